//! `GET /api/runs/{id}/events`: a run's status changes as server-sent events, over real HTTP
//! against a model provider on loopback that answers when the test says.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;

/// The `data` of each `status` event in `text`, in order.
fn statuses(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter(|block| block.lines().any(|l| l == "event: status"))
        .filter_map(|block| block.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_status_changes_stream_until_it_ends() {
    let gate = Arc::new(Semaphore::new(0));
    let held = Arc::clone(&gate);
    let provider = Fake::start(move |_, _| {
        Answer::Gated(
            Arc::clone(&held),
            Box::new(Answer::Json(200, chat_reply("all done"))),
        )
    })
    .await;
    let config = crate::runtime::with_provider(&provider);
    let (server, _dir) = Hookgate::start(&config);
    let run_id = crate::runtime::agent(&server, json!({"message": "go", "deliver": false})).await;
    eventually("the run to be running", async || {
        server.api_json(&format!("/api/runs/{run_id}")).await.1["status"] == "running"
    })
    .await;

    let mut stream = server
        .api(&format!("/api/runs/{run_id}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(
        stream.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut text = String::new();
    while statuses(&text).is_empty() {
        let chunk = stream
            .chunk()
            .await
            .unwrap()
            .expect("the stream ended early");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(statuses(&text)[0]["status"], "running");
    gate.add_permits(1);
    // The stream ends by itself after the run's last status.
    while let Some(chunk) = stream.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let said = statuses(&text);
    let last = said.last().unwrap();
    assert_eq!(last["status"], "ok", "{said:?}");
    assert_eq!(last["reply"], "all done");
    assert_eq!(last["runId"], run_id.as_str());
    assert_eq!(said.len(), 2, "{said:?}");

    let (status, _) = server.api_json("/api/runs/no-such-run/events").await;
    assert_eq!(status, 404);
    let anonymous = client()
        .get(server.url(&format!("/api/runs/{run_id}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
}
