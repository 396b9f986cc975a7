//! Lanes (docs/hooks.md, "Lanes"): a mapping's `runs.maxConcurrent` bounds its runs at once,
//! `runs.maxQueued` refuses a request with 429 and stores nothing, and `runs.priority` decides
//! which queued run starts next. The model provider is a real HTTP server on loopback that holds
//! each answer until the test lets it go, so that what runs at once is what the test says.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::fake::chat_reply;
use crate::harness::*;
use crate::runtime::Backend;

/// A chat-completions provider that answers a call only once the test let one go
/// ([`GatedProvider::release`]), and counts the calls in progress.
#[derive(Clone)]
pub(crate) struct GatedProvider {
    pub(crate) base: String,
    gate: Arc<Semaphore>,
    /// Each call's hook message ([`message_of`]), in the order the calls came.
    prompts: Arc<Mutex<Vec<String>>>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

impl GatedProvider {
    pub(crate) async fn start() -> GatedProvider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let provider = GatedProvider {
            base: format!("http://{}", listener.local_addr().unwrap()),
            gate: Arc::new(Semaphore::new(0)),
            prompts: Arc::default(),
            in_flight: Arc::default(),
            max_in_flight: Arc::default(),
        };
        let state = provider.clone();
        let app = Router::new().fallback(move |body: Bytes| {
            let state = state.clone();
            async move { state.answer(body).await }
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        provider
    }

    async fn answer(&self, body: Bytes) -> axum::Json<Value> {
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let prompt = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .map(message_of)
            .unwrap_or_default();
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        self.prompts.lock().unwrap().push(prompt);
        self.gate.acquire().await.unwrap().forget();
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        axum::Json(chat_reply("ok"))
    }

    /// Lets `n` calls answer, those waiting first.
    pub(crate) fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }

    fn prompts(&self) -> Vec<String> {
        self.prompts.lock().unwrap().clone()
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    /// Waits until the provider has been called `n` times; the prompts so far.
    pub(crate) async fn called(&self, n: usize) -> Vec<String> {
        eventually_within(
            &format!("{n} provider calls"),
            Duration::from_secs(15),
            Duration::from_millis(20),
            async || {
                let prompts = self.prompts();
                (prompts.len() >= n)
                    .then(|| prompts.clone())
                    .ok_or_else(|| format!("{prompts:?}"))
            },
        )
        .await
    }
}

/// The hook's message inside a prompt's untrusted-content envelope (the prompt itself when it
/// has none), so that a failure shows what ran, not the envelope.
fn message_of(prompt: &str) -> String {
    prompt
        .split_once("\n---\n")
        .and_then(|(_, rest)| rest.split_once("\n<<<END"))
        .map_or(prompt, |(message, _)| message)
        .to_string()
}

/// An agent mapping of hook name `name` whose runs say `<name> <n>` and neither deliver nor
/// ask for a heartbeat (a heartbeat turn would be one more provider call), with `runs`.
fn mapping(name: &str, runs: Value) -> Value {
    json!({
        "id": name,
        "match": {"path": name},
        "action": "agent",
        "messageTemplate": format!("{name} {{{{n}}}}"),
        "deliver": false,
        "wakeMode": "next-heartbeat",
        "runs": runs,
    })
}

fn config(provider: &GatedProvider, max_concurrent: u32, mappings: Value) -> Value {
    let mut config = base_config();
    let defaults = json!({
        "provider": {"baseUrl": provider.base, "apiKey": "sk-test"},
        "model": "default-model",
        "maxConcurrent": max_concurrent,
    });
    set(&mut config, "agents.defaults", defaults);
    set(&mut config, "hooks.mappings", mappings);
    config
}

/// Sends `{"n": n}` to `/hooks/<name>`; the answer's status and body.
async fn send(server: &Hookgate, name: &str, n: usize) -> (u16, Value) {
    server
        .hook_json(&format!("/hooks/{name}"), &json!({"n": n}))
        .await
}

async fn accepted(server: &Hookgate, name: &str, n: usize) -> String {
    let (status, body) = send(server, name, n).await;
    assert_eq!(status, 200, "{body}");
    body["runId"].as_str().unwrap().to_string()
}

pub(crate) async fn runs(server: &Hookgate) -> Vec<Value> {
    let (status, body) = server.api_json("/api/runs?limit=100").await;
    assert_eq!(status, 200, "{body}");
    body["runs"].as_array().unwrap().clone()
}

/// Checks that `refused` is a lane's refusal: 429, `Retry-After`, and a terse message.
pub(crate) async fn assert_queue_full(refused: reqwest::Response) {
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "5");
    let (_, body) = json_of(refused).await;
    assert_eq!(
        body,
        json!({"ok": false, "error": "run queue full; retry later"})
    );
}

/// Waits until every run `server` knows has ended.
pub(crate) async fn all_finished(server: &Hookgate, count: usize) {
    eventually_within(
        "every run to finish",
        Duration::from_secs(15),
        Duration::from_millis(50),
        async || {
            let runs = runs(server).await;
            let ended = runs.iter().filter(|r| r["status"] == "ok").count();
            (runs.len() == count && ended == count)
                .then_some(())
                .ok_or_else(|| format!("{ended} of {} ended", runs.len()))
        },
    )
    .await
}

on_both_stores!(
    a_lane_holds_its_mapping_to_max_concurrent_and_not_the_others,
    past_max_queued_a_request_is_refused_with_429_and_nothing_is_stored,
    a_high_priority_run_starts_before_a_queued_low_priority_burst,
    a_high_run_starts_before_the_queued_low_runs_of_its_session_key,
);

/// Waits until `server` shows `count` runs: on NATS, until its view applied them.
pub(crate) async fn shown(server: &Hookgate, count: usize) {
    eventually(&format!("{count} runs shown"), async || {
        runs(server).await.len() == count
    })
    .await
}

async fn a_lane_holds_its_mapping_to_max_concurrent_and_not_the_others(backend: Backend) {
    let provider = GatedProvider::start().await;
    let mappings = json!([
        mapping("bulk", json!({"maxConcurrent": 2})),
        mapping("chat", json!({})),
    ]);
    let (server, _kept) = backend.start(&config(&provider, 8, mappings));
    for n in 0..5 {
        accepted(&server, "bulk", n).await;
    }
    provider.called(2).await;
    // A run of another mapping, queued after the three bulk runs still waiting, starts: the
    // runner looked past them, and left them because their lane was full.
    accepted(&server, "chat", 0).await;
    chat_started_beside_two_bulk_runs(&provider).await;
    assert_eq!(provider.in_flight(), 3);
    provider.release(6);
    all_finished(&server, 6).await;
    assert_eq!(
        provider.max_in_flight(),
        3,
        "two bulk runs and the chat run"
    );
    assert_eq!(provider.prompts().len(), 6);
}

async fn past_max_queued_a_request_is_refused_with_429_and_nothing_is_stored(backend: Backend) {
    let provider = GatedProvider::start().await;
    let mappings = json!([mapping(
        "gmail",
        json!({"maxConcurrent": 1, "maxQueued": 2})
    )]);
    let (server, _kept) = backend.start(&config(&provider, 4, mappings));
    accepted(&server, "gmail", 0).await;
    provider.called(1).await;
    accepted(&server, "gmail", 1).await;
    let keyed = || {
        server
            .hook("/hooks/gmail")
            .header("idempotency-key", "gmail-2")
            .json(&json!({"n": 2}))
    };
    let (status, first) = json_of(keyed().send().await.unwrap()).await;
    assert_eq!(status, 200, "{first}");
    // Admission counts the queue this node shows (on NATS, its view of the stream).
    shown(&server, 3).await;

    let refused = server
        .hook("/hooks/gmail")
        .json(&json!({"n": 3}))
        .send()
        .await
        .unwrap();
    assert_queue_full(refused).await;
    assert_eq!(
        runs(&server).await.len(),
        3,
        "the refused request stored a run"
    );
    // A repeat of a request the lane took is answered with its run, not refused (a cluster
    // finds it in its idempotency bucket).
    let (status, repeat) = json_of(keyed().send().await.unwrap()).await;
    assert_eq!((status, &repeat["runId"]), (200, &first["runId"]));
    assert_eq!(runs(&server).await.len(), 3, "the repeat stored a run");

    // The request log is written behind the answer.
    let record = eventually_within(
        "the refusal's record",
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let (_, page) = server.api_json("/api/requests?status=4xx").await;
            let record = page["requests"][0].clone();
            (!record.is_null())
                .then_some(record)
                .ok_or_else(|| page.to_string())
        },
    )
    .await;
    assert_eq!(record["mappingId"], "gmail", "{record}");
    assert_eq!(
        record["reason"], "mapping gmail: runs.maxQueued (2) reached",
        "{record}"
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("hookgate_lane_refusals_total{mapping=\"gmail\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hookgate_lane_queued{mapping=\"gmail\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hookgate_hook_requests_total{hook=\"gmail\",outcome=\"limited\"} 1"),
        "a refusal by a limit is not counted as unauthorized: {metrics}"
    );

    // As the queue drains, the lane takes requests again.
    provider.release(3);
    all_finished(&server, 3).await;
    accepted(&server, "gmail", 4).await;
    provider.release(1);
    all_finished(&server, 4).await;
    assert_eq!(provider.max_in_flight(), 1);
}

async fn a_high_priority_run_starts_before_a_queued_low_priority_burst(backend: Backend) {
    let provider = GatedProvider::start().await;
    let mappings = json!([
        mapping("gmail", json!({"priority": "low"})),
        mapping("chat", json!({"priority": "high"})),
    ]);
    let (server, _kept) = backend.start(&config(&provider, 1, mappings));
    accepted(&server, "gmail", 0).await;
    provider.called(1).await;
    for n in 1..=5 {
        accepted(&server, "gmail", n).await;
    }
    accepted(&server, "chat", 0).await;
    // On NATS a node knows of a waiting higher-priority run from its view.
    shown(&server, 7).await;
    // The one run already started ends; the next one the provider sees is the chat's.
    provider.release(1);
    let prompts = provider.called(2).await;
    assert_eq!(prompts[1], "chat 0", "{prompts:?}");
    let shown: Vec<Value> = runs(&server).await;
    let priority_of = |hook: &str| {
        let run = shown.iter().find(|r| r["mappingId"] == hook).unwrap();
        run["priority"].clone()
    };
    assert_eq!(
        (priority_of("chat"), priority_of("gmail")),
        (json!("high"), json!("low"))
    );
    provider.release(6);
    all_finished(&server, 7).await;
    let order: Vec<String> = provider.prompts();
    // The low burst then runs, oldest first in one process (on a cluster, in the order the
    // consumer offers them again).
    for (i, n) in (2..7).zip(1..=5) {
        let expected = format!("gmail {n}");
        match backend {
            Backend::Embedded => assert_eq!(order[i], expected, "{order:?}"),
            Backend::Nats => assert!(order.contains(&expected), "{order:?}"),
        }
    }
}

/// The new user's case (docs/runtime.md, "Which run starts next"): CI runs and a website form
/// share `hooks.defaultSessionKey`, as the example configuration has it. Four low CI runs wait
/// behind a running one; the high form, queued after them, is the session's next run, and the
/// session's runs still never overlap.
async fn a_high_run_starts_before_the_queued_low_runs_of_its_session_key(backend: Backend) {
    let provider = GatedProvider::start().await;
    let mappings = json!([
        mapping("ci", json!({"priority": "low"})),
        mapping("form", json!({"priority": "high"})),
    ]);
    let mut config = config(&provider, 4, mappings);
    set(
        &mut config,
        "hooks.defaultSessionKey",
        json!("hook:ingress"),
    );
    let (server, _kept) = backend.start(&config);
    accepted(&server, "ci", 0).await;
    provider.called(1).await;
    for n in 1..=4 {
        accepted(&server, "ci", n).await;
    }
    accepted(&server, "form", 0).await;
    shown(&server, 6).await;
    assert_eq!(
        provider.in_flight(),
        1,
        "a second run of the session started"
    );
    provider.release(1);
    let prompts = provider.called(2).await;
    assert_eq!(prompts[1], "form 0", "{prompts:?}");
    provider.release(5);
    all_finished(&server, 6).await;
    assert_eq!(provider.max_in_flight(), 1, "{:?}", provider.prompts());
    let shown = runs(&server).await;
    assert!(
        shown.iter().all(|run| run["sessionKey"] == "hook:ingress"),
        "{shown:?}"
    );
}

/// Waits for the third provider call, which must be the chat run's, with the two bulk runs
/// that started before it still held: no third bulk run started, though it was queued first.
async fn chat_started_beside_two_bulk_runs(provider: &GatedProvider) {
    let prompts = provider.called(3).await;
    assert_eq!(prompts[2], "chat 0", "{prompts:?}");
    let bulk = prompts.iter().filter(|p| p.starts_with("bulk")).count();
    assert_eq!(bulk, 2, "{prompts:?}");
}

/// Two nodes on one NATS server share a lane: its `maxConcurrent` bounds the runs of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_hold_a_lane_together() {
    let provider = GatedProvider::start().await;
    let nats = crate::nats::NatsServer::start();
    let mut config = config(
        &provider,
        8,
        json!([
            mapping("bulk", json!({"maxConcurrent": 2})),
            mapping("chat", json!({})),
        ]),
    );
    set(
        &mut config,
        "gateway.store",
        json!({"kind": "nats", "url": nats.url()}),
    );
    let (first, _first_dir) = Hookgate::start(&config);
    let (second, _second_dir) = Hookgate::start(&config);
    for n in 0..6 {
        let node = if n % 2 == 0 { &first } else { &second };
        accepted(node, "bulk", n).await;
    }
    provider.called(2).await;
    // Every bulk run was offered before this one, which starts on whichever node takes it.
    accepted(&second, "chat", 0).await;
    chat_started_beside_two_bulk_runs(&provider).await;
    provider.release(7);
    all_finished(&first, 7).await;
    assert_eq!(
        provider.max_in_flight(),
        3,
        "two bulk runs and the chat run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_runs_takes_effect_for_queued_runs() {
    let provider = GatedProvider::start().await;
    let narrow = config(
        &provider,
        8,
        json!([mapping("bulk", json!({"maxConcurrent": 1, "maxQueued": 2}))]),
    );
    let (server, dir) = Hookgate::start(&narrow);
    for n in 0..3 {
        accepted(&server, "bulk", n).await;
    }
    provider.called(1).await;
    assert_eq!(send(&server, "bulk", 3).await.0, 429);

    let wide = config(
        &provider,
        8,
        json!([mapping("bulk", json!({"maxConcurrent": 3, "maxQueued": 3}))]),
    );
    dir.write(&wide);
    eventually("the reload", async || {
        server.api_json("/api/config").await.1["generation"] == 2
    })
    .await;
    // The two queued runs start without waiting for the first.
    provider.called(3).await;
    assert_eq!(provider.in_flight(), 3);
    provider.release(3);
    all_finished(&server, 3).await;
}

#[test]
fn check_names_a_bad_lane_key_without_its_value() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"match": {"path": "a"}, "runs": {"maxConcurrent": 0}},
            {"match": {"path": "b"}, "runs": {"maxConcurrent": 3, "maxQueued": 2}},
            {"match": {"path": "c"}, "runs": {"priority": "urgent-ish"}},
            {"match": {"path": "d"}, "action": "wake", "textTemplate": "t", "runs": {"maxQueued": 9}},
        ]),
    );
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "{output}");
    for expected in [
        "hooks.mappings[0].runs.maxConcurrent: must be at least 1",
        "hooks.mappings[1].runs.maxQueued: must be at least maxConcurrent",
        "hooks.mappings[2].runs.priority: must be high, normal or low",
        "hooks.mappings[3].runs: applies to agent mappings only",
    ] {
        assert!(output.contains(expected), "{expected} not in {output}");
    }
    assert!(!output.contains("urgent-ish"), "{output}");
}
