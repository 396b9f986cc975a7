//! Provider-signed webhooks: each scheme accepts a signature computed independently of hookgate
//! (with the hmac/sha2 crates, or a provider's published vector) in place of the hook token, and
//! refuses tampering, wrong secrets, stale timestamps and missing headers; redeliveries replay.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::harness::*;

fn mac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The Standard Webhooks secrets: `whsec_` + base64 of the key.
const WHSEC_OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const WHSEC_NEW: &str = "whsec_c2Vjb25kLWtleS1mb3Itcm90YXRpb24=";

fn key_of(secret: &str) -> Vec<u8> {
    match secret.strip_prefix("whsec_") {
        Some(b64) => BASE64.decode(b64).unwrap(),
        None => secret.as_bytes().to_vec(),
    }
}

/// Headers that sign `body` for `scheme` with `secret` at time `ts`, delivery `id`.
pub(crate) fn sign(
    scheme: &str,
    secret: &str,
    body: &[u8],
    ts: i64,
    id: &str,
) -> Vec<(String, String)> {
    let key = key_of(secret);
    let ts_text = ts.to_string();
    let pairs: Vec<(&str, String)> = match scheme {
        "github" => vec![
            (
                "x-hub-signature-256",
                format!("sha256={}", hex::encode(mac(&key, &[body]))),
            ),
            ("x-github-delivery", id.into()),
            ("x-github-event", "push".into()),
        ],
        "stripe" => vec![(
            "stripe-signature",
            format!(
                "t={ts},v1={},v0=ignored",
                hex::encode(mac(&key, &[ts_text.as_bytes(), b".", body]))
            ),
        )],
        "slack" => vec![
            ("x-slack-request-timestamp", ts_text.clone()),
            (
                "x-slack-signature",
                format!(
                    "v0={}",
                    hex::encode(mac(&key, &[b"v0:", ts_text.as_bytes(), b":", body]))
                ),
            ),
        ],
        "standard-webhooks" => vec![
            ("webhook-id", id.into()),
            ("webhook-timestamp", ts_text.clone()),
            (
                "webhook-signature",
                format!(
                    "v1,bm90LXRoaXMtb25l v1,{}",
                    BASE64.encode(mac(
                        &key,
                        &[id.as_bytes(), b".", ts_text.as_bytes(), b".", body]
                    ))
                ),
            ),
        ],
        "shopify" => vec![
            ("x-shopify-hmac-sha256", BASE64.encode(mac(&key, &[body]))),
            ("x-shopify-webhook-id", id.into()),
        ],
        "gitlab" => vec![
            ("x-gitlab-token", secret.into()),
            ("x-gitlab-event-uuid", id.into()),
        ],
        "hmac-sha256" => vec![
            (
                "x-signature",
                format!("sha256={}", hex::encode(mac(&key, &[body]))),
            ),
            ("x-delivery", id.into()),
        ],
        other => panic!("no signer for {other}"),
    };
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn signature_config(scheme: &str) -> Value {
    match scheme {
        "standard-webhooks" => json!({"scheme": scheme, "secrets": [WHSEC_OLD, WHSEC_NEW]}),
        "hmac-sha256" => {
            json!({"scheme": scheme, "secrets": ["old-secret", "new-secret"], "header": "X-Signature", "prefix": "sha256=", "encoding": "hex"})
        }
        _ => json!({"scheme": scheme, "secrets": ["old-secret", "new-secret"]}),
    }
}

fn secrets(scheme: &str) -> (&'static str, &'static str) {
    if scheme == "standard-webhooks" {
        (WHSEC_OLD, WHSEC_NEW)
    } else {
        ("old-secret", "new-secret")
    }
}

fn start(scheme: &str) -> (Hookgate, ConfigDir) {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "signed", "match": {"path": "signed"}, "messageTemplate": "delivery {{id}}", "signature": signature_config(scheme)}]),
    );
    Hookgate::start(&config)
}

async fn post(server: &Hookgate, body: &[u8], headers: &[(String, String)]) -> reqwest::Response {
    let mut request = client()
        .post(server.url("/hooks/signed"))
        .body(body.to_vec());
    for (k, v) in headers {
        request = request.header(k.as_str(), v.as_str());
    }
    request.send().await.unwrap()
}

const SCHEMES: [&str; 7] = [
    "github",
    "stripe",
    "slack",
    "standard-webhooks",
    "shopify",
    "gitlab",
    "hmac-sha256",
];
const TIMESTAMPED: [&str; 3] = ["stripe", "slack", "standard-webhooks"];

#[tokio::test]
async fn a_valid_signature_stands_in_for_the_token() {
    for scheme in SCHEMES {
        let (server, _dir) = start(scheme);
        let body = br#"{"id":"evt_1","n":1}"#;
        let (status, reply) = json_of(
            post(
                &server,
                body,
                &sign(scheme, secrets(scheme).0, body, now(), "d-1"),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200, "{scheme}: {reply}");
        let run = server.run_of(&reply).await;
        assert_eq!(run["message"], "delivery evt_1", "{scheme}");
    }
}

#[tokio::test]
async fn a_rotated_secret_is_accepted_too() {
    for scheme in SCHEMES {
        let (server, _dir) = start(scheme);
        let body = br#"{"id":"evt_2"}"#;
        let r = post(
            &server,
            body,
            &sign(scheme, secrets(scheme).1, body, now(), "d-2"),
        )
        .await;
        assert_eq!(r.status(), 200, "{scheme}");
    }
}

#[tokio::test]
async fn a_tampered_body_is_unauthorized() {
    for scheme in SCHEMES.into_iter().filter(|s| *s != "gitlab") {
        let (server, _dir) = start(scheme);
        let headers = sign(
            scheme,
            secrets(scheme).0,
            br#"{"id":"evt_3"}"#,
            now(),
            "d-3",
        );
        let r = post(&server, br#"{"id":"evt_3","admin":true}"#, &headers).await;
        assert_eq!(r.status(), 401, "{scheme}");
        assert_eq!(r.text().await.unwrap(), "Unauthorized");
    }
}

#[tokio::test]
async fn a_wrong_secret_is_unauthorized() {
    for scheme in SCHEMES {
        let (server, _dir) = start(scheme);
        let wrong = if scheme == "standard-webhooks" {
            "whsec_d3JvbmctKioqLXNlY3JldA=="
        } else {
            "wrong-secret"
        };
        let body = br#"{"id":"evt_4"}"#;
        let r = post(&server, body, &sign(scheme, wrong, body, now(), "d-4")).await;
        assert_eq!(r.status(), 401, "{scheme}");
    }
}

#[tokio::test]
async fn a_stale_timestamp_is_unauthorized() {
    for scheme in TIMESTAMPED {
        let (server, _dir) = start(scheme);
        let body = br#"{"id":"evt_5"}"#;
        // Ten seconds past the 300 s tolerance either way: the request may reach the server in a
        // later second than `now()` was read.
        for ts in [now() - 310, now() + 310, i64::MIN + 1, i64::MAX] {
            let r = post(
                &server,
                body,
                &sign(scheme, secrets(scheme).0, body, ts, "d-5"),
            )
            .await;
            assert_eq!(r.status(), 401, "{scheme} at {ts}");
        }
        let r = post(
            &server,
            body,
            &sign(scheme, secrets(scheme).0, body, now() - 290, "d-5"),
        )
        .await;
        assert_eq!(r.status(), 200, "{scheme} just inside the tolerance");
    }
}

#[tokio::test]
async fn a_missing_header_is_unauthorized() {
    for scheme in SCHEMES {
        let (server, _dir) = start(scheme);
        let body = br#"{"id":"evt_6"}"#;
        let signed = sign(scheme, secrets(scheme).0, body, now(), "d-6");
        // Drop the header that carries the signature (the first one of each signer).
        let r = post(&server, body, &signed[1..]).await;
        assert_eq!(r.status(), 401, "{scheme}");
        let r = post(&server, body, &[]).await;
        assert_eq!(r.status(), 401, "{scheme} with no headers");
    }
}

#[tokio::test]
async fn a_redelivery_gets_the_first_answer_and_runs_nothing() {
    for scheme in SCHEMES.into_iter().filter(|s| *s != "slack") {
        let (server, _dir) = start(scheme);
        let body = br#"{"id":"evt_7"}"#;
        let headers = sign(scheme, secrets(scheme).0, body, now(), "d-7");
        let first = post(&server, body, &headers).await;
        let (s1, b1) = (first.status(), first.text().await.unwrap());
        let again = post(&server, body, &headers).await;
        let (s2, b2) = (again.status(), again.text().await.unwrap());
        assert_eq!((s1.as_u16(), &b1), (s2.as_u16(), &b2), "{scheme}");
        let (_, runs) = json_of(server.api("/api/runs?limit=100").send().await.unwrap()).await;
        assert_eq!(
            runs["runs"].as_array().unwrap().len(),
            1,
            "{scheme} ran twice"
        );
    }
}

#[tokio::test]
async fn a_captured_request_cannot_be_replayed_under_a_new_delivery_id() {
    let (server, _dir) = start("github");
    let body = br#"{"id":"evt_9"}"#;
    let mut headers = sign("github", "old-secret", body, now(), "first");
    let (_, a) = json_of(post(&server, body, &headers).await).await;
    headers.retain(|(k, _)| k != "x-github-delivery");
    headers.push(("x-github-delivery".into(), "forged-new-id".into()));
    let (_, b) = json_of(post(&server, body, &headers).await).await;
    assert_eq!(a["runId"], b["runId"]);
    headers.retain(|(k, _)| k != "x-github-delivery");
    let (_, c) = json_of(post(&server, body, &headers).await).await;
    assert_eq!(a["runId"], c["runId"]);
}

#[tokio::test]
async fn a_signature_admits_its_own_mapping_only() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "partner", "match": {"path": "events", "source": "partner"}, "messageTemplate": "partner", "signature": {"scheme": "github", "secret": "partner-secret"}},
            {"id": "internal", "match": {"path": "events", "source": "internal"}, "messageTemplate": "internal", "allowUnsafeExternalContent": true},
        ]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let send = |body: &'static [u8]| {
        let mut request = client()
            .post(server.url("/hooks/events"))
            .body(body.to_vec());
        for (k, v) in sign("github", "partner-secret", body, now(), "d") {
            request = request.header(k, v);
        }
        request.send()
    };
    assert_eq!(
        send(br#"{"source":"partner"}"#).await.unwrap().status(),
        200
    );
    assert_eq!(
        send(br#"{"source":"internal"}"#).await.unwrap().status(),
        401
    );
}

#[tokio::test]
async fn slack_redelivery_with_the_same_timestamp_and_signature_replays() {
    let (server, _dir) = start("slack");
    let body = br#"{"id":"evt_8"}"#;
    let headers = sign("slack", "old-secret", body, now(), "");
    let (_, a) = json_of(post(&server, body, &headers).await).await;
    let (_, b) = json_of(post(&server, body, &headers).await).await;
    assert_eq!(a["runId"], b["runId"]);
}

#[tokio::test]
async fn signature_failures_count_toward_the_lockout() {
    let (server, _dir) = start("github");
    let body = br#"{"id":"x"}"#;
    for _ in 0..20 {
        let r = post(&server, body, &sign("github", "wrong", body, now(), "d")).await;
        assert_eq!(r.status(), 401);
    }
    let r = post(
        &server,
        body,
        &sign("github", "old-secret", body, now(), "d"),
    )
    .await;
    assert_eq!(r.status(), 429);
}

#[tokio::test]
async fn the_token_still_works_for_a_signed_mapping_and_other_names_still_need_it() {
    let (server, _dir) = start("github");
    let r = server
        .hook("/hooks/signed")
        .json(&json!({"id": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = br#"{"text":"x"}"#;
    let mut request = client().post(server.url("/hooks/wake")).body(body.to_vec());
    for (k, v) in sign("github", "old-secret", body, now(), "d") {
        request = request.header(k, v);
    }
    assert_eq!(request.send().await.unwrap().status(), 401);
}

#[tokio::test]
async fn refusals_never_echo_secrets_or_expected_signatures() {
    let (server, _dir) = start("github");
    let body = br#"{"id":"x"}"#;
    let expected = hex::encode(mac(b"old-secret", &[body]));
    let r = post(
        &server,
        body,
        &[("x-hub-signature-256".into(), "sha256=00".into())],
    )
    .await;
    let text = r.text().await.unwrap();
    assert_eq!(text, "Unauthorized");
    let (_, log) = server.terminate();
    assert!(
        !log.contains(&expected) && !log.contains("old-secret") && !log.contains("new-secret"),
        "{log}"
    );
}

#[tokio::test]
async fn slack_url_verification_works_end_to_end_with_a_signed_request() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "slack", "match": {"path": "slack"}, "transform": {"module": "slack.wasm"}, "signature": {"scheme": "slack", "secret": "slack-signing-secret"}}]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["slack"]);
    let server = Hookgate::start_in(&dir);
    let body = br#"{"token":"x","challenge":"c-123","type":"url_verification"}"#;
    let mut request = client()
        .post(server.url("/hooks/slack"))
        .body(body.to_vec());
    for (k, v) in sign("slack", "slack-signing-secret", body, now(), "") {
        request = request.header(k, v);
    }
    let r = request.send().await.unwrap();
    assert_eq!(json_of(r).await, (200, json!({"challenge": "c-123"})));
}

#[test]
fn an_unknown_scheme_or_a_malformed_secret_refuses_startup() {
    for (signature, message) in [
        (
            json!({"scheme": "bitbucket", "secret": "s"}),
            "hooks.mappings[0].signature.scheme: must be one of github, stripe,",
        ),
        (
            json!({"scheme": "standard-webhooks", "secret": "not-whsec"}),
            "hooks.mappings[0].signature.secret: is malformed",
        ),
        (
            json!({"scheme": "github"}),
            "hooks.mappings[0].signature: needs secret or secrets",
        ),
        (
            json!({"scheme": "hmac-sha256", "secret": "s"}),
            "hooks.mappings[0].signature.header: is required for hmac-sha256",
        ),
    ] {
        let mut config = base_config();
        set(
            &mut config,
            "hooks.mappings",
            json!([{"match": {"path": "p"}, "messageTemplate": "m", "signature": signature}]),
        );
        let (status, output, _dir) = check(&config);
        assert!(!status.success());
        assert!(output.contains(message), "expected {message:?} in {output}");
    }
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "agent"}, "signature": {"scheme": "github", "secret": "s"}}]),
    );
    let (status, output, _dir) = check(&config);
    assert!(!status.success());
    assert!(
        output.contains("cannot be used on the built-in wake and agent hooks"),
        "{output}"
    );
}

#[tokio::test]
async fn svix_sends_standard_webhooks_under_its_own_header_names() {
    let (server, _dir) = start("standard-webhooks");
    let body = br#"{"id":"evt_svix"}"#;
    let svix: Vec<(String, String)> = sign("standard-webhooks", WHSEC_OLD, body, now(), "msg_1")
        .into_iter()
        .map(|(name, value)| (name.replacen("webhook-", "svix-", 1), value))
        .collect();
    assert!(
        svix.iter().all(|(name, _)| name.starts_with("svix-")),
        "{svix:?}"
    );
    let (status, reply) = json_of(post(&server, body, &svix).await).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(server.run_of(&reply).await["message"], "delivery evt_svix");
}

#[tokio::test]
async fn the_gitlab_token_reaches_no_template() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "gitlab", "match": {"path": "signed"},
                "messageTemplate": "token [{{headers.x-gitlab-token}}] event [{{headers.x-gitlab-event-uuid}}]",
                "signature": signature_config("gitlab")}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let body = br#"{"id":"evt_gl"}"#;
    let (status, reply) = json_of(
        post(
            &server,
            body,
            &sign("gitlab", "old-secret", body, now(), "gl-1"),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        server.run_of(&reply).await["message"],
        "token [] event [gl-1]"
    );
}

#[test]
fn a_tolerance_outside_a_second_to_an_hour_is_refused() {
    for tolerance in [0, 3601, 99_999_999_999u64] {
        let mut config = base_config();
        set(
            &mut config,
            "hooks.mappings",
            json!([{"match": {"path": "signed"},
                    "signature": {"scheme": "stripe", "secret": "s", "toleranceSeconds": tolerance}}]),
        );
        let (status, output, _dir) = check(&config);
        assert!(!status.success(), "{tolerance}: {output}");
        assert!(
            output.contains("hooks.mappings[0].signature.toleranceSeconds: must be from 1 to 3600"),
            "{output}"
        );
    }
}
