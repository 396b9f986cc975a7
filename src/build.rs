//! What this binary is: its version, the commit it was built from and the wasmtime it embeds
//! (set by `build.rs`), for `hookgate --version` and the `hookgate_build_info` metric.

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit built, 12 hex digits, or `unknown` when built outside a git checkout.
pub const GIT_COMMIT: &str = env!("HOOKGATE_GIT_COMMIT");
/// The wasmtime version Cargo.lock pins.
pub const WASMTIME_VERSION: &str = env!("HOOKGATE_WASMTIME_VERSION");
/// `0.1.0 (commit 0123456789ab, wasmtime 48.0.8)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HOOKGATE_GIT_COMMIT"),
    ", wasmtime ",
    env!("HOOKGATE_WASMTIME_VERSION"),
    ")"
);
