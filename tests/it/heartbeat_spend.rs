//! Heartbeat turns are counted (docs/runtime.md#what-runs-cost): a heartbeat's model call costs
//! tokens, which the agent's spend (`GET /api/spend`, `hookgate runs spend`) and its budget's
//! `tokensPerDay` count with its runs'. The provider is a real HTTP server on loopback that
//! reports a known usage.

use std::time::Duration;

use serde_json::{Value, json};

use crate::day_two::cli;
use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::runtime::{Backend, with_provider};

/// A provider that acknowledges every heartbeat (no delivery) and reports 1,200 input and 100
/// output tokens for each call: the trial's heartbeats.
async fn provider() -> Fake {
    Fake::start(|_, _| {
        let mut body = chat_reply("HEARTBEAT_OK");
        body["usage"] = json!({"prompt_tokens": 1200, "completion_tokens": 100,
                               "total_tokens": 1300});
        Answer::Json(200, body)
    })
    .await
}

/// The main agent's row of `GET /api/spend`, once it shows `heartbeats` heartbeat turns.
async fn main_spend(server: &Hookgate, heartbeats: u64) -> Value {
    eventually_within(
        &format!("{heartbeats} heartbeats in the spend"),
        Duration::from_secs(15),
        Duration::from_millis(50),
        async || {
            let (status, spend) = server.api_json("/api/spend").await;
            let main = spend["agents"]
                .as_array()
                .and_then(|agents| agents.iter().find(|a| a["agentId"] == "main"))
                .cloned();
            match main {
                Some(main) if status == 200 && main["heartbeats"] == heartbeats => Ok(main),
                _ => Err(format!("{status} {spend}")),
            }
        },
    )
    .await
}

/// Two heartbeats of 1,300 tokens each are the agent's spend, and spend its budget of 2,000
/// tokens a day: the next run of that agent is held by it.
async fn a_heartbeats_tokens_are_the_agents_spend_and_its_budgets(backend: Backend) {
    let provider = provider().await;
    let mut config = with_provider(&provider);
    // No periodic heartbeat: the wakes ask for each one.
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    let budget = json!({"tokensPerDay": 2000, "onExceeded": "hold"});
    set(
        &mut config,
        "agents.list",
        json!([{"id": "main", "default": true, "budget": budget}]),
    );
    let (server, _kept) = backend.start(&config);
    for (n, text) in [(1, "disk 91% full"), (2, "disk 95% full")] {
        let (status, body) = server
            .hook_json("/hooks/wake", &json!({"text": text, "mode": "now"}))
            .await;
        assert_eq!(status, 200, "{body}");
        main_spend(&server, n).await;
    }
    let main = main_spend(&server, 2).await;
    assert_eq!(
        main,
        json!({"agentId": "main", "runs": 0, "heartbeats": 2,
               "inputTokens": 2400, "outputTokens": 200}),
    );
    assert_eq!(provider.requests().len(), 2, "one model call per heartbeat");

    // The agent's budget saw them: its next run is held, by its tokens.
    let direct = json!({"message": "m", "deliver": false, "wakeMode": "next-heartbeat"});
    let (status, reply) = server.hook_json("/hooks/agent", &direct).await;
    assert_eq!(status, 200, "{reply}");
    let run_id = reply["runId"].as_str().unwrap();
    let run = eventually_within(
        &format!("run {run_id} to show"),
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let (status, run) = server.api_json(&format!("/api/runs/{run_id}")).await;
            (status == 200).then_some(run).ok_or(status.to_string())
        },
    )
    .await;
    assert_eq!(run["status"], "held", "{run}");
    assert_eq!(
        run["heldBy"],
        json!({"scope": "agent", "id": "main", "limit": "tokensPerDay"})
    );

    // The command line shows the same.
    let spend = cli(&server, &["runs", "spend"]);
    let row = spend.lines().find(|line| line.starts_with("main"));
    let row: Vec<&str> = row.expect(&spend).split_whitespace().collect();
    assert_eq!(row, ["main", "1", "2", "2400", "200"], "{spend}");
}

on_both_stores!(a_heartbeats_tokens_are_the_agents_spend_and_its_budgets);
