//! How intake and a backend's workers tell each other that there is work: a run queued, an
//! outbox row ready, a heartbeat wanted, a stop begun. Signals carry no data; the store does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Requests closer together than this make one heartbeat.
pub const COALESCE: Duration = Duration::from_millis(250);

/// Asks for a heartbeat. Cheap to clone.
#[derive(Clone, Default)]
pub struct HeartbeatTrigger {
    notify: Arc<Notify>,
}

impl HeartbeatTrigger {
    /// Requests a heartbeat soon; many requests in a short time make one.
    pub fn request(&self) {
        self.notify.notify_one();
    }

    /// Waits for a request, then for the rest of its window: requests arriving within
    /// [`COALESCE`] are absorbed by the heartbeat this returns for (`Notify` keeps at most one
    /// permit, which the second wait consumes).
    pub async fn requested(&self) {
        self.notify.notified().await;
        tokio::time::sleep(COALESCE).await;
        let _ = tokio::time::timeout(Duration::ZERO, self.notify.notified()).await;
    }
}

/// The signals of one backend.
#[derive(Default)]
pub struct Signals {
    /// A run was queued ([`Signals::run_queued`]), or a session key became free.
    pub runs_queued: Notify,
    /// How many times a run was queued: a run started at admission, which saw none queued,
    /// wakes the runner at its end only when this moved meanwhile.
    queued: AtomicU64,
    /// The outbox has something new.
    pub outbox_ready: Notify,
    /// A callback or a lifecycle webhook was written to the outbox.
    pub webhooks_ready: Notify,
    /// A batch opened: the batch closer looks again when the next one ends.
    pub batch_opened: Notify,
    pub heartbeat: HeartbeatTrigger,
    stopping: AtomicBool,
}

impl Signals {
    /// Tells the runner that a run was queued. Every path that queues a run says so here, after
    /// its commit.
    pub fn run_queued(&self) {
        self.queued.fetch_add(1, Ordering::SeqCst);
        self.runs_queued.notify_one();
    }

    /// How many times a run was queued so far.
    pub fn queued_count(&self) -> u64 {
        self.queued.load(Ordering::SeqCst)
    }

    /// Marks the stop: workers finish what they hold and take nothing new.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.outbox_ready.notify_one();
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}
