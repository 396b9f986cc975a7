//! What guards an edge (docs/edge.md#the-link, SECURITY.md): its pull token, checked before
//! anything else of a pull or an acknowledgement is read, a credential of its own, and the keys
//! of `edge.serve` a reload applies.

use serde_json::{Value, json};

use crate::edge::{PULL_TOKEN, SECRET, deliver_from, drained, edge_config, private_config};
use crate::harness::*;

#[tokio::test]
async fn a_malformed_pull_without_the_token_is_401_and_counts_toward_the_lockout() {
    let (edge, _dir) = Hookgate::start(&edge_config());
    // 20 failures lock a client out (as for the operator API); each of these is malformed
    // past its missing token: a query that is no number, a body that is no JSON.
    for n in 0..20 {
        let response = if n % 2 == 0 {
            client().get(edge.url("/edge/pull?after=x&wait=y"))
        } else {
            client()
                .post(edge.url("/edge/ack"))
                .header("content-type", "application/json")
                .body("{not json")
        }
        .send()
        .await
        .unwrap();
        assert_eq!(response.status(), 401, "request {n}");
        let (_, body) = json_of(response).await;
        assert_eq!(body, json!({"ok": false, "error": "Unauthorized"}));
    }
    let locked = client()
        .get(edge.url("/edge/pull?after=0"))
        .bearer_auth(PULL_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(locked.status(), 429, "locked out, whatever it presents");
    assert!(locked.headers().contains_key("retry-after"));
}

#[test]
fn check_refuses_a_pull_token_that_is_another_credential() {
    for token in [HOOK_TOKEN, GATEWAY_TOKEN] {
        let mut edge = base_config();
        set(&mut edge, "edge.serve", json!({"pullToken": token}));
        let mut private = base_config();
        set(
            &mut private,
            "edge.link",
            json!({"url": "http://127.0.0.1:1", "pullToken": token}),
        );
        for (config, key) in [
            (edge, "edge.serve.pullToken"),
            (private, "edge.link.pullToken"),
        ] {
            let (status, stderr, _dir) = check(&config);
            assert!(!status.success(), "{stderr}");
            assert!(stderr.contains(key), "{stderr}");
            assert!(stderr.contains("must differ"), "{stderr}");
            assert_no_secrets(&stderr, &[token]);
        }
    }
}

#[tokio::test]
async fn an_edges_routes_and_pull_token_follow_a_reload_and_its_bounds_need_a_restart() {
    let (edge, dir) = Hookgate::start(&edge_config());
    let unsigned = async || {
        let response = client().post(edge.url("/hooks/stripe")).json(&json!({}));
        response.send().await.unwrap().status().as_u16()
    };
    let pull = async |token: &str| {
        let response = client()
            .get(edge.url("/edge/pull?after=0"))
            .bearer_auth(token);
        response.send().await.unwrap().status().as_u16()
    };
    let config_status = async || edge.api_json("/api/config").await.1;
    assert_eq!(unsigned().await, 401, "stripe is no open route yet");

    let new_token = "a-new-pull-token-7777";
    let mut config = edge_config();
    set(
        &mut config,
        "edge.serve",
        json!({"pullToken": new_token, "routes": ["stripe"]}),
    );
    dir.write(&config);
    eventually("the reload", async || {
        config_status().await["generation"] == 2
    })
    .await;
    assert_eq!(unsigned().await, 202, "stripe is an open route now");
    assert_eq!(pull(PULL_TOKEN).await, 401, "the old pull token");
    assert_eq!(pull(new_token).await, 200, "the new pull token");

    // A bound is set up at start: its change refuses the whole reload, the routes' with it.
    set(&mut config, "edge.serve.maxPending", json!(5));
    set(&mut config, "edge.serve.routes", json!([]));
    dir.write(&config);
    let expected = "edge.serve: changed; takes effect only after a restart";
    eventually("the refusal naming edge.serve", async || {
        config_status().await["lastError"]
            .to_string()
            .contains(expected)
    })
    .await;
    assert_eq!(unsigned().await, 202, "the routes in force are kept");
}

/// The first stored requests, as the private node pulls them.
async fn pulled(edge: &Hookgate) -> Value {
    let response = client()
        .get(edge.url("/edge/pull?after=0"))
        .bearer_auth(PULL_TOKEN)
        .send()
        .await
        .unwrap();
    let (status, pulled) = json_of(response).await;
    assert_eq!(status, 200, "{pulled}");
    pulled
}

/// A private node pulling from `edge` with the GitHub mapping of `tests/it/edge.rs` (wakes
/// `github {{n}}`, the signature checked here) and `other` (wakes `other {{n}}`, the token).
fn private_node(edge: &Hookgate) -> (Hookgate, ConfigDir) {
    Hookgate::start(&private_config(&edge.base))
}

#[tokio::test]
async fn the_edge_keeps_no_hook_token_and_says_the_token_admitted_the_request() {
    let (edge, _dir) = Hookgate::start(&edge_config());
    let response = edge
        .hook("/hooks/other")
        .header("x-openclaw-token", HOOK_TOKEN)
        .header("x-kept", "yes")
        .json(&json!({"n": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let pulled = pulled(&edge).await;
    let text = pulled.to_string();
    assert!(!text.contains(HOOK_TOKEN), "{text}");
    let delivery = &pulled["deliveries"][0];
    assert_eq!(delivery["byToken"], true, "{delivery}");
    let names: Vec<&str> = delivery["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h[0].as_str().unwrap())
        .collect();
    assert!(names.contains(&"x-kept"), "{names:?}");
    assert!(!names.contains(&"authorization"), "{names:?}");
    assert!(!names.contains(&"x-openclaw-token"), "{names:?}");

    // The private node takes the edge's word for the token it no longer sees.
    let (private, _private_dir) = private_node(&edge);
    drained(&edge).await;
    assert_eq!(private.event_texts().await, ["other 1"]);
}

#[tokio::test]
async fn the_edge_stores_the_client_its_trusted_proxy_names_and_forgeries_hold_up_nothing() {
    let mut config = edge_config();
    set(&mut config, "gateway.trustedProxies", json!(["127.0.0.1"]));
    let (edge, _dir) = Hookgate::start(&config);
    // 25 forged GitHub deliveries from one client through the proxy (past the 20 failures that
    // lock a client out of a mapping), then a genuine one from another.
    for n in 0..25 {
        let response = client()
            .post(edge.url("/hooks/github"))
            .header("x-forwarded-for", "203.0.113.66")
            .header("x-hub-signature-256", format!("sha256={}", "0".repeat(64)))
            .header("x-github-delivery", format!("forged-{n}"))
            .json(&json!({"n": n}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "the edge holds no secret: stored");
    }
    let response = deliver_from(&edge, 100, "genuine-100", "203.0.113.7").await;
    assert_eq!(response.status(), 202);
    let pulled = pulled(&edge).await;
    assert_eq!(
        pulled["deliveries"][0]["client"], "203.0.113.66",
        "{pulled}"
    );
    assert_eq!(
        pulled["deliveries"][25]["client"], "203.0.113.7",
        "{pulled}"
    );
    assert_eq!(pulled["deliveries"][0]["byToken"], false);

    let (private, _private_dir) = private_node(&edge);
    drained(&edge).await;
    assert_eq!(private.event_texts().await, ["github 100"]);
    eventually("the forgeries' records", async || {
        let (_, records) = private
            .api_json("/api/requests?hook=github&limit=100")
            .await;
        let statuses: Vec<&Value> = records["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["status"])
            .collect();
        statuses.iter().filter(|s| **s == 401).count() == 25 && statuses.iter().all(|s| **s != 429)
    })
    .await;
}

#[tokio::test]
async fn an_edge_holding_a_providers_secret_refuses_forgeries_itself() {
    let mut config = edge_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "github", "match": {"path": "github"}, "action": "wake",
                "signature": {"scheme": "github", "secret": SECRET}}]),
    );
    let (edge, _dir) = Hookgate::start(&config);
    let genuine = deliver_from(&edge, 1, "delivery-1", "198.51.100.1").await;
    assert_eq!(genuine.status(), 202);
    let forged = client()
        .post(edge.url("/hooks/github"))
        .header("x-hub-signature-256", format!("sha256={}", "0".repeat(64)))
        .header("x-github-delivery", "delivery-2")
        .json(&json!({"n": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401, "refused at the edge");
    assert_eq!(forged.text().await.unwrap(), "Unauthorized");
    let pulled = pulled(&edge).await;
    assert_eq!(
        pulled["deliveries"].as_array().unwrap().len(),
        1,
        "{pulled}"
    );
    assert_eq!(pulled["deliveries"][0]["byToken"], false);
    eventually(
        "the forgery's record, its reason the signature",
        async || {
            let (_, records) = edge.api_json("/api/requests?hook=github&status=4xx").await;
            let reason = records["requests"][0]["reason"].as_str().unwrap_or("");
            reason.contains("signature")
        },
    )
    .await;
}
