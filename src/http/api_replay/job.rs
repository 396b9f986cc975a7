//! Bulk replay jobs (docs/operations.md#replaying-in-bulk): a list of recorded requests replayed
//! one after the other, oldest first, at a bounded rate, by a task of their own, with progress
//! an operator polls. Held in this node's memory only: a restart forgets every job, and a job
//! that was running stops where it was (the requests it replayed stay replayed, and linked to
//! their originals in the log).

use std::collections::VecDeque;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::http::AppState;
use crate::http::api_error::ApiError;
use crate::http::api_requests::{Replayed, find, replay_record};
use crate::metrics::BulkReplayLabels;

/// How many jobs a node remembers, the running one included; older finished ones are forgotten.
const KEPT: usize = 16;

/// Replays per second when the operator names no rate.
pub const DEFAULT_RATE: u32 = 10;

/// The highest rate an operator may ask for: a bulk replay runs transforms and makes runs like
/// live traffic does, and must leave room for it.
pub const MAX_RATE: u32 = 100;

/// Replays per second, 1 to [`MAX_RATE`].
#[derive(Debug, Clone, Copy)]
pub struct Rate(NonZeroU32);

impl Rate {
    /// The rate the operator asked for, [`DEFAULT_RATE`] when none; 400 outside 1 to
    /// [`MAX_RATE`].
    pub fn parse(rate: Option<u32>) -> Result<Rate, ApiError> {
        rate.unwrap_or(DEFAULT_RATE)
            .try_into()
            .ok()
            .filter(|rate: &NonZeroU32| rate.get() <= MAX_RATE)
            .map(Rate)
            .ok_or_else(|| {
                ApiError::Invalid(format!("rate must be an integer from 1 to {MAX_RATE}"))
            })
    }

    /// Replays per second.
    pub fn get(self) -> u32 {
        self.0.get()
    }

    /// The least time between the starts of two replays.
    fn period(self) -> Duration {
        Duration::from_secs(1) / self.0.get()
    }
}

/// The jobs of this node, the newest last: at most one running at a time, so that two
/// operators' replays never add up to more than one rate.
#[derive(Default)]
pub struct ReplayJobs {
    jobs: Mutex<VecDeque<Arc<ReplayJob>>>,
}

impl ReplayJobs {
    /// Starts replaying `originals` (record ids, in the order to replay them) in a task of its
    /// own; 409 while another job runs.
    pub(super) fn start(
        &self,
        app: &AppState,
        originals: Vec<String>,
        rate: Rate,
    ) -> Result<Arc<ReplayJob>, ApiError> {
        let job = {
            let mut jobs = self.lock();
            Self::refuse_while_running(&jobs)?;
            let job = Arc::new(ReplayJob::new(originals, rate));
            jobs.push_back(job.clone());
            if jobs.len() > KEPT {
                jobs.pop_front();
            }
            job
        };
        tokio::spawn(run(app.clone(), job.clone()));
        Ok(job)
    }

    /// 409 while a job runs: checked before a selection is read, so that a refused request
    /// costs nothing, and again when the job starts.
    pub(super) fn idle(&self) -> Result<(), ApiError> {
        Self::refuse_while_running(&self.lock())
    }

    fn refuse_while_running(jobs: &VecDeque<Arc<ReplayJob>>) -> Result<(), ApiError> {
        match jobs.iter().find(|job| job.is_running()) {
            Some(running) => Err(ApiError::Conflict(format!(
                "replay job {} is still running: wait for it or cancel it",
                running.id
            ))),
            None => Ok(()),
        }
    }

    /// The job of id `id`, running or remembered.
    pub(super) fn get(&self, id: &str) -> Option<Arc<ReplayJob>> {
        self.lock().iter().find(|job| job.id == id).cloned()
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Arc<ReplayJob>>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One bulk replay.
pub(super) struct ReplayJob {
    pub id: String,
    pub rate: Rate,
    cancelled: AtomicBool,
    /// Wakes the job's task from its wait for the next slot when it is cancelled.
    wake: Notify,
    progress: Mutex<Progress>,
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum JobState {
    Running,
    /// Every request was replayed (successfully or not).
    Finished,
    /// Stopped by the operator before the end; the rest were not replayed.
    Cancelled,
    /// Stopped by a failure before the end, as the job's `reason` says; the rest were not
    /// replayed.
    Failed,
}

struct Progress {
    state: JobState,
    /// Why a failed job stopped.
    reason: Option<String>,
    items: Vec<ReplayItem>,
}

/// One request of a job, and what its replay became (all null until it is replayed).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct ReplayItem {
    /// The original request's record id.
    original: String,
    /// The replay's record id, which links to the original (`replayOf`).
    request_id: Option<String>,
    /// What the hook answered the replay.
    status: Option<u16>,
    /// Why the replay could not be made (the request had gone, say), when it could not.
    error: Option<String>,
    /// When the replay began, in milliseconds since the job began.
    started_ms: Option<u64>,
}

impl ReplayItem {
    fn replayed(&self) -> bool {
        self.status.is_some() || self.error.is_some()
    }

    /// A replay that was not made, or that its hook did not answer with a 2xx.
    fn failed(&self) -> bool {
        self.error.is_some() || self.status.is_some_and(|s| !(200..300).contains(&s))
    }
}

/// A job as `GET /api/requests/replays/{id}` shows it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct JobView {
    ok: bool,
    id: String,
    state: JobState,
    /// Why the job failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// Replays per second.
    rate: u32,
    total: usize,
    /// Replayed so far, failed ones included.
    done: usize,
    failed: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    items: Option<Vec<ReplayItem>>,
}

impl ReplayJob {
    fn new(originals: Vec<String>, rate: Rate) -> ReplayJob {
        let items = originals
            .into_iter()
            .map(|original| ReplayItem {
                original,
                request_id: None,
                status: None,
                error: None,
                started_ms: None,
            })
            .collect();
        ReplayJob {
            id: uuid::Uuid::now_v7().to_string(),
            rate,
            cancelled: AtomicBool::new(false),
            wake: Notify::new(),
            progress: Mutex::new(Progress {
                state: JobState::Running,
                reason: None,
                items,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_running(&self) -> bool {
        self.lock().state == JobState::Running
    }

    /// Stops the job before its next replay; the one in flight, if any, is finished.
    pub(super) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// The job's progress now, with every request's replay when `items`: a copy of each, about
    /// 110 bytes of JSON a request (1.1 MB for 10,000), so a poller that only follows the counts
    /// leaves them out.
    pub(super) fn view(&self, items: bool) -> JobView {
        let progress = self.lock();
        let all = &progress.items;
        JobView {
            ok: true,
            id: self.id.clone(),
            state: progress.state,
            reason: progress.reason.clone(),
            rate: self.rate.get(),
            total: all.len(),
            done: all.iter().filter(|i| i.replayed()).count(),
            failed: all.iter().filter(|i| i.failed()).count(),
            items: items.then(|| all.clone()),
        }
    }
}

/// Replays the job's requests through the hook endpoints, counting each in the metrics.
async fn run(app: AppState, job: Arc<ReplayJob>) {
    let replay = |original: String| {
        let app = app.clone();
        async move {
            let (record, _) = find(&app, &original).await?;
            replay_record(&app, &record).await
        }
    };
    let counted = |failed: bool| {
        let outcome = if failed { "failed" } else { "succeeded" };
        let labels = BulkReplayLabels { outcome };
        app.metrics.bulk_replays.get_or_create(&labels).inc();
    };
    drive(job, replay, counted).await;
}

/// Replays the job's requests in order with `replay`, each starting at least a period after
/// the one before, and tells `counted` whether each failed. The job ends however this does:
/// a panic in `replay` (the hook endpoints' handlers run here without the server's panic
/// layer) or the task's drop ends it failed, so that it never blocks the next job. A full
/// store ends it failed too: every later replay would fail the same way, at the job's rate.
async fn drive<R, F>(job: Arc<ReplayJob>, mut replay: R, mut counted: impl FnMut(bool))
where
    R: FnMut(String) -> F,
    F: Future<Output = Result<Replayed, ApiError>>,
{
    let mut ending = Ending {
        job: job.clone(),
        state: None,
        reason: None,
    };
    let period = job.rate.period();
    let begun = Instant::now();
    let mut next = begun;
    let total = job.lock().items.len();
    for index in 0..total {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = job.wake.notified() => {}
        }
        if job.cancelled.load(Ordering::Acquire) {
            ending.state = Some(JobState::Cancelled);
            return;
        }
        let started = Instant::now();
        next = started + period;
        let original = job.lock().items[index].original.clone();
        let replayed = replay(original).await;
        let full = matches!(replayed, Err(ApiError::StoreFull));
        counted(job.settle(index, started - begun, replayed));
        if full {
            ending.state = Some(JobState::Failed);
            ending.reason = Some(STORE_FULL.into());
            return;
        }
    }
    ending.state = Some(JobState::Finished);
}

/// Why a job stops at a replay the store had no room to record.
const STORE_FULL: &str = "the store is full: the job stopped at the first replay it could not record; replay the rest once it has room";

/// Sets its job's end state when dropped: the one the job's task reached, or failed when the
/// task unwound or was dropped before it reached one.
struct Ending {
    job: Arc<ReplayJob>,
    state: Option<JobState>,
    /// Why, for a failed state.
    reason: Option<String>,
}

impl Drop for Ending {
    fn drop(&mut self) {
        let mut progress = self.job.lock();
        if let Some(state) = self.state {
            progress.state = state;
            progress.reason = self.reason.take();
            return;
        }
        // Replays are made in order and settled once made: the first unsettled one was in flight.
        let at = progress.items.iter().find(|item| !item.replayed());
        let reason = match at {
            Some(item) => format!(
                "internal error while replaying request {}: the rest were not replayed",
                item.original
            ),
            None => "internal error after the last replay".to_string(),
        };
        tracing::error!(job = %self.job.id, %reason, "bulk replay job stopped");
        progress.state = JobState::Failed;
        progress.reason = Some(reason);
    }
}

impl ReplayJob {
    /// Records what request `index`'s replay, begun `started` after the job, became; whether
    /// it failed.
    fn settle(
        &self,
        index: usize,
        started: Duration,
        replayed: Result<Replayed, ApiError>,
    ) -> bool {
        let mut progress = self.lock();
        let item = &mut progress.items[index];
        item.started_ms = Some(u64::try_from(started.as_millis()).unwrap_or(u64::MAX));
        match replayed {
            Ok(replayed) => {
                item.request_id = Some(replayed.request_id);
                item.status = Some(replayed.status);
            }
            Err(err) => item.error = Some(err.to_string()),
        }
        item.failed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(originals: &[&str]) -> Arc<ReplayJob> {
        let originals = originals.iter().map(|o| o.to_string()).collect();
        Arc::new(ReplayJob::new(
            originals,
            Rate::parse(Some(MAX_RATE)).unwrap(),
        ))
    }

    async fn panics(_: String) -> Result<Replayed, ApiError> {
        panic!("a replay's handler panicked")
    }

    #[tokio::test]
    async fn a_job_whose_replay_panics_ends_failed_naming_the_request() {
        let job = job(&["first", "second"]);
        let task = tokio::spawn(drive(job.clone(), panics, |_| {}));
        assert!(task.await.unwrap_err().is_panic());
        let view = job.view(true);
        assert_eq!(view.state, JobState::Failed);
        let reason = view.reason.unwrap();
        assert!(reason.contains("request first"), "{reason}");
        assert_eq!(view.done, 0);
        let jobs = ReplayJobs::default();
        jobs.lock().push_back(job);
        assert!(jobs.idle().is_ok(), "a new job may start");
    }

    #[tokio::test]
    async fn a_full_store_stops_the_job_at_its_first_replay() {
        let job = job(&["first", "second", "third"]);
        let mut calls = 0;
        let full = |_| {
            calls += 1;
            std::future::ready(Err(ApiError::StoreFull))
        };
        drive(job.clone(), full, |_| {}).await;
        assert_eq!(calls, 1, "no replay after the store was full");
        let view = job.view(true);
        assert_eq!(view.state, JobState::Failed);
        assert_eq!(view.reason.as_deref(), Some(STORE_FULL));
        assert_eq!((view.done, view.failed), (1, 1));
        let items = view.items.unwrap();
        assert_eq!(items[0].error.as_deref(), Some("store full; retry"));
    }

    #[test]
    fn a_rate_is_one_to_the_maximum_and_ten_by_default() {
        assert_eq!(Rate::parse(None).unwrap().get(), DEFAULT_RATE);
        assert_eq!(Rate::parse(Some(MAX_RATE)).unwrap().get(), MAX_RATE);
        assert!(Rate::parse(Some(0)).is_err());
        assert!(Rate::parse(Some(MAX_RATE + 1)).is_err());
        assert_eq!(
            Rate::parse(Some(4)).unwrap().period(),
            Duration::from_millis(250)
        );
    }
}
