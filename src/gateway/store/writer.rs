//! The group-commit writer both of the state directory's databases are written through
//! (`hookgate.db` behind [`super::Store`], `requests.db` behind the request log's store). It knows
//! nothing of what it writes: a write is any closure over a SQLite connection.
//!
//! What it guarantees:
//! - **A write is answered once it is committed.** One thread per database takes every write
//!   waiting in its queue (at most [`MAX_BATCH`]) and commits them in one transaction (group
//!   commit); a caller hears its result only after that commit, so with [`Synchronous::Full`]
//!   an acknowledged write survives a crash or a power cut ([`Synchronous::Normal`]: a crash of
//!   the process, not of the machine).
//! - **Callers share one `fsync`**: a batch costs one sync, however many writes it holds.
//! - **A write that fails is undone alone**: beside others in a batch, each runs in a savepoint
//!   of its own, so its error leaves nothing of it and the other writes of its batch are kept; a
//!   write alone in its batch needs none: when it fails, the whole transaction is rolled back.
//! - **A commit that fails is rolled back whole** (the state directory's file system full, an
//!   I/O error) and every caller of its batch is told so, by type ([`StoreError::Full`] or
//!   [`StoreError::Commit`]); the writer goes on with the next batch, so once the cause is gone
//!   (space freed) writes commit again without a restart (docs/reliability.md#a-full-disk). The
//!   log says so at most once a minute ([`super::failure::FailureLog`]).
//! - **Reads never wait for the writer**: they use a connection of their own (WAL mode) on a
//!   blocking thread. They do wait for each other: there is one read connection per database.
//!
//! What it costs: a thread and two connections per database, a savepoint per write of a batch of
//! several, two boxed closures and a channel per write, and up to [`MAX_BATCH`] writes of latency
//! for the last write of a full batch.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prometheus_client::metrics::histogram::Histogram;
use rusqlite::{Connection, Statement};
use tokio::sync::{mpsc, oneshot};

use super::error::{CommitError, StoreError};
use super::failure::{CommitFailure, FailureLog};

/// The most submissions one transaction takes; bounds the latency a batch adds to its first member.
const MAX_BATCH: usize = 512;

/// How far a commit goes before it is answered.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Synchronous {
    /// On disk, even across a power cut: the client hears 200 only after that.
    Full,
    /// In the operating system's hands: survives the process, not the machine.
    Normal,
}

/// One of the state directory's databases, as the writer opens it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DatabaseFile {
    /// Its file name inside the state directory (also the `file` of the writer's log lines).
    pub name: &'static str,
    /// The name of its writer thread.
    pub thread: &'static str,
    /// Brings its schema up to date, on the writer's connection, before anything else runs.
    pub migrate: fn(&Connection) -> rusqlite::Result<()>,
    pub synchronous: Synchronous,
}

/// One operation for the writer: applied inside the batch's transaction as its [`Target`]
/// says; what it returns answers its caller once the batch's commit is known.
type Operation = Box<dyn FnOnce(Target<'_>) -> Applied + Send>;

/// Where an [`Operation`] is applied.
#[derive(Clone, Copy)]
enum Target<'c> {
    /// Alone in its batch's transaction: no savepoint, since when it fails the writer rolls the
    /// whole transaction back instead of committing it. The sequential `/hooks/wake` measure
    /// (one write per batch) spent about 7,000 instructions a request on the savepoint, its
    /// release and the copies of the pages it wrote that SQLite keeps while one is open.
    Alone(&'c Connection),
    /// Beside other writes, in a savepoint of its own.
    Shared(&'c Connection),
    /// Not applied: its batch failed before reaching it, and its caller is answered with that
    /// failure.
    Skipped,
}

enum Write {
    Op(Operation),
    /// Commit what came before, then stop.
    Close,
}

/// A database with its writer thread and its read connection; cheap to clone.
#[derive(Clone)]
pub(crate) struct Database {
    writes: mpsc::UnboundedSender<Write>,
    reader: Arc<Mutex<Connection>>,
    writer: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl Database {
    /// Opens (creating when needed, private to hookgate's user) `file` in `state_dir`, brings
    /// its schema up to date and starts its writer thread. With `group_commit` false each write
    /// gets its own transaction (for measurement only); `commit_time` records how long each
    /// transaction takes.
    pub(crate) fn open(
        state_dir: &Path,
        file: DatabaseFile,
        group_commit: bool,
        commit_time: Option<Histogram>,
    ) -> Result<Database, StoreError> {
        let state_dir_error = |cause| StoreError::StateDir {
            path: state_dir.to_path_buf(),
            cause,
        };
        crate::private_fs::create_private_dir(state_dir).map_err(state_dir_error)?;
        let path = state_dir.join(file.name);
        crate::private_fs::create_private_file(&path).map_err(state_dir_error)?;
        let writer_conn = open_connection(&path, file.synchronous)?;
        (file.migrate)(&writer_conn)?;
        let reader = open_connection(&path, file.synchronous)?;
        let (writes, queue) = mpsc::unbounded_channel();
        let batch = if group_commit { MAX_BATCH } else { 1 };
        let writer = std::thread::Builder::new()
            .name(file.thread.into())
            .spawn(move || write_loop(writer_conn, queue, batch, commit_time, file.name))
            .map_err(state_dir_error)?;
        Ok(Database {
            writes,
            reader: Arc::new(Mutex::new(reader)),
            writer: Arc::new(Mutex::new(Some(writer))),
        })
    }

    /// Runs `op` in the writer's next transaction; its result is returned once that transaction
    /// has committed (and is an error if it did not: [`StoreError::Full`] when the file system
    /// had no room for it, whether `op` or the commit found that out). When `op` fails nothing
    /// it wrote is kept (its savepoint is rolled back, or the whole transaction when it was
    /// alone in it), and the other writes of the batch are unaffected.
    pub(crate) async fn write<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let operation: Operation = Box::new(move |target| {
            let result = match target {
                Target::Alone(conn) => Some(op(conn).map_err(StoreError::from)),
                Target::Shared(conn) => Some(in_savepoint(conn, op)),
                Target::Skipped => None,
            };
            let full = matches!(result, Some(Err(StoreError::Full)));
            let failed = matches!(result, Some(Err(_)));
            let answer: Answer = Box::new(move |commit| {
                let _ = reply.send(settle(result, commit));
            });
            Applied {
                answer,
                full,
                failed,
            }
        });
        self.writes
            .send(Write::Op(operation))
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// Runs `query` on the read connection, off the async threads.
    pub(crate) async fn read<T: Send + 'static>(
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
    pub(crate) fn close(&self) {
        let _ = self.writes.send(Write::Close);
        let writer = self.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
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
    let mut transactions = match Transactions::prepare(&conn) {
        Ok(transactions) => transactions,
        Err(err) => {
            // Never on a connection its migrations just ran on; if it were, every write would
            // be answered that the store is closed.
            tracing::error!(%err, file, "store writer cannot prepare its transactions");
            return;
        }
    };
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
        match commit_batch(&conn, &mut transactions, &mut batch) {
            Ok(Ended::RolledBack) => continue,
            // A commit that changed no row wrote nothing, which a full disk allows: only one
            // that did proves the failure over.
            Ok(Ended::Committed) if conn.total_changes() == changes => {}
            Ok(Ended::Committed) => failures.ended(),
            Err(failure) => failures.failed(&failure, writes),
        }
        if let Some(histogram) = &commit_time {
            histogram.observe(started.elapsed().as_secs_f64());
        }
    }
    // Dropping the receiver makes every later send fail at once.
    drop(queue);
    drop(transactions);
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
    /// It failed: applied [`Target::Alone`], its transaction must not be committed.
    failed: bool,
}

/// Applies each write (inside its own savepoint when it has company, so one failing write does
/// not undo the others), then commits and only then answers the callers. A batch that fails is
/// rolled back whole, and every one of its callers is answered with the failure, those whose
/// write was never reached too.
fn commit_batch(
    conn: &Connection,
    transactions: &mut Transactions<'_>,
    batch: &mut Vec<Write>,
) -> Result<Ended, CommitFailure> {
    let mut answers: Vec<Answer> = Vec::with_capacity(batch.len());
    let mut writes = batch.drain(..);
    let result = apply_all(conn, transactions, &mut writes, &mut answers);
    answers.extend(writes.map(|write| skip(write).answer));
    if result.is_err() && !conn.is_autocommit() {
        // Should this fail too, the next batch rolls back before it begins.
        let _ = transactions.rollback.execute([]);
    }
    let outcome = result.clone().map(|_| ());
    for answer in answers {
        answer(outcome.clone());
    }
    result
}

/// How a batch's transaction ended, when no commit failed.
#[derive(Debug, Clone, Copy)]
enum Ended {
    Committed,
    /// Its one write failed and was undone: its caller has its own error, and nothing was
    /// written, so neither the commit time nor the end of a failure is recorded.
    RolledBack,
}

/// Opens the batch's transaction, applies `writes` in it until one leaves no transaction to go
/// on in, and commits; a write alone that failed is rolled back instead, its caller answered
/// with its own error.
fn apply_all(
    conn: &Connection,
    transactions: &mut Transactions<'_>,
    writes: &mut impl ExactSizeIterator<Item = Write>,
    answers: &mut Vec<Answer>,
) -> Result<Ended, CommitFailure> {
    let failed = CommitFailure::of;
    // A transaction left open by a rollback that failed would fail every BEGIN from now on: end
    // it first, so that one failure cannot stop the writer for good.
    if !conn.is_autocommit() {
        transactions.rollback.execute([]).map_err(failed)?;
    }
    // IMMEDIATE takes the write lock up front, so a store that cannot be written fails here,
    // before any caller is told anything.
    transactions.begin.execute([]).map_err(failed)?;
    let alone = writes.len() == 1;
    let mut undo = false;
    for write in writes {
        let target = if alone {
            Target::Alone(conn)
        } else {
            Target::Shared(conn)
        };
        let Applied {
            answer,
            full,
            failed: write_failed,
        } = apply(target, write);
        answers.push(answer);
        undo = alone && write_failed;
        // SQLite rolls a transaction back by itself on some errors (disk full, I/O). A later
        // savepoint would then open and commit a transaction of its own: stop here, and answer
        // every caller of this batch with an error.
        if conn.is_autocommit() {
            return Err(if full {
                CommitFailure::Full
            } else {
                CommitFailure::Failed(CommitError::RolledBack)
            });
        }
    }
    if undo {
        // Nothing of the batch is kept, which is what its caller is told by its own error.
        // Should the rollback fail, the next batch rolls back before it begins.
        let _ = transactions.rollback.execute([]);
        return Ok(Ended::RolledBack);
    }
    transactions.commit.execute([]).map_err(failed)?;
    Ok(Ended::Committed)
}

/// Applies one write; returns how to answer its caller once the commit outcome is known.
fn apply(target: Target<'_>, write: Write) -> Applied {
    match write {
        Write::Op(operation) => operation(target),
        Write::Close => skip(Write::Close),
    }
}

/// Leaves a write of a failed batch unapplied: its caller gets the batch's failure.
fn skip(write: Write) -> Applied {
    match write {
        Write::Op(operation) => operation(Target::Skipped),
        Write::Close => Applied {
            answer: Box::new(|_| {}),
            full: false,
            failed: false,
        },
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

/// The statements that open and close the writer's transactions, prepared once for its
/// connection and held for its life: rusqlite's `Transaction` parses its own on every use, and
/// taking them from the connection's statement cache cost a lookup (hashing the text) and a
/// return for each, about 1,000 instructions a statement, two a commit.
struct Transactions<'c> {
    begin: Statement<'c>,
    commit: Statement<'c>,
    rollback: Statement<'c>,
}

impl<'c> Transactions<'c> {
    fn prepare(conn: &'c Connection) -> rusqlite::Result<Transactions<'c>> {
        Ok(Transactions {
            begin: conn.prepare("BEGIN IMMEDIATE")?,
            commit: conn.prepare("COMMIT")?,
            rollback: conn.prepare("ROLLBACK")?,
        })
    }
}

/// The statements that mark a write's savepoint in a batch of several.
#[derive(Debug, Clone, Copy)]
enum Control {
    Savepoint,
    Release,
    Undo,
}

/// Runs a savepoint statement, prepared once per connection like every other: rusqlite's
/// `Savepoint` parses its own on every use, which perf put at a third of the writer thread's
/// time under /hooks/wake.
fn control(conn: &Connection, control: Control) -> rusqlite::Result<()> {
    let sql = match control {
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
        (Ok(()), None) => Err(StoreError::Commit(CommitError::NotApplied)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notes(conn: &Connection) -> rusqlite::Result<()> {
        conn.execute_batch("CREATE TABLE IF NOT EXISTS notes (text TEXT NOT NULL)")
    }

    fn open(dir: &Path) -> Database {
        let file = DatabaseFile {
            name: "notes.db",
            thread: "notes-writer",
            migrate: notes,
            synchronous: Synchronous::Full,
        };
        Database::open(dir, file, true, None).unwrap()
    }

    fn texts(db: &Database) -> impl Future<Output = Result<Vec<String>, StoreError>> {
        db.read(|conn| {
            conn.prepare("SELECT text FROM notes ORDER BY rowid")?
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
    }

    /// A write that fails leaves nothing behind, and the writes batched with it are kept.
    #[tokio::test]
    async fn a_failed_write_is_undone_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let insert = |text: &'static str, fail: bool| {
            db.write(move |conn| {
                conn.execute("INSERT INTO notes (text) VALUES (?1)", [text])?;
                if fail {
                    return Err(rusqlite::Error::InvalidQuery);
                }
                Ok(())
            })
        };
        // Hold the writer while the three are queued, so that they are taken together, as one
        // batch, when it lets go.
        let held = db.hold().await;
        let (a, b, c, ()) = tokio::join!(
            insert("a", false),
            insert("b", true),
            insert("c", false),
            held.let_go()
        );
        assert!(a.is_ok() && b.is_err() && c.is_ok());
        assert_eq!(texts(&db).await.unwrap(), ["a", "c"]);
    }

    /// A write alone in its batch runs in no savepoint: when it fails after writing, its
    /// caller gets its own error, the transaction is rolled back rather than committed, and the
    /// next write commits as usual.
    #[tokio::test]
    async fn a_failed_write_alone_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let failed = db
            .write(|conn| {
                conn.execute("INSERT INTO notes (text) VALUES ('lost')", [])?;
                Err::<(), _>(rusqlite::Error::InvalidQuery)
            })
            .await;
        assert!(matches!(
            failed,
            Err(StoreError::Sqlite(rusqlite::Error::InvalidQuery))
        ));
        db.write(|conn| conn.execute("INSERT INTO notes (text) VALUES ('kept')", []))
            .await
            .unwrap();
        assert_eq!(texts(&db).await.unwrap(), ["kept"]);
    }

    /// A write the file has no room for fails as [`StoreError::Full`] (by SQLite's code), and
    /// succeeds once there is room again, with the same writer. `max_page_count` stands in for
    /// a full file system: SQLite answers both with `SQLITE_FULL`.
    #[tokio::test]
    async fn a_full_database_refuses_writes_until_it_has_room() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let set_room = |pages: Option<u32>| {
            db.write(move |conn| {
                let now: u32 = conn.query_row("PRAGMA page_count", [], |row| row.get(0))?;
                conn.query_row(
                    &format!("PRAGMA max_page_count = {}", pages.unwrap_or(now)),
                    [],
                    |_| Ok(()),
                )
            })
        };
        set_room(None).await.unwrap();
        let big_note = |id: &str| {
            let text = format!("{id}{}", "x".repeat(64 * 1024));
            db.write(move |conn| conn.execute("INSERT INTO notes (text) VALUES (?1)", [text]))
        };
        assert!(matches!(big_note("1").await, Err(StoreError::Full)));
        set_room(Some(1 << 20)).await.unwrap();
        big_note("2").await.unwrap();
        let kept = texts(&db).await.unwrap();
        assert_eq!(kept.len(), 1, "nothing of the first note kept");
        assert!(kept[0].starts_with('2'));
    }

    #[tokio::test]
    async fn writes_after_close_fail_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let handle = db.clone();
        db.close();
        let write = handle.write(|conn| conn.execute("INSERT INTO notes (text) VALUES ('a')", []));
        assert!(matches!(write.await, Err(StoreError::Closed)));
    }
}
