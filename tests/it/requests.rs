//! The request log and its operator API (docs/operations.md#the-request-log), over HTTP against
//! the real binary.

use serde_json::{Value, json};

use crate::harness::*;

/// The request log's records, newest first, once at least `count` are there.
pub(crate) async fn recorded(server: &Hookgate, query: &str, count: usize) -> Vec<Value> {
    let mut records = Vec::new();
    eventually(&format!("{count} records for ?{query}"), async || {
        let (status, body) = json_of(
            server
                .api(&format!("/api/requests?{query}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        records = body["requests"].as_array().unwrap().clone();
        records.len() >= count
    })
    .await;
    records
}

fn replay(server: &Hookgate, id: &str) -> reqwest::RequestBuilder {
    client()
        .post(server.url(&format!("/api/requests/{id}/replay")))
        .bearer_auth(GATEWAY_TOKEN)
}

#[tokio::test]
async fn every_hook_request_is_recorded_with_what_it_became() {
    let (server, _dir) = Hookgate::start(&base_config());
    let woke = server
        .hook("/hooks/wake")
        .json(&json!({"text": "deploy finished"}))
        .send()
        .await
        .unwrap();
    let wake_id = request_id(&woke);
    let (status, run) = json_of(
        server
            .hook("/hooks/agent")
            .json(&json!({"message": "summarise"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let unauthorized = client()
        .post(server.url("/hooks/wake"))
        .bearer_auth("wrong")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
    let invalid = server.hook("/hooks/wake").json(&json!({})).send().await;
    assert_eq!(invalid.unwrap().status(), 400);
    let unknown = server.hook("/hooks/nothing").json(&json!({})).send().await;
    assert_eq!(unknown.unwrap().status(), 404);

    let records = recorded(&server, "", 5).await;
    assert_eq!(records.len(), 5);
    let statuses: Vec<u64> = records
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [404, 400, 401, 200, 200], "newest first");
    let wake = &records[4];
    assert_eq!(
        wake["id"],
        wake_id.as_str(),
        "the id answered as X-Request-Id"
    );
    assert_eq!(wake["hook"], "wake");
    assert_eq!(wake["eventOutcome"], "queued");
    assert_eq!(wake["client"], "127.0.0.1");
    assert_eq!(wake["captured"], false, "nothing is captured by default");
    assert_eq!(records[3]["runIds"], json!([run["runId"]]));
    assert_eq!(records[2]["error"], "Unauthorized");
    assert_eq!(records[1]["error"], "text required");
    assert_eq!(records[0]["hook"], "nothing");

    let refused = recorded(&server, "status=4xx", 3).await;
    assert_eq!(refused.len(), 3);
    let agent = recorded(&server, "hook=agent", 1).await;
    assert_eq!(agent.len(), 1);
    assert_eq!(agent[0]["runIds"], records[3]["runIds"]);

    // Two at a time, following `next`, walks every record once, in order.
    let mut walked = Vec::new();
    let mut query = "limit=2".to_string();
    loop {
        let (_, page) = json_of(
            server
                .api(&format!("/api/requests?{query}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        for r in page["requests"].as_array().unwrap() {
            walked.push(r["id"].as_str().unwrap().to_string());
        }
        match page["next"].as_str() {
            Some(next) => query = format!("limit=2&before={next}"),
            None => break,
        }
    }
    let ids: Vec<&str> = records.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(walked, ids);

    let (status, body) =
        json_of(server.api("/api/requests?status=6xx").send().await.unwrap()).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("status must be 2xx, 3xx, 4xx or 5xx"))
    );
    let (status, body) = json_of(
        server
            .api("/api/requests?since=yesterday")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("since must be an RFC 3339 time"))
    );
}

#[tokio::test]
async fn captures_are_redacted_and_credentials_never_reach_the_store() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.capture",
        json!({"enabled": true, "redact": ["/card/number"], "redactHeaders": ["X-Api-Key"]}),
    );
    let (server, dir) = Hookgate::start(&config);
    // Refused, and recorded, without the token it carried in its query.
    let in_query = client()
        .post(server.url("/hooks/wake?token=query-token-c0ffee"))
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(in_query.status(), 400);
    // Not admitted: recorded, its body not kept.
    let forged = client()
        .post(server.url("/hooks/wake"))
        .bearer_auth("wrong")
        .json(&json!({"text": "forged-body-9d1e"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    let response = server
        .hook("/hooks/wake?source=ci")
        .header("x-api-key", "key-7f3a9c")
        .header("cookie", "session=cookie-51b2")
        .json(&json!({"text": "paid", "card": {"number": "4242-4242-4242-4242"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = request_id(&response);
    let records = recorded(&server, "", 3).await;
    assert_eq!(records[2]["target"], "/hooks/wake", "the path only");
    assert_eq!(
        records[1]["captured"], false,
        "an unauthenticated body is never kept"
    );
    let (status, record) = json_of(
        server
            .api(&format!("/api/requests/{id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(record["captured"], true);
    assert_eq!(record["capture"]["query"], "source=ci");
    let headers = record["capture"]["headers"].as_array().unwrap();
    let header = |name: &str| {
        headers
            .iter()
            .find(|pair| pair[0] == name)
            .map(|pair| pair[1].clone())
    };
    assert_eq!(header("x-api-key"), Some(json!("[redacted]")));
    assert_eq!(header("authorization"), None);
    assert_eq!(header("cookie"), None);
    assert_eq!(header("content-type"), Some(json!("application/json")));
    let body: Value = serde_json::from_str(record["capture"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        body,
        json!({"text": "paid", "card": {"number": "[redacted]"}})
    );

    // Nothing secret is anywhere in the store's files.
    let (status, _) = server.terminate();
    assert!(status.success());
    let mut stored = Vec::new();
    for entry in std::fs::read_dir(dir.path().join("state")).unwrap() {
        stored.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    let stored = String::from_utf8_lossy(&stored);
    assert!(stored.contains("[redacted]"), "the record is in the store");
    for secret in [
        HOOK_TOKEN,
        "key-7f3a9c",
        "cookie-51b2",
        "4242-4242",
        "query-token-c0ffee",
        "forged-body-9d1e",
    ] {
        assert!(!stored.contains(secret), "{secret} reached the store");
    }
}

#[tokio::test]
async fn a_failed_request_is_replayed_through_the_fixed_transform() {
    let (server, dir) = start_with_trapping_alerts(base_config(), json!({"capture": {}}));
    let failed = server
        .hook("/hooks/alerts")
        .json(&json!({"alert": "disk full"}))
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), 500);
    let id = request_id(&failed);
    let records = recorded(&server, "mapping=alerts&status=5xx", 1).await;
    assert_eq!(records[0]["id"], id.as_str());
    assert_eq!(records[0]["error"], "hook mapping failed");
    assert_eq!(records[0]["transform"]["outcome"], "failed");
    assert_eq!(records[0]["transform"]["failure"], "trap");
    let reason = records[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("trap: "), "{reason}");

    // Replayed before the fix: it fails again, and says so.
    let (status, again) = json_of(replay(&server, &id).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(again["status"], 500);

    // The operator deploys the fixed transform, then replays.
    fix_alerts(&dir);
    let mut replayed = Value::Null;
    eventually("the replay to succeed", async || {
        replayed = json_of(replay(&server, &id).send().await.unwrap()).await.1;
        replayed["status"] == 200
    })
    .await;
    assert_eq!(replayed["replayOf"], id.as_str());
    assert_eq!(replayed["answer"]["eventOutcome"], "queued");
    let texts = server.wake_texts().await;
    assert!(texts.iter().any(|t| t.contains("disk full")), "{texts:?}");

    let new_id = replayed["requestId"].as_str().unwrap();
    let (_, new) = json_of(
        server
            .api(&format!("/api/requests/{new_id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(new["replayOf"], id.as_str());
    assert_eq!(new["transform"]["outcome"], "run");
    assert_eq!(new["eventOutcome"], "queued");
    let (_, original) = json_of(
        server
            .api(&format!("/api/requests/{id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(
        original["replays"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == new_id)
    );

    let (status, body) = json_of(replay(&server, "no-such-request").send().await.unwrap()).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("request not found"))
    );
}

#[tokio::test]
async fn a_request_without_a_capture_cannot_be_replayed() {
    let (server, _dir) = Hookgate::start(&base_config());
    let r = server
        .hook("/hooks/wake")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    let id = request_id(&r);
    recorded(&server, "", 1).await;
    let (status, body) = json_of(replay(&server, &id).send().await.unwrap()).await;
    assert_eq!(status, 409);
    assert_eq!(
        body["error"],
        "the request's body was not captured, so it cannot be replayed"
    );
}

#[tokio::test]
async fn a_flood_of_refusals_is_counted_not_recorded() {
    let (server, _dir) = Hookgate::start(&base_config());
    for _ in 0..45 {
        let r = client()
            .post(server.url("/hooks/wake"))
            .json(&json!({"text": "x"}))
            .send()
            .await
            .unwrap();
        assert!(r.status() == 401 || r.status() == 429);
    }
    eventually("the suppressed refusals to be counted", async || {
        server
            .metrics()
            .await
            .contains("hookgate_request_log_records_total{outcome=\"suppressed\"} 15")
    })
    .await;
    let records = recorded(&server, "limit=1000", 30).await;
    assert_eq!(
        records.len(),
        30,
        "30 refusals of one client a minute are recorded"
    );
}

#[tokio::test]
async fn old_requests_go_with_their_retention() {
    let mut config = base_config();
    set(&mut config, "gateway.retention.requests", json!("1s"));
    let (server, _dir) = Hookgate::start(&config);
    server
        .hook("/hooks/wake")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    recorded(&server, "", 1).await;
    eventually("the request log to be pruned", async || {
        let (_, page) = json_of(server.api("/api/requests").send().await.unwrap()).await;
        page["requests"].as_array().unwrap().is_empty()
    })
    .await;
}

#[tokio::test]
async fn runs_page_with_a_cursor_and_filter_by_hook_and_session() {
    let mut config = base_config();
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    set(
        &mut config,
        "hooks.allowedSessionKeyPrefixes",
        json!(["hook:"]),
    );
    let (server, _dir) = Hookgate::start(&config);
    for key in ["hook:a", "hook:b", "hook:a"] {
        let r = server
            .hook("/hooks/agent")
            .json(&json!({"message": "m", "sessionKey": key}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let (_, first) = json_of(server.api("/api/runs?limit=2").send().await.unwrap()).await;
    assert_eq!(first["runs"].as_array().unwrap().len(), 2);
    let next = first["next"].as_str().unwrap();
    let (_, second) = json_of(
        server
            .api(&format!("/api/runs?limit=2&before={next}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(second["runs"].as_array().unwrap().len(), 1);
    assert_eq!(second["next"], Value::Null);
    let (_, a) = json_of(
        server
            .api("/api/runs?sessionKey=hook:a")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(a["runs"].as_array().unwrap().len(), 2);
    let (_, none) = json_of(
        server
            .api("/api/runs?hook=Other&since=2000-01-01T00:00:00Z")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(none["runs"], json!([]));
    let (status, body) = json_of(server.api("/api/runs?before=x").send().await.unwrap()).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("before must be a cursor from next"))
    );
}

#[tokio::test]
async fn every_api_error_is_json() {
    let (server, _dir) = Hookgate::start(&base_config());
    for (request, status) in [
        (client().get(server.url("/api/requests")), 401),
        (
            client()
                .get(server.url("/api/requests"))
                .bearer_auth(HOOK_TOKEN),
            401,
        ),
        (client().get(server.url("/api/nothing")), 401),
        (server.api("/api/nothing"), 404),
        (server.api("/api/requests/unknown"), 404),
        (
            client()
                .delete(server.url("/api/requests"))
                .bearer_auth(GATEWAY_TOKEN),
            405,
        ),
        (server.api("/api/requests?limit=0"), 400),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), status);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "{status} is JSON"
        );
        let (_, body) = json_of(response).await;
        assert_eq!(body["ok"], false);
        assert!(body["error"].is_string());
    }
}

/// Runs `hookgate <args>` against `server` with the gateway token in the environment.
pub(crate) fn cli(server: &Hookgate, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(binary())
        .args(args)
        .args(["--url", &server.base])
        .env("HOOKGATE_GATEWAY_TOKEN", GATEWAY_TOKEN)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_cli_lists_shows_and_replays_through_the_api() {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    let (server, _dir) = Hookgate::start(&config);
    let (_, run) = json_of(
        server
            .hook("/hooks/agent")
            .json(&json!({"message": "summarise"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let run_id = run["runId"].as_str().unwrap().to_string();
    let id = recorded(&server, "", 1).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    let (ok, out, err) = cli(&server, &["requests", "list"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("AT"), "{out}");
    assert!(
        lines[1].contains("200") && lines[1].contains("agent") && lines[1].contains(&id),
        "{out}"
    );
    assert!(lines[1].contains(&format!("run {run_id}")), "{out}");

    let (ok, out, err) = cli(&server, &["requests", "list", "--json", "--status", "4xx"]);
    assert!(ok, "{err}");
    let page: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(page["requests"], json!([]));

    let (ok, out, err) = cli(&server, &["requests", "show", &id]);
    assert!(ok, "{err}");
    assert!(
        out.contains("captured body:\n{\"message\":\"summarise\"}"),
        "{out}"
    );

    let (ok, out, _) = cli(&server, &["requests", "replay", &id]);
    assert!(ok);
    assert!(out.starts_with(&format!("replayed {id} as ")), "{out}");

    let (ok, out, _) = cli(&server, &["runs", "list", "--json"]);
    assert!(ok);
    let runs: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        runs["runs"].as_array().unwrap().len(),
        2,
        "the replay made a second run"
    );

    let (ok, out, _) = cli(&server, &["runs", "show", &run_id]);
    assert!(ok);
    assert!(out.contains(&run_id) && out.contains("summarise"), "{out}");

    // Without a provider the run ends with an error, which the listing shows; a retry runs
    // it again.
    eventually("the run to end", async || {
        let (ok, out, _) = cli(&server, &["runs", "list"]);
        ok && out.lines().any(|l| {
            l.contains(&run_id)
                && l.contains(" error ")
                && l.ends_with("no model provider configured")
        })
    })
    .await;
    let (ok, out, err) = cli(&server, &["runs", "retry", &run_id]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("running {run_id} again"));

    let (ok, _, err) = cli(&server, &["requests", "show", "../config"]);
    assert!(!ok);
    assert_eq!(err.trim(), "error: request not found (HTTP 404)");

    let out = std::process::Command::new(binary())
        .args(["requests", "list", "--url", &server.base])
        .env_remove("HOOKGATE_GATEWAY_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("HOOKGATE_GATEWAY_TOKEN"));
}

/// A request answered with an earlier one's work says so, and names that work: an idempotency
/// key's repeat and a signed redelivery (docs/operations.md#the-request-log).
#[tokio::test]
async fn a_repeat_says_which_work_answered_it() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "gh", "match": {"path": "gh"}, "messageTemplate": "push",
                "signature": {"scheme": "github", "secret": "repeat-secret"}}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let agent = || {
        server
            .hook("/hooks/agent")
            .header("idempotency-key", "deploy-42")
            .json(&json!({"message": "summarise"}))
            .send()
    };
    let (_, first) = json_of(agent().await.unwrap()).await;
    let repeated = agent().await.unwrap();
    let repeated_id = request_id(&repeated);
    let body = br#"{"ref":"main"}"#;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let headers = crate::signatures::sign("github", "repeat-secret", body, now, "d");
    let deliver = || {
        let mut request = client().post(server.url("/hooks/gh")).body(body.to_vec());
        for (name, value) in &headers {
            request = request.header(name.as_str(), value.as_str());
        }
        request.send()
    };
    let (_, delivered) = json_of(deliver().await.unwrap()).await;
    let redelivered = deliver().await.unwrap();
    let redelivered_id = request_id(&redelivered);

    let records = recorded(&server, "", 4).await;
    let by_id = |id: &str| records.iter().find(|r| r["id"] == id).unwrap().clone();
    let repeat = by_id(&repeated_id);
    assert_eq!(repeat["repeat"], "idempotency", "{repeat}");
    assert_eq!(repeat["runIds"], json!([first["runId"]]));
    let redelivery = by_id(&redelivered_id);
    assert_eq!(redelivery["repeat"], "redelivery", "{redelivery}");
    assert_eq!(redelivery["runIds"], json!([delivered["runId"]]));
    let fresh = records.iter().filter(|r| r["repeat"].is_null()).count();
    assert_eq!(
        fresh, 2,
        "the first request and the first delivery are no repeats"
    );
    let (ok, out, err) = cli(&server, &["requests", "list"]);
    assert!(ok, "{err}");
    let line = |id: &str| out.lines().find(|l| l.contains(id)).unwrap().to_string();
    let run_id = delivered["runId"].as_str().unwrap();
    assert!(
        line(&redelivered_id).contains(&format!("repeat (redelivery), run {run_id}")),
        "{out}"
    );
    assert!(
        line(&repeated_id).contains("repeat (idempotency), run"),
        "{out}"
    );
}
