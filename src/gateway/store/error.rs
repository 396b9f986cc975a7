//! What a caller of the store is told when its write or read fails.

use std::path::PathBuf;

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

/// Whether SQLite failed for lack of room (`SQLITE_FULL`, whatever its extended code).
pub(super) fn is_full(err: &rusqlite::Error) -> bool {
    err.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
}
