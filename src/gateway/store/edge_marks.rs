//! What a private node has taken from its edge (docs/edge.md#exactly-once): one row per edge
//! sequence number, written in the same SQLite transaction as the work the request made (its
//! run, its event, its relay), so that the work and the mark are committed together or not at
//! all. A delivery pulled again after a crash whose mark is here has been run: it is
//! acknowledged, not run a second time.
//!
//! The pipeline's commits do not know which delivery they serve: the private node's worker
//! runs each delivery inside [`scope`], and [`super::Store::write`] adds the mark of the scope
//! it is called in to that write. The claim of a signed delivery id, which comes before the
//! work, is written without it (`Store::write_unmarked`).

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};

tokio::task_local! {
    static MARK: EdgeMark;
}

/// The delivery a private node's worker is running: the edge's identity and its sequence number.
#[derive(Debug, Clone)]
pub struct EdgeMark {
    /// The edge's queue id (a new one whenever its queue file is new).
    pub edge: Arc<str>,
    pub seq: i64,
}

/// Runs `work` with `mark` as the delivery its store writes commit.
pub async fn scope<F: Future>(mark: EdgeMark, work: F) -> F::Output {
    MARK.scope(mark, work).await
}

/// The mark of the scope this is called in, if any.
pub(super) fn current() -> Option<EdgeMark> {
    MARK.try_with(EdgeMark::clone).ok()
}

/// `work` in the scope this is called in, for a task of its own: a task-local does not cross
/// `tokio::spawn`, so work spawned for a delivery would otherwise commit without its mark (and
/// run again when the delivery is pulled again after a crash).
pub fn carried<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let mark = current();
    async move {
        match mark {
            Some(mark) => MARK.scope(mark, work).await,
            None => work.await,
        }
    }
}

/// The table, made where missing: only a private node has it.
pub(super) fn create(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS edge_marks (
             edge_id TEXT NOT NULL,
             seq     INTEGER NOT NULL,
             at_ms   INTEGER NOT NULL,
             PRIMARY KEY (edge_id, seq)
         ) WITHOUT ROWID;",
    )
}

/// Marks `mark` taken; a second mark of the same delivery changes nothing.
pub(super) fn record(conn: &Connection, mark: &EdgeMark, at_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO edge_marks (edge_id, seq, at_ms) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![&*mark.edge, mark.seq, at_ms])
    .map(drop)
}

/// Whether `seq` of `edge` was taken.
pub(super) fn taken(conn: &Connection, edge: &str, seq: i64) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM edge_marks WHERE edge_id = ?1 AND seq = ?2")?
        .query_row(params![edge, seq], |_| Ok(()))
        .optional()
        .map(|row| row.is_some())
}

/// Forgets the marks the edge has acknowledged: it never sends those again.
pub(super) fn forget(conn: &Connection, edge: &str, up_to: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM edge_marks WHERE edge_id = ?1 AND seq <= ?2")?
        .execute(params![edge, up_to])
        .map(drop)
}
