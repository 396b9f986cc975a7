//! Admission of a batch mapping's requests (docs/hooks.md "Batches", "Lanes", "Budgets"):
//! joining an open batch adds no run, so neither `runs.maxQueued` nor a budget refuses it;
//! opening one is a new run, which the lane and the budgets admit or refuse.

use serde_json::{Value, json};

use crate::fake::Fake;
use crate::harness::*;
use crate::lanes::{GatedProvider, all_finished, assert_queue_full, runs, shown};
use crate::runtime::{Backend, with_provider};

/// The `inbox` mapping: one session key, batches of two that its window never closes within a
/// test, so that only `maxItems` closes them, with `extra` (its `runs` or its `budget`).
fn inbox(extra: Value) -> Value {
    let mut mapping = json!({
        "id": "inbox", "match": {"path": "inbox"}, "action": "agent",
        "sessionKey": "hook:inbox", "messageTemplate": "mail {{n}}",
        "deliver": false, "wakeMode": "next-heartbeat",
        "batch": {"window": "1h", "maxItems": 2},
    });
    mapping
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    mapping
}

fn lane_config(provider: &GatedProvider, max_queued: u32) -> Value {
    let mut config = base_config();
    let defaults = json!({
        "provider": {"baseUrl": provider.base, "apiKey": "sk-test"},
        "model": "default-model",
        "maxConcurrent": 4,
    });
    set(&mut config, "agents.defaults", defaults);
    let runs = json!({"runs": {"maxConcurrent": 1, "maxQueued": max_queued}});
    set(&mut config, "hooks.mappings", json!([inbox(runs)]));
    config
}

async fn send(server: &Hookgate, n: u32) -> reqwest::Response {
    server
        .hook("/hooks/inbox")
        .json(&json!({"n": n}))
        .send()
        .await
        .unwrap()
}

/// Sends mail `n`, which must be answered 200; its run and its position in its batch.
async fn batched(server: &Hookgate, n: u32) -> (String, Value) {
    let (status, answer) = json_of(send(server, n).await).await;
    assert_eq!(status, 200, "{answer}");
    (
        answer["runId"].as_str().unwrap().to_string(),
        answer["batched"].clone(),
    )
}

/// Past `maxQueued` a request that would open a batch is refused and stores nothing, while one
/// that joins the open batch is taken. The lane fills while a batch is open by a reload that
/// narrows it: a batch mapping has one open batch per session key, and a batch that closes is
/// queued, so no request could open one into a lane that is already full.
async fn past_max_queued_a_request_joins_the_open_batch_and_one_opening_a_batch_is_429(
    backend: Backend,
) {
    let provider = GatedProvider::start().await;
    let (server, kept) = backend.start(&lane_config(&provider, 2));
    let (running, _) = batched(&server, 1).await;
    assert_eq!(batched(&server, 2).await, (running.clone(), json!(2)));
    provider.called(1).await;
    let (queued, _) = batched(&server, 3).await;
    assert_eq!(batched(&server, 4).await, (queued, json!(2)));
    let (open, position) = batched(&server, 5).await;
    assert_eq!(position, json!(1));
    shown(&server, 3).await;

    narrow_to_one_queued(kept.dir());
    eventually("the reload", async || {
        server.api_json("/api/config").await.1["generation"] == 2
    })
    .await;
    // The lane is full (one run queued, one running): the open batch still takes a request.
    assert_eq!(batched(&server, 6).await, (open, json!(2)));
    // No batch is open now, and opening one would be a new run past maxQueued.
    let refused = send(&server, 7).await;
    assert_queue_full(refused).await;
    // The full batch's run is queued behind its last request's answer (on NATS, published in
    // the background): once it shows, no batch is left open and no run was added.
    eventually("the full batch queued", async || {
        runs(&server)
            .await
            .iter()
            .all(|r| r["status"] != "batching")
    })
    .await;
    let stored = runs(&server).await;
    assert_eq!(
        stored.len(),
        3,
        "the refused request stored a run: {stored:?}"
    );
    assert_eq!(provider.in_flight(), 1);
    provider.release(3);
    all_finished(&server, 3).await;
}

/// Rewrites the configuration the server runs (on NATS, with its store) with `inbox`'s
/// `runs.maxQueued` at 1, which reloads it.
fn narrow_to_one_queued(dir: &ConfigDir) {
    let text = std::fs::read_to_string(dir.config_file()).unwrap();
    let mut config: Value = serde_json::from_str(&text).unwrap();
    config["hooks"]["mappings"][0]["runs"]["maxQueued"] = json!(1);
    dir.write(&config);
}

fn budget_config(provider: &Fake, on_exceeded: &str) -> Value {
    let mut config = with_provider(provider);
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    let budget = json!({"budget": {"runsPerHour": 1, "onExceeded": on_exceeded}});
    set(&mut config, "hooks.mappings", json!([inbox(budget)]));
    config
}

/// Within its budget a batch mapping's request opens a batch, and the batch's later requests
/// join it; past the budget a request that would open one is refused (`refuse`), or opens a
/// batch whose one run is held when it closes (`hold`).
async fn past_a_budget_a_request_opening_a_batch_is(backend: Backend, on_exceeded: &str) {
    let provider = Fake::provider("done").await;
    let (server, _kept) = backend.start(&budget_config(&provider, on_exceeded));
    let (first, position) = batched(&server, 1).await;
    assert_eq!(position, json!(1));
    assert_eq!(batched(&server, 2).await, (first.clone(), json!(2)));
    eventually("the batch's run to finish", async || {
        server.api_json(&format!("/api/runs/{first}")).await.1["status"] == "ok"
    })
    .await;

    let past = send(&server, 3).await;
    if on_exceeded == "refuse" {
        assert_eq!(past.status(), 429);
        assert!(past.headers().contains_key("retry-after"));
        let (_, body) = json_of(past).await;
        assert_eq!(
            body,
            json!({"ok": false, "error": "budget exceeded; retry later"})
        );
        let stored = runs(&server).await;
        assert_eq!(
            stored.len(),
            1,
            "the refused request stored a run: {stored:?}"
        );
        return;
    }
    // Past a budget that holds, the request opens a batch as any (docs/runtime.md#batches): its
    // requests gather, and when it closes its one run is held, not queued.
    let (status, answer) = json_of(past).await;
    assert_eq!(status, 200, "{answer}");
    let held = answer["runId"].as_str().unwrap().to_string();
    assert_ne!(held, first);
    assert_eq!(batched(&server, 4).await, (held.clone(), json!(2)));
    eventually("the batch's run to be held", async || {
        let run = server.api_json(&format!("/api/runs/{held}")).await.1;
        run["status"] == "held"
    })
    .await;
    let calls = provider.requests().len();
    assert_eq!(calls, 1, "a held run reached the provider");
}

async fn past_a_refusing_budget_a_request_opening_a_batch_is_429(backend: Backend) {
    past_a_budget_a_request_opening_a_batch_is(backend, "refuse").await
}

async fn past_a_holding_budget_a_request_opens_a_batch_that_is_held(backend: Backend) {
    past_a_budget_a_request_opening_a_batch_is(backend, "hold").await
}

on_both_stores!(
    past_max_queued_a_request_joins_the_open_batch_and_one_opening_a_batch_is_429,
    past_a_refusing_budget_a_request_opening_a_batch_is_429,
    past_a_holding_budget_a_request_opens_a_batch_that_is_held,
);
