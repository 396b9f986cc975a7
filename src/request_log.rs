//! The request log's writer (docs/operations.md#the-request-log): records reach the store in
//! batches, behind the answer, never before it.
//!
//! A handler hands its finished record to [`RequestLog::record`], which only queues it; one
//! task takes everything queued and writes it as one operation of the store's group commit. The
//! answer therefore waits for nothing of the log, and a thousand requests cost one savepoint, not
//! a thousand. What that costs: a crash can lose the records of the last moments (never the
//! events and runs, which are committed before their answer), and a full queue drops records
//! (counted in `hookgate_request_log_records{outcome="dropped"}`).
//!
//! Refusals (4xx) are what a flood is made of, so they are bounded: past
//! [`REFUSALS_PER_CLIENT`] from one client, or [`REFUSALS_IN_ALL`] from everyone, in one
//! [`WINDOW`], a refusal is counted instead of recorded, and the client's next record says how
//! many of its refusals were counted (`suppressed`). Accepted requests and our own failures
//! (5xx) are always recorded.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::client::ClientKey;
use crate::gateway::Store;
use crate::gateway::requests::RequestRecord;
use crate::metrics::{Metrics, RequestLogLabels};

/// Refusals recorded per client in a window; more are counted only.
pub const REFUSALS_PER_CLIENT: u32 = 30;
/// Refusals recorded from all clients together in a window.
pub const REFUSALS_IN_ALL: u32 = 600;
/// The window of the refusal bounds.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Records waiting for the writer, at most; past this they are dropped (and counted).
const QUEUE: usize = 16_384;
/// Records one store operation takes, at most.
const BATCH: usize = 1024;
/// Clients whose counted refusals are remembered for their next record.
const REMEMBERED_CLIENTS: usize = 4096;

/// Handle to the request log; one per server.
pub struct RequestLog {
    queue: mpsc::Sender<Entry>,
    flood: Mutex<Flood>,
    metrics: Metrics,
}

enum Entry {
    Record(Box<RequestRecord>),
    /// Answered once everything queued before it is committed.
    Flush(oneshot::Sender<()>),
}

impl RequestLog {
    /// Starts the writer task on the current tokio runtime.
    pub fn start(store: Store, metrics: Metrics) -> RequestLog {
        let (queue, entries) = mpsc::channel(QUEUE);
        tokio::spawn(write_loop(store, entries, metrics.clone()));
        RequestLog {
            queue,
            flood: Mutex::new(Flood::new(Instant::now())),
            metrics,
        }
    }

    /// Queues `record` (of a request from `client`) for the next batch; never waits.
    pub fn record(&self, mut record: RequestRecord, client: Option<ClientKey>) {
        if (400..500).contains(&record.status) {
            let admitted = self
                .flood
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .admit(client, Instant::now());
            match admitted {
                Some(suppressed) => record.suppressed = suppressed,
                None => return self.count("suppressed"),
            }
        }
        if self
            .queue
            .try_send(Entry::Record(Box::new(record)))
            .is_err()
        {
            self.count("dropped");
        }
    }

    /// Waits until every record queued so far is committed (or the writer has stopped).
    pub async fn flush(&self) {
        let (done, committed) = oneshot::channel();
        if self.queue.send(Entry::Flush(done)).await.is_ok() {
            let _ = committed.await;
        }
    }

    fn count(&self, outcome: &'static str) {
        self.metrics
            .request_log
            .get_or_create(&RequestLogLabels { outcome })
            .inc();
    }
}

async fn write_loop(store: Store, mut entries: mpsc::Receiver<Entry>, metrics: Metrics) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut flushes = Vec::new();
    while let Some(first) = entries.recv().await {
        let mut next = Some(first);
        while let Some(entry) = next.take() {
            match entry {
                Entry::Record(record) => batch.push(*record),
                Entry::Flush(done) => flushes.push(done),
            }
            if batch.len() < BATCH {
                next = entries.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            let count = batch.len() as u64;
            match store.record_requests(std::mem::take(&mut batch)).await {
                Ok(()) => {
                    metrics
                        .request_log
                        .get_or_create(&RequestLogLabels {
                            outcome: "recorded",
                        })
                        .inc_by(count);
                }
                Err(err) => tracing::warn!(%err, count, "request log records lost"),
            }
        }
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

/// The refusal bounds of one window.
struct Flood {
    began: Instant,
    recorded: HashMap<Option<ClientKey>, u32>,
    recorded_in_all: u32,
    /// Refusals counted, not recorded, per client, until its next record.
    counted: HashMap<Option<ClientKey>, u64>,
}

impl Flood {
    fn new(now: Instant) -> Flood {
        Flood {
            began: now,
            recorded: HashMap::new(),
            recorded_in_all: 0,
            counted: HashMap::new(),
        }
    }

    /// `Some(refusals counted since the client's last record)` when this refusal is recorded;
    /// `None` when it is only counted.
    fn admit(&mut self, client: Option<ClientKey>, now: Instant) -> Option<u64> {
        if now.duration_since(self.began) >= WINDOW {
            self.began = now;
            self.recorded.clear();
            self.recorded_in_all = 0;
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
        Some(self.counted.remove(&client).unwrap_or(0))
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
