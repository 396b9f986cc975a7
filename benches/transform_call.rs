//! Per-request cost of a transform: instantiate + call + drop of the github example component,
//! the call alone on a kept instance (`transform.reuse`), and the same logic called as native
//! Rust, in one process. Median and p99 of each; the difference of the first two is what a fresh
//! instance costs. Run: `cargo bench --bench transform_call` (builds the transforms first).

use std::path::Path;
use std::time::Instant;

use hookgate::transform::{
    CompileCache, SlotShare, TransformEngine, TransformInput, TransformLimits,
};

mod support;
use support::{build_transforms, percentiles};

/// Calls measured; `TRANSFORM_CALLS` sets another count (more, to profile the loop).
const CALLS: usize = 5000;

fn main() {
    let calls: usize = std::env::var("TRANSFORM_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CALLS);
    let wasm = build_transforms().join("github.wasm");
    let body = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/payloads/github-push.json"),
    )
    .unwrap();
    let limits = TransformLimits::default();
    let engine = TransformEngine::new(&limits).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let loaded = engine
        .load_file(&wasm, &CompileCache::new(cache.path().to_path_buf()))
        .unwrap();
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
    let kept = TransformLimits {
        reuse: u32::MAX,
        ..limits
    };
    let time_calls = |limits: &TransformLimits| {
        let call = |input: TransformInput| {
            runtime.block_on(engine.call(&loaded, input, limits, SlotShare::Mapping))
        };
        // Warm up.
        for _ in 0..200 {
            call(input.clone()).unwrap();
        }
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let input = input.clone();
            let started = Instant::now();
            std::hint::black_box(call(input).unwrap());
            samples.push(started.elapsed());
        }
        samples
    };
    let fresh_samples = time_calls(&limits);
    let kept_samples = time_calls(&kept);
    let mut native_samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let payload: serde_json::Value =
            serde_json::from_slice(std::hint::black_box(&body)).unwrap();
        std::hint::black_box(github::describe("push", &payload));
        native_samples.push(started.elapsed());
    }
    let (wasm_p50, wasm_p99) = percentiles(fresh_samples);
    let (kept_p50, kept_p99) = percentiles(kept_samples);
    let (native_p50, native_p99) = percentiles(native_samples);
    println!(
        "github transform, {calls} calls, pooling allocator: {}",
        engine.pooled
    );
    println!("{:<42} {:>12} {:>12}", "", "median", "p99");
    println!(
        "{:<42} {:>12?} {:>12?}",
        "component: instantiate + call + drop", wasm_p50, wasm_p99
    );
    println!(
        "{:<42} {:>12?} {:>12?}",
        "component: call on a kept instance", kept_p50, kept_p99
    );
    println!(
        "{:<42} {:>12?} {:>12?}",
        "native Rust: parse + describe", native_p50, native_p99
    );
    println!(
        "{:<42} {:>11.1}x {:>11.1}x",
        "ratio of fresh to native",
        wasm_p50.as_secs_f64() / native_p50.as_secs_f64(),
        wasm_p99.as_secs_f64() / native_p99.as_secs_f64()
    );
}
