//! Forward mode keeps every control in front of the real OpenClaw gateway (2026.9.6, as
//! tests/it/openclaw.rs starts it), whose agents call a model provider stand-in on loopback: a
//! batch is one relayed request, a lane bounds the relayed runs OpenClaw is still running, a full
//! lane answers 429, a spent budget holds and a release relays (docs/hooks.md, "Forward mode").

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::openclaw::{OPENCLAW_HOOK_TOKEN, OpenClaw};

/// A model provider that answers each chat call once the test adds a permit to `gate`, and
/// OpenClaw in front of it, ready.
pub(crate) async fn openclaw_behind(gate: &Arc<Semaphore>) -> (OpenClaw, Fake) {
    let gate = Arc::clone(gate);
    let provider = Fake::start(move |call, _| {
        let reply = Box::new(Answer::Json(200, chat_reply("done")));
        if call.path.ends_with("/chat/completions") {
            Answer::Gated(Arc::clone(&gate), reply)
        } else {
            // OpenClaw lists the provider's models first: with none listed it keeps its own.
            Answer::Json(404, json!({"error": "not found"}))
        }
    })
    .await;
    let mut openclaw = OpenClaw::start_with_model(&format!("{}/v1", provider.base), "stand-in");
    openclaw.ready().await;
    (openclaw, provider)
}

/// hookgate in forward mode in front of `openclaw`, with `mappings`.
pub(crate) fn forwarding(openclaw: &OpenClaw, mappings: Value) -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.allowedSessionKeyPrefixes",
        json!(["hook:"]),
    );
    set(&mut config, "hooks.mappings", mappings);
    set(&mut config, "gateway.mode", json!("forward"));
    set(
        &mut config,
        "gateway.forward",
        json!({"url": openclaw.url(), "token": OPENCLAW_HOOK_TOKEN}),
    );
    config
}

/// The run once its status is `status`, waiting up to two minutes (OpenClaw runs the runs of
/// one session one after the other).
async fn becomes(server: &Hookgate, run_id: &str, status: &str) -> Value {
    let (limit, every) = (Duration::from_secs(120), Duration::from_millis(100));
    eventually_within(
        &format!("run {run_id} {status}"),
        limit,
        every,
        async || {
            let run = server.api_json(&format!("/api/runs/{run_id}")).await.1;
            (run["status"] == status)
                .then_some(run.clone())
                .ok_or(run.to_string())
        },
    )
    .await
}

/// The model calls OpenClaw made.
pub(crate) fn model_calls(provider: &Fake) -> Vec<Value> {
    let calls = provider.requests().into_iter();
    calls
        .filter(|call| call.path.ends_with("/chat/completions"))
        .map(|call| call.body)
        .collect()
}

async fn post(server: &Hookgate, path: &str, body: Value) -> (u16, Value, Option<String>) {
    let response = server.hook(path).json(&body).send().await.unwrap();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let (status, reply) = json_of(response).await;
    (status, reply, retry_after)
}

async fn operator(server: &Hookgate, run_id: &str, action: &str) -> u16 {
    let path = format!("/api/runs/{run_id}/{action}");
    let request = client().post(server.url(&path)).bearer_auth(GATEWAY_TOKEN);
    request.send().await.unwrap().status().as_u16()
}

/// `hookgate_forward_relays_total{kind="agent",outcome="forwarded"}`: agent relays that landed.
pub(crate) async fn relayed_runs(server: &Hookgate) -> u64 {
    let metrics = server.metrics().await;
    let line = r#"hookgate_forward_relays_total{kind="agent",outcome="forwarded"} "#;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_mode_keeps_every_control_in_front_of_openclaw() {
    let gate = Arc::new(Semaphore::new(0));
    let (openclaw, provider) = openclaw_behind(&gate).await;
    let config = forwarding(
        &openclaw,
        json!([
            {"id": "lane", "match": {"path": "lane"}, "messageTemplate": "lane {{n}}",
             "runs": {"maxConcurrent": 1, "maxQueued": 1}},
            {"id": "github", "match": {"path": "github"}, "messageTemplate": "event {{n}}",
             "sessionKey": "hook:github", "batch": {"window": "2s", "maxItems": 50}},
            {"id": "budgeted", "match": {"path": "budgeted"}, "messageTemplate": "budgeted {{n}}",
             "budget": {"runsPerHour": 1}},
        ]),
    );
    let (server, _dir) = Hookgate::start(&config);

    // A lane of one: the first run is relayed and OpenClaw runs it (its model call waits at the
    // gate); the second waits here, queued; a third finds the lane's queue full.
    let (status, first, _) = post(&server, "/hooks/lane", json!({"n": 1})).await;
    assert_eq!(status, 200, "{first}");
    let first_id = first["runId"].as_str().unwrap().to_string();
    becomes(&server, &first_id, "forwarding").await;
    // OpenClaw, a Node.js process, may take a while on a busy machine: wait as for a run.
    let (limit, every) = (Duration::from_secs(120), Duration::from_millis(100));
    eventually_within("OpenClaw to call the model", limit, every, async || {
        (!model_calls(&provider).is_empty())
            .then_some(())
            .ok_or_else(String::new)
    })
    .await;
    let (status, second, _) = post(&server, "/hooks/lane", json!({"n": 2})).await;
    assert_eq!(status, 200, "{second}");
    let second_id = second["runId"].as_str().unwrap().to_string();
    let (status, third, retry_after) = post(&server, "/hooks/lane", json!({"n": 3})).await;
    assert_eq!(status, 429, "{third}");
    assert_eq!(retry_after.as_deref(), Some("5"), "{third}");
    let run = server.api_json(&format!("/api/runs/{second_id}")).await.1;
    assert_eq!(
        run["status"], "queued",
        "not relayed while the first runs: {run}"
    );
    assert_eq!(relayed_runs(&server).await, 0, "OpenClaw has not answered");

    // The model answers: OpenClaw ends the first run and answers its relay; then the second is
    // relayed, never before.
    gate.add_permits(1000);
    let first = becomes(&server, &first_id, "forwarded").await;
    let second = becomes(&server, &second_id, "forwarded").await;
    let (ended, started) = (
        first["finishedAt"].as_str().unwrap(),
        second["startedAt"].as_str().unwrap(),
    );
    assert!(started >= ended, "{first}\n{second}\n{}", openclaw.log());
    assert!(first["upstreamRunId"].is_string(), "{first}");

    // A burst to a batch mapping: one run, relayed as one agent request with every message.
    let mut batch = None;
    for n in 1..=10 {
        let (status, reply, _) = post(&server, "/hooks/github", json!({"n": n})).await;
        assert_eq!(
            (status, reply["batched"].as_u64()),
            (200, Some(n)),
            "{reply}"
        );
        assert!(batch.is_none_or(|id| id == reply["runId"]), "{reply}");
        batch = Some(reply["runId"].clone());
    }
    let before = relayed_runs(&server).await;
    becomes(&server, batch.unwrap().as_str().unwrap(), "forwarded").await;
    assert_eq!(
        relayed_runs(&server).await,
        before + 1,
        "one relay for ten requests"
    );
    let prompts: Vec<String> = model_calls(&provider)
        .iter()
        .map(Value::to_string)
        .filter(|body| body.contains("event 2") && body.contains("event 10"))
        .collect();
    assert!(
        !prompts.is_empty(),
        "the batch's prompt reached the model in one run"
    );

    // A spent `hold` budget holds the run past it; the operator's release relays it.
    let (_, spent, _) = post(&server, "/hooks/budgeted", json!({"n": 1})).await;
    becomes(&server, spent["runId"].as_str().unwrap(), "forwarded").await;
    let (status, held, _) = post(&server, "/hooks/budgeted", json!({"n": 2})).await;
    assert_eq!(status, 200, "{held}");
    let held_id = held["runId"].as_str().unwrap().to_string();
    becomes(&server, &held_id, "held").await;
    let before = relayed_runs(&server).await;
    assert_eq!(operator(&server, &held_id, "release").await, 200);
    let released = becomes(&server, &held_id, "forwarded").await;
    assert_eq!(relayed_runs(&server).await, before + 1, "{released}");
}

/// The new user's burst: 50 GitHub-like events (20 that the mapping's conditions filter) to a
/// batch mapping with a spent `hold` budget and the shared session key `hook:ingress`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_users_burst_in_forward_mode_against_openclaw() {
    let gate = Arc::new(Semaphore::new(1000));
    let (openclaw, provider) = openclaw_behind(&gate).await;
    let mut config = forwarding(
        &openclaw,
        json!([
            {"id": "github", "match": {"path": "github",
                "headers": {"X-GitHub-Event": ["issues", "pull_request"]},
                "payload": {"/action": ["opened", "reopened"]}},
             "messageTemplate": "{{action}} #{{number}}",
             "batch": {"window": "2s", "maxItems": 50},
             "budget": {"runsPerHour": 1, "onExceeded": "hold"}},
        ]),
    );
    set(
        &mut config,
        "hooks.defaultSessionKey",
        json!("hook:ingress"),
    );
    let (server, _dir) = Hookgate::start(&config);
    let event = |n: u32, event: &str, action: &str| {
        server
            .hook("/hooks/github")
            .header("X-GitHub-Event", event)
            .json(&json!({"action": action, "number": n}))
            .send()
    };
    // The budget's one run an hour: spent by a first event (a batch of one).
    let (_, first) = json_of(event(0, "issues", "opened").await.unwrap()).await;
    becomes(&server, first["runId"].as_str().unwrap(), "forwarded").await;

    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    let mut held = std::collections::BTreeSet::new();
    for n in 1..=50 {
        let (kind, action) = match n % 5 {
            0 => ("issues", "labeled"),
            1 => ("star", "created"),
            _ => ("pull_request", "opened"),
        };
        let response = event(n, kind, action).await.unwrap();
        let status = response.status().as_u16();
        *statuses.entry(status).or_default() += 1;
        if status == 200 {
            let reply: Value = response.json().await.unwrap();
            held.insert(reply["runId"].as_str().unwrap().to_string());
        }
    }
    // The 30 admitted events are one batch; past the spent budget its run is held when the
    // batch's window closes (docs/runtime.md#batches).
    assert_eq!(statuses, [(200, 30), (204, 20)].into_iter().collect());
    assert_eq!(held.len(), 1, "the burst is one batch: {held:?}");
    let batch = held.iter().next().unwrap();
    becomes(&server, batch, "held").await;
    let relayed = relayed_runs(&server).await;
    eprintln!(
        "new user's burst: answers {statuses:?}, distinct runs answered {}, agent requests \
         relayed to OpenClaw {relayed}, model calls {}",
        held.len(),
        model_calls(&provider).len()
    );
    assert_eq!(relayed, 1, "only the run that spent the budget");

    // A release relays the held batch into OpenClaw: one run over every event.
    assert_eq!(operator(&server, batch, "release").await, 200);
    becomes(&server, batch, "forwarded").await;
    assert_eq!(relayed_runs(&server).await, 2, "{}", openclaw.log());
    let whole = model_calls(&provider)
        .iter()
        .map(Value::to_string)
        .filter(|body| body.contains("opened #2") && body.contains("opened #49"))
        .count();
    assert!(
        whole >= 1,
        "the batch's prompt reached the model in one run"
    );
}
