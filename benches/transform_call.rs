//! Per-request cost of a transform: instantiate + call + drop of the github example component,
//! against the same logic called as native Rust, in one process. Median and p99 of each, and
//! their ratio. Run: `cargo bench --bench transform_call` (builds the transforms first).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hookgate::transform::{TransformEngine, TransformInput, TransformLimits};

const CALLS: usize = 5000;

fn build_transforms() -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms");
    let target = root.join("target");
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
    assert!(status.success());
    target.join("wasm32-wasip2/release")
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

fn main() {
    let wasm = build_transforms().join("github.wasm");
    let body = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/payloads/github-push.json"),
    )
    .unwrap();
    let limits = TransformLimits::default();
    let engine = TransformEngine::new(&limits).unwrap();
    let loaded = engine.load_file(&wasm).unwrap();
    let input = TransformInput {
        name: "github".into(),
        headers: vec![("x-github-event".into(), "push".into())],
        body: body.clone(),
        mapping_id: "github".into(),
        ..Default::default()
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let call = |input: TransformInput| runtime.block_on(engine.call(&loaded, input, &limits));
    // Warm up.
    for _ in 0..200 {
        call(input.clone()).unwrap();
    }
    let mut wasm_samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let input = input.clone();
        let started = Instant::now();
        std::hint::black_box(call(input).unwrap());
        wasm_samples.push(started.elapsed());
    }
    let mut native_samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        let payload: serde_json::Value =
            serde_json::from_slice(std::hint::black_box(&body)).unwrap();
        std::hint::black_box(github::describe("push", &payload));
        native_samples.push(started.elapsed());
    }
    let (wasm_p50, wasm_p99) = percentiles(wasm_samples);
    let (native_p50, native_p99) = percentiles(native_samples);
    println!(
        "github transform, {CALLS} calls, pooling allocator: {}",
        engine.pooled
    );
    println!("{:<42} {:>12} {:>12}", "", "median", "p99");
    println!(
        "{:<42} {:>12?} {:>12?}",
        "component: instantiate + call + drop", wasm_p50, wasm_p99
    );
    println!(
        "{:<42} {:>12?} {:>12?}",
        "native Rust: parse + describe", native_p50, native_p99
    );
    println!(
        "{:<42} {:>11.1}x {:>11.1}x",
        "ratio",
        wasm_p50.as_secs_f64() / native_p50.as_secs_f64(),
        wasm_p99.as_secs_f64() / native_p99.as_secs_f64()
    );
}
