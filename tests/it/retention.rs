//! Retention: finished work older than `gateway.retention` leaves the store while the server runs.

use serde_json::json;

use crate::harness::*;
use crate::runtime::agent;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_finished_runs_older_than_the_retention_are_pruned() {
    let mut config = base_config();
    set(
        &mut config,
        "gateway.retention",
        json!({"events": "2s", "runs": "2s"}),
    );
    let (server, _dir) = Hookgate::start(&config);
    let woke = server
        .hook("/hooks/wake")
        .json(&json!({"text": "old news", "mode": "next-heartbeat"}))
        .send()
        .await
        .unwrap();
    assert_eq!(woke.status(), 200);
    // No provider: the run ends at once with an error and a summary event.
    let run_id = agent(
        &server,
        json!({"message": "m", "wakeMode": "next-heartbeat"}),
    )
    .await;
    eventually("the run's summary", async || {
        server.events().await.len() == 2
    })
    .await;
    eventually("the old events and run to be pruned", async || {
        let run = server
            .api(&format!("/api/runs/{run_id}"))
            .send()
            .await
            .unwrap();
        server.events().await.is_empty() && run.status() == 404
    })
    .await;
}
