//! The SQL of runs and the main session: claiming queued runs, recording outcomes and deliveries,
//! summaries at most once per run, pending events, and the main session's route as its owner set
//! it. Each function runs inside one transaction of the store's writer (or on its read
//! connection), so a crash leaves either all of an outcome or none of it.

use std::collections::HashSet;

use rusqlite::{Connection, OptionalExtension, params};

use super::provider::Exchange;
use super::records::{DeliveryRecord, NewRun, RunOutcome, RunStatus, SummaryEvent};
use crate::config::runtime::Route;

/// Runs left `running` by a process that died go back to `queued` (at-least-once).
pub fn resume_interrupted(conn: &Connection) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'queued', started_at = NULL WHERE status = 'running'",
    )?
    .execute([])
}

/// Queued runs the runner may start, oldest first, at most `limit`: the oldest queued run of
/// each session key that has none running and is not in `busy` (the keys of the runs this
/// process is running). `want` is how many the caller can start now.
///
/// Hooks usually give each run a key of its own, and then the first `limit` queued runs hold
/// `want` of them: one indexed read of `limit` rows ([`oldest_queued`]). Only when those hold
/// fewer (a backlog of busy keys in front) is the queue walked key by key ([`queued_heads`]),
/// so one busy key with a long backlog never hides the runs of others, nor leaves slots idle.
pub fn queued(
    conn: &Connection,
    limit: u32,
    busy: &HashSet<String>,
    want: usize,
) -> rusqlite::Result<Vec<(String, String)>> {
    let oldest = oldest_queued(conn, limit)?;
    let whole_queue = oldest.len() < limit as usize;
    let mut seen = HashSet::new();
    let startable: Vec<(String, String)> = oldest
        .into_iter()
        .filter(|(_, key)| seen.insert(key.clone()) && !busy.contains(key))
        .collect();
    if startable.len() >= want || whole_queue {
        return Ok(startable);
    }
    // Keys in `busy` are running in the store too, and so not among the heads; the margin
    // covers a key that is busy here before its claim is committed.
    let margin = u32::try_from(busy.len()).unwrap_or(u32::MAX);
    Ok(queued_heads(conn, limit.saturating_add(margin))?
        .into_iter()
        .filter(|(_, key)| !busy.contains(key))
        .take(limit as usize)
        .collect())
}

/// The first `limit` queued runs of keys with none running, oldest first, on the
/// `runs_by_status` index (the running runs are few: at most the runner's slots).
fn oldest_queued(conn: &Connection, limit: u32) -> rusqlite::Result<Vec<(String, String)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT run_id, session_key FROM runs WHERE status = 'queued'
           AND session_key NOT IN (SELECT session_key FROM runs WHERE status = 'running')
         ORDER BY rowid LIMIT ?1",
    )?;
    let rows = stmt.query_map(params![limit], |row| Ok((row.get(0)?, row.get(1)?)))?;
    rows.collect()
}

/// The oldest queued run of each session key that has none running: (run id, session key),
/// oldest first.
///
/// Costs O(k log n) for k session keys with queued runs and n runs, not O(n): the keys are
/// walked on the `runs_queue` index one `MIN(session_key) > previous` step at a time (a loose
/// index scan, which SQLite does not plan by itself), and each key's oldest run is the first
/// entry of that key in the same index. A scan of every queued run here made a backlog of one
/// busy session quadratic to drain, since the runner asks after every run.
pub fn queued_heads(conn: &Connection, limit: u32) -> rusqlite::Result<Vec<(String, String)>> {
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
) -> rusqlite::Result<Option<NewRun>> {
    let changed = conn
        .prepare_cached(
            "UPDATE runs SET status = 'running', started_at = ?2
             WHERE run_id = ?1 AND status = 'queued'",
        )?
        .execute(params![run_id, started_at])?;
    if changed == 0 {
        return Ok(None);
    }
    NewRun::select(conn, run_id)
}

/// A run's status, if the run is known.
pub fn status(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<RunStatus>> {
    conn.prepare_cached("SELECT status FROM runs WHERE run_id = ?1")?
        .query_row(params![run_id], |row| row.get(0))
        .optional()
}

/// Records a run's outcome with its delivery record and summary event (the caller adds the
/// delivery's outbox row in the same transaction).
pub fn finish(
    conn: &Connection,
    run_id: &str,
    outcome: &RunOutcome,
    delivery: &DeliveryRecord,
    summary: Option<&SummaryEvent>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = ?2, reply = ?3, summary = ?4, error = ?5, finished_at = ?6,
             delivery = ?7, answered_by = ?8
         WHERE run_id = ?1",
    )?
    .execute(params![
        run_id,
        outcome.status,
        outcome.reply,
        outcome.summary,
        outcome.error,
        outcome.finished_at,
        delivery_json(delivery),
        outcome.model,
    ])?;
    if let Some(summary) = summary {
        summary.insert(conn)?;
    }
    Ok(())
}

fn delivery_json(delivery: &DeliveryRecord) -> String {
    // Plain data: always serialises.
    serde_json::to_string(delivery).unwrap_or_default()
}

/// Sets a run's delivery record.
pub fn set_delivery(
    conn: &Connection,
    run_id: &str,
    delivery: &DeliveryRecord,
) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE runs SET delivery = ?2 WHERE run_id = ?1")?
        .execute(params![run_id, delivery_json(delivery)])?;
    Ok(())
}

/// Sets a forwarded run's status, with the upstream's run id or its refusal.
pub fn set_forwarded(
    conn: &Connection,
    run_id: &str,
    status: RunStatus,
    upstream: Option<&str>,
    error: Option<&str>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = ?2, upstream_run_id = ?3, error = ?4 WHERE run_id = ?1",
    )?
    .execute(params![run_id, status, upstream, error])?;
    Ok(())
}

/// The main session's route as its owner set it (`PUT /api/sessions/main/route`).
pub fn owner_route(conn: &Connection, agent: &str) -> rusqlite::Result<Option<Route>> {
    conn.prepare_cached("SELECT channel, to_addr FROM routes WHERE agent = ?1")?
        .query_row(params![agent], |row| {
            Ok(Route {
                channel: row.get(0)?,
                to: row.get(1)?,
            })
        })
        .optional()
}

/// Sets the main session's route; `None` clears it (`channels.defaultRoute` applies again).
pub fn set_owner_route(
    conn: &Connection,
    agent: &str,
    route: Option<&Route>,
    at: &str,
) -> rusqlite::Result<()> {
    match route {
        Some(route) => conn
            .prepare_cached(
                "INSERT INTO routes (agent, channel, to_addr, at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (agent) DO UPDATE
                   SET channel = excluded.channel, to_addr = excluded.to_addr, at = excluded.at",
            )?
            .execute(params![agent, route.channel, route.to, at])?,
        None => conn
            .prepare_cached("DELETE FROM routes WHERE agent = ?1")?
            .execute(params![agent])?,
    };
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

/// The most earlier exchanges a persistent run's turn carries, and their most bytes together;
/// the oldest are left out first. Retention prunes them with their runs.
const HISTORY_EXCHANGES: u32 = 20;
const HISTORY_BYTES: usize = 64 * 1024;

/// A session's earlier exchanges, newest first: found on the `runs_queue` index (status and
/// session key), so its cost does not grow with the runs of other sessions.
pub(super) const HISTORY: &str = "SELECT prompt, reply FROM runs
     WHERE session_key = ?1 AND status = 'ok' AND target_agent = ?2
       AND session_mode = 'persistent' AND reply IS NOT NULL
       AND rowid < (SELECT rowid FROM runs WHERE run_id = ?3)
     ORDER BY rowid DESC LIMIT ?4";

/// The earlier exchanges of `run`'s conversation, oldest first: the persistent runs of its agent
/// and session key that ended with a reply, stored before it. Runs of one session key run one
/// after another, so these are complete.
pub fn history(conn: &Connection, run: &NewRun) -> rusqlite::Result<Vec<Exchange>> {
    let mut newest_first: Vec<Exchange> = conn
        .prepare_cached(HISTORY)?
        .query_map(
            params![
                run.admitted.session_key,
                run.admitted.target_agent,
                run.run_id,
                HISTORY_EXCHANGES
            ],
            |row| {
                Ok(Exchange {
                    prompt: row.get(0)?,
                    reply: row.get(1)?,
                })
            },
        )?
        .collect::<rusqlite::Result<_>>()?;
    let mut bytes = 0;
    let kept = newest_first
        .iter()
        .take_while(|exchange| {
            bytes += exchange.prompt.len() + exchange.reply.len();
            bytes <= HISTORY_BYTES
        })
        .count();
    newest_first.truncate(kept);
    newest_first.reverse();
    Ok(newest_first)
}

pub fn consume_events(conn: &Connection, agent: &str, up_to_seq: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE events SET consumed = 1 WHERE agent = ?1 AND seq <= ?2 AND consumed = 0",
    )?
    .execute(params![agent, up_to_seq])?;
    Ok(())
}
