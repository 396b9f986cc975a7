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
    /// a slot or a thread (see `guest_clock`); enforced at epoch ticks while the guest runs, and
    /// by a timer while it is blocked in a host call.
    pub timeout: Duration,
    /// Linear memory the instance may grow to, in bytes: all its memories together, and no more
    /// than the engine's pool was sized for.
    pub memory_bytes: usize,
    /// The most bytes an outcome may carry (strings and bodies, summed).
    pub output_bytes: usize,
    /// What each of stdout, stderr and the `log` import may take in one call. Each has a budget
    /// of its own, so a call may write up to three times this in all. A `log` line costs its
    /// length plus what the host adds to it; lines past the budget are dropped and counted. On
    /// stdout or stderr, output that reaches the bound is an output limit breach, found when the
    /// guest fails at the refused write (a fresh instance; a guest that ignores the refusal goes
    /// on, its output cut) or when the call returns (a reused instance).
    pub log_bytes: usize,
    /// Calls running at once over all mappings, one mapping at most half of them (rounded up);
    /// a further call waits for a slot, for at most ten times `timeout` (at least a second).
    pub max_concurrent: u32,
    /// How many calls one instance serves (`transform.reuse` of a mapping): 1, the default, is
    /// a fresh instance for every call, but [`TransformLimits::for_javascript`] keeps
    /// instances. More lets what a call leaves in the instance's memory (globals, caches, the
    /// JavaScript heap) reach the mapping's later calls. An instance goes before that after a
    /// call that failed or was refused memory, when its output pipes are nearly full, and when
    /// idle instances already hold their share of the pool.
    pub reuse: u32,
}

/// What a JavaScript module gets at least. The runtime (QuickJS, loaded at build time) works in
/// the defaults; 64 MiB is room for the JavaScript values of large payloads, and 1 s for an
/// interpreter, which runs the same work slower than compiled Rust.
const JAVASCRIPT_MEMORY_BYTES: usize = 64 * 1024 * 1024;
const JAVASCRIPT_TIMEOUT: Duration = Duration::from_secs(1);

/// A JavaScript module's instances serve their mapping's calls until one fails (or another
/// reason of [`TransformLimits::reuse`] retires it) or the module or the configuration changes,
/// as the OpenClaw gateway keeps an imported module until a reload: a fresh instance starts
/// with the module loaded, but a request through one still costs about 0.3 ms of CPU under
/// load, against 0.2 ms through a kept one.
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

impl TransformLimits {
    /// The bounds of a call that `hooks.transformLimits` leaves unset: the one place they are
    /// written, which the configuration's schema and reference show.
    pub const DEFAULT: TransformLimits = TransformLimits {
        timeout: Duration::from_millis(100),
        memory_bytes: 16 * 1024 * 1024,
        output_bytes: 1024 * 1024,
        log_bytes: 16 * 1024,
        max_concurrent: 32,
        reuse: 1,
    };
}

impl Default for TransformLimits {
    fn default() -> Self {
        TransformLimits::DEFAULT
    }
}

impl TransformLimits {
    /// Each bound the larger of the two: what either grants.
    pub fn widest(self, other: TransformLimits) -> TransformLimits {
        TransformLimits {
            timeout: self.timeout.max(other.timeout),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
            output_bytes: self.output_bytes.max(other.output_bytes),
            log_bytes: self.log_bytes.max(other.log_bytes),
            max_concurrent: self.max_concurrent.max(other.max_concurrent),
            reuse: self.reuse.max(other.reuse),
        }
    }

    /// Each bound at most `ceiling`'s: these limits as far as `ceiling` grants them.
    pub fn within(self, ceiling: &TransformLimits) -> TransformLimits {
        TransformLimits {
            timeout: self.timeout.min(ceiling.timeout),
            memory_bytes: self.memory_bytes.min(ceiling.memory_bytes),
            output_bytes: self.output_bytes.min(ceiling.output_bytes),
            log_bytes: self.log_bytes.min(ceiling.log_bytes),
            max_concurrent: self.max_concurrent.min(ceiling.max_concurrent),
            reuse: self.reuse.min(ceiling.reuse),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_holds_each_bound_to_the_ceiling_and_widest_takes_the_larger() {
        let ceiling = TransformLimits::default().for_javascript();
        let asked = TransformLimits {
            timeout: Duration::from_secs(60),
            memory_bytes: 1 << 30,
            output_bytes: 1,
            ..TransformLimits::default()
        };
        let held = asked.within(&ceiling);
        assert_eq!(held.timeout, Duration::from_secs(1));
        assert_eq!(held.memory_bytes, 64 * 1024 * 1024);
        assert_eq!(held.output_bytes, 1, "a smaller bound stays");
        assert_eq!(asked.widest(ceiling).timeout, Duration::from_secs(60));
        assert_eq!(asked.widest(ceiling).output_bytes, 1024 * 1024);
    }
}
