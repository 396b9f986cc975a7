//! The limits of one transform call, from `hooks.transformLimits` and a mapping's `transform`.

use std::time::Duration;

/// Core instances, memories and tables one component may need. Rust components are one core
/// module plus a few small shims; interpreted guests have more.
pub(super) const CORE_INSTANCES_PER_COMPONENT: u32 = 16;
pub(super) const MEMORIES_PER_COMPONENT: u32 = 2;
pub(super) const TABLES_PER_COMPONENT: u32 = 16;

/// Bounds on one call of a transform. Defaults suit small Rust transforms; interpreted guests
/// (JavaScript, Python) need more memory and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransformLimits {
    /// Wall time from instantiation to the answer; enforced by epoch interruption.
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
