//! Instances kept between the calls of one mapping (`transform.reuse`), and the count that keeps
//! idle ones within their share of the instance pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::Store;

use super::contract::TransformInstance;
use super::host::HostState;

/// An instance kept between the calls of one mapping (`transform.reuse`), with its store.
pub(crate) struct WarmInstance {
    pub(super) store: Store<HostState>,
    pub(super) instance: TransformInstance,
    pub(super) calls: u32,
    /// The limits its store was made with: only a call with the same limits takes it.
    pub(super) made_for: WarmLimits,
}

/// The limits a kept instance's store holds for all its calls: the memory cap of its limiter and
/// the size of its output pipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WarmLimits {
    pub(super) memory_cap: usize,
    pub(super) log_bytes: usize,
}

/// An instance waiting for its mapping's next call, counted as idle for as long as it waits:
/// until a call takes it, or until it is dropped with its module's version on a reload.
pub(crate) struct IdleInstance {
    pub(super) instance: WarmInstance,
    pub(super) _count: IdleCount,
}

/// One unit of the engine's idle count, given back when dropped, so the count cannot drift
/// from the instances that exist.
pub(super) struct IdleCount(Arc<AtomicUsize>);

impl IdleCount {
    /// A unit of `count`, unless it already holds `max`.
    pub(super) fn claim(count: &Arc<AtomicUsize>, max: usize) -> Option<IdleCount> {
        count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| IdleCount(Arc::clone(count)))
    }
}

impl Drop for IdleCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_count_never_passes_its_max_and_follows_drops() {
        let count = Arc::new(AtomicUsize::new(0));
        let first = IdleCount::claim(&count, 2).unwrap();
        let second = IdleCount::claim(&count, 2).unwrap();
        assert!(IdleCount::claim(&count, 2).is_none());
        drop(first);
        assert_eq!(count.load(Ordering::SeqCst), 1);
        let third = IdleCount::claim(&count, 2);
        assert!(third.is_some());
        drop((second, third));
        assert_eq!(count.load(Ordering::SeqCst), 0);
    }
}
