//! The embedded store: one SQLite file in WAL mode under `gateway.stateDir` ([`DB_FILE`]), written
//! through the group-commit writer ([`writer`]): an acknowledged write survives a crash,
//! concurrent callers share one `fsync`, a commit that fails is rolled back whole (and writes
//! commit again once its cause is gone, docs/reliability.md#a-full-disk), and reads never wait
//! for the writer.
//!
//! [`Store`] is the handle on this database (events, runs, the outbox); the request log's file
//! has a handle of its own (`requests::RequestLogStore`), with a writer thread of its own, so
//! that a query of one database does not compile against the other. The queries are written
//! beside the records they read (`runs`, `records`, `run_record`, `requests`): those a caller
//! only awaits are methods of their handle (`Store::runs`, `RequestLogStore::page`), the others
//! functions over a connection that a backend runs through [`Store::write`] or [`Store::read`],
//! so that it can commit several in one transaction (a run's outcome with its summary).

pub mod edge_marks;
mod error;
mod failure;
#[cfg(test)]
mod held;
pub(super) mod held_by;
pub(super) mod next_runs;
pub mod overview;
pub(super) mod records;
pub(super) mod run_view;
pub(super) mod run_wire;
pub(super) mod runs;
pub(super) mod schema;
pub mod spend;
pub(super) mod turn_record;
mod writer;

use std::path::Path;
use std::sync::Arc;

use prometheus_client::metrics::histogram::Histogram;
use rusqlite::Connection;

use self::schema::migrate;
pub use error::{CommitError, StoreError};
pub(super) use writer::{Database, DatabaseFile, Synchronous};

/// The file name of the database inside the state directory.
pub const DB_FILE: &str = "hookgate.db";

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

    /// Runs `op` in the writer's next transaction and answers once that transaction has
    /// committed; a failed `op` keeps nothing of itself and leaves the other writes of the
    /// transaction alone; a failed commit answers [`StoreError::Full`] or [`StoreError::Commit`]
    /// and keeps nothing of `op` (the writer's module says how).
    ///
    /// Inside an [`edge_marks::scope`] the write also marks the scope's delivery taken, in the
    /// same transaction (docs/edge.md#exactly-once).
    pub async fn write<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        match edge_marks::current() {
            None => self.db.write(op).await,
            Some(mark) => {
                let marked = mark.clone();
                let done = self
                    .db
                    .write(move |conn| {
                        let done = op(conn)?;
                        edge_marks::record(conn, &marked, super::clock::now_ms())?;
                        Ok(done)
                    })
                    .await?;
                edge_marks::die_if_told(&mark);
                Ok(done)
            }
        }
    }

    /// [`Store::write`] that marks no edge delivery taken: for what comes before a request's
    /// work (the claim of its delivery id), which must not stand for the work.
    pub async fn write_unmarked<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.db.write(op).await
    }

    /// Makes the table of edge deliveries taken (a private node's, docs/edge.md).
    pub async fn open_edge_marks(&self) -> Result<(), StoreError> {
        self.db
            .write(|conn| {
                edge_marks::create(conn)?;
                super::admission::replay::release_unanswered(conn)
            })
            .await
    }

    /// Whether delivery `seq` of `edge` was taken: answered, or every action it makes committed.
    pub async fn edge_taken(&self, edge: Arc<str>, seq: i64) -> Result<bool, StoreError> {
        self.db
            .read(move |conn| edge_marks::taken(conn, &edge, seq))
            .await
    }

    /// The actions of the delivery this is called for (inside an [`edge_marks::scope`]) that
    /// are committed already, by index; none outside a scope.
    pub async fn edge_actions_taken(&self) -> Result<Vec<u32>, StoreError> {
        let Some(mark) = edge_marks::current() else {
            return Ok(Vec::new());
        };
        self.db
            .read(move |conn| edge_marks::actions_taken(conn, &mark.edge, mark.seq))
            .await
    }

    /// Marks `mark` taken on its own: a delivery once answered, whatever it committed (nothing
    /// when it was refused or filtered).
    pub async fn mark_edge_taken(&self, mark: edge_marks::EdgeMark) -> Result<(), StoreError> {
        self.db
            .write(move |conn| edge_marks::record(conn, &mark, super::clock::now_ms()))
            .await
    }

    /// Forgets the marks of deliveries the edge acknowledged up to `up_to`.
    pub async fn forget_edge_marks(&self, edge: Arc<str>, up_to: i64) -> Result<(), StoreError> {
        self.db
            .write(move |conn| edge_marks::forget(conn, &edge, up_to))
            .await
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
