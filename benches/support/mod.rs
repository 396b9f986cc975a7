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

use sha2::Digest;

pub mod callgrind;
pub mod receiver;
pub mod subscription;
pub mod wrk;

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

/// The number in the environment variable `name`, else `default`.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
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
    let wrapper = std::env::var("HOOKGATE_WRAPPER").unwrap_or_default();
    let wrapper: Vec<String> = wrapper.split_whitespace().map(String::from).collect();
    start_hookgate_under(dir, &wrapper, Stdio::null())
}

/// Starts hookgate under `wrapper` (a program and its arguments; none runs it directly), its
/// standard error (the log's lines, and the wrapper's) to `stderr`; returns the child (the
/// wrapper's process), its base URL and the time until `listening`.
pub fn start_hookgate_under(
    dir: &Path,
    wrapper: &[String],
    stderr: Stdio,
) -> (Child, String, Duration) {
    let started = Instant::now();
    let mut command = wrapper.iter();
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
    .stderr(stderr)
    .spawn()
    .unwrap();
    let base = listening(&mut child);
    (child, base, started.elapsed())
}

/// Reads `child`'s standard output (piped) up to its `listening on <base URL>` line; returns the
/// base URL. Lines before it, a wrapper's own, are skipped.
pub fn listening(child: &mut Child) -> String {
    BufReader::new(child.stdout.take().expect("piped standard output"))
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("listening on ").map(String::from))
        .expect("listening line")
}

/// `program`'s name, installing Debian's `package` with apt-get when it is missing and we are
/// root; panics naming the package otherwise.
pub fn installed(program: &'static str, package: &str) -> &'static str {
    let found = || Command::new(program).arg("--version").output().is_ok();
    if !found() {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"));
        assert!(root, "{program} is missing: apt-get install {package}");
        run(Command::new("apt-get").args(["install", "-y", "-qq", package]));
    }
    program
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

/// Marks where a body takes its request's own number. hookgate coalesces a wake that repeats the
/// newest pending event of its session (nothing is written), so cases whose text would be the
/// same every time number their requests: each wake is then a new event committed to disk before
/// the answer, as in real traffic.
pub const SERIAL: &str = "#SERIAL#";

/// The 15-line JavaScript transform of the JavaScript cases (wrk, instructions).
pub const TITLE_MJS: &str = r#"// Reads payload.title and returns a wake, as a small hook transform does.
export default function ({ payload, headers, path }) {
  const title = typeof payload.title === 'string' ? payload.title.trim() : '';
  if (!title) return null;
  const from = headers['user-agent'] ?? 'someone';
  const words = title.split(/\s+/).length;
  return {
    kind: 'wake',
    text: `${path}: ${title} (${words} words, from ${from})`,
    mode: 'next-heartbeat',
  };
}
"#;

/// The JavaScript transform's component, built with the SDK unless an earlier run built it from
/// the same source with the same SDK. Judged by content, not by file dates: the build directory
/// is shared by every checkout that benches with the same target directory, and a component
/// newer than this checkout's SDK may have been built from another one's.
pub fn build_js() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("bench-js");
    std::fs::create_dir_all(&out).unwrap();
    let source = out.join("title.mjs");
    let component = out.join("title.wasm");
    let stamp = out.join("title.wasm.built-from");
    let sdk = root.join("transforms/js-sdk");
    let mut hasher = sha2::Sha256::new();
    for file in [
        "build.mjs",
        "adapter.js",
        "hookgate-js-runtime.wasm",
        "package-lock.json",
    ] {
        let path = sdk.join(file);
        hasher.update(std::fs::read(&path).unwrap_or_else(|e| panic!("read {path:?}: {e}")));
    }
    hasher.update(TITLE_MJS);
    let from = hex::encode(hasher.finalize());
    if component.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|was| was == from) {
        return component;
    }
    std::fs::write(&source, TITLE_MJS).unwrap();
    if !sdk.join("node_modules").is_dir() {
        run(Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&sdk));
    }
    run(Command::new("node")
        .arg(sdk.join("build.mjs"))
        .arg(&source)
        .arg("-o")
        .arg(&component));
    std::fs::write(&stamp, from).unwrap();
    component
}

pub fn run(command: &mut Command) {
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(status.success(), "{command:?} failed");
}

/// Waits (at most two minutes) until the server has no queued or running run, asking its
/// operator API with `gateway_token`.
pub fn wait_for_empty_queue(base: &str, gateway_token: &str) {
    wait_for_none(base, gateway_token, "runs", &["queued", "running"]);
}

/// Waits (at most two minutes) until the server's outbox has no message waiting for its run,
/// pending or being sent, asking its operator API with `gateway_token`; panics when one is
/// left, or when one failed.
pub fn wait_for_empty_outbox(base: &str, gateway_token: &str) {
    let statuses = ["waiting", "pending", "sending"];
    assert!(
        wait_for_none(base, gateway_token, "outbound", &statuses),
        "messages still in the outbox after two minutes"
    );
    assert!(
        !listed(base, gateway_token, "outbound", "failed"),
        "a message failed: see {base}/api/outbound?status=failed"
    );
}

/// Waits (at most two minutes) until `GET /api/<list>?status=<status>` lists nothing for each
/// of `statuses`; returns whether it came to that.
fn wait_for_none(base: &str, gateway_token: &str, list: &str, statuses: &[&str]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let busy = statuses
            .iter()
            .any(|status| listed(base, gateway_token, list, status));
        if !busy {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether `GET /api/<list>?status=<status>&limit=1` lists anything (`runs` or `outbound`,
/// whose answers hold the list under `runs` and `messages`); true when it cannot be asked.
fn listed(base: &str, gateway_token: &str, list: &str, status: &str) -> bool {
    let url = format!("{base}/api/{list}?status={status}&limit=1");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let Ok(response) = reqwest::Client::new()
            .get(&url)
            .bearer_auth(gateway_token)
            .send()
            .await
        else {
            return true;
        };
        let body: serde_json::Value = response.json().await.unwrap_or(serde_json::Value::Null);
        let items = if list == "runs" { "runs" } else { "messages" };
        body[items].as_array().is_none_or(|found| !found.is_empty())
    })
}

/// The bare axum server of the baselines: answers any request with its own body as JSON.
pub fn echo_router() -> axum::Router {
    axum::Router::new().fallback(|body: axum::body::Bytes| async move {
        ([("content-type", "application/json")], body)
    })
}

/// The example delivery `examples/payloads/<file>`, parsed.
pub fn example_payload(file: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/payloads")
        .join(file);
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// Whether the case `name` runs: the environment `variable` is unset, or one of its
/// comma-separated parts is in the name (`WRK_CASE=axum,wake`).
pub fn selected(variable: &str, name: &str) -> bool {
    std::env::var(variable).map_or(true, |only| only.split(',').any(|part| name.contains(part)))
}
