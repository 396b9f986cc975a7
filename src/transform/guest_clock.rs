//! The time a transform call is charged for, which its limit (`timeoutMs`) bounds: the call's
//! wall time from its first poll, less its waits for a turn on a worker thread after each epoch
//! yield. Neither the wait for a call slot (before the call) nor those turns count: on two cores
//! with spinning guests, a call that needs 2 ms may otherwise wait 100 ms for its turns and be
//! stopped for them. What counts is the guest's code, the host work done for it (instantiation,
//! copying its request and outcome), and any wait of its own (a WASI sleep, a blocking read).
//!
//! The store's epoch callback marks each yield ([`GuestClock::yielding`]) and interrupts the
//! guest at the first tick past its limit; [`Budgeted`], around the call's future, ends a yield's
//! wait when it is polled again, and stops a call that is past its limit while it is not running
//! (blocked in a host call), where no epoch tick reaches it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The charged time of one call. Shared by the call's future and its store.
#[derive(Debug, Default)]
pub struct GuestClock {
    inner: Mutex<Charges>,
}

#[derive(Debug, Default)]
struct Charges {
    /// The call's first poll.
    started: Option<Instant>,
    /// Turn waits that ended.
    uncharged: Duration,
    /// When the guest yielded, while it waits for its next turn.
    yielded_at: Option<Instant>,
}

impl GuestClock {
    pub fn new() -> Arc<GuestClock> {
        Arc::default()
    }

    /// The time charged so far.
    pub fn spent(&self) -> Duration {
        let charges = self.lock();
        let now = Instant::now();
        let waiting = charges.yielded_at.map_or(Duration::ZERO, |at| now - at);
        let Some(started) = charges.started else {
            return Duration::ZERO;
        };
        (now - started).saturating_sub(charges.uncharged + waiting)
    }

    /// The guest yields its thread: until its next poll, the time is not its own.
    pub fn yielding(&self) {
        self.lock().yielded_at = Some(Instant::now());
    }

    fn polled(&self) {
        let mut charges = self.lock();
        let now = Instant::now();
        charges.started.get_or_insert(now);
        if let Some(at) = charges.yielded_at.take() {
            charges.uncharged += now - at;
        }
    }

    fn is_yielding(&self) -> bool {
        self.lock().yielded_at.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Charges> {
        // Instants and durations: a panic elsewhere cannot leave them half-written.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The call ran past its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfTime;

/// A call's future, charged to a [`GuestClock`] and stopped when the clock passes `limit`
/// while the future waits on something other than its turn.
pub struct Budgeted<F: ?Sized> {
    clock: Arc<GuestClock>,
    limit: Duration,
    inner: Pin<Box<F>>,
    /// Made the first time the call waits on something other than its turn: most calls finish
    /// in their first poll, and never need one.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<F: Future + ?Sized> Budgeted<F> {
    /// `inner` comes boxed: a call's future is large, and is boxed where it is made rather than
    /// moved here first.
    pub fn new(clock: Arc<GuestClock>, limit: Duration, inner: Pin<Box<F>>) -> Self {
        Budgeted {
            clock,
            limit,
            inner,
            timer: None,
        }
    }
}

impl<F: Future + ?Sized> Future for Budgeted<F> {
    type Output = Result<F::Output, OutOfTime>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.clock.polled();
        if let Poll::Ready(output) = self.inner.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        if self.clock.is_yielding() {
            // The yield has woken the task already; the wait for its turn is not charged.
            return Poll::Pending;
        }
        let Some(left) = self.limit.checked_sub(self.clock.spent()) else {
            return Poll::Ready(Err(OutOfTime));
        };
        let deadline = tokio::time::Instant::now() + left;
        let timer = match &mut self.timer {
            Some(timer) => {
                timer.as_mut().reset(deadline);
                timer
            }
            None => self
                .timer
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(OutOfTime)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pending once, as a guest at an epoch yield is, then done.
    struct YieldOnce {
        clock: Arc<GuestClock>,
        yielded: bool,
    }

    impl Future for YieldOnce {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            if self.yielded {
                return Poll::Ready(());
            }
            self.yielded = true;
            self.clock.yielding();
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn the_wait_for_a_turn_after_a_yield_is_not_charged() {
        let clock = GuestClock::new();
        let call = YieldOnce {
            clock: Arc::clone(&clock),
            yielded: false,
        };
        let mut budgeted = Box::pin(Budgeted::new(
            Arc::clone(&clock),
            Duration::from_millis(100),
            Box::pin(call),
        ));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(budgeted.as_mut().poll(&mut cx).is_pending());
        // Other tasks hold the threads for longer than the whole limit.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(budgeted.as_mut().poll(&mut cx), Poll::Ready(Ok(())));
    }

    #[tokio::test]
    async fn a_wait_of_the_calls_own_is_charged_and_stopped_at_the_limit() {
        let clock = GuestClock::new();
        let blocked = std::future::pending::<()>();
        let outcome = Budgeted::new(
            Arc::clone(&clock),
            Duration::from_millis(50),
            Box::pin(blocked),
        )
        .await;
        assert_eq!(outcome, Err(OutOfTime));
        assert!(clock.spent() >= Duration::from_millis(50));
    }
}
