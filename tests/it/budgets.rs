//! docs/hooks.md#budgets and docs/runtime.md#held-runs: a mapping's or an agent's budget holds or
//! refuses the runs past it, held runs are released by their window, a reload or the operator
//! (API and CLI), or cancelled. The behaviour tests run on the embedded store and on NATS
//! JetStream.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::runtime::{Backend, finished, with_provider};

/// A configuration whose mapping `github` (`POST /hooks/github`) starts agent runs, answered by
/// `provider`; no heartbeat runs, so that every provider call is a run's.
fn config(provider: &Fake, budget: Value) -> Value {
    let mut config = with_provider(provider);
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    let mapping = json!({"id": "github", "match": {"path": "github"}, "action": "agent",
        "messageTemplate": "event {{n}}", "deliver": false, "wakeMode": "next-heartbeat",
        "budget": budget});
    set(&mut config, "hooks.mappings", json!([mapping]));
    config
}

async fn github(server: &Hookgate, n: u32) -> reqwest::Response {
    server
        .hook("/hooks/github")
        .json(&json!({"n": n}))
        .send()
        .await
        .unwrap()
}

/// Posts event `n`; the run id it was answered with (200).
async fn accepted(server: &Hookgate, n: u32) -> String {
    let (status, reply) = json_of(github(server, n).await).await;
    assert_eq!(status, 200, "{reply}");
    reply["runId"].as_str().unwrap().to_string()
}

/// The run, once this node shows it (on NATS, once its view applied it).
pub(crate) async fn shown(server: &Hookgate, run_id: &str) -> Value {
    let mut run = Value::Null;
    eventually(&format!("run {run_id} to show"), async || {
        let (status, found) = server.api_json(&format!("/api/runs/{run_id}")).await;
        run = found;
        status == 200
    })
    .await;
    run
}

async fn operator(server: &Hookgate, run_id: &str, action: &str) -> (u16, Value) {
    let path = format!("/api/runs/{run_id}/{action}");
    let request = client().post(server.url(&path)).bearer_auth(GATEWAY_TOKEN);
    json_of(request.send().await.unwrap()).await
}

/// Waits until run `run_id` has status `status`.
pub(crate) async fn becomes(server: &Hookgate, run_id: &str, status: &str) {
    let mut run = Value::Null;
    eventually_within(
        &format!("run {run_id} to become {status}"),
        Duration::from_secs(30),
        Duration::from_millis(100),
        async || {
            run = server.api_json(&format!("/api/runs/{run_id}")).await.1;
            (run["status"] == status)
                .then_some(())
                .ok_or(run.to_string())
        },
    )
    .await;
}

/// Checks that `refused` answers `error` and nothing more; the record of the request it
/// answered, once the request log shows it.
async fn refusal_record(server: &Hookgate, refused: reqwest::Response, error: &str) -> Value {
    let id = request_id(&refused);
    assert_eq!(
        json_of(refused).await.1,
        json!({"ok": false, "error": error})
    );
    let mut record = Value::Null;
    eventually("the refusal's record", async || {
        let (status, found) = server.api_json(&format!("/api/requests/{id}")).await;
        record = found;
        status == 200
    })
    .await;
    record
}

fn held_by(scope: &str, id: &str, limit: &str) -> Value {
    json!({"scope": scope, "id": id, "limit": limit})
}

/// Over `runsPerHour` a run is held, not started; the operator releases it and it runs; a
/// second release is a conflict.
pub(crate) async fn runs_per_hour_holds_until_the_operator_releases(backend: Backend) {
    let provider = Fake::provider("done").await;
    let (server, _kept) = backend.start(&config(&provider, json!({"runsPerHour": 1})));
    let first = accepted(&server, 1).await;
    assert_eq!(finished(&server, &first).await["status"], "ok");
    let second = accepted(&server, 2).await;
    let run = shown(&server, &second).await;
    assert_eq!(run["status"], "held", "{run}");
    assert_eq!(run["heldBy"], held_by("mapping", "github", "runsPerHour"));
    assert_eq!(run["mappingId"], "github");
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("hookgate_runs{status=\"held\"} 1"),
        "{metrics}"
    );

    let (status, answer) = operator(&server, &second, "release").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["runId"], second.as_str());
    let run = finished(&server, &second).await;
    assert_eq!(run["status"], "ok", "{run}");
    assert_eq!(run["heldBy"], held_by("mapping", "github", "runsPerHour"));
    let prompts: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.body["messages"].to_string())
        .collect();
    assert_eq!(prompts.len(), 2);
    assert!(prompts[1].contains("event 2"), "{prompts:?}");

    let (status, answer) = operator(&server, &second, "release").await;
    assert_eq!(
        (status, answer),
        (
            409,
            json!({"ok": false, "error": "the run is ok, not held"})
        )
    );
    let (status, _) = operator(&server, "no-such-run", "cancel").await;
    assert_eq!(status, 404);
}

/// `onExceeded: refuse`: a 429 with `Retry-After` and a terse message, the budget in full in
/// the request record and the metrics, and nothing stored.
pub(crate) async fn a_refusing_budget_answers_429_and_stores_nothing(backend: Backend) {
    let provider = Fake::provider("done").await;
    let budget = json!({"runsPerHour": 1, "onExceeded": "refuse"});
    let (server, _kept) = backend.start(&config(&provider, budget));
    let keyed = || {
        server
            .hook("/hooks/github")
            .header("idempotency-key", "event-1")
            .json(&json!({"n": 1}))
    };
    let (status, reply) = json_of(keyed().send().await.unwrap()).await;
    assert_eq!(status, 200, "{reply}");
    let first = reply["runId"].as_str().unwrap().to_string();
    shown(&server, &first).await;
    let refused = github(&server, 2).await;
    assert_eq!(refused.status(), 429);
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=3600).contains(&retry_after), "{retry_after}");
    let record = refusal_record(&server, refused, "budget exceeded; retry later").await;
    assert_eq!(
        record["reason"], "budget exceeded: mapping github runsPerHour (1 runs per hour)",
        "{record}"
    );
    let (_, runs) = server.api_json("/api/runs").await;
    let ids: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [first.as_str()], "the refused request stored no run");
    // A repeat of the request the budget took is answered with its run, not refused.
    let (status, repeat) = json_of(keyed().send().await.unwrap()).await;
    assert_eq!((status, &repeat["runId"]), (200, &json!(first)), "{repeat}");
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("hookgate_budget_refusals_total{scope=\"mapping\"} 1"),
        "{metrics}"
    );
}

/// `tokensPerDay` counts the tokens the provider reported for the runs of the last 24 hours:
/// a run that used 1100 of 1000 leaves no room for the next.
pub(crate) async fn tokens_per_day_holds_once_the_runs_used_them(backend: Backend) {
    let provider = Fake::start(|_, _| {
        let mut body = chat_reply("done");
        body["usage"] = json!({"prompt_tokens": 600, "completion_tokens": 500});
        Answer::Json(200, body)
    })
    .await;
    let (server, _kept) = backend.start(&config(&provider, json!({"tokensPerDay": 1000})));
    let first = accepted(&server, 1).await;
    let run = finished(&server, &first).await;
    assert_eq!(run["status"], "ok", "{run}");
    let second = accepted(&server, 2).await;
    let run = shown(&server, &second).await;
    assert_eq!(run["status"], "held", "{run}");
    assert_eq!(run["heldBy"], held_by("mapping", "github", "tokensPerDay"));
    assert_eq!(provider.requests().len(), 1);
}

/// An agent's budget counts the runs of that agent whatever admitted them (`POST /hooks/agent`
/// here); a held run the operator cancels never runs and cannot be released after.
pub(crate) async fn an_agents_budget_holds_and_a_cancelled_run_never_runs(backend: Backend) {
    let provider = Fake::provider("done").await;
    let mut config = config(&provider, json!({"runsPerHour": 100}));
    set(
        &mut config,
        "agents.list",
        json!([{"id": "main", "default": true, "budget": {"runsPerHour": 1}}]),
    );
    let (server, _kept) = backend.start(&config);
    let direct = json!({"message": "m", "deliver": false, "wakeMode": "next-heartbeat"});
    let (_, reply) = server.hook_json("/hooks/agent", &direct).await;
    let first = reply["runId"].as_str().unwrap().to_string();
    finished(&server, &first).await;
    let second = accepted(&server, 2).await;
    let run = shown(&server, &second).await;
    assert_eq!(run["status"], "held", "{run}");
    assert_eq!(run["heldBy"], held_by("agent", "main", "runsPerHour"));

    let (status, answer) = operator(&server, &second, "cancel").await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "runId": second, "status": "cancelled"})
        )
    );
    let (status, _) = operator(&server, &second, "release").await;
    assert_eq!(status, 409);
    assert_eq!(shown(&server, &second).await["status"], "cancelled");
    assert_eq!(provider.requests().len(), 1, "the cancelled run never ran");
}

/// The release step starts held runs once their budget has room: here a reload raises the
/// limit (the window's own passing is the embedded test below).
pub(crate) async fn a_reload_that_makes_room_releases_held_runs(backend: Backend) {
    let provider = Fake::provider("done").await;
    let (server, kept) = backend.start(&config(&provider, json!({"runsPerHour": 1})));
    let first = accepted(&server, 1).await;
    finished(&server, &first).await;
    let held: Vec<String> = [accepted(&server, 2).await, accepted(&server, 3).await].into();
    for run_id in &held {
        assert_eq!(shown(&server, run_id).await["status"], "held");
    }
    // The file as the backend wrote it (on NATS it names the store too), the limit raised.
    let file = std::fs::read_to_string(kept.dir().config_file()).unwrap();
    let mut config: Value = serde_json::from_str(&file).unwrap();
    config["hooks"]["mappings"][0]["budget"]["runsPerHour"] = json!(2);
    kept.dir().write(&config);
    // Room for one more: the older held run starts, the newer one stays held.
    becomes(&server, &held[0], "ok").await;
    assert_eq!(shown(&server, &held[1]).await["status"], "held");
}

/// Held runs wait in their mapping's lane: with `runs.maxQueued: 3` and a budget that holds,
/// three runs are held and the next request is answered as a full lane answers (429,
/// `Retry-After`, the lane in the request record), not held without end; a cancel makes room.
pub(crate) async fn held_runs_count_against_the_lanes_max_queued(backend: Backend) {
    let provider = Fake::provider("done").await;
    let mut config = config(&provider, json!({"runsPerHour": 1}));
    config["hooks"]["mappings"][0]["runs"] = json!({"maxQueued": 3});
    let (server, _kept) = backend.start(&config);
    let first = accepted(&server, 1).await;
    assert_eq!(finished(&server, &first).await["status"], "ok");
    let mut held = Vec::new();
    for n in 2..=4 {
        let id = accepted(&server, n).await;
        // On NATS the lane is counted in the node's view: wait for it to show the run.
        assert_eq!(shown(&server, &id).await["status"], "held");
        held.push(id);
    }
    let refused = github(&server, 5).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "5");
    let record = refusal_record(&server, refused, "run queue full; retry later").await;
    assert_eq!(
        (&record["outcome"], &record["reason"]),
        (
            &json!("limited"),
            &json!("mapping github: runs.maxQueued (3) reached")
        ),
        "{record}"
    );
    let (status, _) = operator(&server, &held[0], "cancel").await;
    assert_eq!(status, 200);
    eventually("a cancelled run to leave the lane", async || {
        github(&server, 6).await.status() == 200
    })
    .await;
    assert_eq!(provider.requests().len(), 1, "held runs did not run");
}

on_both_stores!(
    held_runs_count_against_the_lanes_max_queued,
    runs_per_hour_holds_until_the_operator_releases,
    a_refusing_budget_answers_429_and_stores_nothing,
    an_agents_budget_holds_and_a_cancelled_run_never_runs,
    tokens_per_day_holds_once_the_runs_used_them,
    a_reload_that_makes_room_releases_held_runs,
);

/// An embedded server whose mapping may start one run an hour, and has: its id.
async fn one_run_spent() -> (Fake, Hookgate, ConfigDir, String) {
    let provider = Fake::provider("done").await;
    let (server, dir) = Hookgate::start(&config(&provider, json!({"runsPerHour": 1})));
    let first = accepted(&server, 1).await;
    finished(&server, &first).await;
    (provider, server, dir, first)
}

/// The window is rolling: a run counts for an hour from its start, and a held run starts once
/// the run before it has left the window. The store's record of when the earlier run was
/// accepted is set to 59 min 50 s ago (the hour passing, written where the gateway reads it)
/// while the gateway is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_run_starts_when_the_window_has_room() {
    let (_provider, server, dir, first) = one_run_spent().await;
    let (status, _) = server.terminate();
    assert!(status.success());
    let almost_an_hour_ago = chrono::Utc::now() - chrono::Duration::seconds(3590);
    let at = almost_an_hour_ago.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let db = rusqlite::Connection::open(dir.path().join("state/hookgate.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE runs SET created_at = ?1 WHERE run_id = ?2",
            rusqlite::params![at, first],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);

    let server = Hookgate::start_in(&dir);
    let second = accepted(&server, 2).await;
    assert_eq!(shown(&server, &second).await["status"], "held");
    // Started once the earlier run left the window, within seconds.
    becomes(&server, &second, "ok").await;
    let run = shown(&server, &second).await;
    assert_eq!(run["heldBy"], held_by("mapping", "github", "runsPerHour"));
}

/// `hookgate runs release ID` and `hookgate runs cancel ID` call the API and print the status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_releases_and_cancels_held_runs() {
    let (_provider, server, _dir, _) = one_run_spent().await;
    let (to_release, to_cancel) = (accepted(&server, 2).await, accepted(&server, 3).await);
    let cli = |action: &str, id: &str| {
        std::process::Command::new(binary())
            .args(["runs", action, id, "--url", &server.base])
            .env("HOOKGATE_GATEWAY_TOKEN", GATEWAY_TOKEN)
            .output()
            .unwrap()
    };
    let cancelled = cli("cancel", &to_cancel);
    assert_succeeded(&cancelled);
    assert_eq!(
        String::from_utf8_lossy(&cancelled.stdout),
        format!("{to_cancel} cancelled\n")
    );
    let released = cli("release", &to_release);
    assert_succeeded(&released);
    assert!(
        String::from_utf8_lossy(&released.stdout).starts_with(&to_release),
        "{released:?}"
    );
    assert_eq!(finished(&server, &to_release).await["status"], "ok");
    let again = cli("release", &to_release);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("not held"),
        "{again:?}"
    );
}

/// `check` names the key of a bad budget and what it expects, never the value.
#[test]
fn check_refuses_bad_budgets_naming_the_key() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"match": {"path": "a"}, "messageTemplate": "m", "budget": {"runsPerHour": 0}},
            {"match": {"path": "b"}, "messageTemplate": "m", "budget": {"onExceeded": "sometimes"}},
            {"match": {"path": "c"}, "action": "wake", "textTemplate": "t", "budget": {"runsPerHour": 5}},
        ]),
    );
    set(
        &mut config,
        "agents.list",
        json!([{"id": "main", "budget": {"tokensPerDay": 0}}]),
    );
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "{output}");
    for expected in [
        "hooks.mappings[0].budget.runsPerHour: must be at least 1",
        "hooks.mappings[1].budget.onExceeded: must be hold or refuse",
        "hooks.mappings[1].budget: needs tokensPerDay or runsPerHour (or both)",
        "hooks.mappings[2].budget: applies to agent mappings only",
        "agents.list[0].budget.tokensPerDay: must be at least 1",
    ] {
        assert!(output.contains(expected), "{expected} in {output}");
    }
    assert!(!output.contains("sometimes"), "{output}");
}

/// In forward mode the upstream runs the model and reports no token usage: `tokensPerDay`
/// cannot apply (check says so). Lanes, batches and `hold` apply there as on the embedded
/// runtime: check says nothing of them and accepts them.
#[test]
fn forward_mode_says_tokens_are_unknown_and_keeps_the_other_controls() {
    let mut config = base_config();
    set(&mut config, "gateway.mode", json!("forward"));
    set(
        &mut config,
        "gateway.forward",
        json!({"url": "http://127.0.0.1:9", "token": "upstream-token-1234567890"}),
    );
    let budget = json!({"tokensPerDay": 1000, "runsPerHour": 10, "onExceeded": "hold"});
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "a"}, "messageTemplate": "m", "budget": budget,
                "runs": {"maxConcurrent": 1}, "batch": {"window": "30s"}}]),
    );
    let (status, output, _dir) = check(&config);
    assert!(status.success(), "{output}");
    assert!(
        output.contains(
            "hooks.mappings[0].budget.tokensPerDay: does not apply in forward mode: the upstream \
             runs the model and its answer to a relayed run reports no token usage"
        ),
        "{output}"
    );
    for key in ["runs", "batch", "budget.onExceeded", "budget.runsPerHour"] {
        let notice = format!("hooks.mappings[0].{key}:");
        assert!(!output.contains(&notice), "{notice} in {output}");
    }
}

/// In forward mode `runsPerHour` counts the runs relayed (whether the upstream took them yet or
/// not) and refuses the one past it; nothing is stored or relayed for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_mode_refuses_runs_past_runs_per_hour() {
    let upstream =
        Fake::start(|_, _| Answer::Json(200, json!({"ok": true, "runId": "up-1"}))).await;
    let mut config = base_config();
    set(&mut config, "gateway.mode", json!("forward"));
    set(
        &mut config,
        "gateway.forward",
        json!({"url": upstream.base, "token": "upstream-token-1234567890"}),
    );
    let budget = json!({"runsPerHour": 1, "onExceeded": "refuse"});
    let mapping = json!({"id": "github", "match": {"path": "github"}, "messageTemplate": "event {{n}}",
        "budget": budget});
    set(&mut config, "hooks.mappings", json!([mapping]));
    let (server, _dir) = Hookgate::start(&config);
    let first = accepted(&server, 1).await;
    assert_eq!(github(&server, 2).await.status(), 429);
    becomes(&server, &first, "forwarded").await;
    assert_eq!(
        upstream.requests().len(),
        1,
        "only the first run was relayed"
    );
}

/// docs/http-contract.md: `waitForCompletion` on a run its budget held answers at once with
/// `completion: {status: "held"}`, instead of waiting for a run that waits for its window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_completion_on_a_held_run_answers_held_at_once() {
    let provider = Fake::provider("done").await;
    let mut config = config(&provider, json!({"runsPerHour": 1}));
    set(
        &mut config,
        "agents.list",
        json!([{"id": "main", "budget": {"runsPerHour": 1}}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let agent = |wait: bool| {
        server
            .hook("/hooks/agent")
            .json(&json!({"message": "m", "deliver": false, "waitForCompletion": wait}))
            .send()
    };
    let (status, first) = json_of(agent(true).await.unwrap()).await;
    assert_eq!(
        (status, &first["completion"]["status"]),
        (200, &json!("ok")),
        "{first}"
    );
    let (status, second) = json_of(agent(true).await.unwrap()).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["completion"], json!({"status": "held"}), "{second}");
    let run_id = second["runId"].as_str().unwrap();
    assert_eq!(
        shown(&server, run_id).await["heldBy"],
        held_by("agent", "main", "runsPerHour")
    );
}
