//! docs/outbound.md#callbacks and docs/hooks.md#batches: every request that joined a batch
//! gets the batch's run's outcome at the callback URL its own payload rendered, with its own
//! request id and position, once; a retry of a joined request adds none. On both stores and in
//! forward mode (the closed batch relayed to another hookgate on loopback speaking OpenClaw's
//! hook wire). The receiver verifies every message with the official Standard Webhooks library.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::outbound::{Receiver, SECRET};
use crate::runtime::{Backend, free_port, with_provider};

/// A batch mapping `standup` of three requests (a window long enough never to end in a
/// test), each posting the run's outcome to its payload's `callbackUrl`.
fn batch_mapping() -> Value {
    json!([{
        "id": "standup", "match": {"path": "standup"}, "messageTemplate": "{{text}}",
        "sessionKey": "hook:standup", "deliver": false,
        "batch": {"window": "1h", "maxItems": 3},
        "callback": {"url": "{{callbackUrl}}", "secret": SECRET},
    }])
}

fn with_batch_callbacks(mut config: Value) -> Value {
    set(&mut config, "hooks.mappings", batch_mapping());
    set(
        &mut config,
        "outbound",
        json!({"allowHosts": ["127.0.0.1"], "retry": {"maxDelay": "1s"}}),
    );
    config
}

/// Posts request `n` of the batch under idempotency key `key`, its callback at `/cb/<n>` of
/// `port`: its answer and its `X-Request-Id`.
async fn join(server: &Hookgate, port: u16, n: usize, key: &str) -> (Value, String) {
    let body = json!({"text": format!("update {n}"),
                      "callbackUrl": format!("http://127.0.0.1:{port}/cb/{n}")});
    let response = server
        .hook("/hooks/standup")
        .header("idempotency-key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let request_id = request_id(&response);
    let (status, answer) = json_of(response).await;
    assert_eq!(status, 200, "{answer}");
    (answer, request_id)
}

/// Three requests join one batch (the second one sent twice), and each gets one verified
/// callback with the run's outcome `reply`, its own request id and position; the outbox
/// holds those three and nothing else once they are done.
async fn three_joined_requests_get_three_callbacks(server: &Hookgate, reply: &str) -> Vec<Value> {
    let port = free_port();
    let receiver = Receiver::start(port, &[SECRET]);
    let mut requests = Vec::new();
    for n in 1..=3 {
        let (answer, request_id) = join(server, port, n, &format!("standup-{n}")).await;
        assert_eq!(answer["batched"], n, "{answer}");
        if n == 2 {
            // A retry of a request that joined: its first answer, and no second callback.
            let (again, _) = join(server, port, 2, "standup-2").await;
            assert_eq!(again["runId"], answer["runId"], "{again}");
            assert_eq!(again["batched"], 2, "{again}");
        }
        requests.push((answer["runId"].clone(), request_id));
    }
    let run_id = requests[0].0.clone();
    assert!(
        requests.iter().all(|(run, _)| *run == run_id),
        "{requests:?}"
    );
    let received = eventually_within(
        "a callback for each request of the batch",
        Duration::from_secs(60),
        Duration::from_millis(100),
        async || {
            let received = receiver.received().await;
            match received.len() {
                3.. => Ok(received),
                n => Err(format!("{n} received")),
            }
        },
    )
    .await;
    assert_eq!(received.len(), 3, "{received:?}");
    for (n, (_, request_id)) in requests.iter().enumerate() {
        let path = format!("/cb/{}", n + 1);
        let message = received
            .iter()
            .find(|m| m["path"] == path.as_str())
            .unwrap_or_else(|| panic!("no callback at {path}: {received:?}"));
        assert_eq!(message["verified"], true, "{message}");
        let payload = &message["payload"];
        assert_eq!(payload["type"], "run.finished", "{message}");
        let data = &payload["data"];
        assert_eq!(data["runId"], run_id, "{data}");
        assert_eq!(data["requestId"], request_id.as_str(), "{data}");
        assert_eq!(data["batched"], n + 1, "{data}");
        assert_eq!(data["status"], "ok", "{data}");
        assert_eq!(data["reply"], reply, "{data}");
    }
    // Three messages, each with an id of its own; the outbox holds them done and nothing more
    // (the retry wrote none), so no fourth comes.
    let ids: std::collections::BTreeSet<_> = received.iter().map(|m| m["id"].to_string()).collect();
    assert_eq!(ids.len(), 3, "{received:?}");
    eventually("the outbox to record the three done", async || {
        let (_, done) = server.api_json("/api/outbound?status=done").await;
        done["messages"].as_array().map(Vec::len) == Some(3)
    })
    .await;
    let (status, all) = server.api_json("/api/outbound?limit=1000").await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(all["messages"].as_array().unwrap().len(), 3, "{all}");
    received
}

async fn each_request_of_a_batch_gets_the_runs_outcome_at_its_own_callback(backend: Backend) {
    let provider = Fake::provider("standup noted").await;
    let (server, _kept) = backend.start(&with_batch_callbacks(with_provider(&provider)));
    three_joined_requests_get_three_callbacks(&server, "standup noted").await;
}

/// Forward mode: the closed batch is relayed as one request, and its completion is each
/// request's callback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_mode_sends_each_request_of_a_batch_the_relayed_outcome() {
    let provider = Fake::provider("relayed standup").await;
    let port = free_port();
    let upstream_dir = ConfigDir::new(&with_provider(&provider));
    let _upstream = Hookgate::try_start_on(&upstream_dir, port).unwrap();
    let mut config = base_config();
    set(&mut config, "gateway.mode", json!("forward"));
    set(
        &mut config,
        "gateway.forward",
        json!({"url": format!("http://127.0.0.1:{port}"), "token": HOOK_TOKEN}),
    );
    let (forwarder, _dir) = Hookgate::start(&with_batch_callbacks(config));
    let received = three_joined_requests_get_three_callbacks(&forwarder, "relayed standup").await;
    // Each names the one run the upstream ran, as the run record does.
    let run_id = received[0]["payload"]["data"]["runId"].as_str().unwrap();
    let (_, record) = forwarder.api_json(&format!("/api/runs/{run_id}")).await;
    let upstream = record["upstreamRunId"].as_str().unwrap_or_default();
    assert!(!upstream.is_empty(), "{record}");
    for message in &received {
        assert_eq!(
            message["payload"]["data"]["upstreamRunId"], upstream,
            "{message}"
        );
    }
}

/// NATS store: a batch of 50 requests whose run replies 30 KB. The callbacks' bodies together
/// (1.5 MB) pass a NATS message's 1 MB, yet neither they nor the run record lose the reply:
/// the outcome's fact carries it once and each view fills its waiting callbacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_batchs_callbacks_and_record_carry_the_whole_reply() {
    const MEMBERS: usize = 50;
    let reply = format!("Noted.\n{}", "z".repeat(30 * 1024));
    let answer = reply.clone();
    let provider = Fake::start(move |_, _| Answer::Json(200, chat_reply(&answer))).await;
    let mut config = with_batch_callbacks(with_provider(&provider));
    config["hooks"]["mappings"][0]["batch"] = json!({"window": "1h", "maxItems": MEMBERS});
    let (server, _kept) = Backend::Nats.start(&config);
    let port = free_port();
    let receiver = Receiver::start(port, &[SECRET]);
    let mut run_id = Value::Null;
    for n in 1..=MEMBERS {
        let (answer, _) = join(&server, port, n, &format!("big-{n}")).await;
        run_id = answer["runId"].clone();
    }
    let received = eventually_within(
        "a callback for each request of the big batch",
        Duration::from_secs(90),
        Duration::from_millis(200),
        async || {
            let received = receiver.received().await;
            match received.len() {
                MEMBERS.. => Ok(received),
                n => Err(format!("{n} received")),
            }
        },
    )
    .await;
    assert_eq!(received.len(), MEMBERS);
    for message in &received {
        let data = &message["payload"]["data"];
        assert_eq!(message["verified"], true, "{}", message["path"]);
        assert_eq!(data["runId"], run_id, "{}", message["path"]);
        assert!(data["reply"] == reply.as_str(), "{}: cut", message["path"]);
    }
    let run_id = run_id.as_str().unwrap();
    let (status, record) = server.api_json(&format!("/api/runs/{run_id}")).await;
    assert_eq!(status, 200, "{record}");
    assert!(
        record["reply"] == reply.as_str(),
        "the record's reply is cut"
    );
}

/// Waits for `count` messages at `receiver` and answers them.
async fn received(receiver: &Receiver, count: usize) -> Vec<Value> {
    eventually_within(
        "the batch's messages",
        Duration::from_secs(60),
        Duration::from_millis(100),
        async || {
            let received = receiver.received().await;
            match received.len() {
                n if n >= count => Ok(received),
                n => Err(format!("{n} of {count} received")),
            }
        },
    )
    .await
}

/// Waits for the outbox to hold `count` messages done, and checks it holds nothing else.
async fn outbox_holds_done(server: &Hookgate, count: usize) {
    eventually("the outbox to record every message done", async || {
        let (_, done) = server.api_json("/api/outbound?status=done").await;
        done["messages"].as_array().map(Vec::len) == Some(count)
    })
    .await;
    let (_, all) = server.api_json("/api/outbound?limit=1000").await;
    assert_eq!(all["messages"].as_array().unwrap().len(), count, "{all}");
}

/// A request whose callback URL renders blank joins the batch without one: the others get
/// theirs, it gets none, and no row waits for it.
async fn a_member_whose_callback_renders_blank_gets_none(backend: Backend) {
    let provider = Fake::provider("noted").await;
    let (server, _kept) = backend.start(&with_batch_callbacks(with_provider(&provider)));
    let port = free_port();
    let receiver = Receiver::start(port, &[SECRET]);
    join(&server, port, 1, "blank-1").await;
    let body = json!({"text": "update 2"});
    let response = server
        .hook("/hooks/standup")
        .json(&body)
        .send()
        .await
        .unwrap();
    let (status, answer) = json_of(response).await;
    assert_eq!((status, &answer["batched"]), (200, &json!(2)), "{answer}");
    join(&server, port, 3, "blank-3").await;
    let received = received(&receiver, 2).await;
    let mut paths: Vec<_> = received.iter().map(|m| m["path"].to_string()).collect();
    paths.sort();
    assert_eq!(paths, [r#""/cb/1""#, r#""/cb/3""#], "{received:?}");
    outbox_holds_done(&server, 2).await;
}

/// A batch closed by its window, not by `maxItems`, sends each of its requests its callback.
async fn a_batch_closed_by_its_window_sends_its_callbacks(backend: Backend) {
    let provider = Fake::provider("window noted").await;
    let mut config = with_batch_callbacks(with_provider(&provider));
    config["hooks"]["mappings"][0]["batch"] = json!({"window": "3s", "maxItems": 100});
    let (server, _kept) = backend.start(&config);
    let port = free_port();
    let receiver = Receiver::start(port, &[SECRET]);
    let (first, _) = join(&server, port, 1, "window-1").await;
    let (second, _) = join(&server, port, 2, "window-2").await;
    assert_eq!(first["runId"], second["runId"], "{second}");
    let received = received(&receiver, 2).await;
    for message in &received {
        let data = &message["payload"]["data"];
        assert_eq!(data["runId"], first["runId"], "{message}");
        assert_eq!(data["reply"], "window noted", "{message}");
    }
    outbox_holds_done(&server, 2).await;
}

/// Lifecycle webhooks are the batch's run's: one endpoint gets one `run.started` and one
/// `run.finished` for a batch of three requests, beside their three callbacks.
async fn an_endpoint_gets_one_start_and_one_end_of_a_batchs_run(backend: Backend) {
    let provider = Fake::provider("once").await;
    let (events, outbound) =
        crate::outbound::endpoint_receiver(&["run.started", "run.finished", "run.failed"]);
    let mut config = with_batch_callbacks(with_provider(&provider));
    config["outbound"]["endpoints"] = outbound["endpoints"].clone();
    let (server, _kept) = backend.start(&config);
    let port = free_port();
    let callbacks = Receiver::start(port, &[SECRET]);
    for n in 1..=3 {
        join(&server, port, n, &format!("events-{n}")).await;
    }
    received(&callbacks, 3).await;
    received(&events, 2).await;
    outbox_holds_done(&server, 5).await;
    let mut types: Vec<_> = events
        .received()
        .await
        .iter()
        .map(|m| m["payload"]["type"].to_string())
        .collect();
    types.sort();
    assert_eq!(types, [r#""run.finished""#, r#""run.started""#]);
}

on_both_stores!(
    each_request_of_a_batch_gets_the_runs_outcome_at_its_own_callback,
    a_member_whose_callback_renders_blank_gets_none,
    a_batch_closed_by_its_window_sends_its_callbacks,
    an_endpoint_gets_one_start_and_one_end_of_a_batchs_run,
);
