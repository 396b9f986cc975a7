//! A bound on work in progress whose size follows the configuration: the runner's
//! `agents.defaults.maxConcurrent` and the server's `gateway.maxConnections` are both reloaded
//! live through it.

use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A semaphore that can be resized while permits are held.
pub struct Slots {
    semaphore: Arc<Semaphore>,
    /// The permits in circulation: free ones plus held ones.
    size: Mutex<usize>,
}

impl Slots {
    pub fn new(size: usize) -> Slots {
        Slots {
            semaphore: Arc::new(Semaphore::new(size)),
            size: Mutex::new(size),
        }
    }

    /// Sets the number of slots. Growing takes effect at once; shrinking retires free slots now
    /// and, while too many are held, more on later calls as they come free (work in progress is
    /// never cut short). Costs a lock and, when the size changed, a semaphore update.
    pub fn resize(&self, wanted: usize) {
        let mut size = self.size.lock().unwrap_or_else(|p| p.into_inner());
        if wanted > *size {
            self.semaphore.add_permits(wanted - *size);
            *size = wanted;
        } else if wanted < *size {
            *size -= self.semaphore.forget_permits(*size - wanted);
        }
    }

    /// A free slot now, if there is one.
    pub fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.semaphore).try_acquire_owned().ok()
    }

    /// Waits for a free slot.
    pub async fn take(&self) -> OwnedSemaphorePermit {
        Arc::clone(&self.semaphore)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
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
            slots.try_take().is_some(),
            "not retired yet: the next resize does it"
        );
        slots.resize(1);
        drop(b);
        let held = slots.try_take();
        assert!(held.is_some());
        assert!(slots.try_take().is_none(), "one slot left");
        slots.resize(3);
        assert!(slots.try_take().is_some() && slots.try_take().is_some());
    }
}
