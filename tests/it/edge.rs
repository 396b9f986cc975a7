//! The edge and its private node (docs/edge.md) as two real processes on loopback: what the
//! edge stored while the private node was away runs there exactly once, in order per mapping,
//! through the private node's own pipeline, across a crash of either side.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;
use crate::signatures::sign;
use crate::subscriptions::octokit_signer;

pub(super) const PULL_TOKEN: &str = "edge-pull-token-5555";
pub(super) const SECRET: &str = "github-webhook-secret";
const GITHUB: usize = 500;
const OTHER: usize = 20;

pub(super) fn edge_config() -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "edge.serve",
        json!({"pullToken": PULL_TOKEN, "routes": ["github"]}),
    );
    config
}

pub(super) fn private_config(edge: &str) -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "github", "match": {"path": "github"}, "action": "wake",
             "textTemplate": "github {{n}}", "signature": {"scheme": "github", "secret": SECRET}},
            {"id": "other", "match": {"path": "other"}, "action": "wake", "textTemplate": "other {{n}}"},
        ]),
    );
    set(
        &mut config,
        "edge.link",
        json!({"url": edge, "pullToken": PULL_TOKEN}),
    );
    config
}

/// A port free now, for an edge that must come back on the same address.
pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(super) async fn start_edge(dir: &ConfigDir, port: u16) -> Hookgate {
    let (limit, every) = (Duration::from_secs(20), Duration::from_millis(100));
    eventually_within("the edge to start", limit, every, async || {
        Hookgate::try_start_on(dir, port)
    })
    .await
}

/// `{"n": n}` for each `n` of `ns`, with its `X-Hub-Signature-256` under [`SECRET`] as octokit
/// (`@octokit/webhooks-methods`, GitHub's own JavaScript client) computes it: one Node.js process
/// signs them all.
fn octokit_signed(ns: std::ops::Range<usize>) -> Vec<(Vec<u8>, String)> {
    let bodies: Vec<String> = ns.map(|n| json!({"n": n}).to_string()).collect();
    let mut child = Command::new("node")
        .arg(octokit_signer().join("sign-many.mjs"))
        .env("SECRET", SECRET)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run node");
    let input = serde_json::to_vec(&bodies).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "octokit's sign failed");
    let signatures: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(signatures.len(), bodies.len());
    bodies
        .into_iter()
        .map(String::into_bytes)
        .zip(signatures)
        .collect()
}

/// GitHub delivery `id` of `body` with its `signature`, sent to the edge as GitHub sends it.
async fn deliver(
    edge: &Hookgate,
    (body, signature): &(Vec<u8>, String),
    id: &str,
) -> reqwest::Response {
    client()
        .post(edge.url("/hooks/github"))
        .header("x-hub-signature-256", signature)
        .header("x-github-delivery", id)
        .header("x-github-event", "push")
        .body(body.clone())
        .send()
        .await
        .unwrap()
}

/// GitHub delivery `id` of `{"n": n}`, signed here, sent to the edge by `client` through a
/// proxy (`X-Forwarded-For`, believed only where the edge trusts the proxy).
pub(super) async fn deliver_from(
    edge: &Hookgate,
    n: usize,
    id: &str,
    client_address: &str,
) -> reqwest::Response {
    let body = serde_json::to_vec(&json!({"n": n})).unwrap();
    let mut request = client()
        .post(edge.url("/hooks/github"))
        .header("x-forwarded-for", client_address)
        .body(body.clone());
    for (name, value) in sign("github", SECRET, &body, 0, id) {
        request = request.header(name, value);
    }
    request.send().await.unwrap()
}

/// The metric `name`'s value in `metrics`.
pub(super) fn metric(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Starts a private node in `dir` that SIGKILLs itself at `at` (test-only:
/// docs/edge.md#testing-the-crash-windows), and waits for it to have done so.
pub(super) fn dies_after_commit(dir: &ConfigDir, at: &str) {
    let dying =
        Hookgate::try_start_in(dir, &[("HOOKGATE_TEST_EDGE_DIE_AFTER_COMMIT", at)]).unwrap();
    let (status, _) = dying.wait();
    assert!(!status.success(), "the private node killed itself at {at}");
}

/// Waits until `edge` has nothing left to hand out.
pub(super) async fn drained(edge: &Hookgate) {
    let (limit, every) = (Duration::from_secs(60), Duration::from_millis(50));
    eventually_within("the edge to be drained", limit, every, async || {
        let backlog = metric(&edge.metrics().await, "hookgate_edge_backlog");
        (backlog == Some(0.0))
            .then_some(())
            .ok_or(format!("backlog {backlog:?}"))
    })
    .await;
}

/// The numbers of the wakes of `prefix`, in the order the private node committed them.
fn numbers(texts: &[String], prefix: &str) -> Vec<usize> {
    texts
        .iter()
        .filter_map(|t| t.strip_prefix(prefix)?.parse().ok())
        .collect()
}

#[tokio::test]
async fn what_the_edge_stored_while_the_private_node_was_away_runs_there_exactly_once() {
    let port = free_port();
    let edge_dir = ConfigDir::new(&edge_config());
    let mut edge = start_edge(&edge_dir, port).await;
    let deliveries = octokit_signed(0..GITHUB);
    for (n, delivery) in deliveries.iter().enumerate() {
        let response = deliver(&edge, delivery, &format!("delivery-{n}")).await;
        assert_eq!(response.status(), 202, "delivery {n}");
    }
    // GitHub's redelivery of one: the same delivery id, the same bytes.
    let redelivery = deliver(&edge, &deliveries[7], "delivery-7").await;
    assert_eq!(redelivery.status(), 202);
    for n in 0..OTHER {
        let response = edge
            .hook("/hooks/other")
            .json(&json!({"n": n}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "other {n}");
    }
    // Without the token or a name of edge.serve.routes nothing is stored.
    let response = client()
        .post(edge.url("/hooks/other"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    // The hook token does not pull, and the pull token submits no hook.
    let pulled = client()
        .get(edge.url("/edge/pull?after=0"))
        .bearer_auth(HOOK_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(pulled.status(), 401);
    let submitted = client()
        .post(edge.url("/hooks/other"))
        .bearer_auth(PULL_TOKEN)
        .json(&json!({"n": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 401);
    let stored = (GITHUB + 1 + OTHER) as f64;
    assert_eq!(
        metric(&edge.metrics().await, "hookgate_edge_backlog"),
        Some(stored)
    );

    // The private node comes up, and dies between the commit of sequence number 510 (`other`
    // 8, which no delivery id protects) and its acknowledgement (test-only:
    // docs/edge.md#testing-the-crash-windows).
    let private_dir = ConfigDir::new(&private_config(&edge.base));
    dies_after_commit(&private_dir, "510");

    // Back up; the edge is SIGKILLed mid-drain and comes back on its address.
    let private = Hookgate::start_in(&private_dir);
    let (limit, every) = (Duration::from_secs(60), Duration::from_millis(50));
    eventually_within("the private node to drain some", limit, every, async || {
        let taken = private.event_texts().await.len();
        (taken > 100).then_some(()).ok_or(format!("{taken} taken"))
    })
    .await;
    edge.kill();
    edge = start_edge(&edge_dir, port).await;
    drained(&edge).await;

    let texts = private.event_texts().await;
    let github = numbers(&texts, "github ");
    assert_eq!(
        github,
        (0..GITHUB).collect::<Vec<_>>(),
        "each delivery once, in order"
    );
    let other = numbers(&texts, "other ");
    assert_eq!(other, (0..OTHER).collect::<Vec<_>>(), "each once, in order");
    assert_eq!(texts.len(), GITHUB + OTHER, "the redelivery ran nothing");

    // The private node's records name the edge's: requestId is the edge's record id.
    let (status, edge_records) = edge.api_json("/api/requests?hook=github&limit=1").await;
    assert_eq!(status, 200, "{edge_records}");
    let edge_id = edge_records["requests"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, linked) = private
        .api_json(&format!("/api/requests?requestId={edge_id}"))
        .await;
    assert_eq!(status, 200, "{linked}");
    let linked = linked["requests"].as_array().unwrap();
    assert!(
        !linked.is_empty(),
        "the private record of edge record {edge_id}"
    );
    assert_eq!(linked[0]["hook"], "github");
    eventually("the redelivery's record, a repeat", async || {
        let (_, repeats) = private
            .api_json("/api/requests?hook=github&limit=1000")
            .await;
        let records = repeats["requests"].as_array().unwrap().clone();
        records.iter().filter(|r| !r["repeat"].is_null()).count() == 1
    })
    .await;

    // The overview shows the link on both sides.
    let (_, overview) = edge.api_json("/api/overview").await;
    assert_eq!(overview["edge"]["role"], "edge", "{overview}");
    assert_eq!(overview["edge"]["backlog"], 0);
    assert_eq!(overview["edge"]["lastAcked"], GITHUB + 1 + OTHER);
    let (_, overview) = private.api_json("/api/overview").await;
    assert_eq!(overview["edge"]["role"], "private", "{overview}");
    assert_eq!(overview["edge"]["connected"], true);
    let private_metrics = private.metrics().await;
    assert_eq!(
        metric(&private_metrics, "hookgate_edge_connected"),
        Some(1.0)
    );
    for log in [private.terminate().1, edge.terminate().1] {
        assert_no_secrets(&log, &[PULL_TOKEN, SECRET]);
    }
}

#[tokio::test]
async fn an_edge_past_its_bounds_answers_503_and_counts_it() {
    let mut config = edge_config();
    set(&mut config, "edge.serve.maxPendingPerRoute", json!(2));
    let (edge, _dir) = Hookgate::start(&config);
    for n in 0..2 {
        let response = deliver_from(&edge, n, &format!("d{n}"), "192.0.2.1").await;
        assert_eq!(response.status(), 202);
    }
    let refused = deliver_from(&edge, 2, "d2", "192.0.2.1").await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    // Another route still has room.
    let other = edge
        .hook("/hooks/other")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 202);
    let metrics = edge.metrics().await;
    assert!(
        metrics.contains("hookgate_edge_refusals_total{bound=\"route\"} 1"),
        "{metrics}"
    );
}

/// docs/edge.md's two configurations are files that `hookgate check` passes as they are.
#[test]
fn the_example_edge_and_private_node_pass_check() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/edge");
    for (file, transforms) in [("edge.json5", &[][..]), ("private.json5", &["github"][..])] {
        let dir = ConfigDir::new(&json!({}));
        dir.write_text(&std::fs::read_to_string(examples.join(file)).unwrap());
        install_transforms(&dir, transforms);
        let out = std::process::Command::new(binary())
            .args(["check", "--config"])
            .arg(dir.config_file())
            .env("GITHUB_WEBHOOK_SECRET", "example-github-secret")
            .output()
            .unwrap();
        assert_succeeded(&out);
    }
}
