//! The request log's search on a million records (docs/operations.md#searching-the-request-log):
//! an ignored test that fills `requests.db` through the log's own store, in the writer's batches,
//! with realistic records (a tenth captured, with GitHub's example deliveries as bodies), times
//! the writes, then starts the real binary on it and times each filter's first page through the
//! API. It asserts only what the pages hold; the figures are printed, not judged:
//!
//! ```text
//! cargo test --test it -- --ignored --nocapture request_search_scale
//! ```
//!
//! `HOOKGATE_SEARCH_RECORDS` sets how many records (1,000,000); `HOOKGATE_SEARCH_STATE` names a
//! state directory to fill once and search again on later runs; with `HOOKGATE_SEARCH_WRITES`
//! set, the writes are timed with the index of outcomes and without it, 200,000 records each.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hookgate::gateway::EventOutcome;
use hookgate::gateway::RequestLogStore;
use hookgate::gateway::requests::{
    RequestOutcome, RequestRecord, TransformTrace, TransformVerdict,
};
use hookgate::hook::capture::Captured;
use serde_json::{Value, json};

use crate::filters::github;
use crate::harness::*;

/// What the writer commits at most at once under load.
const BATCH: usize = 1000;

/// A GitHub delivery's event, its fixture and the actions it is given in turn.
const DELIVERIES: [(&str, &str, &[&str]); 4] = [
    (
        "issues",
        "issues-opened",
        &["opened", "edited", "closed", "labeled"],
    ),
    (
        "pull_request",
        "pull-request-opened",
        &["opened", "synchronize", "closed"],
    ),
    ("push", "push", &[]),
    ("star", "star-created", &["created", "deleted"]),
];

/// Bodies as GitHub sends them, each delivery with each of its actions.
fn bodies() -> Vec<(&'static str, Vec<u8>)> {
    let mut bodies = Vec::new();
    for (event, fixture, actions) in DELIVERIES {
        let json: Value = serde_json::from_slice(&github(fixture)).unwrap();
        if actions.is_empty() {
            bodies.push((event, serde_json::to_vec(&json).unwrap()));
        }
        for action in actions {
            let mut json = json.clone();
            json["action"] = json!(action);
            bodies.push((event, serde_json::to_vec(&json).unwrap()));
        }
    }
    bodies
}

/// Record `n` of the log, made at `at_ms`: GitHub deliveries (a tenth of all records captured),
/// agent and wake requests, refusals, failed transforms and the outcomes, in fixed proportions.
fn record(n: usize, at_ms: i64, bodies: &[(&str, Vec<u8>)]) -> RequestRecord {
    let id = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        (at_ms / 1000) as u64,
        ((at_ms % 1000) * 1_000_000) as u32,
    ))
    .to_string();
    let mut record = RequestRecord {
        request_id: id.clone(),
        id,
        at: chrono::DateTime::from_timestamp_millis(at_ms)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        at_ms,
        client: Some(format!("10.0.{}.{}", n % 7, n % 251)),
        method: "POST".into(),
        status: 200,
        duration_ms: 1.5,
        ..RequestRecord::default()
    };
    let hook = match n % 10 {
        0 => {
            let (event, body) = &bodies[(n / 10) % bodies.len()];
            record.captured = true;
            record.capture = Some(Captured {
                headers: vec![
                    ("content-type".into(), "application/json".into()),
                    ("user-agent".into(), "GitHub-Hookshot/7b2c6f1".into()),
                    ("x-github-event".into(), event.to_string()),
                    ("x-github-delivery".into(), format!("d{n}")),
                ],
                query: None,
                body: Some(body.clone()),
                note: None,
            });
            "github"
        }
        1..=3 => "github",
        4 | 5 => "stripe",
        6 | 7 => "agent",
        _ => "wake",
    };
    record.hook = Some(hook.into());
    record.target = format!("/hooks/{hook}");
    if matches!(hook, "github" | "stripe") {
        record.mapping_id = Some(hook.into());
    }
    match n % 100 {
        10..=14 => {
            record.status = 204;
            record.outcome = Some(RequestOutcome::Filtered);
            record.reason = Some("no mapping's conditions held: github (payload /action)".into());
        }
        20..=24 => {
            record.status = 401;
            record.error = Some("Unauthorized".into());
            record.reason = Some("the token does not match".into());
        }
        30..=32 => {
            record.status = 400;
            record.error = Some("text required".into());
        }
        40 => {
            record.status = 500;
            record.error = Some("hook mapping failed".into());
            record.reason = Some("transform failed (timeout): over its 1000 ms".into());
            record.transform = Some(TransformTrace {
                outcome: TransformVerdict::Failed,
                duration_ms: 1000.0,
                failure: Some("timeout".into()),
            });
        }
        50 => {
            record.status = 429;
            record.error = Some("run queue full; retry later".into());
            record.reason = Some("mapping github: runs.maxQueued (20) reached".into());
            record.outcome = Some(RequestOutcome::Limited);
        }
        60 | 61 => {
            record.outcome = Some(RequestOutcome::Batched);
            record.run_ids = vec![format!("run-{n}")];
        }
        _ if n % 1000 == 70 => {
            record.outcome = Some(RequestOutcome::Held);
            record.run_ids = vec![format!("run-{n}")];
        }
        _ if hook == "wake" => record.event_outcome = Some(EventOutcome::Queued),
        _ => record.run_ids = vec![format!("run-{n}")],
    }
    record
}

/// Fills a new log in `state` with `count` records over the last six days; the records per
/// second its inserts took.
async fn fill(state: &Path, count: usize) -> f64 {
    let store = RequestLogStore::open(state).unwrap();
    let bodies = bodies();
    let end = chrono::Utc::now().timestamp_millis() - 60_000;
    let step = (6 * 24 * 3600 * 1000) / count as i64;
    let start = end - step * count as i64;
    let mut writing = Duration::ZERO;
    let mut n = 0;
    while n < count {
        let batch: Vec<RequestRecord> = (n..(n + BATCH).min(count))
            .map(|i| record(i, start + step * i as i64, &bodies))
            .collect();
        n += batch.len();
        let began = Instant::now();
        store.insert(batch.into()).await.unwrap();
        writing += began.elapsed();
    }
    store.close();
    count as f64 / writing.as_secs_f64()
}

/// The records per second [`fill`] writes into a new log in `dir` of `count` records, with
/// the request log's index of outcomes and without it (dropped before the fill), the best of
/// two rounds each.
async fn write_rates(dir: &Path, count: usize) -> (f64, f64) {
    let (mut with, mut without) = (0f64, 0f64);
    for round in 0..2 {
        for indexed in [true, false] {
            let state = dir.join(format!("writes-{round}-{indexed}"));
            std::fs::create_dir_all(&state).unwrap();
            RequestLogStore::open(&state).unwrap().close();
            if !indexed {
                let conn = rusqlite::Connection::open(state.join("requests.db")).unwrap();
                conn.execute("DROP INDEX requests_by_outcome", []).unwrap();
            }
            let rate = fill(&state, count).await;
            let best = if indexed { &mut with } else { &mut without };
            *best = best.max(rate);
            std::fs::remove_dir_all(&state).unwrap();
        }
    }
    (with, without)
}

/// The median of three timings of `GET /api/requests?{query}`, and the page's size.
async fn first_page(server: &Hookgate, query: &str) -> (Duration, usize) {
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..3 {
        let began = Instant::now();
        let (status, body) = server.api_json(&format!("/api/requests?{query}")).await;
        times.push(began.elapsed());
        assert_eq!(status, 200, "{query}: {body}");
        size = body["requests"].as_array().unwrap().len();
    }
    times.sort();
    (times[1], size)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fills a log of a million records: minutes, and gigabytes of disk"]
async fn request_search_scale() {
    let count: usize =
        std::env::var("HOOKGATE_SEARCH_RECORDS").map_or(1_000_000, |n| n.parse().unwrap());
    let kept = std::env::var("HOOKGATE_SEARCH_STATE")
        .ok()
        .map(PathBuf::from);
    let mut config = base_config();
    set(&mut config, "gateway.retention.requests", json!("0"));
    set(&mut config, "gateway.retention.requestsMaxBytes", json!(0));
    let dir = ConfigDir::new(&config);
    let state = kept.unwrap_or_else(|| dir.path().join("state"));
    if !state.join("requests.db").exists() {
        std::fs::create_dir_all(&state).unwrap();
        let rate = fill(&state, count).await;
        println!("filled {count} records: {rate:.0} records/s into the log");
    }
    if std::env::var("HOOKGATE_SEARCH_WRITES").is_ok() {
        let (with, without) = write_rates(dir.path(), 200_000).await;
        println!("writes: {with:.0} records/s with the outcome index, {without:.0} without");
    }
    let size = std::fs::metadata(state.join("requests.db")).unwrap().len();
    println!("requests.db: {} MB", size / 1_000_000);
    set(&mut config, "gateway.stateDir", json!(state));
    dir.write(&config);
    let server = Hookgate::start_in(&dir);
    for query in [
        "",
        "hook=stripe",
        "status=5xx",
        "outcome=filtered",
        "outcome=held",
        "outcome=refused",
        "error=timeout",
        "error=no%20such%20text",
        "header=x-github-event:issues",
        "header=x-github-event:deployment",
        "body=/action:opened",
        "body=/action:reopened",
        "header=x-github-event:issues&body=/action:labeled",
        "hook=github&status=2xx&body=/action:opened",
    ] {
        let (took, found) = first_page(&server, &format!("{query}&limit=50")).await;
        println!(
            "{:>8.1} ms  {found:>2} found  ?{query}",
            took.as_secs_f64() * 1000.0
        );
    }
}
