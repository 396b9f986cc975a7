//! A burst past a spent budget stays one turn (docs/runtime.md "Batches", docs/hooks.md
//! "Budgets"): the requests of a batch mapping past a budget that holds gather into one batch as
//! within it, and the closed batch's one run is what the budget holds; released, it is one model
//! call with every item. The provider is a real HTTP server on loopback.

use std::time::Duration;

use serde_json::{Value, json};

use crate::batches::{batch_prompts, config, messages_of, send};
use crate::fake::Fake;
use crate::harness::*;
use crate::runtime::Backend;

/// Waits until run `run_id` shows status `status` on `server`; the run.
async fn becomes(server: &Hookgate, run_id: &str, status: &str) -> Value {
    eventually_within(
        &format!("run {run_id} to become {status}"),
        Duration::from_secs(20),
        Duration::from_millis(50),
        async || {
            let run = server.api_json(&format!("/api/runs/{run_id}")).await.1;
            (run["status"] == status)
                .then(|| run.clone())
                .ok_or(run.to_string())
        },
    )
    .await
}

/// `runsPerHour: 1` is spent by a first batch; a burst of six requests then opens one held
/// batch (every answer names its run, positions 1 to 6); released, it is one turn of six items.
async fn a_burst_past_a_spent_budget_is_one_held_batch_and_one_turn(backend: Backend) {
    const BURST: usize = 6;
    let provider = Fake::provider("done").await;
    let mut config = config(&provider, json!({"window": "1h", "maxItems": BURST}));
    config["hooks"]["mappings"][0]["budget"] = json!({"runsPerHour": 1, "onExceeded": "hold"});
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    let (server, _kept) = backend.start(&config);

    // Within the budget: the first batch runs, and spends it.
    let mut first = None;
    for n in 0..BURST {
        first = Some(send(&server, &format!("spend {n}")).await["runId"].clone());
    }
    let first = first.unwrap();
    becomes(&server, first.as_str().unwrap(), "ok").await;
    assert_eq!(provider.requests().len(), 1);

    // Past it: one batch gathers the burst, and its run is held once it closes.
    let mut answers = Vec::new();
    for n in 0..BURST {
        answers.push(send(&server, &format!("burst {n}")).await);
    }
    let run_id = answers[0]["runId"].as_str().unwrap().to_string();
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(answer["runId"], run_id.as_str(), "{answers:?}");
        assert_eq!(answer["batched"], i + 1, "{answers:?}");
    }
    let run = becomes(&server, &run_id, "held").await;
    assert_eq!(
        run["heldBy"],
        json!({"scope": "mapping", "id": "inbox", "limit": "runsPerHour"})
    );
    let (_, held) = server.api_json("/api/runs?status=held").await;
    assert_eq!(held["runs"].as_array().unwrap().len(), 1, "{held}");
    assert_eq!(provider.requests().len(), 1, "a held batch ran");

    // Released: one turn, with every request of the burst in it.
    let release = format!("/api/runs/{run_id}/release");
    let request = client()
        .post(server.url(&release))
        .bearer_auth(GATEWAY_TOKEN);
    let (status, answer) = json_of(request.send().await.unwrap()).await;
    assert_eq!(status, 200, "{answer}");
    becomes(&server, &run_id, "ok").await;
    let prompts = batch_prompts(&provider);
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    let burst: Vec<String> = (0..BURST).map(|n| format!("burst {n}")).collect();
    assert_eq!(messages_of(&prompts[1]), burst);
    assert_eq!(provider.requests().len(), 2, "one turn for the burst");
}

on_both_stores!(a_burst_past_a_spent_budget_is_one_held_batch_and_one_turn);
