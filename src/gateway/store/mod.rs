//! The embedded store: one SQLite file in WAL mode under `gateway.stateDir` ([`DB_FILE`]), written
//! through the group-commit writer ([`writer`]): an acknowledged write survives a crash,
//! concurrent callers share one `fsync`, a commit that fails is rolled back whole (and writes
//! commit again once its cause is gone, docs/reliability.md#a-full-disk), and reads never wait
//! for the writer.

mod error;
mod failure;
mod writer;

use std::path::Path;
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;
use rusqlite::{Connection, OptionalExtension, params};

use super::records::{NewRun, RunStatus};
use super::requests::{RequestFilter, RequestRecord};
use super::schema::{migrate, migrate_request_log};
pub use error::{CommitError, StoreError};
use writer::{Database, DatabaseFile, Synchronous};

/// The file name of the database inside the state directory.
pub const DB_FILE: &str = "hookgate.db";

/// The file name of the request log's database inside the state directory.
pub const REQUEST_LOG_FILE: &str = "requests.db";

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

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Database,
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
        let file = main_file(Synchronous::Full);
        let db = Database::open(state_dir, file, group_commit, commit_time)?;
        Ok(Store { db })
    }

    /// A store that holds a copy of data kept durably elsewhere (a NATS node's view of the
    /// stream): a commit survives the process dying, not the machine losing power, which saves an
    /// `fsync` per transaction. What a power cut loses is applied again from the stream.
    pub fn open_copy(
        state_dir: &Path,
        commit_time: Option<Histogram>,
    ) -> Result<Store, StoreError> {
        let file = main_file(Synchronous::Normal);
        let db = Database::open(state_dir, file, true, commit_time)?;
        Ok(Store { db })
    }

    /// The request log's own file ([`REQUEST_LOG_FILE`]), with a writer thread of its own: its
    /// inserts never queue behind intake's commits nor make them larger, and a commit is not
    /// synced to disk (the log is written behind the answers and may lose its last moment in a
    /// crash anyway, docs/operations.md#the-request-log).
    pub fn open_request_log(state_dir: &Path) -> Result<Store, StoreError> {
        let file = DatabaseFile {
            name: REQUEST_LOG_FILE,
            thread: "hookgate-log",
            migrate: migrate_request_log,
            synchronous: Synchronous::Normal,
        };
        let db = Database::open(state_dir, file, true, None)?;
        Ok(Store { db })
    }

    /// Runs `op` in the writer's next transaction, in a savepoint of its own, and answers once
    /// that transaction has committed; a failed commit answers [`StoreError::Full`] or
    /// [`StoreError::Commit`] and keeps nothing of `op` (the writer's module says how).
    pub async fn write<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.db.write(op).await
    }

    /// Runs `query` on the read connection, off the async threads, without waiting for the
    /// writer.
    pub async fn read<T: Send + 'static>(
        &self,
        query: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.db.read(query).await
    }

    /// Commits every write sent before it, checkpoints the WAL and stops the writer, waiting for
    /// it. Writes sent afterwards, through any clone, fail with [`StoreError::Closed`].
    pub fn close(&self) {
        self.db.close();
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
}

/// The main database, synced as far as `synchronous` says.
fn main_file(synchronous: Synchronous) -> DatabaseFile {
    DatabaseFile {
        name: DB_FILE,
        thread: "hookgate-store",
        migrate,
        synchronous,
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
        NewRun {
            run_id: run_id.into(),
            hook_name: "Hook".into(),
            agent_id: None,
            target_agent: "main".into(),
            session_key: "hook:x".into(),
            message: "m".into(),
            prompt: "p".into(),
            deliver: true,
            channel: crate::hook::Channel::Last,
            to: None,
            model: None,
            thinking: None,
            timeout_seconds: Some(u64::MAX),
            wake_mode: crate::hook::WakeMode::Now,
            source: crate::hook::envelope::ContentSource::Webhook,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            session_mode: Default::default(),
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
        assert_eq!(record.timeout_seconds, Some(i64::MAX));
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
            new.session_key = key.into();
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
}
