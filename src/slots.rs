//! A bound on work in progress whose size follows the configuration: the runner's
//! `agents.defaults.maxConcurrent` and the server's `gateway.maxConnections` are both reloaded
//! live through it.

use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A semaphore that can be resized while permits are held.
pub struct Slots {
    semaphore: Arc<Semaphore>,
    sizes: Mutex<Sizes>,
}

struct Sizes {
    /// Permits in circulation: free ones plus held ones.
    current: usize,
    /// What [`Slots::resize`] asked for; `current` comes down to it as permits come back.
    wanted: usize,
}

impl Slots {
    pub fn new(size: usize) -> Slots {
        Slots {
            semaphore: Arc::new(Semaphore::new(size)),
            sizes: Mutex::new(Sizes {
                current: size,
                wanted: size,
            }),
        }
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, Sizes> {
        self.sizes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the number of slots. Growing takes effect at once; shrinking retires free slots now
    /// and the rest as they are next taken (work in progress is never cut short, and a busy
    /// server whose every freed slot is taken at once still comes down). Costs a lock and, when
    /// the size changed, a semaphore update.
    pub fn resize(&self, wanted: usize) {
        let mut sizes = self.sizes();
        sizes.wanted = wanted;
        if wanted > sizes.current {
            self.semaphore.add_permits(wanted - sizes.current);
            sizes.current = wanted;
        } else if wanted < sizes.current {
            sizes.current -= self.semaphore.forget_permits(sizes.current - wanted);
        }
    }

    /// Slots free now (a snapshot: another task may take one at once).
    pub fn free(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// How many held slots must come back before one can be taken: 0 while one is free, 1 when
    /// every slot is held, more while a shrink is retiring the slots that come back (a snapshot,
    /// like [`Slots::free`]). Costs a lock.
    pub fn shortfall(&self) -> usize {
        let sizes = self.sizes();
        let retiring = sizes.current.saturating_sub(sizes.wanted);
        (retiring + 1).saturating_sub(self.semaphore.available_permits())
    }

    /// Keeps `permit` unless there are more slots than wanted; then retires it instead.
    fn keep(&self, permit: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
        let mut sizes = self.sizes();
        if sizes.current > sizes.wanted {
            permit.forget();
            sizes.current -= 1;
            return None;
        }
        Some(permit)
    }

    /// A free slot now, if there is one.
    pub fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        loop {
            let permit = Arc::clone(&self.semaphore).try_acquire_owned().ok()?;
            if let Some(permit) = self.keep(permit) {
                return Some(permit);
            }
        }
    }

    /// Waits for a free slot.
    pub async fn take(&self) -> OwnedSemaphorePermit {
        loop {
            let permit = Arc::clone(&self.semaphore)
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            if let Some(permit) = self.keep(permit) {
                return permit;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinking_waits_for_held_slots_and_growing_is_immediate() {
        let slots = Slots::new(2);
        let (a, b) = (slots.try_take().unwrap(), slots.try_take().unwrap());
        slots.resize(1);
        drop(a);
        assert!(
            slots.try_take().is_none(),
            "the freed slot is retired when next taken"
        );
        drop(b);
        let held = slots.try_take();
        assert!(held.is_some());
        assert!(slots.try_take().is_none(), "one slot left");
        slots.resize(3);
        assert!(slots.try_take().is_some() && slots.try_take().is_some());
    }

    #[test]
    fn the_shortfall_counts_the_slots_a_shrink_retires() {
        let slots = Slots::new(3);
        assert_eq!(slots.shortfall(), 0);
        let held: Vec<_> = (0..3).filter_map(|_| slots.try_take()).collect();
        assert_eq!(slots.shortfall(), 1);
        slots.resize(1);
        assert_eq!(slots.shortfall(), 3, "two to retire, then one to take");
        drop(held);
        assert_eq!(slots.shortfall(), 0);
        let last = slots.try_take();
        assert!(
            last.is_some() && slots.try_take().is_none(),
            "one slot left"
        );
    }
}
