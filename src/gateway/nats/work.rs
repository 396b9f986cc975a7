//! Work shared between the cluster's nodes: agent runs, heartbeats and deliveries, each taken
//! from a durable pull consumer and acknowledged only once its outcome is on the stream.
//!
//! A node pulls only as many messages as it has free slots, so work spreads over the nodes that
//! have capacity. While a message is being worked on the node tells the server so (an
//! in-progress ack) every third of the ack wait; a node that dies stops doing that, and the
//! server hands the message to another node once the ack wait has passed. Every step publishes
//! its outcome under a message id of its own before it acks, so a step repeated after such a
//! handover changes nothing twice.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use futures_util::StreamExt;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::{Cluster, Fact, RUNNER_MAX_DELIVER};
use crate::gateway::runner::{Conclusion, conclude, turn};
use crate::gateway::runs::{self, RunOutcome};
use crate::gateway::runtime::{Runtime, now_rfc3339};

/// How long a worker waits before pulling again after the cluster failed it.
const RETRY: Duration = Duration::from_secs(1);

/// How long a pull waits for messages before asking again.
const PULL_EXPIRES: Duration = Duration::from_secs(5);

/// How long a worker waits for its view to show what a message refers to.
const VIEW_WAIT: Duration = Duration::from_secs(10);

/// Starts the projection and the workers of a node on the cluster.
pub fn start_workers(
    runtime: &Arc<Runtime>,
    cluster: &Cluster,
) -> Vec<(&'static str, JoinHandle<()>)> {
    let slots = runtime.config.current().runtime.max_concurrent;
    let runner = {
        let (runtime, cluster) = (Arc::clone(runtime), cluster.clone());
        consume(cluster.clone(), "runner", slots, move |message| {
            run(Arc::clone(&runtime), cluster.clone(), message)
        })
    };
    let heartbeat = {
        let (runtime, cluster) = (Arc::clone(runtime), cluster.clone());
        consume(cluster.clone(), "heartbeat", 1, move |message| {
            super::dispatch::beat(Arc::clone(&runtime), cluster.clone(), message)
        })
    };
    let delivery = {
        let (runtime, cluster) = (Arc::clone(runtime), cluster.clone());
        consume(cluster.clone(), "delivery", slots, move |message| {
            super::dispatch::deliver(Arc::clone(&runtime), cluster.clone(), message)
        })
    };
    vec![
        (
            "projection",
            tokio::spawn(super::project(cluster.clone(), runtime.store.clone())),
        ),
        ("runner", tokio::spawn(runner)),
        ("heartbeat", tokio::spawn(heartbeat)),
        ("delivery", tokio::spawn(delivery)),
        (
            "heartbeat-clock",
            tokio::spawn(super::dispatch::clock(Arc::clone(runtime), cluster.clone())),
        ),
    ]
}

/// Pulls from consumer `name` at most `slots` messages at a time and hands each to `handle` in
/// a task of its own, until the process ends.
async fn consume<F, Fut>(cluster: Cluster, name: &'static str, slots: usize, handle: F)
where
    F: Fn(Message) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(slots));
    loop {
        let consumer = match cluster.consumer(name).await {
            Ok(consumer) => consumer,
            Err(err) => {
                tracing::warn!(%err, "cannot pull work");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        loop {
            // Wait for a free slot before asking for work, then ask for as many as are free.
            let Ok(first) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            let mut permits = vec![first];
            while let Ok(permit) = Arc::clone(&slots).try_acquire_owned() {
                permits.push(permit);
            }
            let batch = consumer
                .batch()
                .max_messages(permits.len())
                .expires(PULL_EXPIRES)
                .messages()
                .await;
            let mut batch = match batch {
                Ok(batch) => batch,
                Err(err) => {
                    tracing::warn!(%err, consumer = name, "cannot pull work");
                    tokio::time::sleep(RETRY).await;
                    break;
                }
            };
            let reconnection = cluster.reconnection();
            tokio::pin!(reconnection);
            loop {
                let message = tokio::select! {
                    message = batch.next() => message,
                    () = &mut reconnection => None,
                };
                let Some(message) = message else { break };
                let message = match message {
                    Ok(message) => message,
                    Err(err) => {
                        tracing::debug!(%err, consumer = name, "pull ended");
                        break;
                    }
                };
                let Some(permit) = permits.pop() else { break };
                let work = handle(message);
                tokio::spawn(async move {
                    work.await;
                    drop(permit);
                });
            }
        }
    }
}

/// Runs `work` while telling the server every third of the ack wait that `message` is still
/// being worked on (and calling `refresh`, to keep a lock alive as long).
pub(super) async fn with_progress<T, R: Future<Output = ()>>(
    cluster: &Cluster,
    message: &Message,
    refresh: impl Fn() -> R,
    work: impl Future<Output = T>,
) -> T {
    let every = (cluster.ack_wait / 3).max(Duration::from_millis(500));
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

/// One agent run from the runner consumer: never two of one session key at once in the
/// cluster, and never again once its outcome is on the stream.
async fn run(runtime: Arc<Runtime>, cluster: Cluster, message: Message) {
    let (sequence, delivered) = position(&message);
    let Ok(Fact::Run { run }) = serde_json::from_slice::<Fact>(&message.payload) else {
        tracing::warn!(
            sequence,
            "the runner consumer got something other than a run"
        );
        return done(&message).await;
    };
    cluster.wait_applied(sequence, VIEW_WAIT).await;
    let run_id = run.run_id.clone();
    let found = runtime
        .store
        .read(move |conn| runs::work(conn, &run_id))
        .await;
    let work = match found {
        Ok(Some((status, work))) if status == "queued" || status == "running" => work,
        Ok(Some(_)) => return done(&message).await,
        Ok(None) | Err(_) => return later(&message, RETRY).await,
    };
    let lock = SessionLock::new(&cluster, &work.session_key, &work.run_id);
    if !lock.take().await {
        if delivered < RUNNER_MAX_DELIVER {
            // Its session has a run in progress elsewhere: offered again, later each time.
            let delay = Duration::from_millis(250 * u64::try_from(delivered).unwrap_or(1));
            return later(&message, delay.min(Duration::from_secs(5))).await;
        }
        let outcome = RunOutcome {
            status: "error".into(),
            reply: None,
            summary: None,
            error: Some("its session key stayed busy; given up".into()),
            finished_at: now_rfc3339(),
        };
        let conclusion = conclude(&runtime, &work, outcome).await;
        if publish_outcome(&cluster, &work.run_id, conclusion).await {
            done(&message).await;
        }
        return;
    }
    let started = Fact::Started {
        run_id: work.run_id.clone(),
        started_at: now_rfc3339(),
    };
    let started_id = format!("started-{}-{delivered}", work.run_id);
    if let Err(err) = cluster.publish(&started, &started_id).await {
        tracing::warn!(%err, run_id = %work.run_id, "cannot record the start of a run");
        lock.release().await;
        return later(&message, RETRY).await;
    }
    let outcome = with_progress(&cluster, &message, || lock.refresh(), turn(&runtime, &work)).await;
    let conclusion = conclude(&runtime, &work, outcome).await;
    let wakes_now = conclusion.wakes_now(&work);
    if !publish_outcome(&cluster, &work.run_id, conclusion).await {
        // Not acknowledged: the server offers the run again after the ack wait.
        return;
    }
    lock.release().await;
    done(&message).await;
    if wakes_now {
        if let Err(err) = cluster.request_beat().await {
            tracing::warn!(%err, "cannot request a heartbeat");
        }
    }
}

/// Publishes a run's outcome under an id of its own (a repeat is dropped); whether it landed.
async fn publish_outcome(cluster: &Cluster, run_id: &str, conclusion: Conclusion) -> bool {
    let fact = Fact::Finished {
        run_id: run_id.to_string(),
        outcome: conclusion.outcome,
        delivery: conclusion.delivery,
        summary: conclusion.summary_now,
        job: conclusion.job,
    };
    match cluster.publish(&fact, &format!("finished-{run_id}")).await {
        Ok(_) => true,
        Err(err) => {
            tracing::error!(%err, %run_id, "cannot record the run's outcome");
            false
        }
    }
}

/// A session key's run in progress, for the whole cluster: a key in the locks bucket whose
/// value is the run's id. It expires with the ack wait unless refreshed, so a dead node's lock
/// ends when its run is handed to another node; that node, holding the same run, takes it over.
struct SessionLock<'a> {
    cluster: &'a Cluster,
    key: String,
    run_id: &'a str,
}

impl<'a> SessionLock<'a> {
    fn new(cluster: &'a Cluster, session_key: &str, run_id: &'a str) -> Self {
        use sha2::Digest;
        let key = hex::encode(sha2::Sha256::digest(session_key.as_bytes()));
        SessionLock {
            cluster,
            key,
            run_id,
        }
    }

    /// Whether the session is now this run's.
    async fn take(&self) -> bool {
        let bucket = &self.cluster.buckets.locks;
        if bucket
            .create(&self.key, self.run_id.to_string().into())
            .await
            .is_ok()
        {
            return true;
        }
        match bucket.get(&self.key).await {
            Ok(Some(holder)) if holder == self.run_id.as_bytes() => {
                self.refresh().await;
                true
            }
            _ => false,
        }
    }

    async fn refresh(&self) {
        let value = self.run_id.to_string().into();
        if let Err(err) = self.cluster.buckets.locks.put(&self.key, value).await {
            tracing::warn!(%err, "cannot refresh a session lock");
        }
    }

    async fn release(&self) {
        let bucket = &self.cluster.buckets.locks;
        if let Ok(Some(entry)) = bucket.entry(&self.key).await {
            if entry.value == self.run_id.as_bytes() {
                let _ = bucket
                    .delete_expect_revision(&self.key, Some(entry.revision))
                    .await;
            }
        }
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
