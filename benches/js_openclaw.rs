//! The same JavaScript hook transform served by the real OpenClaw gateway (in-process on V8,
//! unsandboxed) and by hookgate (QuickJS in a WebAssembly sandbox), with hookgate's instance kept
//! between calls and fresh for every call: the CPU time each server process spends per request
//! under the same wrk load, and hookgate's over OpenClaw's (docs/performance.md, "JavaScript
//! against OpenClaw").
//!
//! The transform is the wrk bench's [`TITLE_MJS`]: OpenClaw imports the module, hookgate serves
//! the component the SDK builds from it, named `.mjs` in one mapping (its instances kept, the
//! default for a JavaScript module) and `.wasm` in another (a fresh instance per call). Both
//! gateways map `/hooks/title` to a wake that waits for the next heartbeat, and no heartbeat runs.
//! Each request's title carries a number of its own, so every wake is a new event. A fourth side,
//! hookgate making the same wake from a template with no transform, is the floor the JavaScript
//! sides stand on: a target's share of OpenClaw's CPU less that floor is what the target leaves
//! for running the transform.
//!
//! `JS_ROUNDS` rounds (default 3) each run the four sides one after the other, every side given
//! `WRK_WARMUP` seconds of load (default 3, not measured) and then `WRK_SECONDS` (default 10) at
//! `WRK_CONNECTIONS` connections (default 32); a side's CPU time per request is the change of its
//! process's user + system time (`/proc/<pid>/stat`) over the requests wrk counted, printed with
//! its user and system shares and the process's minor page faults per request. It prints each
//! round, then the medians and the ratios with their targets.
//!
//! Needs the OpenClaw gateway (`scripts/install-openclaw`, into `$OPENCLAW_HOME`, by default
//! `/var/tmp/hookgate-openclaw`), Node.js for the SDK's build, and wrk (installed with apt-get when
//! missing and the user may). Run: `cargo bench --bench js_openclaw`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::wrk::{Load, Usage, drive, machine};
use support::{SERIAL, TITLE_MJS, build_js, env_number, start_hookgate, stop};

const HOOK_TOKEN: &str = "bench-hook-token-0123456789abcdef";
const GATEWAY_TOKEN: &str = "bench-gateway-token-0123456789ab";

/// The targets of the fresh and the kept instance: hookgate's CPU per request over OpenClaw's.
const FRESH_TARGET: f64 = 0.5;
const KEPT_TARGET: f64 = 0.3;

/// The mappings both gateways share but for the module: a wake from the transform's result.
fn mapping(id: &str, path: &str, module: &str) -> Value {
    json!({"id": id, "match": {"path": path}, "action": "wake", "wakeMode": "next-heartbeat",
           "textTemplate": "-", "transform": {"module": module}})
}

/// The floor: the transform's wake made by a template instead (the path and the title; no
/// transform runs).
fn template_mapping(id: &str, path: &str) -> Value {
    json!({"id": id, "match": {"path": path}, "action": "wake", "wakeMode": "next-heartbeat",
           "textTemplate": "/hooks/title: {{title}}"})
}

/// A running OpenClaw gateway, the leader of a process group of its own; stopped when dropped.
struct OpenClaw {
    child: Child,
    base: String,
    state: tempfile::TempDir,
}

impl OpenClaw {
    /// Starts the installed gateway with the transform in its `hooks/transforms`.
    fn start() -> OpenClaw {
        let home = PathBuf::from(
            std::env::var("OPENCLAW_HOME").unwrap_or_else(|_| "/var/tmp/hookgate-openclaw".into()),
        );
        let node = home.join("node/bin/node");
        let entry = home.join("node_modules/openclaw/openclaw.mjs");
        assert!(
            node.exists() && entry.exists(),
            "the OpenClaw gateway is not installed in {}: run scripts/install-openclaw",
            home.display()
        );
        let state = tempfile::tempdir().unwrap();
        let transforms = state.path().join("hooks/transforms");
        std::fs::create_dir_all(&transforms).unwrap();
        std::fs::write(transforms.join("title.mjs"), TITLE_MJS).unwrap();
        let config = json!({
            "gateway": {"mode": "local", "bind": "loopback",
                        "auth": {"mode": "token", "token": GATEWAY_TOKEN}},
            "hooks": {"enabled": true, "token": HOOK_TOKEN,
                      "mappings": [mapping("title", "title", "title.mjs")]},
            "agents": {"defaults": {"heartbeat": {"every": "0"}}},
            "logging": {"file": state.path().join("openclaw.log")},
        });
        let config_path = state.path().join("openclaw.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let log = std::fs::File::create(state.path().join("stdout.log")).unwrap();
        let child = Command::new(node)
            .arg(entry)
            .args(["gateway", "run", "--port", &port.to_string()])
            .env("OPENCLAW_STATE_DIR", state.path().join("state"))
            .env("OPENCLAW_CONFIG_PATH", &config_path)
            .env("OPENCLAW_SKIP_CHANNELS", "1")
            .env("OPENCLAW_DISABLE_BONJOUR", "1")
            .env("OPENCLAW_NO_AUTO_UPDATE", "1")
            .env("OPENCLAW_SKIP_GMAIL_WATCHER", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            // Its own group, so that whatever it starts is stopped with it.
            .process_group(0)
            .spawn()
            .expect("node");
        let mut openclaw = OpenClaw {
            child,
            base: format!("http://127.0.0.1:{port}"),
            state,
        };
        openclaw.wait_ready();
        openclaw
    }

    /// Waits (at most 150 s; 20–30 s on this machine) for `/readyz` to answer 200.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(150);
        let url = format!("{}/readyz", self.base);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = reqwest::Client::new();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the OpenClaw gateway exited with {status}:\n{}", self.log());
            }
            let ready = runtime.block_on(async {
                client
                    .get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200)
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the OpenClaw gateway was not ready in 150 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("stdout.log")).unwrap_or_default()
    }
}

impl Drop for OpenClaw {
    fn drop(&mut self) {
        // SIGTERM to the group first: the gateway stops its children only when it shuts down
        // cleanly; then SIGKILL to whatever is left of the group.
        let group = format!("-{}", self.child.id());
        let kill = |signal: &str| {
            let _ = Command::new("kill")
                .args([signal, "--", &group])
                .stderr(Stdio::null())
                .status();
        };
        kill("-TERM");
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(100));
        }
        kill("-KILL");
        let _ = self.child.wait();
    }
}

/// hookgate's configuration directory: the transform's component kept (`title.mjs`, the source's
/// name) and fresh (`title.wasm`), and the template that makes the same wake.
fn hookgate_dir(component: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hooks/transforms");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(component, root.join("title.wasm")).unwrap();
    let config = json!({
        "gateway": {"auth": {"token": GATEWAY_TOKEN}},
        "hooks": {"enabled": true, "token": HOOK_TOKEN, "mappings": [
            mapping("title", "title", "title.mjs"),
            mapping("title-fresh", "title-fresh", "title.wasm"),
            template_mapping("title-template", "title-template"),
        ]},
        "agents": {"defaults": {"heartbeat": {"every": "0"}}},
    });
    std::fs::write(dir.path().join("hookgate.json5"), config.to_string()).unwrap();
    dir
}

/// One side of the comparison: a server process and the path its transform is mapped at.
struct Side<'a> {
    name: &'static str,
    base: &'a str,
    pid: u32,
    path: &'static str,
}

/// One side's figures in one round; the per-request ones in µs and faults.
struct Figures {
    cpu_per_request: f64,
    user_per_request: f64,
    system_per_request: f64,
    faults_per_request: f64,
    rate: f64,
    failed: u64,
}

fn measure(side: &Side, body: &str, connections: usize, warmup: u64, seconds: u64) -> Figures {
    let load = Load {
        path: side.path,
        body,
        token: HOOK_TOKEN,
        headers: &[],
    };
    if warmup > 0 {
        drive(side.base, &load, connections, warmup);
    }
    let before = Usage::of(side.pid);
    let measured = drive(side.base, &load, connections, seconds);
    let spent = Usage::of(side.pid) - before;
    let requests = measured.requests.max(1) as f64;
    let micros = |time: Duration| time.as_secs_f64() * 1e6 / requests;
    Figures {
        cpu_per_request: micros(spent.user + spent.system),
        user_per_request: micros(spent.user),
        system_per_request: micros(spent.system),
        faults_per_request: spent.minor_faults as f64 / requests,
        rate: measured.rate,
        failed: measured.failed,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let rounds = env_number("JS_ROUNDS", 3).max(1);
    let warmup = env_number("WRK_WARMUP", 3);
    let seconds = env_number("WRK_SECONDS", 10);
    let connections = env_number("WRK_CONNECTIONS", 32) as usize;
    let component = build_js();
    let dir = hookgate_dir(&component);
    let (hookgate, hookgate_base, _) = start_hookgate(dir.path());
    let openclaw = OpenClaw::start();
    let sides = [
        Side {
            name: "OpenClaw (V8, in-process)",
            base: &openclaw.base,
            pid: openclaw.child.id(),
            path: "/hooks/title",
        },
        Side {
            name: "hookgate, instance kept",
            base: &hookgate_base,
            pid: hookgate.id(),
            path: "/hooks/title",
        },
        Side {
            name: "hookgate, fresh instance",
            base: &hookgate_base,
            pid: hookgate.id(),
            path: "/hooks/title-fresh",
        },
        Side {
            name: "hookgate, template (no JS)",
            base: &hookgate_base,
            pid: hookgate.id(),
            path: "/hooks/title-template",
        },
    ];
    let body = json!({"title": format!("a benchmark {SERIAL}"), "n": 1}).to_string();
    println!(
        "the same JavaScript transform, wrk -t2 -c{connections}: {warmup} s warm-up, {seconds} s \
         per side, {rounds} rounds; {}",
        machine()
    );
    println!(
        "{:<6} {:<28} {:>9} {:>7} {:>9} {:>9} {:>9} {:>10}",
        "round", "side", "req/s", "failed", "cpu/req", "user", "system", "faults/req"
    );
    // Per side, each round's CPU, user and system time and faults per request.
    let mut figures: Vec<[Vec<f64>; 4]> = (0..sides.len()).map(|_| Default::default()).collect();
    for round in 1..=rounds {
        for (i, side) in sides.iter().enumerate() {
            let f = measure(side, &body, connections, warmup, seconds);
            println!(
                "{round:<6} {:<28} {:>9.0} {:>7} {:>7.1}µs {:>7.1}µs {:>7.1}µs {:>10.1}",
                side.name,
                f.rate,
                f.failed,
                f.cpu_per_request,
                f.user_per_request,
                f.system_per_request,
                f.faults_per_request
            );
            assert_eq!(f.failed, 0, "{}: answers that were not 2xx", side.name);
            let row = [
                f.cpu_per_request,
                f.user_per_request,
                f.system_per_request,
                f.faults_per_request,
            ];
            for (column, value) in figures[i].iter_mut().zip(row) {
                column.push(value);
            }
        }
    }
    let medians: Vec<[f64; 4]> = figures
        .into_iter()
        .map(|columns| columns.map(median))
        .collect();
    for (side, [cpu, user, system, faults]) in sides.iter().zip(&medians) {
        println!(
            "median {:<28} {:>17.1}µs {user:>7.1}µs {system:>7.1}µs {faults:>10.1}",
            side.name, cpu
        );
    }
    let openclaw_cpu = medians[0][0];
    let floor = medians[3][0];
    println!(
        "{} / OpenClaw: {:.2} (the floor)",
        sides[3].name,
        floor / openclaw_cpu
    );
    for (i, target) in [(1, KEPT_TARGET), (2, FRESH_TARGET)] {
        let ratio = medians[i][0] / openclaw_cpu;
        let verdict = if ratio <= target { "met" } else { "NOT met" };
        // What the target leaves for the transform above the floor, and what it takes now.
        let room = target * openclaw_cpu - floor;
        let spent = medians[i][0] - floor;
        println!(
            "{} / OpenClaw: {ratio:.2} (target ≤ {target}: {verdict}; the transform {spent:.1}µs \
             above the floor, the target leaves {room:.1}µs)",
            sides[i].name
        );
    }
    drop(openclaw);
    stop(hookgate);
}
