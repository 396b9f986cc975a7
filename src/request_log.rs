//! The request log's writer (docs/operations.md#the-request-log): records reach the store in
//! batches, behind the answer, never before it.
//!
//! A handler hands its finished record to [`RequestLog::record`], which only queues it; one
//! task takes everything queued (letting a short batch gather for up to [`GATHER`]), applies the
//! captures (redaction may parse and re-encode a whole body: off the request, on a blocking
//! thread) and writes the batch as one operation into the log's own database (`requests.db`,
//! its own writer thread, commits not synced to disk). The answer therefore waits for nothing of
//! the log, intake's commits neither queue behind its inserts nor grow with them, and a thousand
//! requests cost one savepoint, not a thousand. What that costs: a crash can lose the records of
//! the last moments (never the events and runs, which are committed before their answer). The
//! queue is bounded by records ([`QUEUE`]) and by captured bytes ([`QUEUE_BYTES`]): past the
//! first a record is dropped, past the second its capture is (both counted in
//! `hookgate_request_log_records{outcome="dropped"}`).
//!
//! The log's size is bounded too (`gateway.retention.requestsMaxBytes`): after each batch, the
//! oldest records are pruned while it is over the bound (`outcome="pruned"`), so no traffic,
//! accepted or refused, grows it past what the operator configured.
//!
//! On a NATS store each batch written is also published to the cluster's request stream, and
//! every node's records are indexed from it into this log (`cluster`,
//! docs/cluster.md#the-request-log-in-a-cluster).
//!
//! Refusals (4xx) are what a flood is made of, so they are bounded: past
//! [`REFUSALS_PER_CLIENT`] from one client, or [`REFUSALS_IN_ALL`] from everyone, in one
//! [`WINDOW`], a refusal is counted instead of recorded, and the client's next record says how
//! many of its refusals were counted (`suppressed`). Accepted requests and our own failures
//! (5xx) are always recorded.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::client::ClientKey;
use crate::config::LiveConfig;
use crate::gateway::StoreError;
use crate::gateway::nats::RequestStream;
use crate::gateway::requests::{RequestFilter, RequestLogStore, RequestMinute, RequestRecord};
use crate::hook::capture::CaptureJob;
use crate::metrics::{Metrics, RequestLogLabels};

mod cluster;

pub use cluster::open_stream;

/// Refusals recorded per client in a window; more are counted only.
pub const REFUSALS_PER_CLIENT: u32 = 30;
/// Refusals recorded from all clients together in a window.
pub const REFUSALS_IN_ALL: u32 = 600;
/// The window of the refusal bounds.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Records waiting for the writer, at most; past this they are dropped (and counted).
const QUEUE: usize = 16_384;
/// Captured bytes waiting for the writer, at most; past this captures are dropped (and counted).
const QUEUE_BYTES: usize = 64 * 1024 * 1024;
/// Records one store operation takes, at most.
const BATCH: usize = 1024;
/// How long a batch that is not full waits for more records: under load the log then commits
/// about once per this long (a commit per record or two was most of its writer thread's time).
/// A full batch is written at once, and so is a batch that a [`RequestLog::flush`] waits for.
const GATHER: Duration = Duration::from_millis(20);
/// Clients whose counted refusals are remembered for their next record.
const REMEMBERED_CLIENTS: usize = 4096;

/// Handle to the request log; one per server.
pub struct RequestLog {
    store: RequestLogStore,
    queue: mpsc::Sender<Entry>,
    flood: Mutex<Flood>,
    /// Bytes of the captures queued.
    queued_bytes: Arc<AtomicUsize>,
    metrics: Metrics,
    /// On a NATS store, the records written and not yet published.
    unpublished: Option<Arc<cluster::Backlog>>,
}

enum Entry {
    Record(Box<(RequestRecord, Option<CaptureJob>)>),
    /// Answered once everything queued before it is committed.
    Flush(oneshot::Sender<()>),
}

/// What became of a record handed to the log (the label of its counter).
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Recorded,
    Suppressed,
    Dropped,
    /// Recorded, then pruned to keep the log within its size bound.
    Pruned,
    /// Recorded, and published to the cluster's request stream.
    Published,
    /// Recorded in this node's log only: the stream was out of reach for too long (the
    /// backlog was full, or still waiting when the node stopped), or the record is larger than
    /// any message.
    Unpublished,
    /// Another node's record (or one of this node's own it no longer had), indexed from the
    /// cluster's request stream.
    Indexed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Recorded => "recorded",
            Outcome::Suppressed => "suppressed",
            Outcome::Dropped => "dropped",
            Outcome::Pruned => "pruned",
            Outcome::Published => "published",
            Outcome::Unpublished => "unpublished",
            Outcome::Indexed => "indexed",
        }
    }
}

impl RequestLog {
    /// Starts the writer and the pruning (`gateway.retention.requests`) tasks on the current
    /// tokio runtime, over the log's own `store`; on a NATS store (`shared`), also the tasks
    /// that publish what the writer wrote to the cluster's request stream and index every
    /// node's records from it.
    pub fn start(
        store: RequestLogStore,
        config: LiveConfig,
        metrics: Metrics,
        shared: Option<RequestStream>,
    ) -> RequestLog {
        let (queue, entries) = mpsc::channel(QUEUE);
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let publisher = shared.map(|stream| {
            tokio::spawn(cluster::index_loop(
                stream.clone(),
                store.clone(),
                config.clone(),
                metrics.clone(),
            ));
            cluster::Publisher::start(stream, config.clone(), metrics.clone())
        });
        let unpublished = publisher.as_ref().map(cluster::Publisher::backlog);
        let writer = Writer {
            store: store.clone(),
            queued_bytes: Arc::clone(&queued_bytes),
            metrics: metrics.clone(),
            publisher,
        };
        tokio::spawn(write_loop(writer, entries, config.clone()));
        tokio::spawn(prune_loop(store.clone(), config, metrics.clone()));
        RequestLog {
            store,
            queue,
            flood: Mutex::new(Flood::new(Instant::now())),
            queued_bytes,
            metrics,
            unpublished,
        }
    }

    /// Queues `record` (of a request from `client`) and its `capture` for the next batch;
    /// never waits.
    pub fn record(
        &self,
        mut record: RequestRecord,
        client: Option<ClientKey>,
        capture: Option<CaptureJob>,
    ) {
        if (400..500).contains(&record.status) {
            let admitted = self
                .flood
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .admit(client, Instant::now());
            match admitted {
                Some(suppressed) => record.suppressed = suppressed,
                None => return self.count(Outcome::Suppressed),
            }
        }
        let capture = self.reserve(capture);
        if let Err(refused) = self
            .queue
            .try_send(Entry::Record(Box::new((record, capture))))
        {
            if let Entry::Record(entry) = refused.into_inner() {
                self.release(entry.1.as_ref());
            }
            self.count(Outcome::Dropped);
        }
    }

    /// Records a replay: never suppressed, waiting for room in the queue rather than dropped,
    /// and committed before this returns (the operator is told the new record's id).
    pub async fn record_replay(&self, record: RequestRecord, capture: Option<CaptureJob>) {
        let capture = self.reserve(capture);
        if let Err(refused) = self
            .queue
            .send(Entry::Record(Box::new((record, capture))))
            .await
            && let Entry::Record(entry) = refused.0
        {
            self.release(entry.1.as_ref());
        }
        self.flush().await;
    }

    /// Takes room for `capture` in the byte budget; drops it (and counts that) when there is none.
    fn reserve(&self, capture: Option<CaptureJob>) -> Option<CaptureJob> {
        let job = capture?;
        let size = job.size();
        let before = self.queued_bytes.fetch_add(size, Ordering::Relaxed);
        if before + size > QUEUE_BYTES {
            self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            self.count(Outcome::Dropped);
            return None;
        }
        Some(job)
    }

    fn release(&self, capture: Option<&CaptureJob>) {
        if let Some(job) = capture {
            self.queued_bytes.fetch_sub(job.size(), Ordering::Relaxed);
        }
    }

    /// Waits until every record queued so far is committed (or the writer has stopped).
    pub async fn flush(&self) {
        let (done, committed) = oneshot::channel();
        if self.queue.send(Entry::Flush(done)).await.is_ok() {
            let _ = committed.await;
        }
    }

    /// A page of the log, newest first.
    pub async fn page(&self, filter: RequestFilter) -> Result<Vec<RequestRecord>, StoreError> {
        self.store.page(filter).await
    }

    /// The requests recorded from `since_ms` on, by minute and by how they ended.
    pub async fn minutes(&self, since_ms: i64) -> Result<Vec<RequestMinute>, StoreError> {
        self.store.minutes(since_ms).await
    }

    /// One record with its capture, and the ids of the requests that replayed it.
    pub async fn find(&self, id: &str) -> Result<Option<(RequestRecord, Vec<String>)>, StoreError> {
        self.store.find(id).await
    }

    /// Commits what is queued and closes the log's database (at shutdown, after the last
    /// request); on a NATS store, first waits up to 2 s for what was written to be published.
    pub async fn close(&self) {
        self.flush().await;
        if let Some(backlog) = &self.unpublished {
            backlog.drain(cluster::DRAIN, &self.metrics).await;
        }
        let store = self.store.clone();
        let _ = tokio::task::spawn_blocking(move || store.close()).await;
    }

    fn count(&self, outcome: Outcome) {
        count(&self.metrics, outcome, 1);
    }
}

/// Deletes records older than `gateway.retention.requests`, in batches, and the oldest while
/// the log is over `requestsMaxBytes` (a reload may have lowered it), until the process ends.
async fn prune_loop(store: RequestLogStore, config: LiveConfig, metrics: Metrics) {
    const BATCH: u32 = 500;
    const EVERY: Duration = Duration::from_secs(60);
    loop {
        let retention = config.current().runtime.retention;
        bound_size(&store, retention.requests_max_bytes, &metrics).await;
        let age = retention.requests;
        if let Some(age) = age {
            loop {
                let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
                let before = crate::gateway::runtime_clock::now_ms().saturating_sub(age_ms);
                let pruned = store.prune(before, BATCH).await;
                match pruned {
                    Ok(n) if n == BATCH as usize => tokio::task::yield_now().await,
                    Ok(_) => break,
                    Err(err) => {
                        tracing::warn!(%err, "request log pruning failed; trying again later");
                        break;
                    }
                }
            }
        }
        let pause = age.map_or(EVERY, |age| (age / 2).clamp(Duration::from_secs(1), EVERY));
        tokio::time::sleep(pause).await;
    }
}

/// Prunes the oldest records while the log is over `max_bytes`, when there is a bound.
async fn bound_size(store: &RequestLogStore, max_bytes: Option<u64>, metrics: &Metrics) {
    let Some(max_bytes) = max_bytes else {
        return;
    };
    let pruned = store.prune_to_size(max_bytes).await;
    match pruned {
        Ok(0) => {}
        Ok(n) => count(metrics, Outcome::Pruned, n as u64),
        // A failed commit (a full disk, say) is logged by the store's writer, once a minute at
        // most: a line per batch here would flood the log.
        Err(StoreError::Full | StoreError::Commit(_)) => {}
        Err(err) => tracing::warn!(%err, "request log size pruning failed; trying again later"),
    }
}

fn count(metrics: &Metrics, outcome: Outcome, n: u64) {
    metrics
        .request_log
        .get_or_create(&RequestLogLabels {
            outcome: outcome.as_str(),
        })
        .inc_by(n);
}

/// What the writer writes to, counts in and hands its batches to.
struct Writer {
    store: RequestLogStore,
    /// Bytes of the captures queued.
    queued_bytes: Arc<AtomicUsize>,
    metrics: Metrics,
    /// On a NATS store, where each batch written goes next.
    publisher: Option<cluster::Publisher>,
}

/// Writes what the log is handed, a batch at a time, until every handle is gone.
async fn write_loop(writer: Writer, mut entries: mpsc::Receiver<Entry>, config: LiveConfig) {
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(first) = entries.recv().await {
        // Dropped at the end of this turn, whatever became of the batch: its flushes are
        // answered now, never after a later batch that may not come.
        let mut waiters = Waiters::default();
        gather(&mut entries, first, &mut batch, &mut waiters.0).await;
        if !batch.is_empty() {
            let pending = std::mem::take(&mut batch);
            if write_batch(&writer, pending).await {
                let max_bytes = config.current().runtime.retention.requests_max_bytes;
                bound_size(&writer.store, max_bytes, &writer.metrics).await;
            }
        }
    }
}

/// The flush requests waiting for one batch. Each is answered when this is dropped: on every
/// path out of the batch, a lost batch and a panic unwinding through the writer included, so
/// that no [`RequestLog::flush`] (nor the replay behind it) waits for a batch that never comes.
#[derive(Default)]
struct Waiters(Vec<oneshot::Sender<()>>);

impl Drop for Waiters {
    fn drop(&mut self) {
        for done in self.0.drain(..) {
            // A waiter that gave up is no one to tell.
            let _ = done.send(());
        }
    }
}

/// A record waiting for the writer, with its capture still to apply.
type Pending = (RequestRecord, Option<CaptureJob>);

/// Takes `first` and what is queued behind it: records into `batch` (at most [`BATCH`]), flush
/// requests into `flushes`. A batch that is not full and that no flush waits for waits up to
/// [`GATHER`] for more.
async fn gather(
    entries: &mut mpsc::Receiver<Entry>,
    first: Entry,
    batch: &mut Vec<Pending>,
    flushes: &mut Vec<oneshot::Sender<()>>,
) {
    let gathered_by = tokio::time::Instant::now() + GATHER;
    let mut next = Some(first);
    loop {
        while let Some(entry) = next.take() {
            match entry {
                Entry::Record(entry) => batch.push(*entry),
                Entry::Flush(done) => flushes.push(done),
            }
            if batch.len() < BATCH {
                next = entries.try_recv().ok();
            }
        }
        if batch.len() >= BATCH || !flushes.is_empty() {
            return;
        }
        match tokio::time::timeout_at(gathered_by, entries.recv()).await {
            Ok(Some(entry)) => next = Some(entry),
            Ok(None) | Err(_) => return,
        }
    }
}

/// Applies the captures of `pending`, gives their bytes back to the queue's budget and writes
/// the records as one operation, counting them recorded or dropped, then hands them to the
/// publisher, if any. False when applying the captures failed (its thread panicked): the
/// records are lost, counted dropped, and the log says so, once for the batch.
async fn write_batch(writer: &Writer, pending: Vec<Pending>) -> bool {
    let Writer {
        store,
        queued_bytes,
        metrics,
        publisher,
    } = writer;
    let count_of = pending.len() as u64;
    let bytes: usize = pending
        .iter()
        .filter_map(|(_, job)| job.as_ref().map(CaptureJob::size))
        .sum();
    let records = with_captures(pending, bytes > 0).await;
    queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
    let records = match records {
        Ok(records) => records,
        Err(err) => {
            count(metrics, Outcome::Dropped, count_of);
            tracing::error!(
                error = %err,
                count = count_of,
                capture_bytes = bytes,
                "request log captures failed; records lost"
            );
            return false;
        }
    };
    let records: Arc<[RequestRecord]> = records.into();
    let inserted = store.insert(Arc::clone(&records)).await;
    // Published even when this node's file refused them (a full disk): the cluster's other
    // nodes still have them.
    if let Some(publisher) = publisher {
        publisher.offer(records);
    }
    match inserted {
        Ok(()) => count(metrics, Outcome::Recorded, count_of),
        Err(err) => {
            count(metrics, Outcome::Dropped, count_of);
            // A failed commit (a full disk, say) is logged by the store's writer, once a
            // minute at most: a line per batch here would flood the log.
            if !matches!(err, StoreError::Full | StoreError::Commit(_)) {
                tracing::warn!(%err, count = count_of, "request log records lost");
            }
        }
    }
    true
}

/// The records of `pending` with their captures applied, on a blocking thread when `blocking`
/// (redaction may parse and re-encode a whole body; only a batch with captures is worth a
/// thread). Fails only when that thread does.
async fn with_captures(
    pending: Vec<Pending>,
    blocking: bool,
) -> Result<Vec<RequestRecord>, tokio::task::JoinError> {
    let apply = move || {
        pending
            .into_iter()
            .map(|(mut record, job)| {
                if let Some(job) = job {
                    record.capture = Some(job.capture());
                    record.captured = true;
                }
                record
            })
            .collect::<Vec<_>>()
    };
    if blocking {
        tokio::task::spawn_blocking(apply).await
    } else {
        Ok(apply())
    }
}

/// The refusal bounds of one window.
struct Flood {
    began: Instant,
    recorded: HashMap<Option<ClientKey>, u32>,
    recorded_in_all: u32,
    /// Refusals counted, not recorded, per client, in this window and the one before, until
    /// its next record.
    counted: HashMap<Option<ClientKey>, u64>,
    counted_before: HashMap<Option<ClientKey>, u64>,
}

impl Flood {
    fn new(now: Instant) -> Flood {
        Flood {
            began: now,
            recorded: HashMap::new(),
            recorded_in_all: 0,
            counted: HashMap::new(),
            counted_before: HashMap::new(),
        }
    }

    /// `Some(refusals counted since the client's last record)` when this refusal is recorded;
    /// `None` when it is only counted.
    fn admit(&mut self, client: Option<ClientKey>, now: Instant) -> Option<u64> {
        if now.duration_since(self.began) >= WINDOW {
            self.began = now;
            self.recorded.clear();
            self.recorded_in_all = 0;
            // A count waits one window for its client's next record, then only the metric has
            // it: clients that never come back cannot fill the map.
            std::mem::swap(&mut self.counted, &mut self.counted_before);
            self.counted.clear();
        }
        let recorded = self.recorded.get(&client).copied().unwrap_or(0);
        if recorded >= REFUSALS_PER_CLIENT || self.recorded_in_all >= REFUSALS_IN_ALL {
            if self.counted.len() < REMEMBERED_CLIENTS || self.counted.contains_key(&client) {
                *self.counted.entry(client).or_default() += 1;
            }
            return None;
        }
        self.recorded.insert(client, recorded + 1);
        self.recorded_in_all += 1;
        let now_counted = self.counted.remove(&client).unwrap_or(0);
        Some(now_counted + self.counted_before.remove(&client).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(last: u8) -> Option<ClientKey> {
        Some(ClientKey::of([10, 0, 0, last].into()))
    }

    #[test]
    fn a_flooding_client_is_counted_and_told_in_its_next_window() {
        let start = Instant::now();
        let mut flood = Flood::new(start);
        for _ in 0..REFUSALS_PER_CLIENT {
            assert_eq!(flood.admit(client(1), start), Some(0));
        }
        for _ in 0..5 {
            assert_eq!(flood.admit(client(1), start), None);
        }
        assert_eq!(
            flood.admit(client(2), start),
            Some(0),
            "another client is still recorded"
        );
        assert_eq!(flood.admit(client(1), start + WINDOW), Some(5));
        assert_eq!(flood.admit(client(1), start + WINDOW), Some(0));
    }

    /// Applying captures cannot be made to panic from outside (a capture is total over what a
    /// request holds), so the panic is raised here, in a turn of the writer holding its batch's
    /// waiters.
    #[tokio::test]
    async fn a_batch_s_waiters_are_answered_when_its_turn_panics() {
        let (done, answered) = oneshot::channel();
        let turn = tokio::spawn(async move {
            let _waiters = Waiters(vec![done]);
            panic!("applying the captures panicked");
        });
        assert!(turn.await.expect_err("the turn panics").is_panic());
        assert_eq!(
            answered.await,
            Ok(()),
            "the waiter is answered, not left to a later batch"
        );
    }

    #[tokio::test]
    async fn a_batch_s_waiters_are_answered_when_it_ends() {
        let (done, answered) = oneshot::channel();
        drop(Waiters(vec![done]));
        assert_eq!(answered.await, Ok(()));
    }

    #[test]
    fn many_clients_together_are_bounded_too() {
        let start = Instant::now();
        let mut flood = Flood::new(start);
        let mut recorded = 0;
        for i in 0..=u8::MAX {
            for _ in 0..10 {
                recorded += u32::from(flood.admit(client(i), start).is_some());
            }
        }
        assert_eq!(recorded, REFUSALS_IN_ALL);
    }
}
