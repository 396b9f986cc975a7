//! What a budget's window holds: the runs that entered the queue within it (counted here, not
//! by `spend::spend_since`, whose run count is every run created, held ones included: a held
//! run enters the queue when released, and counts from then), and the tokens its runs used
//! (`spend::spend_since`, which sums them for the operator's spend view too). Each is a read on
//! an index of the runs by mapping or by agent and time (schema 12).

use rusqlite::{Connection, params};

use super::{Limit, Scope};
use crate::gateway::store::spend::{SpendScope, spend_since};

/// How much a window holds, and when the oldest of it entered (milliseconds since the epoch):
/// when that leaves the window, there may be room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    pub count: u64,
    pub oldest_ms: Option<i64>,
}

/// The count of the runs whose `$scope` column is `?1` that entered the queue after `?2`:
/// accepted then (never held), or released then (held and cancelled runs have `held_by` set and
/// no `released_at`). Each part stops at `?3` rows, oldest first, on its index: the answer is
/// exact below the limit `?3` and at least `?3` past it, which is all a budget asks, so a read
/// costs at most the limit, however many runs the window holds. A macro, so that each scope's
/// statement is one literal built at compile time.
macro_rules! runs_entered {
    ($scope:literal) => {
        concat!(
            "SELECT COUNT(*), MIN(at) FROM (
       SELECT * FROM (SELECT created_at AS at FROM runs
        WHERE ",
            $scope,
            " = ?1 AND created_at > ?2 AND held_by IS NULL
        ORDER BY created_at LIMIT ?3)
       UNION ALL
       SELECT * FROM (SELECT released_at FROM runs WHERE ",
            $scope,
            " = ?1 AND released_at > ?2
        ORDER BY released_at LIMIT ?3))"
        )
    };
}

/// The runs of a mapping that entered the queue in the window ([`runs_entered`]).
pub(super) const MAPPING_RUNS: &str = runs_entered!("mapping_id");

/// The same for the runs of an agent.
pub(super) const AGENT_RUNS: &str = runs_entered!("target_agent");

/// When the oldest run of a mapping that used tokens finished after `?2` finished: when the
/// first of its tokens leaves the window (`spend_since` sums them).
pub(super) const MAPPING_TOKENS_OLDEST: &str = "SELECT MIN(finished_at) FROM runs
       WHERE mapping_id = ?1 AND finished_at >= ?2 AND input_tokens + output_tokens > 0";

/// The same for an agent: its runs' and its heartbeat turns' tokens (`spend_since` sums both).
pub(super) const AGENT_TOKENS_OLDEST: &str = "SELECT MIN(at) FROM (
       SELECT MIN(finished_at) AS at FROM runs
        WHERE target_agent = ?1 AND finished_at >= ?2 AND input_tokens + output_tokens > 0
       UNION ALL
       SELECT MIN(finished_at) FROM heartbeat_turns
        WHERE agent = ?1 AND finished_at >= ?2 AND input_tokens + output_tokens > 0)";

/// What the window of `limit` after `since` (RFC 3339, the store's form, which orders like the
/// times) holds for `scope` `id`: for `runsPerHour` the runs that entered the queue, for
/// `tokensPerDay` the input and output tokens of the runs that finished. Runs are counted up to
/// `at_most` (the limit): past it the count says only that it is reached.
pub(super) fn window(
    conn: &Connection,
    limit: Limit,
    scope: Scope,
    id: &str,
    since: &str,
    at_most: u64,
) -> rusqlite::Result<Window> {
    let (count, oldest) = match limit {
        Limit::RunsPerHour => {
            let sql = match scope {
                Scope::Mapping => MAPPING_RUNS,
                Scope::Agent => AGENT_RUNS,
            };
            let (count, oldest): (i64, Option<String>) = conn.prepare_cached(sql)?.query_row(
                params![id, since, i64::try_from(at_most).unwrap_or(i64::MAX)],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
            (count.unsigned_abs(), oldest)
        }
        Limit::TokensPerDay => {
            let (spend_scope, sql) = match scope {
                Scope::Mapping => (SpendScope::Mapping(id), MAPPING_TOKENS_OLDEST),
                Scope::Agent => (SpendScope::Agent(id), AGENT_TOKENS_OLDEST),
            };
            let spend = spend_since(conn, spend_scope, since)?;
            let oldest: Option<String> = conn
                .prepare_cached(sql)?
                .query_row(params![id, since], |row| row.get(0))?;
            let tokens = spend.input_tokens.saturating_add(spend.output_tokens);
            (tokens, oldest)
        }
    };
    Ok(Window {
        count,
        oldest_ms: oldest
            .and_then(|at| chrono::DateTime::parse_from_rfc3339(&at).ok())
            .map(|at| at.timestamp_millis()),
    })
}
