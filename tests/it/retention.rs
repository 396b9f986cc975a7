//! Retention: finished work older than `gateway.retention` leaves the store while the server runs
//! (docs/configuration.md, retention). Which rows may go is tested in `src/gateway/retention.rs`.

use serde_json::json;

use crate::fake::Fake;
use crate::harness::*;
use crate::runtime::{agent, finished, with_provider};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_a_heartbeat_took_are_pruned_once_old_and_young_runs_stay() {
    let provider = Fake::provider("HEARTBEAT_OK").await;
    let mut config = with_provider(&provider);
    set(
        &mut config,
        "gateway.retention",
        json!({"events": "2s", "runs": "2s"}),
    );
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    let (server, _dir) = Hookgate::start(&config);
    let woke = server
        .hook("/hooks/wake")
        .json(&json!({"text": "old news"}))
        .send()
        .await
        .unwrap();
    assert_eq!(woke.status(), 200);
    // The run's summary event is taken by the heartbeat its `wakeMode: now` asks for.
    let run_id = agent(&server, json!({"message": "m", "deliver": false})).await;
    assert_eq!(finished(&server, &run_id).await["status"], "ok");
    eventually(
        "the events and the run's summary to be pruned",
        async || server.events().await.is_empty(),
    )
    .await;
    // A run stays at least as long as a repeat of its request would be answered with its id.
    let run = server.run_of(&json!({"runId": run_id})).await;
    assert_eq!(run["status"], "ok", "{run}");
    assert!(
        provider.requests().len() >= 2,
        "the run and at least one heartbeat"
    );
}
