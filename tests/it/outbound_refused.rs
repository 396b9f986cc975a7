//! `request.refused` (docs/outbound.md#lifecycle-webhooks): a refused hook request told to the
//! endpoints subscribed, received by the Standard Webhooks receiver of `outbound.rs` on
//! 127.0.0.1, within each endpoint's `refusedPerMinute`, and nothing written without a
//! subscriber.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    assert_eq!((token.0, signature.0, unknown.0), (401, 401, 404));

    let received = received_at_least(&receiver, "/events", 3).await;
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
    for message in &received {
        let text = message["payload"].to_string();
        assert!(
            !text.contains("not-the-token") && !text.contains("sha256="),
            "{text}"
        );
        assert!(
            message["payload"]["data"].get("suppressed").is_none(),
            "{message}"
        );
    }
    // One message per refusal, none for the accepted request, each sent once.
    eventually("the three messages to be done", async || {
        let rows = outbox(&server).await;
        rows.len() == 3 && rows.iter().all(|r| r["status"] == "done")
    })
    .await;
    assert_eq!(receiver.received().await.len(), 3);
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

/// Milliseconds left in the current minute of the wall clock, which the server's bound counts by.
fn left_in_minute() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    60_000 - (now.as_millis() % 60_000) as u64
}

async fn refusals_beyond_the_bound_are_counted_and_told_with_the_next_message(backend: Backend) {
    let (receiver, mut outbound) = endpoint_receiver(&["request.refused"]);
    outbound["endpoints"][0]["refusedPerMinute"] = json!(2);
    let (server, _kept) = backend.start(&config(outbound));
    // Five refusals in one minute of the server's clock: not across its turn.
    if left_in_minute() < 10_000 {
        tokio::time::sleep(Duration::from_millis(left_in_minute() + 100)).await;
    }
    let mut ids = Vec::new();
    for _ in 0..5 {
        let (status, id) = unknown(&server).await;
        assert_eq!(status, 404);
        ids.push(id);
    }
    let received = received_at_least(&receiver, "/events", 2).await;
    about(&received, &ids[0]);
    about(&received, &ids[1]);
    // Until the minute turns, refusals are counted, not written: one more each second, until
    // the first of the next minute is written, telling how many were left out before it.
    let told = eventually_within(
        "a message telling of the refusals left out",
        Duration::from_secs(75),
        Duration::from_secs(1),
        async || {
            let received = receiver.received().await;
            if let Some(told) = received
                .iter()
                .find(|m| m["payload"]["data"]["suppressed"].is_u64())
            {
                return Ok(told.clone());
            }
            let (status, id) = unknown(&server).await;
            assert_eq!(status, 404);
            ids.push(id);
            Err(format!("{} received", received.len()))
        },
    )
    .await;
    let data = &told["payload"]["data"];
    let at = ids
        .iter()
        .position(|id| data["requestId"] == id.as_str())
        .unwrap_or_else(|| panic!("{data} is about no refusal sent"));
    assert!(at >= 5, "{at}");
    // Every refusal before it but the first two was left out.
    assert_eq!(data["suppressed"], at as u64 - 2, "{data}");
    let received = receiver.received().await;
    let written_first_minute = received.iter().filter(|m| {
        let id = &m["payload"]["data"]["requestId"];
        ids[..at].iter().any(|sent| id == sent.as_str())
    });
    assert_eq!(written_first_minute.count(), 2, "{received:?}");
}

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
