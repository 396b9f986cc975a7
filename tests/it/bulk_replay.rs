//! Bulk replay of the request log (docs/operations.md#replaying-in-bulk), over HTTP and the CLI
//! against the real binary.

use serde_json::{Value, json};

use crate::browser::Browser;
use crate::harness::*;
use crate::requests::{cli, recorded};

/// The filter of every test here: the mapping's failed requests.
const FAILED: &str = "status=5xx&mapping=alerts";

/// A mapping `alerts` whose transform, `live.wasm`, traps, with its requests captured: the
/// configuration (to fix by [`fix_by_reload`]) and the server.
pub(crate) fn start_failing(action: &str) -> (Hookgate, ConfigDir, Value) {
    let extra = json!({
        "capture": {},
        "transform": {"module": "live.wasm", "config": {"mode": "trap", "action": action}},
    });
    let (server, dir) = start_with_trapping_alerts(base_config(), extra);
    let config: Value =
        json5::from_str(&std::fs::read_to_string(dir.config_file()).unwrap()).unwrap();
    (server, dir, config)
}

/// Points `alerts` at the passthrough transform by a reload, and waits until it is in force.
pub(crate) async fn fix_by_reload(
    server: &Hookgate,
    dir: &ConfigDir,
    mut config: Value,
    action: &str,
) {
    config["hooks"]["mappings"][0]["transform"] = json!({
        "module": "passthrough.wasm", "config": {"action": action, "field": "/alert"},
    });
    dir.write(&config);
    eventually("the fixed configuration to be in force", async || {
        // 1 is the configuration loaded at start.
        server.api_json("/api/config").await.1["generation"] == 2
    })
    .await;
}

/// Sends an alert to `alerts`; returns the request's id and status.
pub(crate) async fn alert(server: &Hookgate, text: &str, key: Option<&str>) -> (String, u16) {
    let mut request = server.hook("/hooks/alerts").json(&json!({"alert": text}));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.unwrap();
    (request_id(&response), response.status().as_u16())
}

/// `POST /api/requests/replay` with `body`.
pub(crate) async fn bulk(server: &Hookgate, body: Value) -> (u16, Value) {
    json_of(
        client()
            .post(server.url("/api/requests/replay"))
            .bearer_auth(GATEWAY_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

pub(crate) fn filter(query: &str) -> Value {
    let pairs = form_urlencoded::parse(query.as_bytes()).into_owned();
    Value::Object(pairs.map(|(k, v)| (k, Value::from(v))).collect())
}

/// The job `id` once it is no longer running.
async fn ended(server: &Hookgate, id: &str) -> Value {
    let path = format!("/api/requests/replays/{id}");
    eventually_within(
        "the replay job to end",
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(100),
        async || {
            let (status, job) = server.api_json(&path).await;
            assert_eq!(status, 200, "{job}");
            (job["state"] != "running")
                .then_some(job.clone())
                .ok_or(job.to_string())
        },
    )
    .await
}

/// Starts a bulk replay of `query` at `rate` (of what was replayed already too when `again`)
/// and waits for it to end.
pub(crate) async fn replay_all(server: &Hookgate, query: &str, rate: u32, again: bool) -> Value {
    let body = json!({"filter": filter(query), "rate": rate, "again": again});
    let (status, plan) = bulk(server, body).await;
    assert_eq!(status, 202, "{plan}");
    ended(server, plan["id"].as_str().unwrap()).await
}

#[tokio::test]
async fn failed_requests_are_replayed_in_order_once_fixed() {
    let (server, dir, config) = start_failing("wake");
    let mut originals = Vec::new();
    for text in ["first", "second", "third"] {
        let (id, status) = alert(&server, text, None).await;
        assert_eq!(status, 500);
        originals.push(id);
    }
    recorded(&server, FAILED, 3).await;

    let (status, plan) = bulk(&server, json!({"filter": filter(FAILED), "dryRun": true})).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        (&plan["matched"], &plan["replayable"]),
        (&json!(3), &json!(3))
    );
    assert_eq!(plan["notReplayable"], json!([]));
    assert!(plan.get("id").is_none(), "{plan}");
    assert_eq!(
        recorded(&server, "", 3).await.len(),
        3,
        "a dry run replays nothing"
    );

    fix_by_reload(&server, &dir, config, "wake").await;
    let job = replay_all(&server, FAILED, 4, false).await;
    assert_eq!(job["state"], "finished", "{job}");
    assert_eq!((&job["total"], &job["done"]), (&json!(3), &json!(3)));
    assert_eq!(job["failed"], 0, "{job}");
    let items = job["items"].as_array().unwrap();
    let replayed_originals: Vec<&str> = items
        .iter()
        .map(|i| i["original"].as_str().unwrap())
        .collect();
    assert_eq!(replayed_originals, originals, "oldest first");
    let new_ids: Vec<&str> = items
        .iter()
        .map(|i| i["requestId"].as_str().unwrap())
        .collect();
    assert!(new_ids.is_sorted(), "replayed in order: {new_ids:?}");
    for item in items {
        assert_eq!(item["status"], 200, "{item}");
        let (_, record) = server
            .api_json(&format!(
                "/api/requests/{}",
                item["requestId"].as_str().unwrap()
            ))
            .await;
        assert_eq!(record["replayOf"], item["original"], "{record}");
        assert_eq!(record["eventOutcome"], "queued", "{record}");
    }
    // The rate is a bound on when each replay began (250 ms apart at 4 a second).
    let starts: Vec<u64> = items
        .iter()
        .map(|i| i["startedMs"].as_u64().unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[1] - w[0] >= 250), "{starts:?}");
    assert_eq!(server.wake_texts().await, ["first", "second", "third"]);
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("hookgate_bulk_replays_total{outcome=\"succeeded\"} 3"),
        "{metrics}"
    );

    // The originals keep their 5xx: the same filter selects them again, but what was replayed
    // successfully is not replayed again unless asked, and the replays themselves never are.
    let (_, plan) = bulk(&server, json!({"filter": filter(FAILED), "dryRun": true})).await;
    assert_eq!(
        (&plan["matched"], &plan["replayable"]),
        (&json!(3), &json!(0))
    );
    assert_eq!(
        plan["notReplayable"],
        json!([{"reason": "the request was already replayed successfully", "count": 3}])
    );
    let (_, plan) = bulk(
        &server,
        json!({"filter": {"mapping": "alerts"}, "dryRun": true, "again": true}),
    )
    .await;
    assert_eq!(
        (&plan["matched"], &plan["replayable"]),
        (&json!(6), &json!(3))
    );
    assert_eq!(
        plan["notReplayable"],
        json!([{"reason": "the request is itself a replay", "count": 3}])
    );
}

#[tokio::test]
async fn uncaptured_and_unauthenticated_requests_are_counted_not_replayed() {
    let (server, _dir, _) = start_failing("wake");
    let (_, status) = alert(&server, "kept", None).await;
    assert_eq!(status, 500);
    let wake = server
        .hook("/hooks/wake")
        .json(&json!({"text": "not kept"}));
    assert_eq!(wake.send().await.unwrap().status(), 200);
    let refused = client()
        .post(server.url("/hooks/alerts"))
        .bearer_auth("not-the-token")
        .json(&json!({"alert": "forged"}));
    assert_eq!(refused.send().await.unwrap().status(), 401);
    recorded(&server, "", 3).await;

    let (status, plan) = bulk(&server, json!({"filter": {}, "dryRun": true})).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        (&plan["matched"], &plan["replayable"]),
        (&json!(3), &json!(1))
    );
    assert_eq!(
        plan["notReplayable"],
        json!([
            {"reason": "the request was refused for its authentication, so it cannot be replayed",
             "count": 1},
            {"reason": "the request's body was not captured, so it cannot be replayed", "count": 1},
        ])
    );
    let job = replay_all(&server, "", 10, false).await;
    assert_eq!(
        (&job["total"], &job["done"]),
        (&json!(1), &json!(1)),
        "{job}"
    );
    assert_eq!(job["failed"], 1, "the transform still traps: {job}");
    assert_eq!(job["items"][0]["status"], 500, "{job}");
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("hookgate_bulk_replays_total{outcome=\"failed\"} 1"),
        "{metrics}"
    );
    assert_eq!(recorded(&server, "", 4).await.len(), 4, "one replay made");
}

#[tokio::test]
async fn a_request_replayed_twice_through_its_idempotency_key_is_one_run() {
    let (server, dir, config) = start_failing("agent");
    let (original, status) = alert(&server, "deploy", Some("deploy-42")).await;
    assert_eq!(status, 500);
    recorded(&server, FAILED, 1).await;
    fix_by_reload(&server, &dir, config, "agent").await;

    let first = replay_all(&server, FAILED, 10, false).await;
    let second = replay_all(&server, FAILED, 10, true).await;
    let mut runs = Vec::new();
    for job in [&first, &second] {
        assert_eq!(job["items"][0]["original"], original.as_str(), "{job}");
        assert_eq!(job["items"][0]["status"], 200, "{job}");
        let id = job["items"][0]["requestId"].as_str().unwrap();
        let (_, record) = server.api_json(&format!("/api/requests/{id}")).await;
        runs.push(record["runIds"].clone());
        if job == &second {
            assert_eq!(record["repeat"], "idempotency", "{record}");
        }
    }
    assert_eq!(runs[0].as_array().unwrap().len(), 1, "{runs:?}");
    assert_eq!(
        runs[0], runs[1],
        "the second replay repeats the first's run"
    );
    let (_, all) = server.api_json("/api/runs").await;
    assert_eq!(all["runs"].as_array().unwrap().len(), 1, "{all}");
}

#[tokio::test]
async fn one_job_runs_at_a_time_and_can_be_cancelled() {
    let (server, _dir, _) = start_failing("wake");
    for text in ["a", "b", "c", "d", "e", "f"] {
        assert_eq!(alert(&server, text, None).await.1, 500);
    }
    recorded(&server, FAILED, 6).await;
    let (status, plan) = bulk(&server, json!({"filter": filter(FAILED), "rate": 1})).await;
    assert_eq!(status, 202, "{plan}");
    let id = plan["id"].as_str().unwrap();

    let (status, refused) = bulk(&server, json!({"filter": filter(FAILED)})).await;
    assert_eq!(status, 409, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains(id), "{refused}");

    let path = format!("/api/requests/replays/{id}");
    let (status, _) = json_of(
        client()
            .delete(server.url(&path))
            .bearer_auth(GATEWAY_TOKEN)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let job = ended(&server, id).await;
    assert_eq!(job["state"], "cancelled", "{job}");
    let done = job["done"].as_u64().unwrap();
    assert!(done < 6, "cancelled before the end: {job}");
    assert!(job["items"][done as usize]["requestId"].is_null(), "{job}");
    let (_, summary) = server.api_json(&format!("{path}?summary=true")).await;
    assert_eq!(summary["done"], done, "{summary}");
    assert!(summary.get("items").is_none(), "{summary}");
    let (status, _) = server.api_json(&format!("{path}?summery=true")).await;
    assert_eq!(status, 400, "a parameter it does not take");

    let (status, again) = bulk(&server, json!({"filter": filter(FAILED), "dryRun": true})).await;
    assert_eq!(status, 200, "{again}");
    let (status, next) = bulk(&server, json!({"filter": filter(FAILED), "rate": 100})).await;
    assert_eq!(status, 202, "another job once the first ended: {next}");

    for (body, error) in [
        (json!({"rate": 0}), "rate must be an integer from 1 to 100"),
        (
            json!({"rate": 101}),
            "rate must be an integer from 1 to 100",
        ),
        (
            json!({"filter": {"status": "5"}}),
            "status must be 2xx, 3xx, 4xx or 5xx",
        ),
    ] {
        let (status, refused) = bulk(&server, body).await;
        assert_eq!((status, refused["error"].as_str()), (400, Some(error)));
    }
    let (status, refused) = bulk(&server, json!({"filters": {}})).await;
    assert_eq!(status, 400, "{refused}");
    let (status, _) = server.api_json("/api/requests/replays/no-such-job").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn the_cli_counts_then_replays_and_fails_when_a_replay_does() {
    let (server, dir, config) = start_failing("wake");
    for text in ["one", "two"] {
        assert_eq!(alert(&server, text, None).await.1, 500);
    }
    recorded(&server, FAILED, 2).await;
    let args = [
        "requests",
        "replay",
        "--status",
        "5xx",
        "--mapping",
        "alerts",
    ];

    // Without --yes and no terminal: the count, and nothing replayed.
    let (ok, out, err) = cli(&server, &[&args[..], &["--since", "1h"]].concat());
    assert!(!ok, "{out}");
    assert!(out.contains("2 requests match, 2 can be replayed"), "{out}");
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(recorded(&server, "", 2).await.len(), 2);

    // Still broken: replayed, failed, exit non-zero.
    let (ok, out, _) = cli(&server, &[&args[..], &["--yes", "--rate", "100"]].concat());
    assert!(!ok, "{out}");
    assert!(out.contains("replayed 2: 0 succeeded, 2 failed"), "{out}");

    fix_by_reload(&server, &dir, config, "wake").await;
    let (ok, out, err) = cli(&server, &[&args[..], &["--yes", "--rate", "100"]].concat());
    assert!(ok, "{out}{err}");
    assert!(out.contains("replayed 2: 2 succeeded, 0 failed"), "{out}");
    assert_eq!(server.wake_texts().await, ["one", "two"]);

    // Replayed successfully: left out, unless asked for again (the failed replays match too,
    // and are replays).
    let (ok, out, err) = cli(&server, &[&args[..], &["--yes"]].concat());
    assert!(ok, "{out}{err}");
    assert!(out.contains("4 requests match, 0 can be replayed"), "{out}");
    assert!(
        out.contains("2 cannot: the request was already replayed successfully"),
        "{out}"
    );

    // With --json, stdout is the job's JSON alone; the words go to stderr.
    let again = ["--yes", "--json", "--again"];
    let (ok, out, err) = cli(&server, &[&args[..], &again].concat());
    assert!(ok, "{out}{err}");
    let job: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        (&job["state"], &job["done"]),
        (&json!("finished"), &json!(2))
    );
    assert_eq!(job["items"].as_array().unwrap().len(), 2, "{job}");
    assert!(err.contains("replayed 2: 2 succeeded, 0 failed"), "{err}");

    let (ok, _, err) = cli(&server, &["requests", "replay", "--since", "an hour"]);
    assert!(!ok);
    assert!(err.contains("--since"), "{err}");
    // Further back than a date can be: refused with the flag named, not a panic.
    for command in ["replay", "list"] {
        let (ok, _, err) = cli(&server, &["requests", command, "--since", "300000y"]);
        assert!(!ok);
        assert!(err.contains("--since") && err.contains("shorter"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[tokio::test]
async fn the_console_replays_every_matching_request_once_confirmed() {
    let (server, dir, config) = start_failing("wake");
    for text in ["one", "two"] {
        assert_eq!(alert(&server, text, None).await.1, 500);
    }
    let wake = server
        .hook("/hooks/wake")
        .json(&json!({"text": "not selected"}));
    assert_eq!(wake.send().await.unwrap().status(), 200);
    recorded(&server, "", 3).await;
    fix_by_reload(&server, &dir, config, "wake").await;

    let browser = Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    browser.type_into("#filter-mapping", "alerts").await;
    browser
        .run("document.getElementById('filter-status').value = '5xx'")
        .await;
    browser.click("#request-filters button[type=submit]").await;

    // The count first; nothing is replayed until the operator confirms it.
    browser.click("#bulk-replay").await;
    browser
        .wait_for_text(
            "#bulk-replay-status",
            "2 requests match, 2 can be replayed.",
        )
        .await;
    browser
        .wait_for_text("#bulk-replay-confirm", "Confirm: replay 2 requests at 10/s")
        .await;
    assert_eq!(recorded(&server, "", 3).await.len(), 3, "no replay yet");
    browser.click("#bulk-replay-confirm").await;
    browser
        .wait_for_text(
            "#bulk-replay-status",
            "Replay finished: 2 of 2 replayed, 2 succeeded, 0 failed.",
        )
        .await;
    assert_eq!(server.wake_texts().await, ["not selected", "one", "two"]);

    // The script is served under the console's policy, as its other files are.
    let script = client()
        .get(server.url("/console/replay.js"))
        .send()
        .await
        .unwrap();
    let policy = script.headers()["content-security-policy"]
        .to_str()
        .unwrap();
    assert!(policy.contains("script-src 'self'"), "{policy}");
}
