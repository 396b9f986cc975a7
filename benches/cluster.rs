//! The cluster benchmark: wake and agent intake on the embedded store against NATS JetStream,
//! with one node and with two, in one run, on this machine.
//!
//! Starts a real `nats-server -js` (Debian's package) on 127.0.0.1 and the real hookgate binary:
//! one node on the embedded SQLite store (the baseline), one node on NATS, then two nodes on the
//! same NATS server with the connections split between them. Prints requests/s, p50 and p99 per
//! case and the ratio to the embedded store at the same connection count. No model provider is
//! configured: runs end at once with an error, so the runner's work is in the figures but no
//! model's latency is.
//!
//! Run: `cargo bench --bench cluster` (`LOAD_SECONDS=5` for longer cases).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

mod support;
use support::{Case, drive, load_seconds, start_hookgate, stop};

const HOOK_TOKEN: &str = "bench-hook-token-0123";
const GATEWAY_TOKEN: &str = "bench-gateway-token-0123";

fn cases() -> [Case; 2] {
    [Case::wake(HOOK_TOKEN), Case::agent(HOOK_TOKEN)]
}

/// A server stopped (SIGTERM, then waited for) when dropped, also when the benchmark panics: one
/// left running would keep its port and whatever descriptors it inherited.
struct Process(Option<Child>);

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(child) = self.0.take() {
            stop(child);
        }
    }
}

/// Starts `nats-server` with JetStream in `dir`; returns it and its URL.
fn start_nats(dir: &Path) -> (Child, String) {
    let binary = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("nats-server");
    let mut child = Command::new(binary)
        .args(["-js", "-a", "127.0.0.1", "-p", "-1", "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nats-server (apt-get install nats-server)");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut port = None;
    for line in lines.by_ref().map_while(Result::ok) {
        const LISTENING: &str = "Listening for client connections on ";
        if let Some(at) = line.find(LISTENING) {
            port = line[at + LISTENING.len()..]
                .rsplit(':')
                .next()
                .map(|p| p.trim().to_string());
        }
        if line.contains("Server is ready") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let port = port.expect("nats-server named no client port");
    (child, format!("nats://127.0.0.1:{port}"))
}

fn node_dir(store: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut config = json!({
        "gateway": {"auth": {"token": GATEWAY_TOKEN}},
        "hooks": {"enabled": true, "token": HOOK_TOKEN},
        // No heartbeats: the benchmark measures intake.
        "agents": {"defaults": {"heartbeat": {"every": "0"}}},
    });
    if let Some(url) = store {
        config["gateway"]["store"] = json!({"kind": "nats", "url": url});
    }
    std::fs::write(dir.path().join("hookgate.json5"), config.to_string()).unwrap();
    dir
}

/// Drives `case` against every base at once, `connections` split between them: total req/s,
/// the largest p50 and p99.
async fn drive_all(
    bases: &[String],
    case: &Case,
    connections: usize,
    seconds: f64,
) -> (f64, Duration, Duration) {
    let each = connections.div_ceil(bases.len());
    let runs = bases.iter().map(|base| drive(base, case, each, seconds));
    let results = futures_util::future::join_all(runs).await;
    results.into_iter().fold(
        (0.0, Duration::ZERO, Duration::ZERO),
        |(rate, p50, p99), r| (rate + r.0, p50.max(r.1), p99.max(r.2)),
    )
}

/// Waits until no node has a run queued or running, and every NATS node's view shows a marker
/// wake posted to the first one: the next case then starts on idle nodes with current views.
async fn settle(embedded: &str, nats: &[String]) {
    let http = reqwest::Client::new();
    let get = |url: String| {
        let http = http.clone();
        async move {
            let response = http
                .get(url)
                .bearer_auth(GATEWAY_TOKEN)
                .send()
                .await
                .unwrap();
            response.json::<Value>().await.unwrap()
        }
    };
    let marker = format!("settle {}", uuid::Uuid::new_v4());
    http.post(format!("{}/hooks/wake", nats[0]))
        .bearer_auth(HOOK_TOKEN)
        .json(&json!({"text": marker, "mode": "next-heartbeat"}))
        .send()
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let bases = std::iter::once(embedded.to_string()).chain(nats.iter().cloned());
    for base in bases {
        let is_nats = base != embedded;
        let mut after = 0;
        let mut current = !is_nats;
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "{base} did not settle (view current: {current})"
            );
            let busy = ["queued", "running"]
                .into_iter()
                .map(|status| get(format!("{base}/api/runs?status={status}&limit=1")));
            let busy = futures_util::future::join_all(busy)
                .await
                .iter()
                .any(|page| !page["runs"].as_array().unwrap().is_empty());
            while !current {
                let page = get(format!(
                    "{base}/api/sessions/main/events?after={after}&limit=1000"
                ))
                .await;
                let events = page["events"].as_array().unwrap();
                let Some(last) = events.last() else { break };
                after = last["seq"].as_i64().unwrap();
                current = events.iter().any(|e| e["text"] == marker.as_str());
            }
            if !busy && current {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn main() {
    let seconds = load_seconds();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let nats_dir = tempfile::tempdir().unwrap();
    let (nats, url) = start_nats(nats_dir.path());
    let nats = Process(Some(nats));

    let embedded_dir = node_dir(None);
    let (embedded, embedded_base, _) = start_hookgate(embedded_dir.path());
    let embedded = Process(Some(embedded));
    let node_dirs = [node_dir(Some(&url)), node_dir(Some(&url))];
    let (first, first_base, _) = start_hookgate(node_dirs[0].path());
    let first = Process(Some(first));

    println!(
        "hookgate cluster benchmark: {seconds} s per case, NATS, client and servers on this machine"
    );
    println!(
        "{:<14} {:<16} {:>5} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "case", "store", "conns", "req/s", "p50", "p99", "rate/emb", "p99/emb"
    );
    let mut rows: Vec<Value> = Vec::new();
    let mut nodes = vec![first_base.clone()];
    let mut second = None;
    for count in [1, 2] {
        if count == 2 {
            let (child, base, _) = start_hookgate(node_dirs[1].path());
            nodes.push(base);
            second = Some(Process(Some(child)));
        }
        let store = format!("nats, {count} node{}", if count == 1 { "" } else { "s" });
        for case in cases() {
            for connections in [16, 64] {
                runtime.block_on(settle(&embedded_base, &nodes));
                let (base_rate, base_p50, base_p99) =
                    runtime.block_on(drive(&embedded_base, &case, connections, seconds));
                runtime.block_on(settle(&embedded_base, &nodes));
                let (rate, p50, p99) =
                    runtime.block_on(drive_all(&nodes, &case, connections, seconds));
                println!(
                    "{:<14} {:<16} {connections:>5} {base_rate:>10.0} {base_p50:>10.1?} {base_p99:>10.1?} {:>9} {:>9}",
                    case.name, "embedded", "1.00", "1.00"
                );
                println!(
                    "{:<14} {store:<16} {connections:>5} {rate:>10.0} {p50:>10.1?} {p99:>10.1?} {:>9.2} {:>9.1}",
                    case.name,
                    rate / base_rate,
                    p99.as_secs_f64() / base_p99.as_secs_f64()
                );
                rows.push(json!({"case": case.name, "store": store, "connections": connections,
                                 "embedded": base_rate.round(), "nats": rate.round(), "ratio": rate / base_rate}));
            }
        }
    }
    // Nodes before the NATS server, so that they stop while it is still there.
    drop((second, first, embedded));
    drop(nats);
    println!("{}", serde_json::to_string(&rows).unwrap());
}
