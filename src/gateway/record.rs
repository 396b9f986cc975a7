//! The rows of the store and their JSON form in the operator API: main-session events and runs.

use rusqlite::{Connection, Row, params};
use serde::{Deserialize, Serialize};

/// A main-session event about to be appended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewEvent {
    /// The agent whose main session receives it.
    pub agent: String,
    pub kind: EventKind,
    pub text: String,
    pub trusted: bool,
    /// Where it came from, e.g. `hook:wake`.
    pub source: String,
    /// RFC 3339, UTC.
    pub at: String,
}

/// What kind of main-session event this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// A system event from a wake.
    System,
    /// The summary of a finished agent run.
    Summary,
}

impl EventKind {
    fn as_str(self) -> &'static str {
        match self {
            EventKind::System => "system",
            EventKind::Summary => "summary",
        }
    }
}

impl NewEvent {
    pub(crate) fn insert(&self, conn: &Connection) -> rusqlite::Result<i64> {
        conn.prepare_cached(
            "INSERT INTO events (agent, kind, text, trusted, source, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            self.agent,
            self.kind.as_str(),
            self.text,
            self.trusted,
            self.source,
            self.at
        ])?;
        Ok(conn.last_insert_rowid())
    }
}

/// A committed event, as the operator API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct EventRecord {
    pub seq: i64,
    pub kind: String,
    pub text: String,
    pub trusted: bool,
    pub source: String,
    pub at: String,
}

impl EventRecord {
    pub(crate) fn select_after(
        conn: &Connection,
        agent: &str,
        after: i64,
        limit: u32,
    ) -> rusqlite::Result<Vec<EventRecord>> {
        let mut stmt = conn.prepare_cached(
            "SELECT seq, kind, text, trusted, source, at FROM events
             WHERE agent = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![agent, after, limit], |row| {
            Ok(EventRecord {
                seq: row.get(0)?,
                kind: row.get(1)?,
                text: row.get(2)?,
                trusted: row.get(3)?,
                source: row.get(4)?,
                at: row.get(5)?,
            })
        })?;
        rows.collect()
    }
}

/// A run about to be queued. Field meanings are those of [`RunRecord`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewRun {
    pub run_id: String,
    pub hook_name: String,
    pub agent_id: Option<String>,
    pub target_agent: String,
    pub session_key: String,
    pub message: String,
    pub prompt: String,
    pub deliver: bool,
    pub channel: String,
    pub to: Option<String>,
    pub model: Option<String>,
    pub thinking: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub wake_mode: String,
    pub source: String,
    pub created_at: String,
}

impl NewRun {
    pub(crate) fn insert(&self, conn: &Connection) -> rusqlite::Result<()> {
        conn.prepare_cached(
            "INSERT INTO runs (run_id, status, hook_name, agent_id, target_agent, session_key,
                 message, prompt, deliver, channel, to_addr, model, thinking, timeout_seconds,
                 wake_mode, source, created_at)
             VALUES (?1, 'queued', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        )?
        .execute(params![
            self.run_id,
            self.hook_name,
            self.agent_id,
            self.target_agent,
            self.session_key,
            self.message,
            self.prompt,
            self.deliver,
            self.channel,
            self.to,
            self.model,
            self.thinking,
            self.timeout_seconds
                .map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
            self.wake_mode,
            self.source,
            self.created_at,
        ])?;
        Ok(())
    }
}

/// A run as the operator API shows it (`GET /api/runs/<runId>`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub run_id: String,
    /// `queued` until the runner takes it.
    pub status: String,
    pub hook_name: String,
    /// The resolved target agent, or null when the request named none.
    pub agent_id: Option<String>,
    pub session_key: String,
    /// The message as accepted.
    pub message: String,
    /// Exactly what the agent will be given.
    pub prompt: String,
    pub deliver: bool,
    pub channel: String,
    pub to: Option<String>,
    /// The resolved model id, or null.
    pub model: Option<String>,
    pub thinking: Option<String>,
    pub timeout_seconds: Option<i64>,
    pub wake_mode: String,
    /// `webhook` or `email`.
    pub source: String,
    pub created_at: String,
    /// The agent's reply, once the run finished.
    pub reply: Option<String>,
    /// The first non-empty line of the reply, at most 300 characters.
    pub summary: Option<String>,
    pub error: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// What became of delivering the reply: `{"status":"pending|sent|failed|skipped", ...}`.
    pub delivery: Option<serde_json::Value>,
    /// The upstream gateway's run id, in forward mode.
    pub upstream_run_id: Option<String>,
}

/// The columns of a [`RunRecord`], in the order `from_row` reads them.
const RUN_COLUMNS: &str =
    "run_id, status, hook_name, agent_id, session_key, message, prompt, deliver,
    channel, to_addr, model, thinking, timeout_seconds, wake_mode, source, created_at,
    reply, summary, error, started_at, finished_at, delivery, upstream_run_id";

impl RunRecord {
    pub(crate) fn select(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<RunRecord>> {
        use rusqlite::OptionalExtension;
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
            delivery: row
                .get::<_, Option<String>>(21)?
                .and_then(|text| serde_json::from_str(&text).ok()),
            upstream_run_id: row.get(22)?,
        })
    }

    /// Runs with `status` (any when `None`), newest first.
    pub(crate) fn select_by_status(
        conn: &Connection,
        status: Option<&str>,
        limit: u32,
    ) -> rusqlite::Result<Vec<RunRecord>> {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE (?1 IS NULL OR status = ?1)
             ORDER BY created_at DESC, rowid DESC LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![status, limit], Self::from_row)?;
        rows.collect()
    }
}
