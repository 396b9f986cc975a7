//! The edge, and a private node in forward mode in front of the real OpenClaw gateway (as
//! tests/it/openclaw_controls.rs starts it, its agents calling a model provider stand-in on
//! loopback): what the edge stored while the private node was away reaches OpenClaw's model,
//! relayed once each (one relay, one forwarded run, one distinct OpenClaw run id per request),
//! and a restart of the private node adds no model call for an earlier request (docs/edge.md,
//! "The private node in front of OpenClaw").

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::edge::{PULL_TOKEN, drained, edge_config, metric};
use crate::fake::Fake;
use crate::harness::*;
use crate::openclaw_controls::{forwarding, model_calls, openclaw_behind, relayed_runs};

const STORED: usize = 20;

/// The message of the agent request `n`.
fn message(n: usize) -> String {
    format!("relay {n} done")
}

/// How many of the model calls OpenClaw made carry the message of agent request `n`, for each
/// `n` of `0..until`.
fn calls_per_request(provider: &Fake, until: usize) -> Vec<usize> {
    let bodies: Vec<String> = model_calls(provider).iter().map(Value::to_string).collect();
    (0..until)
        .map(|n| bodies.iter().filter(|b| b.contains(&message(n))).count())
        .collect()
}

/// Sends agent request `n` to the edge with the hook token; the edge stores it as sequence
/// number `n + 1`.
async fn store(edge: &Hookgate, n: usize) {
    let body = json!({"message": message(n), "name": "Edge"});
    let (status, stored) = edge.hook_json("/hooks/agent", &body).await;
    assert_eq!(
        (status, &stored["stored"]),
        (202, &json!(n + 1)),
        "{n}: {stored}"
    );
}

/// Waits until OpenClaw has run each agent request `0..until` (every count 1 or more) and
/// returns the counts.
async fn received(private: &Hookgate, provider: &Fake, until: usize) -> Vec<usize> {
    let (limit, every) = (Duration::from_secs(180), Duration::from_millis(200));
    eventually_within("OpenClaw to run each request", limit, every, async || {
        let counts = calls_per_request(provider, until);
        counts
            .iter()
            .all(|&c| c >= 1)
            .then(|| counts.clone())
            .ok_or(format!(
                "model calls per request {counts:?}; the last of {} calls: {:?}; runs: {}",
                model_calls(provider).len(),
                model_calls(provider)
                    .last()
                    .map(|c| c["messages"].to_string()),
                private.api_json("/api/runs?limit=2").await.1
            ))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edges_backlog_reaches_the_real_openclaw_once_through_a_private_node() {
    let gate = Arc::new(Semaphore::new(10_000));
    let (openclaw, provider) = openclaw_behind(&gate).await;
    let (edge, _edge_dir) = Hookgate::start(&edge_config());

    // The private node is away: the edge stores each request and answers 202.
    for n in 0..STORED {
        store(&edge, n).await;
    }
    let backlog = metric(&edge.metrics().await, "hookgate_edge_backlog");
    assert_eq!(backlog, Some(STORED as f64));
    assert!(
        model_calls(&provider).is_empty(),
        "nothing reached OpenClaw"
    );

    // The private node comes up in forward mode and relays the backlog to OpenClaw.
    let mut config = forwarding(&openclaw, json!([]));
    set(
        &mut config,
        "edge.link",
        json!({"url": edge.base, "pullToken": PULL_TOKEN}),
    );
    let private_dir = ConfigDir::new(&config);
    let private = Hookgate::start_in(&private_dir);
    received(&private, &provider, STORED).await;
    drained(&edge).await;
    assert_eq!(relayed_until(&private, STORED as u64).await, STORED as u64);
    let (status, runs) = private.api_json("/api/runs?limit=100").await;
    assert_eq!(status, 200, "{runs}");
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), STORED, "one run per stored request");
    let mut upstream_runs = std::collections::BTreeSet::new();
    for run in runs {
        assert_eq!(run["status"], "forwarded", "{run}");
        let upstream = run["upstreamRunId"].as_str().unwrap_or("");
        assert!(uuid::Uuid::parse_str(upstream).is_ok(), "{run}");
        upstream_runs.insert(upstream.to_string());
    }
    assert_eq!(upstream_runs.len(), STORED, "OpenClaw started one run each");
    let counts = calls_per_request(&provider, STORED);
    assert_no_secrets(&private.terminate().1, &[PULL_TOKEN]);

    // Restarted on its store, the private node relays nothing again: one request stored after
    // the restart reaches OpenClaw, and no earlier one reaches it again.
    let private = Hookgate::start_in(&private_dir);
    store(&edge, STORED).await;
    let after = received(&private, &provider, STORED + 1).await;
    drained(&edge).await;
    assert_eq!(
        after[..STORED],
        counts[..],
        "nothing relayed twice\n{}",
        openclaw.log()
    );
    assert_eq!(relayed_until(&private, 1).await, 1, "only the new request");
    let (_, overview) = edge.api_json("/api/overview").await;
    assert_eq!(overview["edge"]["lastAcked"], STORED + 1, "{overview}");
}

/// The private node's relay counter once it reaches `want` or a deadline passes: the edge
/// forgets a request when the private node commits it, before its relay to OpenClaw is counted.
async fn relayed_until(private: &Hookgate, want: u64) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let relayed = relayed_runs(private).await;
        if relayed >= want || std::time::Instant::now() > deadline {
            return relayed;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
