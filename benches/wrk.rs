//! The HTTP load benchmark, driven by wrk (the C load generator, a process of its own): the real
//! hookgate binary against a bare axum server in the same run, at 32 and 64 connections.
//!
//! Every case gets `WRK_WARMUP` seconds of load first (default 3, not measured) and then
//! `WRK_SECONDS` (default 10); each line gives requests/s, p50, p99 (wrk's latency distribution),
//! the ratio to the baseline, the p99 over the baseline's, answers that were not 2xx, the
//! server's CPU time per request, the share of the machine's CPU time its hypervisor took
//! (steal) while the case ran, and the ratio the targets name (docs/performance.md), with the
//! same ratio of CPU time per request beside it.
//! Bodies that would repeat carry a number of their own per request ([`SERIAL`]), so every wake
//! is a new event, committed before its answer.
//! `WRK_CASE=github` runs the cases whose name contains that text; `WRK_CASE=axum,wake` those
//! that contain either. wrk is installed with apt-get when missing and the user may.
//!
//! Run: `cargo bench --bench wrk`.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

mod support;
use support::wrk::{Load, Measured, cpu_time, drive, machine, machine_ticks};
use support::{
    SERIAL, build_js, build_transforms, echo_router, env_number, example_payload, selected,
    serve_in_thread, start_hookgate, stop, wait_for_empty_queue,
};

const HOOK_TOKEN: &str = "bench-hook-token-0123";
const GATEWAY_TOKEN: &str = "bench-gateway-token-0123";
const CONNECTIONS: [usize; 2] = [32, 64];

/// Which server a case is sent to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Server {
    Baseline,
    /// The baseline's echo answered only after a round trip through another thread, as a group
    /// commit answers: what the hand-off alone costs, with no database behind it.
    ThreadHop,
    /// hookgate without a model provider: runs end at once.
    Hookgate,
    /// hookgate whose provider answers after one second: runs stay in flight.
    SlowProvider,
}

/// One kind of request.
struct Case {
    name: &'static str,
    server: Server,
    path: &'static str,
    /// The request body; each [`SERIAL`] in it becomes a number no other request of the run has.
    body: String,
    headers: Vec<(&'static str, &'static str)>,
    /// The case whose rate the target compares this one's with, and the least ratio.
    target: Option<(&'static str, f64)>,
}

fn case(name: &'static str, server: Server, path: &'static str, body: Value) -> Case {
    Case {
        name,
        server,
        path,
        body: body.to_string(),
        headers: Vec::new(),
        target: None,
    }
}

impl Case {
    fn header(mut self, name: &'static str, value: &'static str) -> Case {
        self.headers.push((name, value));
        self
    }

    /// What wrk sends for this case.
    fn load(&self) -> Load<'_> {
        Load {
            path: self.path,
            body: &self.body,
            token: HOOK_TOKEN,
            headers: &self.headers,
        }
    }

    fn target(mut self, of: &'static str, ratio: f64) -> Case {
        self.target = Some((of, ratio));
        self
    }
}

fn cases() -> Vec<Case> {
    let push = example_payload("github-push.json");
    let deploy = json!({"service": "api", "version": format!("1.2.{SERIAL}")});
    let run = json!({"message": format!("benchmark run {SERIAL}"), "wakeMode": "next-heartbeat", "deliver": false});
    vec![
        case(
            "axum baseline",
            Server::Baseline,
            "/",
            json!({"text": format!("x {SERIAL}")}),
        ),
        case(
            "axum, thread hop",
            Server::ThreadHop,
            "/",
            json!({"text": format!("x {SERIAL}")}),
        ),
        case(
            "/hooks/wake",
            Server::Hookgate,
            "/hooks/wake",
            json!({"text": format!("benchmark event {SERIAL}"), "mode": "next-heartbeat"}),
        )
        .target("axum baseline", 0.6),
        case(
            "/hooks/agent",
            Server::Hookgate,
            "/hooks/agent",
            run.clone(),
        )
        .target("/hooks/wake", 0.7),
        case(
            "/hooks/agent, 1 s provider",
            Server::SlowProvider,
            "/hooks/agent",
            run,
        )
        .target("/hooks/wake", 0.7),
        case(
            "template → wake",
            Server::Hookgate,
            "/hooks/deploy",
            deploy.clone(),
        ),
        case(
            "template → agent",
            Server::Hookgate,
            "/hooks/deploy-run",
            deploy,
        ),
        // The same action from the same push delivery, by templates instead of the transform.
        case(
            "template → agent (push)",
            Server::Hookgate,
            "/hooks/push-run",
            push.clone(),
        ),
        case(
            "github → agent",
            Server::Hookgate,
            "/hooks/github",
            push.clone(),
        )
        .header("x-github-event", "push")
        .target("template → agent (push)", 0.85),
        case(
            "github, reuse 1000",
            Server::Hookgate,
            "/hooks/github-reused",
            push,
        )
        .header("x-github-event", "push"),
        case(
            "js → wake",
            Server::Hookgate,
            "/hooks/title",
            json!({"title": format!("a benchmark {SERIAL}"), "n": 1}),
        )
        .target("template → wake", 0.4),
        case(
            "js, fresh instance",
            Server::Hookgate,
            "/hooks/title-fresh",
            json!({"title": format!("a benchmark {SERIAL}"), "n": 1}),
        ),
    ]
}

fn config(provider: Option<&str>) -> Value {
    let transform = |module: &str, reuse: Option<u32>| {
        let mut t = json!({"module": module});
        if let Some(reuse) = reuse {
            t["reuse"] = json!(reuse);
        }
        t
    };
    let mut config = json!({
        "gateway": {"auth": {"token": GATEWAY_TOKEN}},
        "hooks": {"enabled": true, "token": HOOK_TOKEN, "mappings": [
            {"id": "deploy", "match": {"path": "deploy"}, "action": "wake", "wakeMode": "next-heartbeat",
             "textTemplate": "Deployed {{service}} {{version}}"},
            {"id": "deploy-run", "match": {"path": "deploy-run"}, "action": "agent", "wakeMode": "next-heartbeat",
             "deliver": false, "messageTemplate": "Deployed {{service}} {{version}}"},
            {"id": "push-run", "match": {"path": "push-run"}, "action": "agent", "name": "GitHub",
             "wakeMode": "next-heartbeat",
             "messageTemplate": "GitHub push to {{repository.full_name}} {{ref}} by {{pusher.name}}: {{head_commit.message}}"},
            {"id": "github", "match": {"path": "github"}, "wakeMode": "next-heartbeat",
             "transform": transform("github.wasm", None)},
            {"id": "github-reused", "match": {"path": "github-reused"}, "wakeMode": "next-heartbeat",
             "transform": transform("github.wasm", Some(1000))},
            {"id": "title", "match": {"path": "title"}, "action": "wake", "textTemplate": "-",
             "transform": transform("title.mjs", None)},
            {"id": "title-fresh", "match": {"path": "title-fresh"}, "action": "wake", "textTemplate": "-",
             "transform": transform("title.mjs", Some(1))},
        ]},
        // No heartbeats: the benchmark measures intake.
        "agents": {"defaults": {"heartbeat": {"every": "0"}}},
    });
    if let Some(base) = provider {
        config["models"] = json!({"providers": {"slow": {"baseUrl": base}}});
        config["agents"]["defaults"]["model"] = json!("slow/model");
    }
    config
}

/// A configuration directory with the transforms in place.
fn prepare_dir(provider: Option<&str>, wasm: &Path, js: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hooks/transforms");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(wasm.join("github.wasm"), root.join("github.wasm")).unwrap();
    std::fs::copy(js, root.join("title.wasm")).unwrap();
    let config = config(provider).to_string();
    std::fs::write(dir.path().join("hookgate.json5"), config).unwrap();
    dir
}

/// One line of the table, kept for the ratios of the cases after it.
struct Row {
    case: &'static str,
    connections: usize,
    measured: Measured,
    /// The server's CPU time per request, in µs.
    cpu_per_request: f64,
}

/// The bare axum server of the baseline: a JSON echo, on a runtime of two threads as hookgate's.
fn start_baseline() -> String {
    serve_in_thread(echo_router())
}

/// The baseline's echo behind a thread hop: each request sends a reply channel to a thread that
/// takes every one waiting (as the store's writer takes a batch) and answers them, and the echo
/// is sent when the answer arrives. No database, no `fsync`: the price of the hand-off alone.
fn start_thread_hop() -> String {
    let (hops, mut waiting) =
        tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<()>>();
    std::thread::spawn(move || {
        let mut batch = Vec::new();
        while waiting.blocking_recv_many(&mut batch, 512) > 0 {
            for reply in batch.drain(..) {
                let _ = reply.send(());
            }
        }
    });
    serve_in_thread(
        axum::Router::new().fallback(move |body: axum::body::Bytes| {
            let hops = hops.clone();
            async move {
                let (reply, answer) = tokio::sync::oneshot::channel();
                let _ = hops.send(reply);
                let _ = answer.await;
                ([("content-type", "application/json")], body)
            }
        }),
    )
}

/// A model provider that answers every chat completion after one second.
fn start_slow_provider() -> String {
    serve_in_thread(axum::Router::new().fallback(|| async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        axum::Json(json!({"id": "c", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}))
    }))
}

fn main() {
    let seconds = env_number("WRK_SECONDS", 10);
    let warmup = env_number("WRK_WARMUP", 3);
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| selected("WRK_CASE", c.name))
        .collect();
    let wasm = build_transforms();
    let js = build_js();
    let baseline = start_baseline();
    let thread_hop = start_thread_hop();
    let provider = start_slow_provider();
    let plain_dir = prepare_dir(None, &wasm, &js);
    let slow_dir = prepare_dir(Some(&format!("{provider}/v1")), &wasm, &js);
    let (plain, plain_url, _) = start_hookgate(plain_dir.path());
    let (slow, slow_url, _) = start_hookgate(slow_dir.path());

    println!(
        "hookgate under wrk -t2: {warmup} s warm-up, {seconds} s per case; {}",
        machine()
    );
    println!(
        "{:<28} {:>5} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>7} {:>5}  target (by CPU)",
        "case", "conns", "req/s", "p50", "p99", "/axum", "p99/ax", "failed", "cpu/req", "steal"
    );
    let mut results: Vec<Row> = Vec::new();
    for connections in CONNECTIONS {
        for case in &cases {
            let (url, pid) = match case.server {
                // The baselines run in this process (so does the slow provider, idle then).
                Server::Baseline => (&baseline, std::process::id()),
                Server::ThreadHop => (&thread_hop, std::process::id()),
                Server::Hookgate => (&plain_url, plain.id()),
                Server::SlowProvider => (&slow_url, slow.id()),
            };
            if case.server == Server::Hookgate {
                // The runs an earlier case queued are run in the background; a case measured
                // while they drain would be charged for them.
                wait_for_empty_queue(url, GATEWAY_TOKEN);
            }
            if warmup > 0 {
                drive(url, &case.load(), connections, warmup);
            }
            let cpu_before = cpu_time(pid);
            let (total_before, steal_before) = machine_ticks();
            let measured = drive(url, &case.load(), connections, seconds);
            let cpu_per_request =
                (cpu_time(pid) - cpu_before).as_secs_f64() * 1e6 / measured.requests.max(1) as f64;
            let (total_after, steal_after) = machine_ticks();
            // Saturating: a hypervisor may set its counters back (a live migration).
            let steal = steal_after.saturating_sub(steal_before) as f64 * 100.0
                / total_after.saturating_sub(total_before).max(1) as f64;
            let base = results
                .iter()
                .find(|row| row.case == "axum baseline" && row.connections == connections)
                .map(|row| (row.measured.rate, row.measured.p99));
            let (per_base, p99_per_base) = base.map_or((1.0, 1.0), |(rate, p99)| {
                (
                    measured.rate / rate,
                    measured.p99.as_secs_f64() / p99.as_secs_f64(),
                )
            });
            let target = case
                .target
                .and_then(|(of, least)| {
                    let other = results
                        .iter()
                        .find(|row| row.case == of && row.connections == connections)?;
                    let ratio = measured.rate / other.measured.rate;
                    let by_cpu = other.cpu_per_request / cpu_per_request;
                    let verdict = if ratio >= least { "met" } else { "NOT met" };
                    Some(format!(
                        "{ratio:.2} of {of} (≥ {least}: {verdict}) ({by_cpu:.2})"
                    ))
                })
                .unwrap_or_default();
            println!(
                "{:<28} {connections:>5} {:>9.0} {:>9.1?} {:>9.1?} {per_base:>6.2} {p99_per_base:>6.1} {:>6} {cpu_per_request:>5.0}µs {steal:>4.0}%  {target}",
                case.name, measured.rate, measured.p50, measured.p99, measured.failed
            );
            results.push(Row {
                case: case.name,
                connections,
                measured,
                cpu_per_request,
            });
        }
    }
    stop(plain);
    stop(slow);
}
