//! Work shared between the cluster's nodes: agent runs, heartbeats and deliveries, each taken
//! from a durable pull consumer and acknowledged only once its outcome is on the stream.
//!
//! A node pulls only as many messages as it has free slots, so work spreads over the nodes that
//! have capacity. While a message is being worked on the node tells the server so (an
//! in-progress ack) every two seconds; a node that dies stops doing that, and the
//! server hands the message to another node once the ack wait has passed. Every step publishes
//! its outcome under a message id of its own before it acks, so a step repeated after such a
//! handover changes nothing twice.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};

use super::Cluster;

/// How long a worker waits before pulling again after the cluster failed it.
pub(super) const RETRY: Duration = Duration::from_secs(1);

/// How long a stopping node lets the work in hand finish before handing it back.
pub(super) const FINISH_GRACE: Duration = Duration::from_secs(3);

/// How long a worker waits for its view to show what a message refers to.
pub(super) const VIEW_WAIT: Duration = Duration::from_secs(10);

/// The work a node has in hand, so that a stopping node can hand it back instead of leaving it
/// to the ack wait (five minutes past the run timeout by default) on every rolling restart.
#[derive(Clone)]
pub struct InFlight {
    stop: Arc<tokio::sync::watch::Sender<bool>>,
    active: Arc<tokio::sync::watch::Sender<usize>>,
}

/// Counts one message in hand until dropped.
pub(super) struct Entered(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Entered {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight {
            stop: Arc::new(tokio::sync::watch::channel(false).0),
            active: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }
}

impl InFlight {
    pub(super) fn enter(&self) -> Entered {
        self.active.send_modify(|n| *n += 1);
        Entered(Arc::clone(&self.active))
    }

    /// Resolves once [`InFlight::hand_back`] has begun.
    pub(super) async fn stopping(&self) {
        let mut stop = self.stop.subscribe();
        let _ = stop.wait_for(|stop| *stop).await;
    }

    /// Has every message in hand given back to the server (its work dropped), waiting at most
    /// `limit` for the hand-backs to be sent.
    pub async fn hand_back(&self, limit: Duration) {
        self.stop.send_replace(true);
        let mut active = self.active.subscribe();
        let _ = tokio::time::timeout(limit, active.wait_for(|n| *n == 0)).await;
    }
}

/// Runs `work` while telling the server every [`Cluster::progress_every`] that `message` is
/// still being worked on (and calling `refresh`, to keep a lock alive as long).
pub(super) async fn with_progress<T, R: Future<Output = ()>>(
    cluster: &Cluster,
    message: &Message,
    refresh: impl Fn() -> R,
    work: impl Future<Output = T>,
) -> T {
    let every = cluster.progress_every();
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tokio::pin!(work);
    loop {
        tokio::select! {
            value = &mut work => return value,
            _ = ticks.tick() => {
                if let Err(err) = message.ack_with(AckKind::Progress).await {
                    tracing::warn!(%err, "cannot extend the ack wait");
                }
                refresh().await;
            }
        }
    }
}

/// The stream sequence and delivery count of a message from a consumer.
pub(super) fn position(message: &Message) -> (u64, i64) {
    message
        .info()
        .map_or((0, 1), |info| (info.stream_sequence, info.delivered))
}

/// Lets the server offer `message` again after `delay`.
pub(super) async fn later(message: &Message, delay: Duration) {
    if let Err(err) = message.ack_with(AckKind::Nak(Some(delay))).await {
        tracing::warn!(%err, "cannot hand work back");
    }
}

pub(super) async fn done(message: &Message) {
    if let Err(err) = message.ack().await {
        tracing::warn!(%err, "cannot acknowledge work");
    }
}

/// Milliseconds until the next multiple of `every` since the epoch, and that multiple's index:
/// every node's periodic heartbeat request of one period then has the same message id.
pub(super) fn next_period(every: Duration, now_ms: i64) -> (Duration, i64) {
    let every_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX).max(1);
    let index = now_ms / every_ms + 1;
    let wait = index.saturating_mul(every_ms).saturating_sub(now_ms);
    (
        Duration::from_millis(u64::try_from(wait).unwrap_or(0)),
        index,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_aligned_to_the_clock() {
        let every = Duration::from_secs(60);
        assert_eq!(next_period(every, 0), (every, 1));
        assert_eq!(
            next_period(every, 59_000),
            (Duration::from_secs(1), 1),
            "two nodes in one period name the same period"
        );
        assert_eq!(next_period(every, 60_000), (every, 2));
    }
}
