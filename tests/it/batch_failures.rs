//! docs/runtime.md "Batches" on a NATS cluster, where a node can die between the steps of a
//! join: a batch is announced to every view before the bucket names it, so a request that
//! joins a batch whose opener died is still run; an announced batch no request joined is
//! discarded, never run empty; and two retries of one request reaching two nodes at once take
//! one position between them.

use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::batches::{assert_prompt, batch_prompts, by_run, config, messages_of, send, send_keyed};
use crate::fake::Fake;
use crate::harness::*;
use crate::nats::NatsServer;

/// A node of a cluster on `nats` whose `inbox` mapping batches with `batch`.
fn node(nats: &NatsServer, provider: &Fake, batch: Value) -> Value {
    let mut node = crate::cluster::node_config_at(&nats.url(), provider);
    node["hooks"]["mappings"] = config(provider, batch)["hooks"]["mappings"].clone();
    node
}

/// A node whose batches have `window`, once one batch ran, so that the stream holds a
/// `BatchOpened` fact to take a copy of.
async fn one_batch_run(window: &str) -> (NatsServer, Fake, Hookgate, ConfigDir) {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let batch = json!({"window": window, "maxItems": 10});
    let (a, dir) = Hookgate::start(&node(&nats, &provider, batch));
    let first = send(&a, "first").await;
    let run_id = first["runId"].as_str().unwrap().to_string();
    eventually("the first batch run ok", async || {
        run(&a, &run_id)
            .await
            .is_some_and(|run| run["status"] == "ok")
    })
    .await;
    (nats, provider, a, dir)
}

/// What a node that opened a batch and died left behind: the `BatchOpened` fact of a new run,
/// taken from the one a real request published (which must be on the stream), with its
/// window ending `window_ms` from now. Returns the run id.
async fn announce_batch(js: &async_nats::jetstream::Context, window_ms: i64) -> (String, i64) {
    let stream = js.get_stream("HOOKGATE").await.unwrap();
    let opened = stream
        .get_last_raw_message_by_subject("HOOKGATE.batch.opened")
        .await
        .unwrap();
    let mut fact: Value = serde_json::from_slice(&opened.payload).unwrap();
    let run_id = uuid::Uuid::now_v7().to_string();
    let closes_at_ms = chrono::Utc::now().timestamp_millis() + window_ms;
    // A run is written in its form 2 (src/gateway/store/run_wire.rs), camel case as the fact.
    fact["run"]["runId"] = json!(run_id);
    fact["opened"]["closesAtMs"] = json!(closes_at_ms);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        async_nats::header::NATS_MESSAGE_ID,
        format!("batch-{run_id}").as_str(),
    );
    js.publish_with_headers("HOOKGATE.batch.opened", headers, fact.to_string().into())
        .await
        .unwrap()
        .await
        .unwrap();
    (run_id, closes_at_ms)
}

/// The run `run_id` as node `server`'s API shows it, or `None` when it knows none.
async fn run(server: &Hookgate, run_id: &str) -> Option<Value> {
    let (status, run) = server.api_json(&format!("/api/runs/{run_id}")).await;
    match status {
        200 => Some(run),
        404 => None,
        other => panic!("{other}: {run}"),
    }
}

/// An opener that published its batch and named it in the bucket, then died before its own
/// item: the next request joins at position 2, and the batch runs with that one message when
/// its window ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_joining_a_batch_whose_opener_died_is_run() {
    let (nats, provider, a, _dir) = one_batch_run("2s").await;

    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let (run_id, closes_at_ms) = announce_batch(&js, 3_000).await;
    let bucket = js.get_key_value("hookgate-batches").await.unwrap();
    let key = hex::encode(Sha256::digest(b"inbox\nhook:inbox"));
    let entry = json!({"runId": run_id, "closesAtMs": closes_at_ms, "maxItems": 10, "items": 1, "closed": false});
    bucket.put(&key, entry.to_string().into()).await.unwrap();

    let joined = send(&a, "second").await;
    assert_eq!(
        (&joined["runId"], &joined["batched"]),
        (&json!(run_id), &json!(2))
    );
    eventually_within(
        "the batch run with the joiner's message",
        Duration::from_secs(40),
        Duration::from_millis(100),
        async || match run(&a, &run_id).await {
            Some(run) if run["status"] == "ok" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let prompts = batch_prompts(&provider);
    assert_prompt(&prompts, &run_id, &["second".to_string()]);
}

/// An opener that published its batch and died before the bucket named it: no request can
/// join that batch, and when its window is long past it is discarded from every view, never
/// run with an empty prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announced_batch_that_no_request_joined_is_discarded() {
    let (nats, provider, a, _dir) = one_batch_run("1s").await;
    let asked = provider.requests().len();

    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let (run_id, _) = announce_batch(&js, 1_000).await;
    eventually("the announced batch in the view", async || {
        run(&a, &run_id)
            .await
            .is_some_and(|run| run["status"] == "batching")
    })
    .await;
    eventually_within(
        "the announced batch discarded",
        Duration::from_secs(60),
        Duration::from_millis(200),
        async || match run(&a, &run_id).await {
            None => Ok(()),
            Some(run) => Err(run["status"].to_string()),
        },
    )
    .await;
    assert_eq!(provider.requests().len(), asked, "an empty batch was run");
}

/// Two retries of each of eight requests, sent at once to two nodes: each pair gets one run
/// and one position, and the batch holds each message once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_at_once_on_two_nodes_take_one_position() {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let config = node(&nats, &provider, json!({"window": "2s", "maxItems": 50}));
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    let subjects: Vec<String> = (0..8).map(|n| format!("mail-{n}")).collect();
    let pairs = futures_util::future::join_all(subjects.iter().map(|subject| {
        let (a, b) = (&a, &b);
        async move {
            let (on_a, on_b) = tokio::join!(
                send_keyed(a, subject, subject),
                send_keyed(b, subject, subject)
            );
            (subject.clone(), on_a, on_b)
        }
    }))
    .await;
    let mut answers = Vec::new();
    for (subject, on_a, on_b) in pairs {
        assert_eq!(
            (&on_a["runId"], &on_a["batched"]),
            (&on_b["runId"], &on_b["batched"]),
            "{subject}"
        );
        answers.push((subject, on_a));
    }
    let runs = by_run(answers);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let prompts = crate::batches::prompts(&provider, 1).await;
    let (run_id, in_order) = runs.into_iter().next().unwrap();
    assert_prompt(&prompts, &run_id, &in_order);
    let mut messages = messages_of(&prompts[0]);
    messages.sort();
    assert_eq!(messages, subjects);
}

/// A retry of a batched request after a reload took the mapping's `batch` away is answered with
/// the batch's run, and no run is made of it (its key's entry names a batch item, not a run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_batch_was_configured_away_gets_the_batchs_run() {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let config = node(&nats, &provider, json!({"window": "1h", "maxItems": 10}));
    let dir = ConfigDir::new(&config);
    let a = Hookgate::start_in(&dir);
    let first = send_keyed(&a, "mail-1", "mail-1").await;
    assert_eq!(first["batched"], 1, "{first}");
    let mut unbatched = config.clone();
    unbatched["hooks"]["mappings"][0]
        .as_object_mut()
        .unwrap()
        .remove("batch");
    dir.write(&unbatched);
    eventually("the reload", async || {
        a.api_json("/api/config").await.1["generation"] == 2
    })
    .await;
    let retried = send_keyed(&a, "mail-1", "mail-1").await;
    assert_eq!(retried["runId"], first["runId"], "{retried}");
    let (_, runs) = a.api_json("/api/runs").await;
    let runs = runs["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "batching", "{runs:?}");
}
