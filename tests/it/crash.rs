//! Crash safety under load: mixed traffic while the server is killed with SIGKILL several times.
//! Every request answered 200 must be in the store afterwards exactly once, and every run must
//! finish exactly once (one outcome, one summary), however often it was interrupted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;

/// SIGKILLs per test run.
const KILLS: usize = 3;
/// Acknowledged requests between two kills.
const ACKS_PER_ROUND: usize = 250;
/// Concurrent clients.
const CLIENTS: usize = 8;

/// What the clients were told: wake texts and run ids (with the marker their run must echo).
#[derive(Default)]
struct Acknowledged {
    wakes: Vec<String>,
    runs: Vec<(String, String)>,
    /// Answers other than 200 from a live server, which none of these requests should get.
    unexpected: Vec<String>,
}

/// One request of the mix: where it goes, its body, and what its acknowledgement promises.
enum Promise {
    Wake(String),
    Run(String),
}

fn request(n: usize) -> (&'static str, Value, Promise) {
    let marker = format!("crash-{n}");
    match n % 5 {
        0 => (
            "/hooks/wake",
            json!({"text": marker, "mode": "next-heartbeat"}),
            Promise::Wake(marker),
        ),
        1 => (
            "/hooks/agent",
            json!({"message": marker, "name": "Crash", "deliver": false,
                   "sessionKey": format!("hook:crash-{}", n % 4)}),
            Promise::Run(marker),
        ),
        2 => (
            "/hooks/deploy",
            json!({"id": marker}),
            Promise::Wake(format!("deployed {marker}")),
        ),
        3 => ("/hooks/task", json!({"id": marker}), Promise::Run(marker)),
        _ => (
            "/hooks/alerts",
            json!({"alert": {"summary": marker}}),
            Promise::Wake(format!("Alert: {marker}")),
        ),
    }
}

fn config(provider: &Fake) -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "agents.defaults.provider",
        json!({"baseUrl": provider.base}),
    );
    set(&mut config, "agents.defaults.model", json!("test-model"));
    set(&mut config, "agents.defaults.maxConcurrent", json!(8));
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    set(
        &mut config,
        "hooks.allowedSessionKeyPrefixes",
        json!(["hook:"]),
    );
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "deploy", "match": {"path": "deploy"}, "action": "wake",
             "textTemplate": "deployed {{id}}", "wakeMode": "next-heartbeat"},
            {"id": "task", "match": {"path": "task"}, "action": "agent",
             "messageTemplate": "{{id}}", "name": "Task", "deliver": false},
            {"id": "alerts", "match": {"path": "alerts"},
             // Generous: on two cores shared with the other tests, 100 ms of wall time is not
             // always 100 ms of CPU, and a timeout here would be a 500 the test counts as wrong.
             "transform": {"module": "passthrough.wasm", "limits": {"timeoutMs": 5000},
                           "config": {"action": "wake", "field": "/alert/summary", "prefix": "Alert: "}}},
        ]),
    );
    config
}

/// The provider answers each run with the marker found in its prompt, a little later, so that
/// kills catch runs in flight.
async fn echoing_provider() -> Fake {
    Fake::start(|request, _| {
        let prompt = request.body.to_string();
        let marker = prompt
            .find("crash-")
            .map(|at| {
                prompt[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect::<String>()
            })
            .unwrap_or_default();
        Answer::After(
            Duration::from_millis(20),
            Box::new(Answer::Json(200, chat_reply(&format!("done {marker}")))),
        )
    })
    .await
}

/// Sends requests from the mix until `stop`; a failed connection waits for the next server.
async fn send_mix(
    first: usize,
    mut base: watch::Receiver<String>,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Acknowledged>>,
    progress: Arc<Notify>,
) {
    let http = client();
    let mut n = first;
    while !stop.load(Ordering::SeqCst) {
        let url = base.borrow_and_update().clone();
        let (path, body, promise) = request(n);
        let sent = http
            .post(format!("{url}{path}"))
            .bearer_auth(HOOK_TOKEN)
            .json(&body)
            .send()
            .await;
        let reply = match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                let body = response.json::<Value>().await;
                (status, body)
            }
            Err(_) => {
                // The server is gone: no answer, no promise. Wait for its successor.
                if base.changed().await.is_err() {
                    return;
                }
                n += CLIENTS;
                continue;
            }
        };
        let mut acked = acked.lock().unwrap();
        match (reply, promise) {
            ((200, Ok(_)), Promise::Wake(text)) => acked.wakes.push(text),
            ((200, Ok(reply)), Promise::Run(marker)) => acked
                .runs
                .push((reply["runId"].as_str().unwrap().into(), marker)),
            // A body cut off by the kill is no acknowledgement.
            ((200, Err(_)), _) => {}
            ((status, body), _) => acked.unexpected.push(format!("{path}: {status} {body:?}")),
        }
        drop(acked);
        progress.notify_one();
        n += CLIENTS;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_acknowledged_is_lost_or_doubled_across_sigkills_under_load() {
    let provider = echoing_provider().await;
    let dir = ConfigDir::new(&config(&provider));
    install_transforms(&dir, &["passthrough"]);
    let server = Hookgate::start_in(&dir);
    let (base_tx, base_rx) = watch::channel(server.base.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Acknowledged::default()));
    let progress = Arc::new(Notify::new());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            tokio::spawn(send_mix(
                i,
                base_rx.clone(),
                Arc::clone(&stop),
                Arc::clone(&acked),
                Arc::clone(&progress),
            ))
        })
        .collect();

    let load = async {
        let mut server = server;
        for round in 1..=KILLS {
            wait_for_acks(&acked, &progress, round * ACKS_PER_ROUND).await;
            server.kill();
            server = Hookgate::start_in(&dir);
            base_tx.send(server.base.clone()).unwrap();
        }
        wait_for_acks(&acked, &progress, (KILLS + 1) * ACKS_PER_ROUND).await;
        server
    };
    let server = tokio::time::timeout(Duration::from_secs(120), load)
        .await
        .expect("the clients stopped getting answers");
    stop.store(true, Ordering::SeqCst);
    drop(base_tx);
    for client in clients {
        client.await.unwrap();
    }

    let acked = std::mem::take(&mut *acked.lock().unwrap());
    assert_eq!(acked.unexpected, Vec::<String>::new());
    let runs = finished_runs(&server, &acked.runs).await;
    let events = all_events(&server).await;
    check_wakes(&events, &acked.wakes);
    check_runs(&events, &runs, &acked.runs);
    let stored_runs = check_no_run_twice(&server).await;
    let resumed = resumed_runs(&provider, &runs);
    println!(
        "crash under load: {} acknowledged requests ({} wakes, {} runs) checked across {KILLS} \
         SIGKILLs: 0 lost, 0 doubled; {stored_runs} runs stored, each finished once, {resumed} \
         of them resumed after a kill",
        acked.wakes.len() + acked.runs.len(),
        acked.wakes.len(),
        acked.runs.len(),
    );
}

/// How many of `runs` the provider was asked for more than once: runs a kill interrupted.
fn resumed_runs(provider: &Fake, runs: &BTreeMap<String, Value>) -> usize {
    let mut calls = BTreeMap::<&str, usize>::new();
    let requests = provider.requests();
    for request in &requests {
        let body = request.body.to_string();
        if let Some(run_id) = runs.keys().find(|id| body.contains(id.as_str())) {
            *calls.entry(run_id).or_default() += 1;
        }
    }
    calls.values().filter(|n| **n > 1).count()
}

async fn wait_for_acks(acked: &Mutex<Acknowledged>, progress: &Notify, target: usize) {
    while acked_count(acked) < target {
        progress.notified().await;
    }
}

fn acked_count(acked: &Mutex<Acknowledged>) -> usize {
    let acked = acked.lock().unwrap();
    acked.wakes.len() + acked.runs.len()
}

/// Waits until every acknowledged run has finished; returns them by id. A run missing from the
/// store fails the test at once.
async fn finished_runs(server: &Hookgate, runs: &[(String, String)]) -> BTreeMap<String, Value> {
    let mut finished = BTreeMap::new();
    for (run_id, _) in runs {
        // Runs of one session key go one at a time behind a 20 ms provider, so the last of a
        // backlog may take a while; the bound only stops a run that never finishes.
        let (limit, every) = (Duration::from_secs(60), Duration::from_millis(50));
        let run = eventually_within("the run finished", limit, every, async || {
            let response = server.api(&format!("/api/runs/{run_id}")).send().await;
            let (status, run) = json_of(response.unwrap()).await;
            assert_eq!(status, 200, "acknowledged run {run_id} lost: {run}");
            if run["finishedAt"].is_string() {
                Ok(run)
            } else {
                Err(format!("run {run_id} never finished: {run}"))
            }
        })
        .await;
        finished.insert(run_id.clone(), run);
    }
    finished
}

/// Every run in the store, by message: no request may have become two runs. Returns how many
/// runs there are (acknowledged or not: a request cut off by a kill may have been stored).
async fn check_no_run_twice(server: &Hookgate) -> usize {
    let (status, body) = json_of(server.api("/api/runs?limit=1000").send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    let mut messages = BTreeMap::<&str, usize>::new();
    for run in body["runs"].as_array().unwrap() {
        *messages
            .entry(run["message"].as_str().unwrap())
            .or_default() += 1;
    }
    let doubled: Vec<_> = messages.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        doubled.is_empty(),
        "requests stored as two runs: {doubled:?}"
    );
    let total = body["runs"].as_array().unwrap().len();
    assert!(
        total < 1000,
        "more runs than one page: raise the page or lower the load"
    );
    total
}

/// Every event of the main session, page by page.
async fn all_events(server: &Hookgate) -> Vec<Value> {
    let mut events: Vec<Value> = Vec::new();
    loop {
        let after = events.last().map_or(0, |e| e["seq"].as_i64().unwrap());
        let response = server
            .api(&format!(
                "/api/sessions/main/events?after={after}&limit=1000"
            ))
            .send()
            .await
            .unwrap();
        let (status, body) = json_of(response).await;
        assert_eq!(status, 200, "{body}");
        let page = body["events"].as_array().unwrap().clone();
        if page.is_empty() {
            return events;
        }
        events.extend(page);
    }
}

fn check_wakes(events: &[Value], acknowledged: &[String]) {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for event in events.iter().filter(|e| e["kind"] == "system") {
        *seen.entry(event["text"].as_str().unwrap()).or_default() += 1;
    }
    let doubled: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "wakes stored twice: {doubled:?}");
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|text| !seen.contains_key(text.as_str()))
        .collect();
    assert!(lost.is_empty(), "acknowledged wakes lost: {lost:?}");
}

fn check_runs(events: &[Value], runs: &BTreeMap<String, Value>, acknowledged: &[(String, String)]) {
    let mut summaries: BTreeMap<&str, usize> = BTreeMap::new();
    for event in events.iter().filter(|e| e["kind"] == "summary") {
        *summaries
            .entry(event["text"].as_str().unwrap())
            .or_default() += 1;
    }
    let mut ids = BTreeSet::new();
    for (run_id, marker) in acknowledged {
        assert!(
            ids.insert(run_id),
            "two acknowledgements named run {run_id}"
        );
        let run = &runs[run_id];
        assert_eq!(run["status"], "ok", "{run}");
        let reply = format!("done {marker}");
        assert_eq!(run["reply"], reply.as_str(), "{run}");
        let name = run["hookName"].as_str().unwrap();
        let summary = format!("Hook {name}: {reply}");
        assert_eq!(
            summaries.get(summary.as_str()),
            Some(&1),
            "run {run_id} must have exactly one summary `{summary}`"
        );
    }
}
