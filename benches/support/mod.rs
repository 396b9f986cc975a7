//! What the benchmarks share: building the example transforms, and percentiles.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Builds the transforms for `wasm32-wasip2`; returns the directory of the `.wasm` files.
pub fn build_transforms() -> PathBuf {
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
    assert!(status.success(), "building the transforms failed");
    target.join("wasm32-wasip2/release")
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
