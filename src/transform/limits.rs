//! The limits of one transform call, from `hooks.transformLimits` and a mapping's `transform`.

use std::time::Duration;

/// Core instances, memories and tables one component may need. Rust components are one core
/// module plus a few small shims; interpreted guests have more.
pub(super) const CORE_INSTANCES_PER_COMPONENT: u32 = 16;
pub(super) const MEMORIES_PER_COMPONENT: u32 = 2;
pub(super) const TABLES_PER_COMPONENT: u32 = 16;

/// Bounds on one call of a transform. Defaults suit small Rust transforms; interpreted guests
/// (JavaScript, Python) may need more memory and time for the same work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransformLimits {
    /// Running time from instantiation to the answer: the time the call runs, not its waits for
    /// a slot or a thread (see `guest_clock`); enforced at epoch ticks.
    pub timeout: Duration,
    /// Linear memory the instance may grow to, in bytes.
    pub memory_bytes: usize,
    /// The most bytes an outcome may carry (strings and bodies, summed).
    pub output_bytes: usize,
    /// What stdout, stderr and `log` together may write per call; more is a limit breach for
    /// stdout/stderr and is dropped for `log`.
    pub log_bytes: usize,
    /// Calls running at once; further requests wait for a slot.
    pub max_concurrent: u32,
    /// How many calls one instance serves (`transform.reuse` of a mapping): 1, the default, is
    /// a fresh instance for every call. More lets what a call leaves in the instance's memory
    /// (globals, caches, the JavaScript heap) reach the mapping's later calls.
    pub reuse: u32,
}

/// What a JavaScript module gets at least. The runtime (QuickJS, loaded at build time) works in
/// the defaults; 64 MiB is room for the JavaScript values of large payloads, and 1 s for an
/// interpreter, which runs the same work slower than compiled Rust.
const JAVASCRIPT_MEMORY_BYTES: usize = 64 * 1024 * 1024;
const JAVASCRIPT_TIMEOUT: Duration = Duration::from_secs(1);

/// A JavaScript module's instances serve their mapping's calls until one fails or the module or
/// the configuration changes, as the OpenClaw gateway keeps an imported module until a reload:
/// a fresh instance starts with the module loaded, but a request through one still costs about
/// 0.3 ms of CPU under load, against 0.2 ms through a kept one.
const JAVASCRIPT_REUSE: u32 = u32::MAX;

impl TransformLimits {
    /// These limits raised to what a JavaScript module needs (at least 64 MiB and 1 s), with
    /// instances kept between calls: the defaults of a mapping naming a JavaScript or TypeScript
    /// module, which its own `transform.limits` and `reuse` override.
    pub fn for_javascript(self) -> TransformLimits {
        TransformLimits {
            memory_bytes: self.memory_bytes.max(JAVASCRIPT_MEMORY_BYTES),
            timeout: self.timeout.max(JAVASCRIPT_TIMEOUT),
            reuse: JAVASCRIPT_REUSE,
            ..self
        }
    }
}

impl Default for TransformLimits {
    fn default() -> Self {
        TransformLimits {
            timeout: Duration::from_millis(100),
            memory_bytes: 16 * 1024 * 1024,
            output_bytes: 1024 * 1024,
            log_bytes: 16 * 1024,
            max_concurrent: 32,
            reuse: 1,
        }
    }
}
