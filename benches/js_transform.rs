//! A JavaScript transform against the Rust github transform, in one run: the component's size, its
//! build time, the server's start with it cold (compiled) and warm (from the cache), and
//! requests/s and latencies of the same GitHub `issues` delivery through each, which both turn
//! into an agent run; the JavaScript one also with `transform.reuse`.
//!
//! Run: `cargo bench --bench js_transform` (`LOAD_SECONDS=5` for longer cases). Needs Node.js;
//! runs `npm ci` in `transforms/js-sdk` when its packages are missing.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::json;

mod support;
use support::{Case, build_transforms, drive, load_seconds, start_hookgate, stop};

const HOOK_TOKEN: &str = "bench-hook-token-0123";
const GATEWAY_TOKEN: &str = "bench-gateway-token-0123";

/// Builds the JavaScript example into `out` with the SDK; returns how long the build took.
fn build_js(out: &Path) -> std::time::Duration {
    let transforms = Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms");
    let sdk = transforms.join("js-sdk");
    if !sdk.join("node_modules").is_dir() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&sdk)
            .status()
            .expect("npm");
        assert!(status.success(), "npm ci failed");
    }
    let started = Instant::now();
    let status = Command::new("node")
        .arg(sdk.join("build.mjs"))
        .arg(transforms.join("js-example/github-issues-digest.mjs"))
        .arg("-o")
        .arg(out)
        .status()
        .expect("node");
    assert!(status.success(), "building the JavaScript transform failed");
    started.elapsed()
}

fn prepare_dir(wasm_dir: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hooks/transforms");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(wasm_dir.join("github.wasm"), root.join("github.wasm")).unwrap();
    let js_build = build_js(&root.join("issues.wasm"));
    println!("SDK build of the example:                  {js_build:.1?}");
    let limits = json!({"memoryBytes": 64 * 1024 * 1024, "timeoutMs": 1000});
    let config = json!({
        "gateway": {"auth": {"token": GATEWAY_TOKEN}},
        "hooks": {"enabled": true, "token": HOOK_TOKEN, "mappings": [
            {"id": "rust", "match": {"path": "rust"}, "wakeMode": "next-heartbeat",
             "transform": {"module": "github.wasm"}},
            {"id": "js", "match": {"path": "js"}, "wakeMode": "next-heartbeat",
             "transform": {"module": "issues.wasm", "limits": limits}},
            {"id": "js-reused", "match": {"path": "js-reused"}, "wakeMode": "next-heartbeat",
             "transform": {"module": "issues.wasm", "limits": limits, "reuse": 1000}},
        ]},
        "agents": {"defaults": {"heartbeat": {"every": "0"}}},
    });
    std::fs::write(dir.path().join("hookgate.json5"), config.to_string()).unwrap();
    dir
}

fn size_mib(path: &Path) -> f64 {
    std::fs::metadata(path).map_or(f64::NAN, |m| m.len() as f64 / (1024.0 * 1024.0))
}

fn main() {
    let seconds = load_seconds();
    let wasm_dir = build_transforms();
    let dir = prepare_dir(&wasm_dir);
    let root = dir.path().join("hooks/transforms");
    println!(
        "component size: JavaScript {:.1} MiB, Rust {:.2} MiB",
        size_mib(&root.join("issues.wasm")),
        size_mib(&root.join("github.wasm"))
    );
    let (cold, _, cold_start) = start_hookgate(dir.path());
    stop(cold);
    let (warm, base, warm_start) = start_hookgate(dir.path());
    println!("start to listening, both transforms cold:  {cold_start:.1?}");
    println!("start to listening, both transforms warm:  {warm_start:.1?}");

    let issues: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/payloads/github-issues.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let case = |name, path| Case {
        name,
        path,
        body: issues.clone(),
        headers: vec![("x-github-event", "issues")],
        token: HOOK_TOKEN,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "{:<22} {:>5} {:>10} {:>10} {:>10} {:>9}",
        "case", "conns", "req/s", "p50", "p99", "rate/rust"
    );
    for connections in [1, 16] {
        let mut rust_rate = f64::NAN;
        for case in [
            case("rust github (issues)", "/hooks/rust"),
            case("js issues digest", "/hooks/js"),
            case("js, reuse 1000", "/hooks/js-reused"),
        ] {
            let (rate, p50, p99) = runtime.block_on(drive(&base, &case, connections, seconds));
            if case.path == "/hooks/rust" {
                rust_rate = rate;
            }
            println!(
                "{:<22} {connections:>5} {rate:>10.0} {p50:>10.1?} {p99:>10.1?} {:>9.2}",
                case.name,
                rate / rust_rate
            );
        }
    }
    stop(warm);
}
