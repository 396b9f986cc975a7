//! docs/cluster.md "The request log in a cluster": on a NATS store every node's request records
//! are published to the cluster's request stream and indexed by every node, so that any
//! node's API lists what any node received, with the same filters and captures, after the
//! node that recorded them is gone, and on a node started later with an empty state directory.

use std::time::Duration;

use serde_json::{Value, json};

use crate::browser::Browser;
use crate::cluster::node_config_at;
use crate::fake::Fake;
use crate::harness::*;
use crate::nats::NatsServer;

/// A node's configuration: the NATS store, captures on, and a `github` mapping that wakes.
fn config(nats: &NatsServer, provider: &Fake) -> Value {
    let mut config = node_config_at(&nats.url(), provider);
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "github", "match": {"path": "github"}, "action": "wake",
                "textTemplate": "{{action}}", "wakeMode": "next-heartbeat"}]),
    );
    config
}

/// The records `node` lists for `query`, once there are exactly `count` (within 20 s).
async fn listed(node: &Hookgate, query: &str, count: usize) -> Vec<Value> {
    eventually_within(
        &format!("{count} records for ?{query}"),
        Duration::from_secs(20),
        Duration::from_millis(50),
        async || {
            let (status, body) = node.api_json(&format!("/api/requests?{query}")).await;
            assert_eq!(status, 200, "{body}");
            let records = body["requests"].as_array().unwrap().clone();
            if records.len() == count {
                Ok(records)
            } else {
                Err(format!("{} records: {body}", records.len()))
            }
        },
    )
    .await
}

/// Sends a GitHub-like delivery for `action` to `node`; its request id, once answered 200.
async fn deliver(node: &Hookgate, action: &str) -> String {
    let sent = node
        .hook("/hooks/github")
        .json(&json!({"action": action, "marker": format!("body-of-{action}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200, "{action}");
    request_id(&sent)
}

/// The ids of `records`, in their order.
fn ids(records: &[Value]) -> Vec<&str> {
    records.iter().map(|r| r["id"].as_str().unwrap()).collect()
}

/// A refusal and an unknown hook, each recorded by `node`.
async fn refuse_twice(node: &Hookgate) {
    let invalid = node.hook("/hooks/wake").json(&json!({})).send().await;
    assert_eq!(invalid.unwrap().status(), 400);
    let unknown = node.hook("/hooks/nothing").json(&json!({})).send().await;
    assert_eq!(unknown.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_lists_what_the_other_received_with_filters_and_captures() {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let config = config(&nats, &provider);
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    let mut sent_to_a = Vec::new();
    for action in ["opened", "closed", "edited"] {
        sent_to_a.push(deliver(&a, action).await);
    }
    refuse_twice(&a).await;
    let on_b = deliver(&b, "reopened").await;

    // B lists A's records with its own, newest first, through every filter.
    let github = listed(&b, "hook=github", 4).await;
    let mut expected: Vec<&str> = sent_to_a.iter().map(String::as_str).collect();
    expected.push(&on_b);
    expected.reverse();
    assert_eq!(ids(&github), expected);
    assert!(github.iter().all(|r| r["mappingId"] == "github"));
    let ok = listed(&b, "mapping=github&status=2xx", 4).await;
    assert_eq!(ids(&ok), expected);
    let refused = listed(&b, "status=4xx", 2).await;
    let statuses: Vec<&Value> = refused.iter().map(|r| &r["status"]).collect();
    assert_eq!(statuses, [&json!(404), &json!(400)]);
    // And A lists B's.
    let on_a = listed(&a, "hook=github", 4).await;
    assert_eq!(ids(&on_a), expected);

    // The capture of A's request, from B.
    let (status, record) = b.api_json(&format!("/api/requests/{}", sent_to_a[0])).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["captured"], true, "{record}");
    let body: Value = serde_json::from_str(record["capture"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["marker"], "body-of-opened");
    assert_eq!(record["hook"], "github");
    assert_eq!(record["eventOutcome"], "queued");

    // Each node counts what it published and what it indexed of the other's.
    let metrics_a = a.metrics().await;
    assert!(
        metrics_a.contains(r#"hookgate_request_log_records_total{outcome="published"} 5"#),
        "{metrics_a}"
    );
    let metrics_b = b.metrics().await;
    assert!(
        metrics_b.contains(r#"hookgate_request_log_records_total{outcome="indexed"} 5"#),
        "{metrics_b}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_s_records_stay_and_a_new_node_catches_up_and_replays_them() {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let config = config(&nats, &provider);
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    let mut sent = Vec::new();
    for i in 0..20 {
        sent.push(deliver(&a, &format!("action-{i}")).await);
    }
    sent.reverse();
    assert_eq!(ids(&listed(&b, "hook=github", 20).await), sent);
    a.kill();
    // Still there once A is gone: B's own copy, not a view of A's.
    assert_eq!(ids(&listed(&b, "hook=github&limit=100", 20).await), sent);

    // A node started later, with an empty state directory, catches up from the stream.
    let (c, _dir_c) = Hookgate::start(&config);
    assert_eq!(ids(&listed(&c, "hook=github&limit=100", 20).await), sent);

    // A request A recorded, replayed on C from its capture; the replay is listed with the
    // original on B too.
    let original = &sent[19];
    let replayed = client()
        .post(c.url(&format!("/api/requests/{original}/replay")))
        .bearer_auth(GATEWAY_TOKEN)
        .send()
        .await
        .unwrap();
    let (status, replayed) = json_of(replayed).await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["status"], 200, "{replayed}");
    assert_eq!(replayed["replayOf"], original.as_str());
    let replay_id = replayed["requestId"].as_str().unwrap().to_string();
    eventually_within(
        "the replay listed with its original on B",
        Duration::from_secs(20),
        Duration::from_millis(50),
        async || {
            let (_, record) = b.api_json(&format!("/api/requests/{original}")).await;
            match record["replays"].as_array() {
                Some(replays) if replays.iter().any(|r| r == replay_id.as_str()) => Ok(()),
                _ => Err(format!("{record}")),
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_made_while_nats_is_away_are_published_once_it_is_back() {
    let mut nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let config = config(&nats, &provider);
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    deliver(&a, "before").await;
    listed(&b, "hook=github", 1).await;
    nats.kill();
    // Refused with 500 (intake cannot publish), and recorded by A.
    let failed = a
        .hook("/hooks/github")
        .json(&json!({"action": "during"}))
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), 500);
    let failed = request_id(&failed);
    let kept = listed(&a, "status=5xx", 1).await;
    assert_eq!(ids(&kept), [failed.as_str()]);
    nats.start_again();
    let published = listed(&b, "status=5xx", 1).await;
    assert_eq!(ids(&published), [failed.as_str()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_s_console_lists_what_the_other_received() {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let config = config(&nats, &provider);
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    let id = deliver(&a, "labeled").await;
    listed(&b, "hook=github", 1).await;

    let browser = Browser::start().await;
    browser.go(&b.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    let row = format!("#requests-table tr[data-id=\"{id}\"]");
    browser.wait_for_text(&row, "github").await;
    browser.click(&format!("{row} button")).await;
    browser.wait_for_text("#request-became", "queued").await;
    browser
        .wait_for_text("#request-body", "body-of-labeled")
        .await;
}

/// The request stream's `max_age`, `max_bytes` and subjects, as the server has them.
async fn stream_limits(nats: &NatsServer) -> (Duration, i64, Vec<String>) {
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let mut stream = js.get_stream("HOOKGATE-requests").await.unwrap();
    let config = stream.info().await.unwrap().config.clone();
    (config.max_age, config.max_bytes, config.subjects)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_stream_is_bounded_by_the_retention_and_follows_a_reload() {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let mut config = config(&nats, &provider);
    set(
        &mut config,
        "gateway.retention",
        json!({"requests": "2d", "requestsMaxBytes": 64 * 1024 * 1024}),
    );
    let dir = ConfigDir::new(&config);
    let node = Hookgate::start_in(&dir);
    let day = Duration::from_secs(86_400);
    assert_eq!(
        stream_limits(&nats).await,
        (
            2 * day,
            64 * 1024 * 1024,
            vec!["HOOKGATE-requests.records".into()]
        )
    );

    set(
        &mut config,
        "gateway.retention",
        json!({"requests": "1d", "requestsMaxBytes": 0}),
    );
    dir.write(&config);
    eventually("the reloaded configuration", async || {
        node.api_json("/api/config").await.1["generation"].as_u64() == Some(2)
    })
    .await;
    // Set with the next batch published.
    deliver(&node, "after-the-reload").await;
    eventually_within(
        "the reloaded limits on the stream",
        Duration::from_secs(20),
        Duration::from_millis(50),
        async || {
            let (max_age, max_bytes, _) = stream_limits(&nats).await;
            if (max_age, max_bytes) == (day, -1) {
                Ok(())
            } else {
                Err(format!("max_age {max_age:?}, max_bytes {max_bytes}"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_prunes_the_records_it_indexed() {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let mut config = config(&nats, &provider);
    set(&mut config, "gateway.retention.requests", json!("5s"));
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    let old = deliver(&a, "old").await;
    assert_eq!(ids(&listed(&b, "hook=github", 1).await), [old.as_str()]);
    listed(&b, "hook=github", 0).await;
    listed(&a, "hook=github", 0).await;
    // Pruned for good: what follows is indexed, the pruned record is not again.
    let new = deliver(&a, "new").await;
    assert_eq!(ids(&listed(&b, "hook=github", 1).await), [new.as_str()]);
}
