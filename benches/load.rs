//! The load benchmark: hookgate against a bare axum server, in one run, on this machine.
//!
//! Starts a bare axum server that answers a small JSON POST with 200 (the baseline: what the
//! machine does over HTTP at all) and the real hookgate binary, drives both with the same client
//! at 1, 16 and 64 connections, and prints requests/s, p50 and p99 per case with the ratio to the
//! baseline; then peak RSS under load, idle RSS with 20 transforms loaded, and the time from start
//! to `listening` with 20 transforms, cold (no compile cache) and warm.
//!
//! Run: `cargo bench --bench load` (`LOAD_SECONDS=5` for longer cases, `LOAD_CASE=github` for
//! the cases whose name contains that text).

use std::path::Path;
use std::time::Duration;

use serde_json::json;

mod support;
use support::{
    Case, build_transforms, drive, load_seconds, rss_mib, serve_in_thread, start_hookgate, stop,
};

const HOOK_TOKEN: &str = "bench-hook-token-0123";
const GATEWAY_TOKEN: &str = "bench-gateway-token-0123";

fn cases() -> Vec<Case> {
    let push: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/payloads/github-push.json"),
        )
        .unwrap(),
    )
    .unwrap();
    vec![
        Case::wake(HOOK_TOKEN),
        Case::agent(HOOK_TOKEN),
        Case {
            name: "template mapping",
            path: "/hooks/deploy",
            body: json!({"service": "api", "version": "1.2"}),
            headers: vec![],
            token: HOOK_TOKEN,
        },
        Case {
            name: "github transform",
            path: "/hooks/github",
            body: push.clone(),
            headers: vec![("x-github-event", "push")],
            token: HOOK_TOKEN,
        },
        Case {
            name: "github, reuse 1000",
            path: "/hooks/github-reused",
            body: push,
            headers: vec![("x-github-event", "push")],
            token: HOOK_TOKEN,
        },
        Case {
            name: "wrong token",
            path: "/hooks/wake",
            body: json!({"text": "x"}),
            headers: vec![],
            token: "wrong-token",
        },
    ]
}

/// The bare axum server of the baseline.
fn start_baseline() -> String {
    serve_in_thread(
        axum::Router::new()
            .fallback(|_body: axum::body::Bytes| async { axum::Json(json!({"ok": true})) }),
    )
}

fn config(transforms: usize) -> serde_json::Value {
    let mut mappings = vec![
        json!({"id": "deploy", "match": {"path": "deploy"}, "action": "wake", "wakeMode": "next-heartbeat", "textTemplate": "Deployed {{service}} {{version}}"}),
        json!({"id": "github", "match": {"path": "github"}, "transform": {"module": "github.wasm"}, "wakeMode": "next-heartbeat"}),
        json!({"id": "github-reused", "match": {"path": "github-reused"}, "transform": {"module": "github.wasm", "reuse": 1000}, "wakeMode": "next-heartbeat"}),
    ];
    for i in 0..transforms {
        mappings.push(json!({"id": format!("t{i}"), "match": {"path": format!("t{i}")}, "transform": {"module": format!("t{i}.wasm")}}));
    }
    json!({
        "gateway": {"auth": {"token": GATEWAY_TOKEN}},
        "hooks": {"enabled": true, "token": HOOK_TOKEN, "mappings": mappings},
        // No heartbeats: the benchmark measures intake.
        "agents": {"defaults": {"heartbeat": {"every": "0"}}},
    })
}

/// A copy of `wasm` with a custom section appended, so that each copy has its own digest and is
/// compiled (and cached) on its own.
fn distinct_copy(wasm: &[u8], index: usize) -> Vec<u8> {
    let name = b"hookgate-bench";
    let payload = index.to_le_bytes();
    let size = 1 + name.len() + payload.len();
    let mut bytes = wasm.to_vec();
    bytes.extend([0u8, size as u8, name.len() as u8]);
    bytes.extend(name);
    bytes.extend(payload);
    bytes
}

fn prepare_dir(transforms: usize, wasm_dir: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hooks/transforms");
    std::fs::create_dir_all(&root).unwrap();
    let github = std::fs::read(wasm_dir.join("github.wasm")).unwrap();
    std::fs::write(root.join("github.wasm"), &github).unwrap();
    for i in 0..transforms {
        std::fs::write(root.join(format!("t{i}.wasm")), distinct_copy(&github, i)).unwrap();
    }
    std::fs::write(
        dir.path().join("hookgate.json5"),
        config(transforms).to_string(),
    )
    .unwrap();
    dir
}

fn main() {
    let seconds = load_seconds();
    let wasm_dir = build_transforms();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let baseline = start_baseline();
    let dir = prepare_dir(0, &wasm_dir);
    let (child, base, _) = start_hookgate(dir.path());
    let pid = child.id();

    println!("hookgate load benchmark: {seconds} s per case, client and servers on this machine");
    println!(
        "{:<18} {:>5} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "case", "conns", "req/s", "p50", "p99", "rate/base", "p99/base"
    );
    let baseline_case = Case {
        name: "baseline (axum)",
        path: "/",
        body: json!({"text": "x"}),
        headers: vec![],
        token: "-",
    };
    let mut summary = Vec::new();
    for connections in [1, 16, 64] {
        let (base_rate, base_p50, base_p99) =
            runtime.block_on(drive(&baseline, &baseline_case, connections, seconds));
        println!(
            "{:<18} {connections:>5} {base_rate:>10.0} {:>10.1?} {:>10.1?} {:>9} {:>9}",
            baseline_case.name, base_p50, base_p99, "1.00", "1.00"
        );
        let only = std::env::var("LOAD_CASE").ok();
        for case in cases()
            .into_iter()
            .filter(|c| only.as_deref().is_none_or(|o| c.name.contains(o)))
        {
            let (rate, p50, p99) = runtime.block_on(drive(&base, &case, connections, seconds));
            println!(
                "{:<18} {connections:>5} {rate:>10.0} {p50:>10.1?} {p99:>10.1?} {:>9.2} {:>9.2}",
                case.name,
                rate / base_rate,
                p99.as_secs_f64() / base_p99.as_secs_f64()
            );
            summary.push((
                case.name,
                connections,
                rate,
                rate / base_rate,
                p99.as_secs_f64() / base_p99.as_secs_f64(),
            ));
        }
    }
    let (_, peak) = rss_mib(pid);
    stop(child);

    let dir20 = prepare_dir(20, &wasm_dir);
    let (cold, _, cold_start) = start_hookgate(dir20.path());
    let cold_pid = cold.id();
    std::thread::sleep(Duration::from_secs(1));
    let (idle, _) = rss_mib(cold_pid);
    stop(cold);
    let (warm, _, warm_start) = start_hookgate(dir20.path());
    stop(warm);

    println!();
    println!("peak RSS under load:                     {peak:.1} MiB");
    println!("idle RSS with 20 transforms loaded:      {idle:.1} MiB");
    println!("start to listening, 20 transforms cold:  {cold_start:.0?}");
    println!("start to listening, 20 transforms warm:  {warm_start:.0?}");
    let at64 = |name: &str| {
        summary
            .iter()
            .find(|(n, c, ..)| *n == name && *c == 64)
            .copied()
    };
    if let (Some(wake), Some(github)) = (at64("/hooks/wake"), at64("github transform")) {
        println!();
        println!("targets (64 connections):");
        println!(
            "  /hooks/wake ≥ 60% of baseline:          {:.0}%",
            wake.3 * 100.0
        );
        println!(
            "  github transform ≥ 70% of /hooks/wake:  {:.0}%",
            github.2 / wake.2 * 100.0
        );
        println!("  p99 ≤ 5x baseline p99 (wake):           {:.1}x", wake.4);
        println!("  idle RSS ≤ 40 MiB:                      {idle:.1} MiB");
        println!("  warm start ≤ 300 ms:                    {warm_start:.0?}");
    }
}
