//! What the benchmarks share: building the example transforms, running the real binary, and
//! percentiles.

// Compiled into every benchmark, each of which uses a part.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Builds the transforms for `wasm32-wasip2`; returns the directory of the `.wasm` files.
pub fn build_transforms() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms");
    // Beside the outer build when it has a target directory of its own (as CI's cache), so
    // that the tests' build of the transforms is reused.
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || root.join("target"),
        |dir| PathBuf::from(dir).join("wasm-transforms"),
    );
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(root.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("cargo");
    assert!(status.success(), "building the transforms failed");
    target.join("wasm32-wasip2/release")
}

/// Seconds per case: `LOAD_SECONDS`, else 2.
pub fn load_seconds() -> f64 {
    std::env::var("LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0)
}

/// The median and the 99th percentile.
pub fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    if samples.is_empty() {
        return (Duration::ZERO, Duration::ZERO);
    }
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Starts hookgate; returns the child, its base URL and the time until `listening`.
///
/// `HOOKGATE_WRAPPER` (say `heaptrack` or `valgrind --tool=massif`) runs the server under that
/// command; the returned child is then the wrapper's process.
pub fn start_hookgate(dir: &Path) -> (Child, String, Duration) {
    let started = Instant::now();
    let wrapper = std::env::var("HOOKGATE_WRAPPER").unwrap_or_default();
    let mut command = wrapper.split_whitespace();
    let mut child = match command.next() {
        Some(program) => {
            let mut c = Command::new(program);
            c.args(command).arg(env!("CARGO_BIN_EXE_hookgate"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_hookgate")),
    }
    .args(["serve", "--listen", "127.0.0.1:0", "--config"])
    .arg(dir.join("hookgate.json5"))
    .env("RUST_LOG", "hookgate=warn")
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // A wrapper may print lines of its own first.
    let base = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("listening on ").map(String::from))
        .expect("listening line");
    (child, base, started.elapsed())
}

pub fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// `VmRSS` and `VmHWM` (peak) of a process, in MiB.
pub fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// One kind of request.
pub struct Case {
    pub name: &'static str,
    pub path: &'static str,
    pub body: serde_json::Value,
    pub headers: Vec<(&'static str, &'static str)>,
    pub token: &'static str,
}

impl Case {
    /// `/hooks/wake` with a system event that waits for the next heartbeat.
    pub fn wake(token: &'static str) -> Case {
        Case {
            name: "/hooks/wake",
            path: "/hooks/wake",
            body: serde_json::json!({"text": "benchmark event", "mode": "next-heartbeat"}),
            headers: vec![],
            token,
        }
    }

    /// `/hooks/agent` with a run that wakes nothing and delivers nothing.
    pub fn agent(token: &'static str) -> Case {
        Case {
            name: "/hooks/agent",
            path: "/hooks/agent",
            body: serde_json::json!({"message": "benchmark run", "wakeMode": "next-heartbeat", "deliver": false}),
            headers: vec![],
            token,
        }
    }
}

/// Requests/s and latencies of `connections` clients sending `case` to `base` for `seconds`.
pub async fn drive(
    base: &str,
    case: &Case,
    connections: usize,
    seconds: f64,
) -> (f64, Duration, Duration) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .build()
        .unwrap();
    let url = format!("{base}{}", case.path);
    let body = case.body.to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (client, url, body, stop) =
                (client.clone(), url.clone(), body.clone(), Arc::clone(&stop));
            let headers = case.headers.clone();
            let token = case.token;
            tokio::spawn(async move {
                let mut samples = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let mut request = client.post(&url).bearer_auth(token).body(body.clone());
                    for (k, v) in &headers {
                        request = request.header(*k, *v);
                    }
                    let sent = Instant::now();
                    let response = request.send().await.expect("request");
                    let _ = response.bytes().await;
                    samples.push(sent.elapsed());
                }
                samples
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for worker in workers {
        samples.extend(worker.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let rate = samples.len() as f64 / elapsed;
    let (p50, p99) = percentiles(samples);
    (rate, p50, p99)
}

/// Serves `app` on 127.0.0.1 from a runtime of its own with two worker threads (as many as
/// hookgate gets), on a thread of its own; returns its base URL.
pub fn serve_in_thread(app: axum::Router) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(format!("http://{}", listener.local_addr().unwrap()))
                .unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}
