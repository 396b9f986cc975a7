//! The request log in a cluster (docs/cluster.md#the-request-log-in-a-cluster): how many
//! records per second one node's writer publishes to the cluster's request stream and the other
//! node indexes, and how long a record takes from one node's answer to the other node's API.
//!
//! Starts a real `nats-server -js` and two hookgate nodes on it (the real binary). The requests
//! go to a mapping whose condition never holds, each with a captured body of about 300 bytes:
//! answered `204 filtered` and recorded, with no fact published for them, so that the stream
//! traffic measured is the request log's alone.
//!
//! Run: `cargo bench --bench request_log_cluster` (`LOAD_SECONDS=5` for a longer load).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

mod support;
use support::{Case, drive, load_seconds, percentiles, start_hookgate, stop};

const HOOK_TOKEN: &str = "bench-hook-token-0123";
const GATEWAY_TOKEN: &str = "bench-gateway-token-0123";
/// Requests timed one at a time from one node's answer to the other's listing.
const DELAY_SAMPLES: usize = 100;

/// A process stopped (SIGTERM, then waited for) when dropped, also when the benchmark panics.
struct Process(Option<Child>);

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(child) = self.0.take() {
            stop(child);
        }
    }
}

/// Starts `nats-server` with JetStream in `dir` on `port`.
fn start_nats(dir: &Path, port: u16) -> Child {
    Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server (apt-get install nats-server)")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn node_dir(url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "gateway": {"auth": {"token": GATEWAY_TOKEN}, "store": {"kind": "nats", "url": url}},
        "hooks": {
            "enabled": true, "token": HOOK_TOKEN, "capture": {"enabled": true},
            "mappings": [{"id": "never", "match": {"path": "github", "payload": {"/action": "never"}},
                          "action": "wake", "textTemplate": "t"}],
        },
        "agents": {"defaults": {"heartbeat": {"every": "0"}}},
    });
    std::fs::write(dir.path().join("hookgate.json5"), config.to_string()).unwrap();
    dir
}

fn case() -> Case {
    Case {
        name: "filtered",
        path: "/hooks/github",
        body: json!({"action": "opened", "issue": {"title": "x".repeat(240), "number": 1}}),
        headers: vec![("x-github-event", "issues")],
        token: HOOK_TOKEN,
    }
}

/// `hookgate_request_log_records_total{outcome}` on the node at `base`.
async fn counted(http: &reqwest::Client, base: &str, outcome: &str) -> u64 {
    let text = http
        .get(format!("{base}/metrics"))
        .bearer_auth(GATEWAY_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("hookgate_request_log_records_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until `outcome` on `base` reaches `at_least`; when it did.
async fn reached(http: &reqwest::Client, base: &str, outcome: &str, at_least: u64) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(120);
    while counted(http, base, outcome).await < at_least {
        assert!(
            Instant::now() < deadline,
            "{outcome} never reached {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Instant::now()
}

/// Sends one request to `a` and polls `b` for its record: the time from `a`'s answer until `b`
/// lists it.
async fn delay(http: &reqwest::Client, a: &str, b: &str, case: &Case) -> Duration {
    let answer = http
        .post(format!("{a}{}", case.path))
        .bearer_auth(HOOK_TOKEN)
        .json(&case.body)
        .send()
        .await
        .unwrap();
    let answered = Instant::now();
    let id = answer.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    loop {
        let listed: serde_json::Value = http
            .get(format!("{b}/api/requests?requestId={id}"))
            .bearer_auth(GATEWAY_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if listed["requests"].as_array().is_some_and(|r| !r.is_empty()) {
            return answered.elapsed();
        }
        assert!(answered.elapsed() < Duration::from_secs(30), "never listed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The publisher's and the indexer's own pace: records made while the NATS server is stopped
/// (SIGSTOP) wait in `a`'s backlog; once it runs again (SIGCONT), timed from the first record
/// published to the last.
async fn backlog(http: &reqwest::Client, a: &str, b: &str, case: &Case, nats_pid: u32) {
    let signal = |name: &str| {
        let sent = Command::new("kill")
            .args([name, &nats_pid.to_string()])
            .status();
        assert!(sent.is_ok_and(|s| s.success()), "kill {name}");
    };
    let published = counted(http, a, "published").await;
    let indexed = counted(http, b, "indexed").await;
    signal("-STOP");
    drive(a, case, 16, load_seconds()).await;
    let recorded = counted(http, a, "recorded").await;
    let waiting = recorded - published;
    signal("-CONT");
    // Both counters polled together: the index follows the publisher closely.
    let (mut first, mut last) = ([None; 2], [None; 2]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while last.iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "the backlog never drained");
        let now = [
            counted(http, a, "published").await - published,
            counted(http, b, "indexed").await - indexed,
        ];
        let at = Instant::now();
        for i in 0..2 {
            if now[i] > 0 && first[i].is_none() {
                first[i] = Some(at);
            }
            if now[i] >= waiting && last[i].is_none() {
                last[i] = Some(at);
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let rate = |i: usize| {
        let (from, to) = (first[i].unwrap(), last[i].unwrap());
        waiting as f64 / to.duration_since(from).as_secs_f64()
    };
    println!(
        "a backlog of {waiting} records: published at {:.0} records/s, indexed by b at {:.0} records/s",
        rate(0),
        rate(1),
    );
}

fn main() {
    let nats_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let nats = Process(Some(start_nats(nats_dir.path(), port)));
    let nats_pid = nats.0.as_ref().map_or(0, Child::id);
    let url = format!("nats://127.0.0.1:{port}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let http = reqwest::Client::new();
    let (dir_a, dir_b) = (node_dir(&url), node_dir(&url));
    // A node started before the server listens fails its connect.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nats-server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (a, base_a, _) = start_hookgate(dir_a.path());
    let (b, base_b, _) = start_hookgate(dir_b.path());
    let (_a, _b) = (Process(Some(a)), Process(Some(b)));
    let case = case();
    runtime.block_on(async {
        let seconds = load_seconds();
        let started = Instant::now();
        let (rate, p50, p99) = drive(&base_a, &case, 64, seconds).await;
        let recorded = counted(&http, &base_a, "recorded").await;
        let published_at = reached(&http, &base_a, "published", recorded).await;
        let indexed_at = reached(&http, &base_b, "indexed", recorded).await;
        let per_s = |at: Instant| recorded as f64 / at.duration_since(started).as_secs_f64();
        println!(
            "load: {rate:.0} req/s to node a for {seconds} s (p50 {p50:.1?}, p99 {p99:.1?}); \
             {recorded} records"
        );
        println!(
            "published by a: {:.0} records/s, all {:.2?} after the load ended",
            per_s(published_at),
            published_at.duration_since(started) - Duration::from_secs_f64(seconds),
        );
        println!(
            "indexed by b:   {:.0} records/s, all {:.2?} after the load ended",
            per_s(indexed_at),
            indexed_at.duration_since(started) - Duration::from_secs_f64(seconds),
        );
        backlog(&http, &base_a, &base_b, &case, nats_pid).await;
        let mut samples = Vec::with_capacity(DELAY_SAMPLES);
        for _ in 0..DELAY_SAMPLES {
            samples.push(delay(&http, &base_a, &base_b, &case).await);
        }
        let (p50, p99) = percentiles(samples);
        println!("a's answer to b's listing, one request at a time: p50 {p50:.1?}, p99 {p99:.1?}");
    });
}
