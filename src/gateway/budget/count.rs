//! What a budget's window holds: the runs that entered the queue within it, and the tokens its
//! runs used. Each is one read on an index of the runs by mapping or by agent and age.

use rusqlite::{Connection, params};

use super::{Limit, Scope};

/// How much a window holds, and when the oldest of it entered (milliseconds since the epoch):
/// when that leaves the window, there may be room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    pub count: u64,
    pub oldest_ms: Option<i64>,
}

/// The runs of a mapping that entered the queue after `?2`: accepted then (never held),
/// or released then. Held and cancelled runs have `held_by` set and no `released_at`.
const MAPPING_RUNS: &str = "SELECT COUNT(*), MIN(at) FROM (
       SELECT created_at AS at FROM runs
        WHERE mapping_id = ?1 AND created_at > ?2 AND held_by IS NULL
       UNION ALL
       SELECT released_at FROM runs WHERE mapping_id = ?1 AND released_at > ?2)";

/// The same for the runs of an agent.
const AGENT_RUNS: &str = "SELECT COUNT(*), MIN(at) FROM (
       SELECT created_at AS at FROM runs
        WHERE target_agent = ?1 AND created_at > ?2 AND held_by IS NULL
       UNION ALL
       SELECT released_at FROM runs WHERE target_agent = ?1 AND released_at > ?2)";

/// The tokens the runs of a mapping used, of those that finished after `?2` and used any.
const MAPPING_TOKENS: &str =
    "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), MIN(finished_at)
       FROM runs WHERE mapping_id = ?1 AND created_at > ?2 AND finished_at > ?2
        AND input_tokens + output_tokens > 0";

/// The same for the runs of an agent.
const AGENT_TOKENS: &str = "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), MIN(finished_at)
       FROM runs WHERE target_agent = ?1 AND created_at > ?2 AND finished_at > ?2
        AND input_tokens + output_tokens > 0";

/// What the window of `limit` after `since` (RFC 3339, the store's form, which orders like the
/// times) holds for `scope` `id`: for `runsPerHour` the runs that entered the queue, for
/// `tokensPerDay` the input and output tokens of the runs that finished.
pub(super) fn window(
    conn: &Connection,
    limit: Limit,
    scope: Scope,
    id: &str,
    since: &str,
) -> rusqlite::Result<Window> {
    let sql = match (limit, scope) {
        (Limit::RunsPerHour, Scope::Mapping) => MAPPING_RUNS,
        (Limit::RunsPerHour, Scope::Agent) => AGENT_RUNS,
        (Limit::TokensPerDay, Scope::Mapping) => MAPPING_TOKENS,
        (Limit::TokensPerDay, Scope::Agent) => AGENT_TOKENS,
    };
    let (count, oldest): (i64, Option<String>) = conn
        .prepare_cached(sql)?
        .query_row(params![id, since], |row| Ok((row.get(0)?, row.get(1)?)))?;
    Ok(Window {
        count: u64::try_from(count).unwrap_or(0),
        oldest_ms: oldest
            .and_then(|at| chrono::DateTime::parse_from_rfc3339(&at).ok())
            .map(|at| at.timestamp_millis()),
    })
}
