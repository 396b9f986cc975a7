//! The console's overview (docs/operations.md#the-overview): `GET /api/overview` after known
//! traffic, on both stores.

use serde_json::{Value, json};

use crate::fake::Fake;
use crate::harness::*;
use crate::runtime::{Backend, finished, with_provider};

/// Mappings `ci` (a wake, only for `{"kind": "deploy"}`: anything else is filtered) and `github`
/// (agent runs, one an hour: the next is held).
fn config(provider: &Fake) -> Value {
    let mut config = with_provider(provider);
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "ci", "match": {"path": "ci", "payload": {"/kind": "deploy"}},
             "action": "wake", "textTemplate": "deploy"},
            {"id": "github", "match": {"path": "github"}, "action": "agent",
             "messageTemplate": "event {{n}}", "deliver": false, "wakeMode": "next-heartbeat",
             "runs": {"maxConcurrent": 1, "maxQueued": 5},
             "budget": {"runsPerHour": 1}},
        ]),
    );
    config
}

/// Sends 4 deploys and 1 run (5 accepted), 3 filtered, 2 refused 401 and 1 held run; returns
/// the held run's id.
async fn known_traffic(server: &Hookgate) -> String {
    for _ in 0..4 {
        let sent = server.hook("/hooks/ci").json(&json!({"kind": "deploy"}));
        assert_eq!(sent.send().await.unwrap().status(), 200);
    }
    for _ in 0..3 {
        let sent = server.hook("/hooks/ci").json(&json!({"kind": "test"}));
        assert_eq!(sent.send().await.unwrap().status(), 204);
    }
    for _ in 0..2 {
        let forged = client()
            .post(server.url("/hooks/ci"))
            .bearer_auth("not-the-token")
            .json(&json!({"kind": "deploy"}));
        assert_eq!(forged.send().await.unwrap().status(), 401);
    }
    let (status, first) = server.hook_json("/hooks/github", &json!({"n": 1})).await;
    assert_eq!(status, 200, "{first}");
    finished(server, first["runId"].as_str().unwrap()).await;
    let (status, second) = server.hook_json("/hooks/github", &json!({"n": 2})).await;
    assert_eq!(status, 200, "{second}");
    second["runId"].as_str().unwrap().to_string()
}

/// The overview once it shows every request sent (the log is written behind the answers).
async fn overview_of(server: &Hookgate, requests: u64) -> Value {
    let mut overview = Value::Null;
    eventually("the overview to count every request", async || {
        let (status, answer) = server.api_json("/api/overview").await;
        assert_eq!(status, 200, "{answer}");
        let totals = &answer["requests"]["totals"];
        let counted: u64 = totals
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        let held = answer["oldestHeld"].is_object();
        overview = answer;
        counted == requests && held
    })
    .await;
    overview
}

async fn the_overview_counts_requests_runs_and_budgets(backend: Backend) {
    let provider = Fake::provider("done").await;
    let (server, _dir) = backend.start(&config(&provider));
    let held = known_traffic(&server).await;
    let overview = overview_of(&server, 11).await;

    assert_eq!(
        overview["requests"]["totals"],
        json!({"accepted": 5, "filtered": 3, "batched": 0, "limited": 0, "refused": 0,
               "held": 1, "clientErrors": 2, "serverErrors": 0})
    );
    let minutes = overview["requests"]["minutes"].as_array().unwrap();
    assert!(!minutes.is_empty() && minutes.len() <= 2, "{minutes:?}");
    assert_eq!(
        overview["budgets"],
        json!([{"scope": "mapping", "id": "github", "limit": "runsPerHour", "max": 1,
                "used": 1, "onExceeded": "hold"}])
    );
    let github = overview["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|lane| lane["mappingId"] == "github")
        .unwrap();
    assert_eq!(github["held"], 1, "{github}");
    assert_eq!(github["maxConcurrent"], 1);
    assert_eq!(github["maxQueued"], 5);
    let runs_in = |status: &str| {
        overview["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["status"] == status)
            .unwrap()["runs"]
            .clone()
    };
    assert_eq!(runs_in("ok"), 1);
    assert_eq!(runs_in("held"), 1);
    assert_eq!(overview["oldestHeld"]["runId"], held.as_str());
    assert_eq!(
        overview["oldestHeld"]["heldBy"],
        "mapping:runsPerHour:github"
    );
    assert!(overview["oldestHeld"]["waitedSeconds"].is_u64());
    assert_eq!(overview["spend"][0]["mappingId"], "github");
    assert_eq!(overview["spend"][0]["runs"], 2);

    // A window it does not count is refused, and says what it takes.
    for hours in ["0", "25", "three"] {
        let (status, answer) = server
            .api_json(&format!("/api/overview?hours={hours}"))
            .await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"], "hours must be an integer from 1 to 24");
    }
    let (status, _) = json_of(
        client()
            .get(server.url("/api/overview"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401, "behind the gateway token");
}

on_both_stores!(the_overview_counts_requests_runs_and_budgets);
