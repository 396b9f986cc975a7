//! What the writer does with a batch that did not commit: every caller of the batch is told why
//! ([`CommitFailure`]), and the operator is told in the log, without a line per batch
//! ([`FailureLog`]).

use std::time::{Duration, Instant};

use super::error::{StoreError, is_full};

/// Why a batch did not commit, told to each of its callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CommitFailure {
    /// [`StoreError::Full`].
    Full,
    /// Anything else, as SQLite put it.
    Failed(String),
}

impl CommitFailure {
    /// Classifies by SQLite's result code: `SQLITE_FULL` is [`CommitFailure::Full`].
    pub(super) fn of(err: rusqlite::Error) -> CommitFailure {
        if is_full(&err) {
            CommitFailure::Full
        } else {
            CommitFailure::Failed(err.to_string())
        }
    }

    /// The error a caller of the failed batch is answered with.
    pub(super) fn to_error(&self) -> StoreError {
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
    pub(super) fn ended(&mut self) {
        if let Some((_, began, _)) = self.failing.take() {
            let (file, refused) = (self.file, self.refused);
            let failed_for_s = began.elapsed().as_secs();
            tracing::warn!(file, refused, failed_for_s, "store commits succeed again");
            self.refused = 0;
        }
    }
}
