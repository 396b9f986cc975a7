//! `request.refused` (docs/outbound.md#lifecycle-webhooks): a refused hook request told to the
//! endpoints subscribed, received by the Standard Webhooks receiver of `outbound.rs` on
//! 127.0.0.1, within each endpoint's `refusedPerMinute`, and nothing written without a
//! subscriber.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;
use crate::outbound::{Receiver, SECRET, endpoint_receiver};
use crate::runtime::{Backend, free_port};

/// The secret of the signed mappings.
const GH_SECRET: &str = "gh-secret";

/// `base_config` with the signed mappings `signed` and `other` (wakes, so that no provider is
/// needed) and `outbound`.
fn config(outbound: Value) -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "signed", "match": {"path": "signed"}, "action": "wake", "textTemplate": "s",
             "signature": {"scheme": "github", "secret": GH_SECRET}},
            {"id": "other", "match": {"path": "other"}, "action": "wake", "textTemplate": "o",
             "signature": {"scheme": "github", "secret": GH_SECRET}},
        ]),
    );
    set(&mut config, "outbound", outbound);
    config
}

/// A request's status and `X-Request-Id`.
async fn sent(request: reqwest::RequestBuilder) -> (u16, String) {
    let response = request.send().await.unwrap();
    (response.status().as_u16(), request_id(&response))
}

/// `/hooks/agent` with a wrong token: 401, attributed to no mapping.
async fn bad_token(server: &Hookgate) -> (u16, String) {
    let request = client().post(server.url("/hooks/agent"));
    sent(
        request
            .bearer_auth("not-the-token")
            .json(&json!({"message": "hi"})),
    )
    .await
}

/// A path that names no hook, with the token: 404, attributed to no mapping, and never a
/// lockout however often.
async fn unknown(server: &Hookgate) -> (u16, String) {
    sent(server.hook("/hooks/nowhere").json(&json!({}))).await
}

/// The mapping `path` with a signature by the wrong secret: 401, attributed to the mapping.
async fn bad_signature(server: &Hookgate, path: &str) -> (u16, String) {
    let body = br#"{"id":"evt_1"}"#;
    let mut request = client().post(server.url(path)).body(body.to_vec());
    for (name, value) in crate::signatures::sign("github", "wrong", body, 0, "d-1") {
        request = request.header(name, value);
    }
    sent(request).await
}

/// `GET /api/outbound`'s messages.
async fn outbox(server: &Hookgate) -> Vec<Value> {
    let (status, list) = server.api_json("/api/outbound?limit=1000").await;
    assert_eq!(status, 200, "{list}");
    list["messages"].as_array().unwrap().clone()
}

/// What `receiver` got at `path` once it has at least `n` messages.
async fn received_at_least(receiver: &Receiver, path: &str, n: usize) -> Vec<Value> {
    eventually_within(
        &format!("{n} messages at {path}"),
        Duration::from_secs(20),
        Duration::from_millis(100),
        async || {
            let got: Vec<Value> = receiver
                .received()
                .await
                .into_iter()
                .filter(|m| m["path"] == path)
                .collect();
            match got.len() {
                len if len >= n => Ok(got),
                len => Err(format!("{len} received")),
            }
        },
    )
    .await
}

/// The message about request `id`, checked verified and typed.
fn about<'a>(received: &'a [Value], id: &str) -> &'a Value {
    let message = received
        .iter()
        .find(|m| m["payload"]["data"]["requestId"] == id)
        .unwrap_or_else(|| panic!("no message about {id}: {received:?}"));
    assert_eq!(message["verified"], true, "{message}");
    assert_eq!(message["payload"]["type"], "request.refused", "{message}");
    &message["payload"]["data"]
}

async fn a_subscribed_endpoint_hears_of_each_refused_request(backend: Backend) {
    let (receiver, outbound) = endpoint_receiver(&["request.refused"]);
    let (server, _kept) = backend.start(&config(outbound));
    // Accepted: no message.
    let accepted = sent(server.hook("/hooks/wake").json(&json!({"text": "hi"}))).await;
    assert_eq!(accepted.0, 200);
    let token = bad_token(&server).await;
    let signature = bad_signature(&server, "/hooks/signed").await;
    let unknown = unknown(&server).await;
    let query = sent(client().post(server.url("/hooks/wake?token=in-the-query"))).await;
    assert_eq!(
        (token.0, signature.0, unknown.0, query.0),
        (401, 401, 404, 400)
    );

    let received = received_at_least(&receiver, "/events", 4).await;
    let data = about(&received, &token.1);
    assert_eq!(data["status"], 401);
    assert_eq!(data["error"], "Unauthorized");
    assert_eq!(data["path"], "/hooks/agent");
    assert_eq!(data["method"], "POST");
    assert_eq!(data["clientAddress"], "127.0.0.1");
    assert!(data.get("mapping").is_none(), "{data}");
    let data = about(&received, &signature.1);
    assert_eq!(
        (data["status"].clone(), data["mapping"].clone()),
        (json!(401), json!("signed"))
    );
    assert_eq!(data["error"], "Unauthorized");
    let data = about(&received, &unknown.1);
    assert_eq!(
        (data["status"].clone(), data["error"].clone()),
        (json!(404), json!("Not Found"))
    );
    assert_eq!(data["path"], "/hooks/nowhere");
    let data = about(&received, &query.1);
    assert_eq!(
        (data["status"].clone(), data["path"].clone()),
        (json!(400), json!("/hooks/wake"))
    );
    for message in &received {
        let text = message["payload"].to_string();
        assert!(
            !text.contains("not-the-token") && !text.contains("sha256="),
            "{text}"
        );
        assert!(
            !text.contains("in-the-query") && !text.contains('?'),
            "{text}"
        );
        assert!(
            message["payload"]["data"].get("suppressed").is_none(),
            "{message}"
        );
    }
    // One message per refusal, none for the accepted request, each sent once.
    eventually("the four messages to be done", async || {
        let rows = outbox(&server).await;
        rows.len() == 4 && rows.iter().all(|r| r["status"] == "done")
    })
    .await;
    assert_eq!(receiver.received().await.len(), 4);
    let rows = outbox(&server).await;
    assert!(
        rows.iter()
            .all(|r| r["event"] == "request.refused" && r["runId"].is_null())
    );
}

async fn an_endpoints_mappings_filter_picks_the_refusals_it_hears_of(backend: Backend) {
    let port = free_port();
    let receiver = Receiver::start(port, &[SECRET]);
    let endpoint = |id: &str, filter: Value| {
        let mut endpoint = json!({
            "id": id, "url": format!("http://127.0.0.1:{port}/{id}"), "secret": SECRET,
            "events": ["request.refused"],
        });
        if let Some((key, value)) = filter.as_object().and_then(|f| f.iter().next()) {
            endpoint[key] = value.clone();
        }
        endpoint
    };
    let outbound = json!({"allowHosts": ["127.0.0.1"], "endpoints": [
        endpoint("all", json!({})),
        endpoint("watched", json!({"mappings": ["signed"]})),
        // A refusal made no run, and has no agent: an `agents` filter lets none through.
        endpoint("agents", json!({"agents": ["main"]})),
    ]});
    let (server, _kept) = backend.start(&config(outbound));
    let signed = bad_signature(&server, "/hooks/signed").await;
    let other = bad_signature(&server, "/hooks/other").await;
    let token = bad_token(&server).await;
    assert_eq!((signed.0, other.0, token.0), (401, 401, 401));

    let all = received_at_least(&receiver, "/all", 3).await;
    assert_eq!(about(&all, &other.1)["mapping"], "other");
    assert!(about(&all, &token.1).get("mapping").is_none());
    let watched = received_at_least(&receiver, "/watched", 1).await;
    assert_eq!(about(&watched, &signed.1)["mapping"], "signed");
    eventually("the four messages to be done", async || {
        let rows = outbox(&server).await;
        rows.len() == 4 && rows.iter().all(|r| r["status"] == "done")
    })
    .await;
    let destinations: Vec<Value> = outbox(&server)
        .await
        .iter()
        .map(|r| r["destination"].clone())
        .collect();
    assert!(
        !destinations.contains(&json!("endpoint:agents")),
        "{destinations:?}"
    );
    assert_eq!(receiver.received().await.len(), 4);
}

/// The minute (of the Unix epoch) of a message's `timestamp`: the time its refusal was
/// received, which the bound counts by.
fn minute_of(message: &Value) -> i64 {
    let at = message["payload"]["timestamp"].as_str().unwrap();
    let at = chrono::DateTime::parse_from_rfc3339(at).unwrap();
    at.timestamp_millis().div_euclid(60_000)
}

async fn refusals_beyond_the_bound_are_counted_and_told_with_the_next_message(backend: Backend) {
    let (receiver, mut outbound) = endpoint_receiver(&["request.refused"]);
    outbound["endpoints"][0]["refusedPerMinute"] = json!(2);
    let (server, _kept) = backend.start(&config(outbound));
    // Refusals one after the other: five at once, then one a poll until a message tells of
    // refusals left out (the first of a minute after a full one). Wherever the minutes turn,
    // each message's timestamp says which minute counted it.
    let mut ids = Vec::new();
    for _ in 0..5 {
        let (status, id) = unknown(&server).await;
        assert_eq!(status, 404);
        ids.push(id);
    }
    eventually_within(
        "a message telling of the refusals left out",
        Duration::from_secs(75),
        Duration::from_secs(1),
        async || {
            let received = receiver.received().await;
            if received
                .iter()
                .any(|m| m["payload"]["data"]["suppressed"].is_u64())
            {
                return Ok(());
            }
            let (status, id) = unknown(&server).await;
            assert_eq!(status, 404);
            ids.push(id);
            Err(format!("{} received", received.len()))
        },
    )
    .await;
    // Every message written is sent before they are compared: none is left to send, and the
    // receiver has at least as many as are listed. Retention's pass a minute after the start
    // deletes the rows sent (docs/configuration.md#retention), so a test that ran that long
    // lists fewer rows than were received; the comparison below tells a missing message by the
    // refusals the next would then tell of, and a message received twice by its position.
    eventually("every message to be sent", async || {
        let rows = outbox(&server).await;
        rows.iter().all(|r| r["status"] == "done") && receiver.received().await.len() >= rows.len()
    })
    .await;
    let mut written: Vec<(usize, Value)> = receiver
        .received()
        .await
        .into_iter()
        .map(|m| {
            let id = &m["payload"]["data"]["requestId"];
            let at = ids.iter().position(|sent| id == sent.as_str());
            (
                at.unwrap_or_else(|| panic!("{m} is about no refusal sent")),
                m,
            )
        })
        .collect();
    written.sort_by_key(|(at, _)| *at);
    // The first two are written; each message tells exactly of the refusals sent since the
    // one before it; a minute writes two at most, and a refusal is left out only when its
    // minute had written two.
    assert_eq!((written[0].0, written[1].0), (0, 1), "{written:?}");
    let mut told = 0;
    for (k, (at, message)) in written.iter().enumerate() {
        let before = k.checked_sub(1).map_or(0, |k| written[k].0 + 1);
        let suppressed = message["payload"]["data"]["suppressed"]
            .as_u64()
            .unwrap_or(0);
        assert_eq!(suppressed, (at - before) as u64, "{message}");
        let minute = minute_of(message);
        let same_minute = written[..k].iter().filter(|(_, m)| minute_of(m) == minute);
        assert!(same_minute.count() < 2, "a third in a minute: {written:?}");
        if suppressed > 0 {
            let (full, last) = (&written[k - 2].1, &written[k - 1].1);
            assert_eq!(minute_of(full), minute_of(last), "{written:?}");
            assert!(minute_of(last) < minute, "{written:?}");
            told += suppressed;
        }
    }
    assert!(told > 0, "{written:?}");
}

/// Without an endpoint subscribed, a refusal writes nothing (an endpoint of other events is
/// no subscriber); once one subscribes by a reload, the generation's `refusalsWanted` shortcut
/// lets refusals through again (a shortcut left off by the reload would fail the second half).
async fn without_a_subscriber_a_refusal_writes_nothing(backend: Backend) {
    let (receiver, outbound) = endpoint_receiver(&["run.started"]);
    let (server, kept) = backend.start(&config(outbound));
    let generation = |status: Value| status["generation"].as_u64().unwrap();
    let (_, status) = server.api_json("/api/config").await;
    let before = generation(status);
    for _ in 0..3 {
        assert_eq!(bad_token(&server).await.0, 401);
        assert_eq!(bad_signature(&server, "/hooks/signed").await.0, 401);
    }
    // The same refusals once the endpoint subscribes: written, so the earlier ones would have
    // been by now too.
    let file = std::fs::read_to_string(kept.dir().config_file()).unwrap();
    let mut config: Value = serde_json::from_str(&file).unwrap();
    config["outbound"]["endpoints"][0]["events"] = json!(["run.started", "request.refused"]);
    kept.dir().write(&config);
    eventually("the reload", async || {
        let (_, status) = server.api_json("/api/config").await;
        generation(status) > before
    })
    .await;
    let (_, id) = bad_token(&server).await;
    let received = received_at_least(&receiver, "/events", 1).await;
    about(&received, &id);
    eventually("the message to be done", async || {
        let rows = outbox(&server).await;
        rows.len() == 1 && rows[0]["status"] == "done"
    })
    .await;
    assert_eq!(receiver.received().await.len(), 1);
}

/// A request pulled from an edge was answered by the edge: the private node's refusal of it
/// is told to no endpoint, its sender's own refusals are.
#[tokio::test]
async fn a_refusal_of_a_request_pulled_from_an_edge_is_not_told() {
    let (edge, _edge_dir) = Hookgate::start(&crate::edge::edge_config());
    // The edge holds no secret: it stores a forgery, and answers its sender.
    let forged = client()
        .post(edge.url("/hooks/github"))
        .header("x-hub-signature-256", format!("sha256={}", "0".repeat(64)))
        .header("x-github-delivery", "forged-1")
        .json(&json!({"n": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 202);
    let (receiver, outbound) = endpoint_receiver(&["request.refused"]);
    let mut config = crate::edge::private_config(&edge.base);
    set(&mut config, "outbound", outbound);
    let (private, _private_dir) = Hookgate::start(&config);
    crate::edge::drained(&edge).await;
    eventually("the forgery's record: 401", async || {
        let (_, records) = private.api_json("/api/requests?hook=github").await;
        records["requests"][0]["status"] == 401
    })
    .await;
    let (status, id) = bad_token(&private).await;
    assert_eq!(status, 401);
    let received = received_at_least(&receiver, "/events", 1).await;
    about(&received, &id);
    eventually("the message to be done", async || {
        let rows = outbox(&private).await;
        !rows.is_empty() && rows.iter().all(|r| r["status"] == "done")
    })
    .await;
    assert_eq!(outbox(&private).await.len(), 1);
    assert_eq!(receiver.received().await.len(), 1);
}

/// A bound of 0 would silence the endpoint while it looks subscribed: refused by its key.
#[test]
fn a_bound_of_zero_is_refused_by_its_key() {
    let outbound = json!({"allowHosts": ["127.0.0.1"], "endpoints": [{
        "id": "ops", "url": "http://127.0.0.1:9/events", "secret": SECRET,
        "events": ["request.refused"], "refusedPerMinute": 0,
    }]});
    let (status, output, _dir) = check(&config(outbound));
    assert!(!status.success(), "check accepted it: {output}");
    assert!(
        output.contains("outbound.endpoints[0].refusedPerMinute") && output.contains("at least 1"),
        "{output}"
    );
}

on_both_stores!(
    a_subscribed_endpoint_hears_of_each_refused_request,
    an_endpoints_mappings_filter_picks_the_refusals_it_hears_of,
    refusals_beyond_the_bound_are_counted_and_told_with_the_next_message,
    without_a_subscriber_a_refusal_writes_nothing,
);
