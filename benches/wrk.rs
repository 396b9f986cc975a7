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
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

mod support;
use support::{
    SERIAL, build_js, build_transforms, echo_router, example_payload, installed, selected,
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

/// What one wrk run measured.
struct Measured {
    rate: f64,
    p50: Duration,
    p99: Duration,
    /// Answers that were not 2xx or 3xx, and socket errors.
    failed: u64,
    /// Requests answered in the measured run.
    requests: u64,
}

/// Drives `url` with `case`'s request from `connections` connections for `seconds`.
fn drive(url: &str, case: &Case, connections: usize, seconds: u64) -> Measured {
    let script = tempfile::NamedTempFile::new().unwrap();
    let mut lua = String::from("wrk.method = \"POST\"\n");
    lua += "wrk.headers[\"Content-Type\"] = \"application/json\"\n";
    lua += &format!("wrk.headers[\"Authorization\"] = \"Bearer {HOOK_TOKEN}\"\n");
    for (name, value) in &case.headers {
        lua += &format!("wrk.headers[\"{name}\"] = \"{value}\"\n");
    }
    lua += &body_script(&case.body);
    std::fs::write(script.path(), lua).unwrap();
    let output = Command::new(installed("wrk", "wrk"))
        .args(["-t2", &format!("-c{connections}"), &format!("-d{seconds}s")])
        .args(["--latency", "-s"])
        .arg(script.path())
        .arg(format!("{url}{}", case.path))
        .output()
        .expect("run wrk");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "wrk failed: {text}");
    parse(&text)
}

/// The Lua that gives wrk's requests their body: the same one every time, or, when `body` holds
/// [`SERIAL`], a new number for each request (`<thread>.<count>`: each wrk thread has a Lua
/// state of its own, numbered by `setup`).
fn body_script(body: &str) -> String {
    let Some((before, after)) = body.split_once(SERIAL) else {
        return format!("wrk.body = [==[{body}]==]\n");
    };
    assert!(!after.contains(SERIAL), "one {SERIAL} per body");
    format!(
        "local threads = 0\n\
         function setup(thread) threads = threads + 1; thread:set(\"id\", threads) end\n\
         local count = 0\n\
         function request()\n  \
           count = count + 1\n  \
           return wrk.format(nil, nil, nil, [==[{before}]==] .. id .. \".\" .. count .. [==[{after}]==])\n\
         end\n"
    )
}

/// One line of the table, kept for the ratios of the cases after it.
struct Row {
    case: &'static str,
    connections: usize,
    measured: Measured,
    /// The server's CPU time per request, in µs.
    cpu_per_request: f64,
}

/// Reads wrk's `--latency` report.
fn parse(text: &str) -> Measured {
    let field = |prefix: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::trim)
    };
    let percentile = |p: &str| field(p).map_or(Duration::ZERO, duration);
    let errors: u64 = field("Socket errors:").map_or(0, |rest| {
        rest.split(',')
            .filter_map(|part| part.split_whitespace().last()?.parse::<u64>().ok())
            .sum()
    });
    Measured {
        rate: field("Requests/sec:")
            .and_then(|r| r.parse().ok())
            .unwrap_or(0.0),
        p50: percentile("50%"),
        p99: percentile("99%"),
        failed: field("Non-2xx or 3xx responses:")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
            + errors,
        requests: text
            .lines()
            .find_map(|l| l.trim().split_once(" requests in"))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or(0),
    }
}

/// CPU time the process `pid` has used so far (user + system), from `/proc/<pid>/stat`.
///
/// Requests per second on a shared two-core machine move with its neighbours; the server's CPU
/// time per request moves much less, so each case reports both.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces, inside parentheses); utime and stime
    // are the 14th and 15th of the line, in ticks of 1/100 s (USER_HZ on Linux).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum());
    Duration::from_millis(ticks * 10)
}

/// The machine's CPU time so far, all of it and what the hypervisor took for others (steal),
/// in ticks, from the first line of `/proc/stat`.
///
/// On a shared virtual machine a case that ran while its neighbours were busy got a fraction of
/// the two cores: its requests per second say little then, and the steal column says so.
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    // cpu  user nice system idle iowait irq softirq steal guest guest_nice
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("cpu "))
        .map_or(vec![], |rest| {
            rest.split_whitespace()
                .filter_map(|t| t.parse().ok())
                .collect()
        });
    // guest time is already counted in user time.
    let total = ticks.iter().take(8).sum();
    (total, ticks.get(7).copied().unwrap_or(0))
}

/// `276.00us`, `1.23ms`, `2.00s`.
fn duration(text: &str) -> Duration {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().unwrap_or(0.0);
    Duration::from_secs_f64(match unit {
        "us" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        _ => 0.0,
    })
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

fn env_seconds(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The machine, for the report.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map_or("unknown CPU", |m| m.trim_start_matches([' ', '\t', ':']));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {model}")
}

fn main() {
    let seconds = env_seconds("WRK_SECONDS", 10);
    let warmup = env_seconds("WRK_WARMUP", 3);
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
                drive(url, case, connections, warmup);
            }
            let cpu_before = cpu_time(pid);
            let (total_before, steal_before) = machine_ticks();
            let measured = drive(url, case, connections, seconds);
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
