//! docs/operations.md "Trying a change on recorded traffic": a candidate's transform calls held
//! to the bounds the configuration in force grants, a dry run's time limit, and one dry run at
//! a time.

use serde_json::{Value, json};

use crate::dry_run::{dry_run, logged};
use crate::harness::*;

/// A mapping `spin` whose transform never returns, failing at `timeout_ms`.
fn spin(timeout_ms: u64) -> Value {
    json!({"id": "spin", "match": {"path": "spin"},
           "transform": {"module": "hostile.wasm", "config": {"mode": "loop"},
                         "limits": {"timeoutMs": timeout_ms}}})
}

/// A server whose `spin` mapping fails after 1 s, with `requests` of it captured.
async fn spinning(requests: usize) -> (Hookgate, ConfigDir) {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    set(&mut config, "hooks.mappings", json!([spin(1000)]));
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let sent: Vec<_> = (0..requests)
        .map(|_| tokio::spawn(server.hook("/hooks/spin").json(&json!({})).send()))
        .collect();
    for request in sent {
        assert_eq!(request.await.unwrap().unwrap().status(), 500);
    }
    logged(&server, requests).await;
    (server, dir)
}

/// The candidate: `spin` asking for `timeout_ms`.
fn spin_candidate(timeout_ms: u64) -> String {
    let mut candidate = base_config();
    set(&mut candidate, "hooks.mappings", json!([spin(timeout_ms)]));
    serde_json::to_string(&candidate).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidates_transform_gets_no_more_time_than_the_live_configuration_grants() {
    let (server, _dir) = spinning(1).await;
    let body = json!({"config": spin_candidate(20_000)});
    let (status, answer) = dry_run(&server, &body).await;
    assert_eq!(status, 200, "{answer}");
    let now = &answer["requests"][0]["now"];
    assert_eq!(now["status"], 500, "{answer}");
    assert_eq!(now["error"], "hook mapping failed", "{answer}");
    // Stopped at the live 1 s, not at the 20 s the candidate asked for.
    assert_eq!(
        now["reason"], "running-time limit of 1s exceeded",
        "{answer}"
    );
    assert_eq!(answer["stopped"], Value::Null, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_stops_at_its_time_limit_and_says_where_to_continue() {
    let (server, _dir) = spinning(3).await;
    // Each trial takes the live 1 s: the limit, at 1.5 s, stops the second in its call.
    let body = json!({"config": spin_candidate(1000), "timeLimitMs": 1500});
    let (status, answer) = dry_run(&server, &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["stopped"], "timeLimit", "{answer}");
    let tried = answer["requests"].as_array().unwrap();
    assert!(tried.len() <= 1, "{answer}");
    assert_eq!(answer["totals"]["requests"], tried.len(), "{answer}");
    let last = tried.last().map_or(Value::Null, |t| t["id"].clone());
    assert_eq!(answer["next"], last, "{answer}");
    // Continued, the rest is tried.
    let rest = json!({"config": spin_candidate(1000), "after": answer["next"]});
    let (status, rest) = dry_run(&server, &rest).await;
    assert_eq!(status, 200, "{rest}");
    assert_eq!(rest["stopped"], Value::Null, "{rest}");
    assert_eq!(rest["requests"].as_array().unwrap().len(), 3 - tried.len());
    // A limit past the documented one is refused.
    let over = json!({"config": spin_candidate(1000), "timeLimitMs": 30_001});
    let (status, refused) = dry_run(&server, &over).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"], "timeLimitMs: must be 1 to 30000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_dry_run_beside_a_running_one_is_told_to_come_back() {
    let (server, _dir) = spinning(5).await;
    // About 5 s of trials, 1 s each.
    let long = json!({"config": spin_candidate(1000)});
    let url = server.url("/api/requests/dry-run");
    let post = |body: &Value| client().post(&url).bearer_auth(GATEWAY_TOKEN).json(body);
    let limit = std::time::Duration::from_secs(20);
    let every = std::time::Duration::from_millis(20);
    // Sent again should the quick one below hold the gate at that moment.
    let running = eventually_within("the long dry run runs", limit, every, async || {
        let response = post(&long).send().await.unwrap();
        match response.status().as_u16() {
            429 => Err("refused".to_string()),
            _ => Ok(json_of(response).await),
        }
    });
    // One that tries nothing: admitted, it answers at once.
    let quick = json!({"config": spin_candidate(1000), "filter": {"hook": "none"}});
    let refused = eventually_within("a dry run is refused", limit, every, async || {
        let response = post(&quick).send().await.unwrap();
        match response.status().as_u16() {
            429 => Ok(response),
            other => Err(format!("answered {other}")),
        }
    });
    let ((status, answer), response) = tokio::join!(running, refused);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["totals"]["requests"], 5, "{answer}");
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=30).contains(&retry_after), "{retry_after}");
    let (_, refused) = json_of(response).await;
    assert_eq!(
        refused,
        json!({"ok": false, "error": "a dry run is running; retry later"})
    );
    // Once it has ended, the next is admitted.
    let (status, answer) = dry_run(&server, &quick).await;
    assert_eq!(status, 200, "{answer}");
}
