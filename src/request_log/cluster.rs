//! The request log on a NATS store (docs/cluster.md#the-request-log-in-a-cluster): the writer
//! hands each batch it wrote to the [`Publisher`], which publishes it to the cluster's request
//! stream behind the writer, and [`index_loop`] indexes every node's records from that stream
//! into this node's log.
//!
//! While NATS is unreachable the batches wait in memory, in order, up to [`BACKLOG_RECORDS`]
//! records and [`BACKLOG_BYTES`] captured bytes, and are published once it is back; past
//! either bound, or when they are still waiting [`DRAIN`] into the node's stop, they stay in
//! this node's log only (counted `unpublished`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Outcome, bound_size, count};
use crate::config::LiveConfig;
use crate::gateway::RequestLogStore;
use crate::gateway::nats::{Cluster, ClusterError, Read, RequestStream, StreamLimits};
use crate::gateway::requests::RequestRecord;
use crate::metrics::Metrics;

/// Records waiting to be published, at most.
const BACKLOG_RECORDS: usize = 65_536;
/// Captured bytes waiting to be published, at most.
const BACKLOG_BYTES: usize = 64 * 1024 * 1024;
/// The pause before a failed publish or a stopped index is tried again.
const RETRY: Duration = Duration::from_secs(1);
/// How long a stopping node waits for its backlog to be published.
pub(super) const DRAIN: Duration = Duration::from_secs(2);
/// Messages the index writes in one operation, at most.
const INDEX_BATCH: usize = 64;

/// A written batch, with what it holds against the backlog's bounds.
struct Written {
    records: Arc<[RequestRecord]>,
    bytes: usize,
}

/// Hands written batches to the task that publishes them; never waits.
pub(super) struct Publisher {
    queue: mpsc::UnboundedSender<Written>,
    backlog: Arc<Backlog>,
    metrics: Metrics,
}

/// What waits to be published; shared by the writer, the publishing task and the log's handle,
/// which waits for it to drain at the node's stop.
#[derive(Default)]
pub(super) struct Backlog {
    records: AtomicUsize,
    bytes: AtomicUsize,
    /// Told whenever a batch leaves the backlog.
    left: tokio::sync::Notify,
}

impl Backlog {
    /// Waits until nothing waits to be published, for at most `limit`; what still waits then
    /// is counted `unpublished` (it stays in this node's log only).
    pub(super) async fn drain(&self, limit: Duration, metrics: &Metrics) {
        let empty = async {
            loop {
                let left = self.left.notified();
                tokio::pin!(left);
                left.as_mut().enable();
                if self.records.load(Ordering::Relaxed) == 0 {
                    return;
                }
                left.await;
            }
        };
        if tokio::time::timeout(limit, empty).await.is_err() {
            let waiting = self.records.load(Ordering::Relaxed) as u64;
            tracing::warn!(waiting, "stopping with request records not yet published");
            count(metrics, Outcome::Unpublished, waiting);
        }
    }

    /// Takes `records` records and `bytes` bytes out of the backlog.
    fn release(&self, records: usize, bytes: usize) {
        self.records.fetch_sub(records, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.left.notify_waiters();
    }
}

impl Publisher {
    /// Starts the task that publishes to `stream`, keeping its limits those of `config`.
    pub(super) fn start(stream: RequestStream, config: LiveConfig, metrics: Metrics) -> Publisher {
        let (queue, batches) = mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog::default());
        tokio::spawn(publish_loop(
            stream,
            batches,
            Arc::clone(&backlog),
            config,
            metrics.clone(),
        ));
        Publisher {
            queue,
            backlog,
            metrics,
        }
    }

    /// Queues `records`, just written to this node's log, for publishing; counts them
    /// `unpublished` when the backlog is full.
    pub(super) fn offer(&self, records: Arc<[RequestRecord]>) {
        let bytes = records.iter().map(capture_bytes).sum();
        let n = records.len();
        let before = self.backlog.records.fetch_add(n, Ordering::Relaxed);
        let before_bytes = self.backlog.bytes.fetch_add(bytes, Ordering::Relaxed);
        let full = before + n > BACKLOG_RECORDS || before_bytes + bytes > BACKLOG_BYTES;
        if full || self.queue.send(Written { records, bytes }).is_err() {
            self.backlog.release(n, bytes);
            count(&self.metrics, Outcome::Unpublished, n as u64);
        }
    }

    /// The backlog, for the log's handle to drain at the node's stop.
    pub(super) fn backlog(&self) -> Arc<Backlog> {
        Arc::clone(&self.backlog)
    }
}

fn capture_bytes(record: &RequestRecord) -> usize {
    record.capture.as_ref().map_or(0, |capture| {
        capture.body.as_ref().map_or(0, Vec::len)
            + capture
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>()
    })
}

/// Opens the cluster's request stream, created or given the limits of
/// `gateway.retention.requests*` (the publisher sets them again after a reload).
pub async fn open_stream(
    cluster: &Cluster,
    config: &LiveConfig,
) -> Result<RequestStream, ClusterError> {
    RequestStream::open(cluster, limits(config)).await
}

/// The operator's bounds on the log, as the stream's limits.
fn limits(config: &LiveConfig) -> StreamLimits {
    let retention = config.current().runtime.retention;
    StreamLimits {
        max_age: retention.requests,
        max_bytes: retention.requests_max_bytes,
    }
}

/// Publishes each batch in turn, trying one that fails again until it is published, and
/// sets the stream's limits again when a reload changed the retention.
async fn publish_loop(
    stream: RequestStream,
    mut batches: mpsc::UnboundedReceiver<Written>,
    backlog: Arc<Backlog>,
    config: LiveConfig,
    metrics: Metrics,
) {
    let mut limits_set = limits(&config);
    while let Some(Written { records, bytes }) = batches.recv().await {
        let mut failing = false;
        loop {
            let wanted = limits(&config);
            if wanted != limits_set {
                match stream.set_limits(wanted).await {
                    Ok(()) => limits_set = wanted,
                    Err(err) => tracing::warn!(%err, "cannot set the request stream's limits"),
                }
            }
            match stream.publish(Arc::clone(&records)).await {
                Ok(unsendable) => {
                    let sent = records.len() as u64 - unsendable.0;
                    count(&metrics, Outcome::Published, sent);
                    count(&metrics, Outcome::Unpublished, unsendable.0);
                    break;
                }
                Err(err) => {
                    // Once per outage, not once per attempt.
                    if !failing {
                        tracing::warn!(%err, "cannot publish request records; trying again");
                        failing = true;
                    }
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
        backlog.release(records.len(), bytes);
    }
}

/// Indexes the stream's records into `store`, from the sequence after the last it indexed,
/// until the process ends; records new to the log are counted `indexed`, and the log is kept
/// within `requestsMaxBytes` as after the writer's batches.
pub(super) async fn index_loop(
    stream: RequestStream,
    store: RequestLogStore,
    config: LiveConfig,
    metrics: Metrics,
) {
    loop {
        if let Err(err) = follow(&stream, &store, &config, &metrics).await {
            tracing::warn!(%err, "the request log stopped indexing the cluster's records; resuming");
            tokio::time::sleep(RETRY).await;
        }
    }
}

/// Why indexing stopped.
#[derive(Debug, thiserror::Error)]
enum IndexError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("request log: {0}")]
    Store(#[from] crate::gateway::StoreError),
}

/// Follows the stream until the connection is made again (then `Ok`, to be called again).
async fn follow(
    stream: &RequestStream,
    store: &RequestLogStore,
    config: &LiveConfig,
    metrics: &Metrics,
) -> Result<(), IndexError> {
    let mut after = store.indexed(stream.name()).await?;
    if after > stream.last_sequence().await? {
        // The stream was deleted and made again since: its sequences start over.
        after = 0;
    }
    let mut follower = stream.follow(after).await?;
    let reconnection = stream.reconnection();
    tokio::pin!(reconnection);
    loop {
        let read = tokio::select! {
            read = follower.next(INDEX_BATCH) => read,
            () = &mut reconnection => return Ok(()),
        };
        let Some(read) = read else {
            return Ok(());
        };
        let Read { records, last } = read?;
        let new = store
            .index(records, stream.name().to_string(), last)
            .await?;
        count(metrics, Outcome::Indexed, new);
        if new > 0 {
            let max_bytes = config.current().runtime.retention.requests_max_bytes;
            bound_size(store, max_bytes, metrics).await;
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn unpublished(metrics: &Metrics) -> u64 {
        metrics
            .request_log
            .get_or_create(&crate::metrics::RequestLogLabels {
                outcome: Outcome::Unpublished.as_str(),
            })
            .get()
    }

    #[tokio::test]
    async fn a_stop_waits_for_the_backlog_to_be_published() {
        let backlog = Arc::new(Backlog::default());
        backlog.records.store(3, Ordering::Relaxed);
        let publisher = Arc::clone(&backlog);
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            publisher.release(2, 0);
            tokio::task::yield_now().await;
            publisher.release(1, 0);
        });
        let metrics = Metrics::default();
        backlog.drain(Duration::from_secs(3600), &metrics).await;
        assert_eq!(backlog.records.load(Ordering::Relaxed), 0);
        assert_eq!(unpublished(&metrics), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn what_is_still_waiting_at_the_limit_is_counted_unpublished() {
        let backlog = Backlog::default();
        backlog.records.store(5, Ordering::Relaxed);
        let metrics = Metrics::default();
        backlog.drain(DRAIN, &metrics).await;
        assert_eq!(unpublished(&metrics), 5);
    }
}
