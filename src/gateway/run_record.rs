//! A run as the operator API shows and lists it: [`RunRecord`], read from the store's row, and
//! [`RunFilter`], which runs a listing returns.

use rusqlite::Error::FromSqlConversionFailure;
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

use super::records::{DeliveryRecord, RunStatus};
use crate::hook::envelope::ContentSource;
use crate::hook::{Channel, Thinking, WakeMode};

/// A run as the operator API shows it (`GET /api/runs/<runId>`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub run_id: String,
    pub status: RunStatus,
    pub hook_name: String,
    /// The resolved target agent, or null when the request named none.
    pub agent_id: Option<String>,
    pub session_key: String,
    /// The message as accepted.
    pub message: String,
    /// Exactly what the agent will be given.
    pub prompt: String,
    pub deliver: bool,
    pub channel: Channel,
    pub to: Option<String>,
    /// The resolved model id, or null.
    pub model: Option<String>,
    pub thinking: Option<Thinking>,
    pub timeout_seconds: Option<i64>,
    pub wake_mode: WakeMode,
    pub source: ContentSource,
    pub created_at: String,
    /// The agent's reply, once the run finished.
    pub reply: Option<String>,
    /// The first non-empty line of the reply, at most 300 characters.
    pub summary: Option<String>,
    pub error: Option<String>,
    /// The model id that answered (a fallback, when the primary failed for a while).
    pub answered_by: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// What became of delivering the reply.
    pub delivery: Option<DeliveryRecord>,
    /// The upstream gateway's run id, in forward mode.
    pub upstream_run_id: Option<String>,
    /// 1, and one more for each retry of its turn.
    pub attempts: u32,
}

/// The columns of a [`RunRecord`], in the order `from_row` reads them.
const RUN_COLUMNS: &str =
    "run_id, status, hook_name, agent_id, session_key, message, prompt, deliver,
    channel, to_addr, model, thinking, timeout_seconds, wake_mode, source, created_at,
    reply, summary, error, started_at, finished_at, delivery, upstream_run_id, answered_by,
    attempts";
/// Where a listing's cursor (the row's `rowid`) comes after [`RUN_COLUMNS`].
const CURSOR_AT: usize = 25;

impl RunRecord {
    pub(crate) fn select(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<RunRecord>> {
        conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?1"))?
            .query_row(params![run_id], Self::from_row)
            .optional()
    }

    fn from_row(row: &Row<'_>) -> rusqlite::Result<RunRecord> {
        Ok(RunRecord {
            run_id: row.get(0)?,
            status: row.get(1)?,
            hook_name: row.get(2)?,
            agent_id: row.get(3)?,
            session_key: row.get(4)?,
            message: row.get(5)?,
            prompt: row.get(6)?,
            deliver: row.get(7)?,
            channel: row.get(8)?,
            to: row.get(9)?,
            model: row.get(10)?,
            thinking: row.get(11)?,
            timeout_seconds: row.get(12)?,
            wake_mode: row.get(13)?,
            source: row.get(14)?,
            created_at: row.get(15)?,
            reply: row.get(16)?,
            summary: row.get(17)?,
            error: row.get(18)?,
            started_at: row.get(19)?,
            finished_at: row.get(20)?,
            delivery: json_column(row, 21)?,
            upstream_run_id: row.get(22)?,
            answered_by: row.get(23)?,
            attempts: row.get(24)?,
        })
    }

    /// A page of runs, newest first, each with its cursor (for `before` of the next page).
    pub(crate) fn select_page(
        conn: &Connection,
        filter: &RunFilter,
    ) -> rusqlite::Result<Vec<(RunRecord, i64)>> {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS}, rowid FROM runs
             WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR hook_name = ?2)
               AND (?3 IS NULL OR session_key = ?3) AND (?4 IS NULL OR created_at >= ?4)
               AND (?5 IS NULL OR rowid < ?5)
             ORDER BY rowid DESC LIMIT ?6"
        ))?;
        let rows = stmt.query_map(
            params![
                filter.status,
                filter.hook,
                filter.session_key,
                filter.since,
                filter.before,
                filter.limit
            ],
            |row| Ok((Self::from_row(row)?, row.get(CURSOR_AT)?)),
        )?;
        rows.collect()
    }
}

/// A JSON text column read as `T`. Text that does not read as `T` is a corrupt row, as a text
/// that names no enum variant is: reading it as null would show a delivery that never happened.
fn json_column<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    index: usize,
) -> rusqlite::Result<Option<T>> {
    row.get::<_, Option<String>>(index)?
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|err| FromSqlConversionFailure(index, Type::Text, Box::new(err)))
}

/// Which runs a listing returns, newest first.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    pub hook: Option<String>,
    pub session_key: Option<String>,
    /// RFC 3339, milliseconds, UTC: runs created at or after it.
    pub since: Option<String>,
    /// The previous page's cursor.
    pub before: Option<i64>,
    pub limit: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_follows_every_run_column() {
        assert_eq!(RUN_COLUMNS.split(',').count(), CURSOR_AT);
    }
}
