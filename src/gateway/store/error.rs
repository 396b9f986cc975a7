//! What a caller of the store is told when its write or read fails: each failure keeps the error
//! it came from, so that callers tell them apart by type, never by wording.

use std::path::PathBuf;
use std::sync::Arc;

/// A failure of the store. The message is for the log, never for a client. A message that
/// includes its cause does not return it as [`std::error::Error::source`] too (a chain printer
/// would say it twice): [`StoreError::cause`] gives it typed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Any failure of SQLite but [`StoreError::Full`].
    #[error("sqlite: {0}")]
    Sqlite(rusqlite::Error),
    /// The state directory's file system has no room for the write (SQLite's `SQLITE_FULL`):
    /// nothing of it was kept, and the same write succeeds once space is freed.
    #[error("the state directory's file system is full")]
    Full,
    #[error("cannot create state directory {path}: {cause}")]
    StateDir {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("the store is closed")]
    Closed,
    /// The transaction holding the write failed to commit, for another reason than
    /// [`StoreError::Full`]; nothing of it was kept.
    #[error("commit failed: {0}")]
    Commit(CommitError),
    /// A record larger than the NATS servers take in one message: the client's to mend (413).
    #[error("a {size}-byte record is over the store's limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    /// The NATS cluster failed; the cluster's own error, which says what it was doing.
    #[error(transparent)]
    Cluster(Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// The error this failure's message ends with, for code that needs its type: SQLite's,
    /// the file system's, the [`CommitError`] or the cluster's own; `None` for a failure that
    /// has no other cause.
    pub fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            StoreError::Sqlite(err) => Some(err),
            StoreError::StateDir { cause, .. } => Some(cause),
            StoreError::Commit(cause) => Some(cause),
            StoreError::Cluster(err) => Some(err.as_ref()),
            StoreError::Full | StoreError::Closed | StoreError::TooLarge { .. } => None,
        }
    }
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

/// Whether SQLite failed for lack of room (`SQLITE_FULL`, whatever its extended code).
pub(super) fn is_full(err: &rusqlite::Error) -> bool {
    err.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
}

/// Why a batch's transaction did not commit, when the disk was not full. Every write of the
/// batch is told the same failure: cloning it shares SQLite's error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommitError {
    /// SQLite refused to begin, commit or roll back the transaction.
    #[error(transparent)]
    Sqlite(Arc<rusqlite::Error>),
    /// SQLite rolled the transaction back by itself (an I/O error, say) while a write of the
    /// batch was applied; the write's own error went to its caller.
    #[error("transaction rolled back by SQLite")]
    RolledBack,
    /// The write was never applied although its batch committed; the writer never does this.
    #[error("the write was not applied")]
    NotApplied,
}

impl CommitError {
    /// Whether `self` and `other` have the same cause: the same variant and, for SQLite's
    /// errors, the same kind and extended result code (their messages are not compared).
    pub(super) fn same_cause(&self, other: &CommitError) -> bool {
        let cause = |err: &rusqlite::Error| {
            let code = match err {
                rusqlite::Error::SqliteFailure(failure, _) => Some(failure.extended_code),
                _ => None,
            };
            (std::mem::discriminant(err), code)
        };
        match (self, other) {
            (CommitError::Sqlite(a), CommitError::Sqlite(b)) => cause(a) == cause(b),
            (CommitError::RolledBack, CommitError::RolledBack)
            | (CommitError::NotApplied, CommitError::NotApplied) => true,
            _ => false,
        }
    }
}
