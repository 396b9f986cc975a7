//! How many dry runs run at once: one. A dry run renders and calls transforms on a blocking
//! thread for up to [`TIME_LIMIT`], so a second beside it would take the other core of a small
//! host from the live path; it is answered 429 with the time the running one has left.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a dry run tries requests: at it, the request being tried is left untried (its
/// transform call stopped) and the answer says so (`stopped: "timeLimit"`, and `next` to
/// continue with that request).
pub const TIME_LIMIT: Duration = Duration::from_secs(30);

/// The one dry run that may run: its deadline, while it runs.
#[derive(Debug, Default, Clone)]
pub struct DryRunGate {
    running: Arc<Mutex<Option<Instant>>>,
}

/// A dry run let through the gate, until it is dropped; it goes with the dry run's work to its
/// blocking thread, so the gate stays shut until that work ends, even when the client has left.
#[derive(Debug)]
pub struct Admitted {
    gate: DryRunGate,
    /// When the dry run stops trying requests.
    pub deadline: Instant,
}

/// Another dry run is running; it ends within `retry_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    pub retry_after: Duration,
}

impl DryRunGate {
    /// Lets a dry run through, with `limit` to try requests in, unless one is running.
    pub fn admit(&self, limit: Duration) -> Result<Admitted, Busy> {
        let now = Instant::now();
        let mut running = self.lock();
        if let Some(deadline) = *running {
            return Err(Busy {
                retry_after: deadline.saturating_duration_since(now),
            });
        }
        let deadline = now + limit;
        *running = Some(deadline);
        Ok(Admitted {
            gate: self.clone(),
            deadline,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        *self.gate.lock() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_dry_run_at_a_time_and_the_next_is_told_when_to_come_back() {
        let gate = DryRunGate::default();
        let first = gate.admit(TIME_LIMIT).unwrap();
        let busy = gate.admit(TIME_LIMIT).unwrap_err();
        assert!(busy.retry_after <= TIME_LIMIT);
        assert!(busy.retry_after > TIME_LIMIT / 2);
        drop(first);
        assert!(gate.admit(TIME_LIMIT).is_ok());
    }
}
