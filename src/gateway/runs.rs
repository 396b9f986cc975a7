//! The SQL of the runtime: claiming queued runs, recording outcomes, summaries at most once per
//! run, the outbox and the main session's last route. Each function runs inside one transaction
//! of the store's writer (or on its read connection), so a crash leaves either all of an outcome
//! or none of it.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use crate::config::runtime::Route;
use crate::hook::Channel;

/// What the runner needs of a queued run.
#[derive(Debug, Clone)]
pub struct RunWork {
    pub run_id: String,
    pub hook_name: String,
    pub target_agent: String,
    pub prompt: String,
    pub model: Option<String>,
    pub thinking: Option<String>,
    pub timeout_seconds: Option<i64>,
    pub deliver: bool,
    pub channel: String,
    pub to: Option<String>,
    pub wake_mode: String,
    pub session_key: String,
}

impl RunWork {
    /// What the runner needs of a run, from the run as accepted.
    pub fn of(run: &super::NewRun) -> RunWork {
        RunWork {
            run_id: run.run_id.clone(),
            hook_name: run.hook_name.clone(),
            target_agent: run.target_agent.clone(),
            prompt: run.prompt.clone(),
            model: run.model.clone(),
            thinking: run.thinking.clone(),
            timeout_seconds: run
                .timeout_seconds
                .map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
            deliver: run.deliver,
            channel: run.channel.clone(),
            to: run.to.clone(),
            wake_mode: run.wake_mode.clone(),
            session_key: run.session_key.clone(),
        }
    }
}

/// Runs left `running` by a process that died go back to `queued` (at-least-once).
pub fn resume_interrupted(conn: &Connection) -> rusqlite::Result<usize> {
    conn.execute(
        "UPDATE runs SET status = 'queued', started_at = NULL WHERE status = 'running'",
        [],
    )
}

/// The oldest queued run of each session key that has none running: (run id, session key),
/// oldest first. One busy key with a long backlog therefore never hides the runs of others.
///
/// Costs O(k log n) for k session keys with queued runs and n runs, not O(n): the keys are
/// walked on the `runs_queue` index one `MIN(session_key) > previous` step at a time (a loose
/// index scan, which SQLite does not plan by itself), and each key's oldest run is the first
/// entry of that key in the same index. A scan of every queued run here made a backlog of one
/// busy session quadratic to drain, since the runner asks after every run.
pub fn queued(conn: &Connection, limit: u32) -> rusqlite::Result<Vec<(String, String)>> {
    let mut stmt = conn.prepare_cached(
        "WITH RECURSIVE keys(key) AS (
             SELECT MIN(session_key) FROM runs WHERE status = 'queued'
             UNION ALL
             SELECT (SELECT MIN(session_key) FROM runs WHERE status = 'queued' AND session_key > key)
             FROM keys WHERE key IS NOT NULL
         ),
         heads(key, head) AS (
             SELECT key, (SELECT rowid FROM runs WHERE status = 'queued' AND session_key = key
                          ORDER BY rowid LIMIT 1)
             FROM keys
             WHERE key IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM runs WHERE status = 'running' AND session_key = key)
         )
         SELECT runs.run_id, heads.key FROM heads JOIN runs ON runs.rowid = heads.head
         ORDER BY heads.head LIMIT ?1",
    )?;
    let rows = stmt.query_map(params![limit], |row| Ok((row.get(0)?, row.get(1)?)))?;
    rows.collect()
}

/// Marks a queued run `running`; `None` when another claim got there first.
pub fn claim(
    conn: &Connection,
    run_id: &str,
    started_at: &str,
) -> rusqlite::Result<Option<RunWork>> {
    let changed = conn.execute(
        "UPDATE runs SET status = 'running', started_at = ?2 WHERE run_id = ?1 AND status = 'queued'",
        params![run_id, started_at],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    conn.query_row(
        "SELECT run_id, hook_name, target_agent, prompt, model, thinking,
                timeout_seconds, deliver, channel, to_addr, wake_mode, session_key
         FROM runs WHERE run_id = ?1",
        params![run_id],
        |row| {
            Ok(RunWork {
                run_id: row.get(0)?,
                hook_name: row.get(1)?,
                target_agent: row.get(2)?,
                prompt: row.get(3)?,
                model: row.get(4)?,
                thinking: row.get(5)?,
                timeout_seconds: row.get(6)?,
                deliver: row.get(7)?,
                channel: row.get(8)?,
                to: row.get(9)?,
                wake_mode: row.get(10)?,
                session_key: row.get(11)?,
            })
        },
    )
    .optional()
}

/// A run's status, if the run is known.
pub fn status(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT status FROM runs WHERE run_id = ?1",
        params![run_id],
        |row| row.get(0),
    )
    .optional()
}

/// How a run ended.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunOutcome {
    /// `ok`, `error` or `timeout`.
    pub status: String,
    pub reply: Option<String>,
    pub summary: Option<String>,
    pub error: Option<String>,
    pub finished_at: String,
}

/// Records a run's outcome and what follows from it, in one transaction.
pub fn finish(
    conn: &Connection,
    run_id: &str,
    outcome: &RunOutcome,
    delivery: &Value,
    summary: Option<&SummaryEvent>,
    outbox: Option<&OutboxEntry>,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE runs SET status = ?2, reply = ?3, summary = ?4, error = ?5, finished_at = ?6, delivery = ?7
         WHERE run_id = ?1",
        params![
            run_id,
            outcome.status,
            outcome.reply,
            outcome.summary,
            outcome.error,
            outcome.finished_at,
            delivery.to_string()
        ],
    )?;
    if let Some(summary) = summary {
        summary.insert(conn)?;
    }
    if let Some(entry) = outbox {
        entry.insert(conn)?;
    }
    Ok(())
}

/// The untrusted main-session event that tells the agent what a run did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SummaryEvent {
    pub agent: String,
    pub run_id: String,
    pub text: String,
    pub at: String,
}

impl SummaryEvent {
    /// Inserts the event unless this run already has one: a resumed run or a retried delivery
    /// never adds a second summary.
    pub fn insert(&self, conn: &Connection) -> rusqlite::Result<bool> {
        let inserted = conn.execute(
            "INSERT OR IGNORE INTO events (agent, kind, text, trusted, source, at, run_id)
             VALUES (?1, 'summary', ?2, 0, 'hook:run', ?3, ?4)",
            params![self.agent, self.text, self.at, self.run_id],
        )?;
        Ok(inserted == 1)
    }
}

/// A row of the outbox: something to send, retried until it is done or given up.
#[derive(Debug, Clone)]
pub struct OutboxEntry {
    pub kind: &'static str,
    pub run_id: Option<String>,
    pub payload: Value,
    pub created_at: String,
    pub now_ms: i64,
}

impl OutboxEntry {
    pub fn insert(&self, conn: &Connection) -> rusqlite::Result<()> {
        conn.execute(
            "INSERT INTO outbox (kind, run_id, payload, next_at_ms, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![self.kind, self.run_id, self.payload.to_string(), self.now_ms, self.created_at],
        )?;
        Ok(())
    }
}

/// An outbox row due for an attempt.
#[derive(Debug, Clone)]
pub struct DueEntry {
    pub id: i64,
    pub kind: String,
    pub run_id: Option<String>,
    pub payload: Value,
    pub attempts: u32,
}

impl DueEntry {
    /// From a row of `SELECT id, kind, run_id, payload, attempts`.
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<DueEntry> {
        let payload: String = row.get(3)?;
        Ok(DueEntry {
            id: row.get(0)?,
            kind: row.get(1)?,
            run_id: row.get(2)?,
            payload: serde_json::from_str(&payload).unwrap_or(Value::Null),
            attempts: row.get(4)?,
        })
    }
}

/// Rows due at `now_ms`, oldest first.
pub fn due(conn: &Connection, now_ms: i64, limit: u32) -> rusqlite::Result<Vec<DueEntry>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, kind, run_id, payload, attempts FROM outbox
         WHERE status = 'pending' AND next_at_ms <= ?1 ORDER BY id LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![now_ms, limit], DueEntry::from_row)?;
    rows.collect()
}

/// When the next pending row is due, if any.
pub fn next_due_ms(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.query_row(
        "SELECT MIN(next_at_ms) FROM outbox WHERE status = 'pending'",
        [],
        |row| row.get(0),
    )
}

/// Marks a row as being sent; a process that dies now leaves it `sending`, which the next start
/// does not resend (see [`abandon_in_flight`]).
pub fn mark_sending(conn: &Connection, id: i64) -> rusqlite::Result<bool> {
    Ok(conn.execute(
        "UPDATE outbox SET status = 'sending' WHERE id = ?1 AND status = 'pending'",
        params![id],
    )? == 1)
}

/// Sets a row's status and error, and its next attempt when it goes back to pending.
pub fn settle(
    conn: &Connection,
    id: i64,
    status: &str,
    error: Option<&str>,
    attempts: u32,
    next_at_ms: i64,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE outbox SET status = ?2, last_error = ?3, attempts = ?4, next_at_ms = ?5 WHERE id = ?1",
        params![id, status, error, attempts, next_at_ms],
    )?;
    Ok(())
}

/// Rows a dead process was sending: `kind` rows that are safe to repeat go back to pending,
/// the others are given up as `uncertain` (a chat message is never sent twice). Returns the
/// given-up rows so that their runs can be told.
pub fn abandon_in_flight(conn: &Connection) -> rusqlite::Result<Vec<DueEntry>> {
    conn.execute(
        "UPDATE outbox SET status = 'pending' WHERE status = 'sending' AND kind LIKE 'forward-%'",
        [],
    )?;
    let mut stmt = conn.prepare(
        "SELECT id, kind, run_id, payload, attempts FROM outbox WHERE status = 'sending'",
    )?;
    let rows: Vec<DueEntry> = stmt
        .query_map([], DueEntry::from_row)?
        .collect::<rusqlite::Result<_>>()?;
    conn.execute(
        "UPDATE outbox SET status = 'uncertain' WHERE status = 'sending'",
        [],
    )?;
    Ok(rows)
}

/// Sets a run's delivery record (and, for forwarded runs, status and upstream id).
pub fn set_delivery(conn: &Connection, run_id: &str, delivery: &Value) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE runs SET delivery = ?2 WHERE run_id = ?1",
        params![run_id, delivery.to_string()],
    )?;
    Ok(())
}

pub fn set_forwarded(
    conn: &Connection,
    run_id: &str,
    status: &str,
    upstream: Option<&str>,
    error: Option<&str>,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE runs SET status = ?2, upstream_run_id = ?3, error = ?4 WHERE run_id = ?1",
        params![run_id, status, upstream, error],
    )?;
    Ok(())
}

/// The main session's last route.
pub fn last_route(conn: &Connection, agent: &str) -> rusqlite::Result<Option<Route>> {
    conn.query_row(
        "SELECT channel, to_addr FROM routes WHERE agent = ?1",
        params![agent],
        |row| {
            let channel: String = row.get(0)?;
            Ok(Channel::parse(&channel).map(|channel| Route {
                channel,
                to: row.get(1).ok().flatten(),
            }))
        },
    )
    .optional()
    .map(Option::flatten)
}

pub fn set_last_route(
    conn: &Connection,
    agent: &str,
    route: &Route,
    at: &str,
) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO routes (agent, channel, to_addr, at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (agent) DO UPDATE SET channel = excluded.channel, to_addr = excluded.to_addr, at = excluded.at",
        params![agent, route.channel.as_str(), route.to, at],
    )?;
    Ok(())
}

/// A pending main-session event, for a heartbeat.
#[derive(Debug, Clone)]
pub struct PendingEvent {
    pub seq: i64,
    pub text: String,
    pub at: String,
}

pub fn pending_events(
    conn: &Connection,
    agent: &str,
    limit: u32,
) -> rusqlite::Result<Vec<PendingEvent>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, text, at FROM events WHERE agent = ?1 AND consumed = 0 ORDER BY seq LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![agent, limit], |row| {
        Ok(PendingEvent {
            seq: row.get(0)?,
            text: row.get(1)?,
            at: row.get(2)?,
        })
    })?;
    rows.collect()
}

pub fn consume_events(conn: &Connection, agent: &str, up_to_seq: i64) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE events SET consumed = 1 WHERE agent = ?1 AND seq <= ?2 AND consumed = 0",
        params![agent, up_to_seq],
    )?;
    Ok(())
}
