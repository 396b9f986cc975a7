//! What the writer does with a batch that did not commit: every caller of the batch is told why
//! ([`CommitFailure`]), and the operator is told in the log, without a line per batch
//! ([`FailureLog`]).

use std::time::{Duration, Instant};

use super::error::{CommitError, StoreError, is_full};

/// Why a batch did not commit, told to each of its callers.
#[derive(Debug, Clone)]
pub(super) enum CommitFailure {
    /// [`StoreError::Full`].
    Full,
    /// Anything else, with SQLite's error where it had one.
    Failed(CommitError),
}

impl CommitFailure {
    /// Classifies by SQLite's result code: `SQLITE_FULL` is [`CommitFailure::Full`].
    pub(super) fn of(err: rusqlite::Error) -> CommitFailure {
        if is_full(&err) {
            CommitFailure::Full
        } else {
            CommitFailure::Failed(CommitError::Sqlite(err.into()))
        }
    }

    /// The error a caller of the failed batch is answered with.
    pub(super) fn to_error(&self) -> StoreError {
        match self {
            CommitFailure::Full => StoreError::Full,
            CommitFailure::Failed(cause) => StoreError::Commit(cause.clone()),
        }
    }

    fn same_cause(&self, other: &CommitFailure) -> bool {
        match (self, other) {
            (CommitFailure::Full, CommitFailure::Full) => true,
            (CommitFailure::Failed(a), CommitFailure::Failed(b)) => a.same_cause(b),
            _ => false,
        }
    }
}

impl std::fmt::Display for CommitFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitFailure::Full => StoreError::Full.fmt(f),
            CommitFailure::Failed(cause) => cause.fmt(f),
        }
    }
}

/// How often a failure that goes on is logged again.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// Logs a store's failing commits so that an operator can read them: the first at once, then at
/// most one line per [`FAILURE_LOG_EVERY`] (or when the cause changes) with the writes refused
/// meanwhile, and one line when commits succeed again. A full disk fails every commit, and a line
/// each would flood the log (and fill a log kept on the same disk). Costs a clock read per
/// failed batch and nothing per successful one.
pub(super) struct FailureLog {
    file: &'static str,
    /// The failure last logged, when failures began and when they were last logged.
    failing: Option<(CommitFailure, Instant, Instant)>,
    /// Writes refused since the last line.
    refused: usize,
}

impl FailureLog {
    pub(super) fn new(file: &'static str) -> FailureLog {
        FailureLog {
            file,
            failing: None,
            refused: 0,
        }
    }

    /// A batch of `writes` failed with `failure`.
    pub(super) fn failed(&mut self, failure: &CommitFailure, writes: usize) {
        self.refused += writes;
        let now = Instant::now();
        let began = match &self.failing {
            None => now,
            Some((said, began, at)) => {
                if said.same_cause(failure) && now.duration_since(*at) < FAILURE_LOG_EVERY {
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
    pub(super) fn ended(&mut self) {
        if let Some((_, began, _)) = self.failing.take() {
            let (file, refused) = (self.file, self.refused);
            let failed_for_s = began.elapsed().as_secs();
            tracing::warn!(file, refused, failed_for_s, "store commits succeed again");
            self.refused = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32, message: &str) -> CommitFailure {
        let err =
            rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some(message.into()));
        CommitFailure::of(err)
    }

    /// Callers and the log tell failures apart by SQLite's code, and keep SQLite's error.
    #[test]
    fn a_failure_keeps_its_cause_and_is_classified_by_code() {
        let full = sqlite(rusqlite::ffi::SQLITE_FULL, "database or disk is full");
        assert!(matches!(full.to_error(), StoreError::Full));
        let io = sqlite(rusqlite::ffi::SQLITE_IOERR_WRITE, "disk I/O error");
        let error = io.to_error();
        assert_eq!(error.to_string(), "commit failed: disk I/O error");
        assert!(matches!(
            error.cause().and_then(|c| c.downcast_ref::<CommitError>()),
            Some(CommitError::Sqlite(_))
        ));
        assert_eq!(
            format!("{:#}", anyhow::Error::from(error)),
            "commit failed: disk I/O error",
            "a chain printer says the cause once"
        );
        let reworded = sqlite(rusqlite::ffi::SQLITE_IOERR_WRITE, "another wording");
        assert!(io.same_cause(&reworded), "the same code is the same cause");
        let locked = sqlite(rusqlite::ffi::SQLITE_BUSY, "database is locked");
        assert!(!io.same_cause(&locked) && !io.same_cause(&full));
    }
}
