//! The embedded store: one SQLite file in WAL mode under `gateway.stateDir`.
//!
//! All writes go through one writer thread that takes every submission waiting in its queue and
//! commits them in one transaction (group commit): a caller is answered only after the commit that
//! holds its write, so an acknowledged write survives a crash, and concurrent callers share the
//! cost of one `fsync`. Reads use their own connection and never wait for the writer.
//!
//! A commit that fails (the state directory's file system full, an I/O error) is rolled back
//! whole and every caller of its batch is told so; the writer goes on with the next batch, so
//! once the cause is gone (space freed) writes commit again without a restart
//! (docs/reliability.md#a-full-disk).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prometheus_client::metrics::histogram::Histogram;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use super::records::{EventRecord, NewRun, RunStatus};
use super::requests::{RequestFilter, RequestRecord};
use super::run_record::{RunFilter, RunRecord};
use super::schema::{migrate, migrate_request_log};

/// The most submissions one transaction takes; bounds the latency a batch adds to its first member.
const MAX_BATCH: usize = 512;

/// The file name of the database inside the state directory.
pub const DB_FILE: &str = "hookgate.db";

/// The file name of the request log's database inside the state directory.
pub const REQUEST_LOG_FILE: &str = "requests.db";

/// Which of the state directory's databases a [`Store`] holds.
#[derive(Debug, Clone, Copy)]
enum StoreFile {
    /// Events, runs, the outbox: what intake commits before it answers.
    Main,
    /// The request log.
    RequestLog,
}

/// A failure of the store. The message is for the log, never for a client.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Any failure of SQLite but [`StoreError::Full`].
    #[error("sqlite: {0}")]
    Sqlite(rusqlite::Error),
    /// The state directory's file system has no room for the write (SQLite's `SQLITE_FULL`):
    /// nothing of it was kept, and the same write succeeds once space is freed.
    #[error("the state directory's file system is full")]
    Full,
    #[error("cannot create state directory {path}: {source}")]
    StateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the store is closed")]
    Closed,
    /// The transaction holding the write failed to commit, for another reason than
    /// [`StoreError::Full`]; nothing of it was kept.
    #[error("commit failed: {0}")]
    Commit(String),
    /// A record larger than the NATS servers take in one message: the client's to mend (413).
    #[error("a {size}-byte record is over the store's limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    /// The NATS cluster failed.
    #[error("{0}")]
    Cluster(String),
}

impl From<rusqlite::Error> for StoreError {
    /// Classifies by SQLite's result code, never by its message: `SQLITE_FULL` is
    /// [`StoreError::Full`], anything else [`StoreError::Sqlite`].
    fn from(err: rusqlite::Error) -> Self {
        if is_full(&err) {
            StoreError::Full
        } else {
            StoreError::Sqlite(err)
        }
    }
}

fn is_full(err: &rusqlite::Error) -> bool {
    err.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
}

/// What became of a queued run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunQueued {
    /// Newly committed with status `queued`.
    New { run_id: String },
    /// A repeat of an earlier request within the idempotency window: nothing was written.
    Replayed { run_id: String },
}

/// Idempotency data for a run: its fingerprint, and the window in which a repeat is recognised.
#[derive(Debug, Clone)]
pub struct IdempotencyClaim {
    pub fingerprint: String,
    pub now_ms: i64,
    pub window: Duration,
}

/// One operation for the writer: applied inside the batch's transaction, in a savepoint of its
/// own; what it returns answers its caller once the batch's commit is known. Given no
/// connection, it is not applied: its batch failed before reaching it, and its caller is
/// answered with that failure.
type Operation = Box<dyn FnOnce(Option<&Connection>) -> Applied + Send>;

enum Write {
    Op(Operation),
    /// Commit what came before, then stop.
    Close,
}

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    writes: mpsc::UnboundedSender<Write>,
    reader: Arc<Mutex<Connection>>,
    writer: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl Store {
    /// Opens (creating when needed) the database in `state_dir` and starts the writer thread.
    /// With `group_commit` false each write gets its own transaction (for measurement only).
    pub fn open(state_dir: &Path, group_commit: bool) -> Result<Store, StoreError> {
        Self::open_observed(state_dir, group_commit, None)
    }

    /// Like [`Store::open`], recording how long each transaction takes into `commit_time`.
    pub fn open_observed(
        state_dir: &Path,
        group_commit: bool,
        commit_time: Option<Histogram>,
    ) -> Result<Store, StoreError> {
        let file = StoreFile::Main;
        Self::open_with(
            state_dir,
            file,
            group_commit,
            commit_time,
            Synchronous::Full,
        )
    }

    /// A store that holds a copy of data kept durably elsewhere (a NATS node's view of the
    /// stream): a commit survives the process dying, not the machine losing power, which saves an
    /// `fsync` per transaction. What a power cut loses is applied again from the stream.
    pub fn open_copy(
        state_dir: &Path,
        commit_time: Option<Histogram>,
    ) -> Result<Store, StoreError> {
        Self::open_with(
            state_dir,
            StoreFile::Main,
            true,
            commit_time,
            Synchronous::Normal,
        )
    }

    /// The request log's own file ([`REQUEST_LOG_FILE`]), with a writer thread of its own: its
    /// inserts never queue behind intake's commits nor make them larger, and a commit is not
    /// synced to disk (the log is written behind the answers and may lose its last moment in a
    /// crash anyway, docs/operations.md#the-request-log).
    pub fn open_request_log(state_dir: &Path) -> Result<Store, StoreError> {
        Self::open_with(
            state_dir,
            StoreFile::RequestLog,
            true,
            None,
            Synchronous::Normal,
        )
    }

    fn open_with(
        state_dir: &Path,
        file: StoreFile,
        group_commit: bool,
        commit_time: Option<Histogram>,
        synchronous: Synchronous,
    ) -> Result<Store, StoreError> {
        let state_dir_error = |source| StoreError::StateDir {
            path: state_dir.to_path_buf(),
            source,
        };
        crate::private_fs::create_private_dir(state_dir).map_err(state_dir_error)?;
        let (name, migrate, thread): (_, fn(&Connection) -> rusqlite::Result<()>, _) = match file {
            StoreFile::Main => (DB_FILE, migrate, "hookgate-store"),
            StoreFile::RequestLog => (REQUEST_LOG_FILE, migrate_request_log, "hookgate-log"),
        };
        let path = state_dir.join(name);
        crate::private_fs::create_private_file(&path).map_err(state_dir_error)?;
        let writer_conn = open_connection(&path, synchronous)?;
        migrate(&writer_conn)?;
        let reader = open_connection(&path, synchronous)?;
        let (writes, queue) = mpsc::unbounded_channel();
        let batch = if group_commit { MAX_BATCH } else { 1 };
        let writer = std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || write_loop(writer_conn, queue, batch, commit_time, name))
            .map_err(|source| StoreError::StateDir {
                path: state_dir.to_path_buf(),
                source,
            })?;
        Ok(Store {
            writes,
            reader: Arc::new(Mutex::new(reader)),
            writer: Arc::new(Mutex::new(Some(writer))),
        })
    }

    /// Writes a batch of the request log (one operation, however many records).
    pub async fn record_requests(&self, records: Vec<RequestRecord>) -> Result<(), StoreError> {
        self.write(move |conn| RequestRecord::insert_all(conn, &records))
            .await
    }

    /// A page of the request log, newest first.
    pub async fn requests(&self, filter: RequestFilter) -> Result<Vec<RequestRecord>, StoreError> {
        self.read(move |conn| RequestRecord::select(conn, &filter))
            .await
    }

    /// One request of the log with its capture, and the requests that replayed it.
    pub async fn request(
        &self,
        id: &str,
    ) -> Result<Option<(RequestRecord, Vec<String>)>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| RequestRecord::select_one(conn, &id))
            .await
    }

    /// Runs `op` in the writer's next transaction; its result is returned once that transaction
    /// has committed (and is an error if it did not: [`StoreError::Full`] when the file system
    /// had no room for it, whether `op` or the commit found that out). `op` runs in a savepoint of its own, so
    /// when it fails nothing it wrote is kept, and the other writes of the batch are unaffected.
    pub async fn write<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let operation: Operation = Box::new(move |conn| {
            let result = conn.map(|conn| in_savepoint(conn, op));
            let full = matches!(result, Some(Err(StoreError::Full)));
            let answer: Answer = Box::new(move |commit| {
                let _ = reply.send(settle(result, commit));
            });
            Applied { answer, full }
        });
        self.writes
            .send(Write::Op(operation))
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// Queues a run, unless `claim` recognises it as a repeat; answers once committed.
    pub async fn queue_run(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
    ) -> Result<RunQueued, StoreError> {
        self.write(move |conn| queue_run(conn, &run, claim.as_ref()))
            .await
    }

    /// Proves the store can commit a write now: one row rewritten, synced like any other write,
    /// so that a full file system fails it ([`StoreError::Full`]) as it fails intake's writes,
    /// and passes it again as soon as they would commit. Costs one small write in the next
    /// group commit.
    pub async fn probe(&self) -> Result<(), StoreError> {
        self.write(|conn| {
            conn.prepare_cached("INSERT OR REPLACE INTO probe (id, at_ms) VALUES (1, ?1)")?
                .execute([super::clock::now_ms()])
                .map(drop)
        })
        .await
    }

    /// Events of `agent`'s main session with `seq > after` (with `after` `None`: the newest
    /// `limit`), oldest first.
    pub async fn events(
        &self,
        agent: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let agent = agent.to_string();
        self.read(move |conn| EventRecord::select_after(conn, &agent, after, limit))
            .await
    }

    /// Runs per status, and the work waiting (queued runs plus pending outbox sends).
    pub async fn gauges(&self) -> Result<(Vec<(RunStatus, i64)>, i64), StoreError> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT status, COUNT(*) FROM runs GROUP BY status")?;
            let by_status = stmt
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<rusqlite::Result<Vec<(RunStatus, i64)>>>()?;
            let waiting: i64 = conn
                .prepare_cached(
                    "SELECT (SELECT COUNT(*) FROM runs WHERE status = 'queued')
                   + (SELECT COUNT(*) FROM outbox WHERE status = 'pending')",
                )?
                .query_row([], |row| row.get(0))?;
            Ok((by_status, waiting))
        })
        .await
    }

    /// A page of runs, newest first, each with its cursor.
    pub async fn runs(&self, filter: RunFilter) -> Result<Vec<(RunRecord, i64)>, StoreError> {
        self.read(move |conn| RunRecord::select_page(conn, &filter))
            .await
    }

    /// The run with this id, if any.
    pub async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let run_id = run_id.to_string();
        self.read(move |conn| RunRecord::select(conn, &run_id))
            .await
    }

    /// Runs `query` on the read connection, off the async threads.
    pub async fn read<T: Send + 'static>(
        &self,
        query: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let reader = Arc::clone(&self.reader);
        tokio::task::spawn_blocking(move || {
            let conn = reader
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            query(&conn).map_err(StoreError::from)
        })
        .await
        .map_err(|_| StoreError::Closed)?
    }

    /// Commits every write sent before it, checkpoints the WAL and stops the writer, waiting for
    /// it. Writes sent afterwards, through any clone, fail with [`StoreError::Closed`].
    pub fn close(&self) {
        let _ = self.writes.send(Write::Close);
        let writer = self.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
}

/// How far a commit goes before it is answered.
#[derive(Debug, Clone, Copy)]
enum Synchronous {
    /// On disk, even across a power cut: the client hears 200 only after that.
    Full,
    /// In the operating system's hands: survives the process, not the machine.
    Normal,
}

fn open_connection(path: &Path, synchronous: Synchronous) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    // Every statement the store runs stays prepared: rusqlite's default of 16 let some be
    // parsed again on every write (perf: the SQL parser at a tenth of the writer's time).
    conn.set_prepared_statement_cache_capacity(128);
    // Plans never depend on bound values. Without this SQLite marks a statement such as the
    // wake's "newest pending event of agent ?1 ORDER BY seq" to be planned again whenever ?1 is
    // bound, so the cache above kept nothing: perf found the parser and planner on most of the
    // writer thread's samples under /hooks/wake. The store has no statistics (no ANALYZE) for a
    // bound value to improve a plan with.
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    let synchronous = match synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    // SQLite's default page cache (2 MiB) is kept on purpose: a larger one made each commit's
    // cache truncation (pcache1TruncateUnsafe) cost more than the reads it saved (perf, /hooks/agent).
    conn.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous={synchronous}; PRAGMA foreign_keys=ON;"
    ))?;
    Ok(conn)
}

fn write_loop(
    conn: Connection,
    mut queue: mpsc::UnboundedReceiver<Write>,
    max_batch: usize,
    commit_time: Option<Histogram>,
    file: &'static str,
) {
    let mut batch = Vec::with_capacity(max_batch);
    let mut failures = FailureLog::new(file);
    let mut open = true;
    while open {
        let Some(first) = queue.blocking_recv() else {
            break;
        };
        let mut next = Some(first);
        while let Some(write) = next.take() {
            if matches!(write, Write::Close) {
                open = false;
                break;
            }
            batch.push(write);
            if batch.len() < max_batch {
                next = queue.try_recv().ok();
            }
        }
        let started = Instant::now();
        let writes = batch.len();
        let changes = conn.total_changes();
        match commit_batch(&conn, &mut batch) {
            // A commit that changed no row wrote nothing, which a full disk allows: only one
            // that did proves the failure over.
            Ok(()) if conn.total_changes() == changes => {}
            Ok(()) => failures.ended(),
            Err(failure) => failures.failed(&failure, writes),
        }
        if let Some(histogram) = &commit_time {
            histogram.observe(started.elapsed().as_secs_f64());
        }
    }
    // Dropping the receiver makes every later send fail at once.
    drop(queue);
    if let Err(err) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);") {
        tracing::warn!(%err, file, "store checkpoint at shutdown failed");
    }
}

/// Tells one caller the outcome, given whether the batch's commit succeeded.
type Answer = Box<dyn FnOnce(Result<(), CommitFailure>) + Send>;

/// What applying one write left behind.
struct Applied {
    answer: Answer,
    /// It failed for lack of space: if SQLite then rolled the whole transaction back by
    /// itself, that is why.
    full: bool,
}

/// Why a batch did not commit, told to each of its callers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CommitFailure {
    /// [`StoreError::Full`].
    Full,
    /// Anything else, as SQLite put it.
    Failed(String),
}

impl CommitFailure {
    fn of(err: &rusqlite::Error) -> CommitFailure {
        if is_full(err) {
            CommitFailure::Full
        } else {
            CommitFailure::Failed(err.to_string())
        }
    }

    fn to_error(&self) -> StoreError {
        match self {
            CommitFailure::Full => StoreError::Full,
            CommitFailure::Failed(message) => StoreError::Commit(message.clone()),
        }
    }
}

impl std::fmt::Display for CommitFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitFailure::Full => StoreError::Full.fmt(f),
            CommitFailure::Failed(message) => f.write_str(message),
        }
    }
}

/// Applies each write inside its own savepoint, so one failing write does not undo the others, then
/// commits and only then answers the callers. A batch that fails is rolled back whole, and every
/// one of its callers is answered with the failure, those whose write was never reached too.
fn commit_batch(conn: &Connection, batch: &mut Vec<Write>) -> Result<(), CommitFailure> {
    let mut answers: Vec<Answer> = Vec::with_capacity(batch.len());
    let mut writes = batch.drain(..);
    let result = apply_all(conn, &mut writes, &mut answers);
    answers.extend(writes.map(|write| skip(write).answer));
    if result.is_err() && !conn.is_autocommit() {
        // Should this fail too, the next batch rolls back before it begins.
        let _ = control(conn, Control::Rollback);
    }
    for answer in answers {
        answer(result.clone());
    }
    result
}

/// Opens the batch's transaction, applies `writes` in it until one leaves no transaction to go
/// on in, and commits.
fn apply_all(
    conn: &Connection,
    writes: &mut impl Iterator<Item = Write>,
    answers: &mut Vec<Answer>,
) -> Result<(), CommitFailure> {
    let failed = |err: rusqlite::Error| CommitFailure::of(&err);
    // A transaction left open by a rollback that failed would fail every BEGIN from now on: end
    // it first, so that one failure cannot stop the writer for good.
    if !conn.is_autocommit() {
        control(conn, Control::Rollback).map_err(failed)?;
    }
    // IMMEDIATE takes the write lock up front, so a store that cannot be written fails here,
    // before any caller is told anything.
    control(conn, Control::Begin).map_err(failed)?;
    for write in writes {
        let Applied { answer, full } = apply(conn, write);
        answers.push(answer);
        // SQLite rolls a transaction back by itself on some errors (disk full, I/O). A later
        // savepoint would then open and commit a transaction of its own: stop here, and answer
        // every caller of this batch with an error.
        if conn.is_autocommit() {
            return Err(if full {
                CommitFailure::Full
            } else {
                CommitFailure::Failed("transaction rolled back by SQLite".into())
            });
        }
    }
    control(conn, Control::Commit).map_err(failed)
}

/// Applies one write; returns how to answer its caller once the commit outcome is known.
fn apply(conn: &Connection, write: Write) -> Applied {
    match write {
        Write::Op(operation) => operation(Some(conn)),
        Write::Close => skip(Write::Close),
    }
}

/// Leaves a write of a failed batch unapplied: its caller gets the batch's failure.
fn skip(write: Write) -> Applied {
    match write {
        Write::Op(operation) => operation(None),
        Write::Close => Applied {
            answer: Box::new(|_| {}),
            full: false,
        },
    }
}

/// How often a failure that goes on is logged again.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// Logs a store's failing commits so that an operator can read them: the first at once, then at
/// most one line per [`FAILURE_LOG_EVERY`] (or when the cause changes) with the writes refused
/// meanwhile, and one line when commits succeed again. A full disk fails every commit, and a line
/// each would flood the log (and fill a log kept on the same disk). Costs a clock read per
/// failed batch and nothing per successful one.
struct FailureLog {
    file: &'static str,
    /// The failure last logged, when failures began and when they were last logged.
    failing: Option<(CommitFailure, Instant, Instant)>,
    /// Writes refused since the last line.
    refused: usize,
}

impl FailureLog {
    fn new(file: &'static str) -> FailureLog {
        FailureLog {
            file,
            failing: None,
            refused: 0,
        }
    }

    /// A batch of `writes` failed with `failure`.
    fn failed(&mut self, failure: &CommitFailure, writes: usize) {
        self.refused += writes;
        let now = Instant::now();
        let began = match &self.failing {
            None => now,
            Some((said, began, at)) => {
                if said == failure && now.duration_since(*at) < FAILURE_LOG_EVERY {
                    return;
                }
                *began
            }
        };
        let (file, refused) = (self.file, self.refused);
        let failing_for_s = now.duration_since(began).as_secs();
        tracing::error!(
            file,
            %failure,
            refused,
            failing_for_s,
            "store commits failing: their writes are refused (logged again at most once a minute)"
        );
        self.failing = Some((failure.clone(), began, now));
        self.refused = 0;
    }

    /// A batch that changed something committed.
    fn ended(&mut self) {
        if let Some((_, began, _)) = self.failing.take() {
            let (file, refused) = (self.file, self.refused);
            let failed_for_s = began.elapsed().as_secs();
            tracing::warn!(file, refused, failed_for_s, "store commits succeed again");
            self.refused = 0;
        }
    }
}

/// Runs `work` in a savepoint of the open transaction: when it fails, what it wrote is undone
/// and the transaction goes on for the batch's other writes.
fn in_savepoint<T>(
    conn: &Connection,
    work: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> Result<T, StoreError> {
    control(conn, Control::Savepoint)?;
    let result = work(conn).and_then(|value| control(conn, Control::Release).map(|()| value));
    if result.is_err() {
        // When SQLite has already rolled the whole transaction back this fails too, and the
        // batch's commit reports it.
        let _ = control(conn, Control::Undo).and_then(|()| control(conn, Control::Release));
    }
    Ok(result?)
}

/// The statements that open, mark and close the writer's transactions.
#[derive(Debug, Clone, Copy)]
enum Control {
    Begin,
    Commit,
    Rollback,
    Savepoint,
    Release,
    Undo,
}

/// Runs a transaction-control statement, prepared once per connection like every other:
/// rusqlite's `Transaction` and `Savepoint` parse theirs on every use, four statements per
/// write, which perf put at a third of the writer thread's time under /hooks/wake.
fn control(conn: &Connection, control: Control) -> rusqlite::Result<()> {
    let sql = match control {
        Control::Begin => "BEGIN IMMEDIATE",
        Control::Commit => "COMMIT",
        Control::Rollback => "ROLLBACK",
        Control::Savepoint => "SAVEPOINT write",
        Control::Release => "RELEASE write",
        Control::Undo => "ROLLBACK TO write",
    };
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// A caller's answer: its write's own result once its batch committed, else the batch's failure.
fn settle<T>(
    result: Option<Result<T, StoreError>>,
    commit: Result<(), CommitFailure>,
) -> Result<T, StoreError> {
    match (commit, result) {
        (Err(failure), _) => Err(failure.to_error()),
        (Ok(()), Some(result)) => result,
        // Never: a write is left unapplied only in a batch that failed.
        (Ok(()), None) => Err(StoreError::Commit("the write was not applied".into())),
    }
}

pub(super) fn queue_run(
    conn: &Connection,
    run: &NewRun,
    claim: Option<&IdempotencyClaim>,
) -> rusqlite::Result<RunQueued> {
    if let Some(claim) = claim {
        let window_ms = i64::try_from(claim.window.as_millis()).unwrap_or(i64::MAX);
        let earlier: Option<(String, i64)> = conn
            .query_row(
                "SELECT run_id, first_at_ms FROM idempotency WHERE fingerprint = ?1",
                params![claim.fingerprint],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        if let Some((run_id, first_at_ms)) = earlier {
            if claim.now_ms.saturating_sub(first_at_ms) < window_ms {
                return Ok(RunQueued::Replayed { run_id });
            }
        }
        conn.prepare_cached(
            "INSERT OR REPLACE INTO idempotency (fingerprint, run_id, first_at_ms)
             VALUES (?1, ?2, ?3)",
        )?
        .execute(params![claim.fingerprint, run.run_id, claim.now_ms])?;
        conn.prepare_cached("DELETE FROM idempotency WHERE first_at_ms < ?1")?
            .execute(params![claim.now_ms.saturating_sub(window_ms)])?;
    }
    run.insert(conn)?;
    Ok(RunQueued::New {
        run_id: run.run_id.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(run_id: &str) -> NewRun {
        let action = crate::hook::AgentAction {
            message: "m".into(),
            channel: Some(crate::hook::Channel::Last),
            timeout_seconds: Some(u64::MAX),
            ..Default::default()
        };
        NewRun {
            run_id: run_id.into(),
            admitted: crate::hook::AdmittedRun {
                action,
                target_agent: "main".into(),
                session_key: "hook:x".into(),
                session_key_chosen: false,
                source: crate::hook::envelope::ContentSource::Webhook,
                allow_unsafe_external_content: false,
            },
            prompt: "p".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
        }
    }

    fn claim(now_ms: i64) -> Option<IdempotencyClaim> {
        Some(IdempotencyClaim {
            fingerprint: "f".into(),
            now_ms,
            window: Duration::from_secs(300),
        })
    }

    #[tokio::test]
    async fn idempotency_window_counts_from_the_first_delivery() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        let first = store.queue_run(run("r1"), claim(0)).await.unwrap();
        assert_eq!(
            first,
            RunQueued::New {
                run_id: "r1".into()
            }
        );
        let repeat = store.queue_run(run("r2"), claim(299_999)).await.unwrap();
        assert_eq!(
            repeat,
            RunQueued::Replayed {
                run_id: "r1".into()
            }
        );
        let late = store.queue_run(run("r3"), claim(300_000)).await.unwrap();
        assert_eq!(
            late,
            RunQueued::New {
                run_id: "r3".into()
            }
        );
        assert!(
            store.run("r2").await.unwrap().is_none(),
            "a replay writes nothing"
        );
        store.close();
    }

    #[tokio::test]
    async fn huge_timeouts_are_stored_saturated() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        store.queue_run(run("r"), None).await.unwrap();
        let record = store.run("r").await.unwrap().unwrap();
        assert_eq!(
            record.run.action().timeout_seconds,
            Some(i64::MAX.unsigned_abs())
        );
        store.close();
    }

    #[tokio::test]
    async fn the_queue_offers_each_idle_session_its_oldest_run_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        for (id, key) in [
            ("a1", "hook:b"),
            ("b1", "hook:a"),
            ("a2", "hook:b"),
            ("c1", "hook:c"),
        ] {
            let mut new = run(id);
            new.admitted.session_key = key.into();
            store.queue_run(new, None).await.unwrap();
        }
        let queued_for = |limit: u32, busy: &[&str], want: usize| {
            let busy = busy.iter().map(|k| k.to_string()).collect();
            store.read(move |conn| super::super::runs::queued(conn, limit, &busy, want))
        };
        let queued = |limit: u32, busy: &[&str]| queued_for(limit, busy, 1);
        let ids =
            |rows: Vec<(String, String)>| rows.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
        assert_eq!(ids(queued(10, &[]).await.unwrap()), ["a1", "b1", "c1"]);

        let claimed = store
            .write(|conn| super::super::runs::claim(conn, "a1", "now"))
            .await
            .unwrap();
        assert!(claimed.is_some());
        assert_eq!(
            ids(queued(10, &["hook:b"]).await.unwrap()),
            ["b1", "c1"],
            "a session with a run in progress offers nothing, not even its next run"
        );
        assert_eq!(ids(queued(1, &[]).await.unwrap()), ["b1"]);
        // The walk by key skips the keys running in the store.
        let heads = store.read(|conn| super::super::runs::queued_heads(conn, 10));
        assert_eq!(ids(heads.await.unwrap()), ["b1", "c1"]);
        // A first batch with nothing to start is not the end: the walk finds the others.
        assert_eq!(ids(queued(1, &["hook:a"]).await.unwrap()), ["c1"]);
        // Nor is one with fewer than the free slots could start: the walk looks further (and
        // `limit` still bounds the answer).
        assert_eq!(ids(queued_for(1, &[], 2).await.unwrap()), ["b1"]);
        assert_eq!(ids(queued_for(2, &["hook:c"], 2).await.unwrap()), ["b1"]);
        store.close();
    }

    /// A statement stays prepared however its parameters are bound: the wake's check, bound to
    /// another agent each time, is never planned again (it was, on every request, until the
    /// connection asked for stable plans).
    #[tokio::test]
    async fn a_wake_reuses_its_prepared_statement() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        for (agent, text) in [("main", "a"), ("ops", "b"), ("main", "c"), ("main", "c")] {
            let event = super::super::records::NewEvent {
                agent: agent.into(),
                kind: super::super::records::EventKind::System,
                text: text.into(),
                trusted: false,
                source: "hook:wake".into(),
                at: "2026-01-01T00:00:00.000Z".into(),
            };
            store
                .write(move |conn| event.append_wake(conn))
                .await
                .unwrap();
        }
        let reprepared = store
            .write(|conn| {
                let stmt = conn.prepare_cached(super::super::records::NEWEST_PENDING)?;
                Ok(stmt.get_status(rusqlite::StatementStatus::RePrepare))
            })
            .await
            .unwrap();
        assert_eq!(reprepared, 0);
    }

    /// A session's history is searched for on an index, in the order it is read: neither a scan
    /// of every run nor a sort of them.
    #[test]
    fn a_sessions_history_is_read_from_an_index() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("plan.db")).unwrap();
        super::super::schema::migrate(&conn).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!(
                "EXPLAIN QUERY PLAN {}",
                super::super::runs::HISTORY
            ))
            .unwrap()
            .query_map(["hook:x", "main", "run-1", "20"], |row| row.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let runs = plan.iter().find(|step| step.contains(" runs ")).unwrap();
        assert!(
            runs.starts_with("SEARCH runs USING INDEX")
                && ["status=?", "session_key=?", "rowid<?"]
                    .iter()
                    .all(|term| runs.contains(term)),
            "{plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.contains("TEMP B-TREE")),
            "{plan:?}"
        );
    }

    /// A write that fails leaves nothing behind, and the writes batched with it are kept.
    #[tokio::test]
    async fn a_failed_write_is_undone_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        let insert = |text: &'static str, fail: bool| {
            store.write(move |conn| {
                conn.execute(
                    "INSERT INTO events (agent, kind, text, trusted, source, at)
                     VALUES ('main', 'system', ?1, 0, 'test', '2026-01-01T00:00:00.000Z')",
                    [text],
                )?;
                if fail {
                    return Err(rusqlite::Error::InvalidQuery);
                }
                Ok(())
            })
        };
        // Hold the writer in a write of its own while the three are queued, so that they are
        // taken together, as one batch, when it lets go.
        let (entered, writer_held) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let gate = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .write(move |_| {
                        let _ = entered.send(());
                        let _ = released.recv();
                        Ok(())
                    })
                    .await
            }
        });
        tokio::task::spawn_blocking(move || writer_held.recv())
            .await
            .unwrap()
            .unwrap();
        let (a, b, c, ()) = tokio::join!(
            insert("a", false),
            insert("b", true),
            insert("c", false),
            async { release.send(()).unwrap() }
        );
        gate.await.unwrap().unwrap();
        assert!(a.is_ok() && b.is_err() && c.is_ok());
        let texts = store
            .read(|conn| {
                conn.prepare("SELECT text FROM events ORDER BY seq")?
                    .query_map([], |row| row.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .await
            .unwrap();
        assert_eq!(texts, ["a", "c"]);
    }

    /// A write the file has no room for fails as [`StoreError::Full`] (by SQLite's code), and
    /// succeeds once there is room again, with the same writer. `max_page_count` stands in for
    /// a full file system: SQLite answers both with `SQLITE_FULL`.
    #[tokio::test]
    async fn a_full_store_refuses_writes_until_it_has_room() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        let set_room = |pages: Option<u32>| {
            store.write(move |conn| {
                let now: u32 = conn.query_row("PRAGMA page_count", [], |row| row.get(0))?;
                conn.query_row(
                    &format!("PRAGMA max_page_count = {}", pages.unwrap_or(now)),
                    [],
                    |_| Ok(()),
                )
            })
        };
        set_room(None).await.unwrap();
        let big_run = |id: &str| {
            let mut big = run(id);
            big.admitted.action.message = "x".repeat(64 * 1024);
            store.queue_run(big, None)
        };
        assert!(matches!(big_run("r1").await, Err(StoreError::Full)));
        set_room(Some(1 << 20)).await.unwrap();
        big_run("r2").await.unwrap();
        assert!(
            store.run("r1").await.unwrap().is_none(),
            "nothing of r1 kept"
        );
        assert!(store.run("r2").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn writes_after_close_fail_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        let handle = store.clone();
        store.close();
        assert!(matches!(handle.probe().await, Err(StoreError::Closed)));
    }
}
