//! What a private node has taken from its edge (docs/edge.md#exactly-once): a row per action a
//! delivery made, written in the same SQLite transaction as the action's work (its run, its
//! event, its relay), so that each action and its mark are committed together or not at all;
//! and a row once the delivery is answered. A delivery pulled again after a crash whose actions
//! are all marked, or which was answered, is acknowledged without running; one that stopped
//! part way (a `forEach` request's later actions never made) runs again and makes only the
//! actions not marked.
//!
//! The pipeline's commits do not know which delivery they serve: the private node's worker
//! runs each delivery inside [`scope`], admission runs each action inside [`action_scope`], and
//! [`super::Store::write`] adds the mark of the scope it is called in to that write. The claim
//! of a signed delivery id, which comes before the work, is written without it
//! (`Store::write_unmarked`).

use std::sync::{Arc, OnceLock};

use rusqlite::{Connection, params};
use tokio::task::JoinHandle;

tokio::task_local! {
    static MARK: EdgeMark;
}

/// A delivery a private node's worker is running, or one action of it.
#[derive(Debug, Clone)]
pub struct EdgeMark {
    /// The edge's queue id (a new one whenever its queue file is new).
    pub edge: Arc<str>,
    pub seq: i64,
    /// What of the delivery a write in this scope commits.
    pub part: Part,
}

/// What of a delivery a mark stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The delivery is answered: every action it makes is committed, or it was refused. Writes
    /// made outside any action (the signed delivery's recorded answer) stand for this.
    Answered,
    /// Action `index` of the `of` the delivery's request makes (one, or one per `forEach`
    /// element).
    Action { index: u32, of: u32 },
}

impl Part {
    /// The `action` and `actions` columns: `-1, 0` for [`Part::Answered`].
    fn columns(self) -> (i64, i64) {
        match self {
            Part::Answered => (-1, 0),
            Part::Action { index, of } => (index.into(), of.into()),
        }
    }
}

impl EdgeMark {
    /// The mark of the delivery as a whole, answered.
    pub fn answered(edge: Arc<str>, seq: i64) -> EdgeMark {
        EdgeMark {
            edge,
            seq,
            part: Part::Answered,
        }
    }
}

/// Runs `work` with `mark` as the delivery its store writes commit.
pub async fn scope<F: Future>(mark: EdgeMark, work: F) -> F::Output {
    MARK.scope(mark, work).await
}

/// The delivery of the scope this is called in, if any.
pub fn current() -> Option<EdgeMark> {
    MARK.try_with(EdgeMark::clone).ok()
}

/// Runs `work`, action `index` of `of` of `delivery`'s request, so that the writes it makes
/// mark that action taken.
pub async fn action_scope<F: Future>(
    delivery: &EdgeMark,
    index: u32,
    of: u32,
    work: F,
) -> F::Output {
    let mark = EdgeMark {
        part: Part::Action { index, of },
        ..delivery.clone()
    };
    MARK.scope(mark, work).await
}

/// Spawns `work` in the scope this is called in: a task-local does not cross `tokio::spawn`, so
/// work spawned for a delivery would otherwise commit without its mark (and run again when the
/// delivery is pulled again after a crash). Outside a scope `work` is spawned as it is: an
/// `async` block wrapping it held both `work` and its scoped form, twice its size, and tokio
/// copies a task's whole future at its spawn and at each change of its stage (about 2k
/// instructions per `/hooks/agent`, docs/performance.md).
pub fn spawn_carried<F>(work: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match current() {
        Some(mark) => tokio::spawn(MARK.scope(mark, work)),
        None => tokio::spawn(work),
    }
}

/// The table, made where missing: only a private node has it.
pub(super) fn create(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS edge_marks (
             edge_id TEXT NOT NULL,
             seq     INTEGER NOT NULL,
             action  INTEGER NOT NULL,
             actions INTEGER NOT NULL,
             at_ms   INTEGER NOT NULL,
             PRIMARY KEY (edge_id, seq, action)
         ) WITHOUT ROWID;",
    )
}

/// Marks `mark` taken; a second mark of the same part changes nothing.
pub(super) fn record(conn: &Connection, mark: &EdgeMark, at_ms: i64) -> rusqlite::Result<()> {
    let (action, actions) = mark.part.columns();
    conn.prepare_cached(
        "INSERT OR IGNORE INTO edge_marks (edge_id, seq, action, actions, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![&*mark.edge, mark.seq, action, actions, at_ms])
    .map(drop)
}

/// Whether `seq` of `edge` was taken: answered, or every action of it committed.
pub(super) fn taken(conn: &Connection, edge: &str, seq: i64) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT coalesce(max(action = -1), 0), count(*) FILTER (WHERE action >= 0),
                coalesce(max(actions), 0)
         FROM edge_marks WHERE edge_id = ?1 AND seq = ?2",
    )?
    .query_row(params![edge, seq], |row| {
        let (answered, actions, of): (bool, i64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
        Ok(answered || (actions > 0 && actions >= of))
    })
}

/// The actions of `seq` of `edge` already committed, by index.
pub(super) fn actions_taken(conn: &Connection, edge: &str, seq: i64) -> rusqlite::Result<Vec<u32>> {
    let mut statement = conn.prepare_cached(
        "SELECT action FROM edge_marks WHERE edge_id = ?1 AND seq = ?2 AND action >= 0
         ORDER BY action",
    )?;
    let rows = statement.query_map(params![edge, seq], |row| row.get::<_, u32>(0))?;
    rows.collect()
}

/// Forgets the marks the edge has acknowledged: it never sends those again.
pub(super) fn forget(conn: &Connection, edge: &str, up_to: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM edge_marks WHERE edge_id = ?1 AND seq <= ?2")?
        .execute(params![edge, up_to])
        .map(drop)
}

/// Test-only (docs/edge.md#testing-the-crash-windows): the environment variable naming where a
/// private node kills itself: `<seq>` right after that delivery is answered, before it is
/// marked on its own or acknowledged; `<seq>:<action>` right after that action's commit.
pub const DIE_AFTER_COMMIT_ENV: &str = "HOOKGATE_TEST_EDGE_DIE_AFTER_COMMIT";

/// Kills this process when `mark` is where [`DIE_AFTER_COMMIT_ENV`] says to; `mark`'s work was
/// just committed.
pub fn die_if_told(mark: &EdgeMark) {
    static AT: OnceLock<Option<(i64, Option<u32>)>> = OnceLock::new();
    let at = AT.get_or_init(|| {
        let value = std::env::var(DIE_AFTER_COMMIT_ENV).ok()?;
        match value.split_once(':') {
            None => Some((value.parse().ok()?, None)),
            Some((seq, action)) => Some((seq.parse().ok()?, Some(action.parse().ok()?))),
        }
    });
    let part = match mark.part {
        Part::Answered => None,
        Part::Action { index, .. } => Some(index),
    };
    if *at == Some((mark.seq, part)) {
        // SAFETY: kill(2) on our own process id has no memory effects.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(seq: i64, part: Part) -> EdgeMark {
        EdgeMark {
            edge: "e".into(),
            seq,
            part,
        }
    }

    #[test]
    fn a_delivery_is_taken_once_answered_or_every_action_is_marked() {
        let conn = Connection::open_in_memory().unwrap();
        create(&conn).unwrap();
        let action = |index, of| Part::Action { index, of };
        record(&conn, &mark(1, action(0, 3)), 0).unwrap();
        record(&conn, &mark(1, action(2, 3)), 0).unwrap();
        assert!(!taken(&conn, "e", 1).unwrap(), "action 1 of 3 is missing");
        assert_eq!(actions_taken(&conn, "e", 1).unwrap(), [0, 2]);
        record(&conn, &mark(1, action(1, 3)), 0).unwrap();
        assert!(taken(&conn, "e", 1).unwrap());
        record(&conn, &mark(2, Part::Answered), 0).unwrap();
        assert!(
            taken(&conn, "e", 2).unwrap(),
            "refused: answered, no action"
        );
        assert!(actions_taken(&conn, "e", 2).unwrap().is_empty());
        assert!(!taken(&conn, "e", 3).unwrap());
        assert!(!taken(&conn, "other", 1).unwrap());
        forget(&conn, "e", 1).unwrap();
        assert!(!taken(&conn, "e", 1).unwrap());
    }

    /// Spawned work carries the scope's mark into its task.
    #[tokio::test]
    async fn spawned_work_inside_a_scope_sees_its_mark() {
        let seen = scope(mark(42, Part::Answered), async {
            spawn_carried(async { current() }).await
        })
        .await
        .unwrap();
        assert_eq!(seen.map(|m| m.seq), Some(42));
    }

    /// Outside a scope it carries none.
    #[tokio::test]
    async fn spawned_work_outside_a_scope_sees_no_mark() {
        let seen = spawn_carried(async { current() }).await.unwrap();
        assert!(seen.is_none());
    }
}
