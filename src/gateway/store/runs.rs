//! The SQL of runs and the main session: queueing runs (once per idempotency key), claiming
//! them, recording outcomes and deliveries, summaries at most once per run, pending events, and
//! the main session's route as its owner set it. Each function runs inside one transaction of
//! the store's writer (or on its read connection), so a crash leaves either all of an outcome
//! or none of it. [`Store::queue_run`] and [`Store::gauges`] wrap the two a caller needs alone.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::records::{DeliveryRecord, NewRun, RunOutcome, RunStatus, SummaryEvent};
use super::turn_record::Exchange;
use super::turn_record::ModelCall;
use super::{Store, StoreError};
use crate::config::runtime::Route;
use crate::gateway::clock::now_rfc3339;

/// What became of a queued run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunQueued {
    /// Newly committed with status `queued`.
    New { run_id: String },
    /// A repeat of an earlier request within the idempotency window: nothing was written.
    Replayed { run_id: String },
}

/// Idempotency data for a run: its fingerprint, and the window in which a repeat is recognised.
#[derive(Debug, Clone)]
pub struct IdempotencyClaim {
    pub fingerprint: String,
    pub now_ms: i64,
    pub window: Duration,
}

impl Store {
    /// Queues a run, unless `claim` recognises it as a repeat; answers once committed.
    pub async fn queue_run(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
    ) -> Result<RunQueued, StoreError> {
        self.write(move |conn| queue_run(conn, &run, claim.as_ref()))
            .await
    }

    /// Runs per status, and the work waiting (queued runs plus pending outbox sends).
    pub async fn gauges(&self) -> Result<(Vec<(RunStatus, i64)>, i64), StoreError> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT status, COUNT(*) FROM runs GROUP BY status")?;
            let by_status = stmt
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<rusqlite::Result<Vec<(RunStatus, i64)>>>()?;
            let waiting: i64 = conn
                .prepare_cached(
                    "SELECT (SELECT COUNT(*) FROM runs WHERE status = 'queued')
                   + (SELECT COUNT(*) FROM outbox WHERE status = 'pending')",
                )?
                .query_row([], |row| row.get(0))?;
            Ok((by_status, waiting))
        })
        .await
    }
}

/// Inserts `run` as `queued`, unless `claim`'s fingerprint was first seen within its window
/// (then nothing is written); remembers the claim and forgets those older than the window. Runs
/// in the caller's transaction: the embedded store's writer, or forward mode's with its relay.
pub fn queue_run(
    conn: &Connection,
    run: &NewRun,
    claim: Option<&IdempotencyClaim>,
) -> rusqlite::Result<RunQueued> {
    Ok(queue_or_start(conn, run, claim, None)?.0)
}

/// How [`queue_or_start`] left a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Stored `running`: its caller starts it.
    Running,
    /// Queued for the runner, or not stored at all (a repeat).
    Waiting,
}

/// Queues `run` as [`queue_run`] does, or with `started_at` stores it `running` from then
/// when nothing waits before it ([`waits`]): the claim of it made in the same transaction.
pub fn queue_or_start(
    conn: &Connection,
    run: &NewRun,
    claim: Option<&IdempotencyClaim>,
    started_at: Option<&str>,
) -> rusqlite::Result<(RunQueued, Stored)> {
    if let Some(claim) = claim {
        if let Some(run_id) = repeat_of(conn, claim)? {
            return Ok((RunQueued::Replayed { run_id }, Stored::Waiting));
        }
        record_claim(conn, claim, &run.run_id)?;
    }
    let started_at = match started_at {
        Some(at) if !waits(conn, &run.admitted.session_key)? => Some(at),
        _ => None,
    };
    run.insert_as(conn, started_at)?;
    let run_id = run.run_id.clone();
    let stored = match started_at {
        Some(_) => Stored::Running,
        None => Stored::Waiting,
    };
    Ok((RunQueued::New { run_id }, stored))
}

/// Whether a run of `session_key` would wait if queued now: a run is queued (the runner
/// starts queued runs first, in their own order), or one of its key is running.
pub(in crate::gateway) const WAITS: &str =
    "SELECT EXISTS (SELECT 1 FROM runs WHERE status = 'queued')
     OR EXISTS (SELECT 1 FROM runs WHERE status = 'running' AND session_key = ?1)";

/// Costs two look-ups on the status indexes ([`WAITS`]).
fn waits(conn: &Connection, session_key: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached(WAITS)?
        .query_row(params![session_key], |row| row.get(0))
}

/// The run of the request `claim` repeats: the first with its fingerprint, when that was within
/// the claim's window.
pub fn repeat_of(conn: &Connection, claim: &IdempotencyClaim) -> rusqlite::Result<Option<String>> {
    let earlier: Option<(String, i64)> = conn
        .prepare_cached("SELECT run_id, first_at_ms FROM idempotency WHERE fingerprint = ?1")?
        .query_row(params![claim.fingerprint], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    Ok(earlier
        .filter(|(_, first_at_ms)| claim.now_ms.saturating_sub(*first_at_ms) < window_ms(claim))
        .map(|(run_id, _)| run_id))
}

/// Remembers `claim`'s fingerprint for `run_id`, and forgets those older than its window.
pub fn record_claim(
    conn: &Connection,
    claim: &IdempotencyClaim,
    run_id: &str,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO idempotency (fingerprint, run_id, first_at_ms)
         VALUES (?1, ?2, ?3)",
    )?
    .execute(params![claim.fingerprint, run_id, claim.now_ms])?;
    conn.prepare_cached("DELETE FROM idempotency WHERE first_at_ms < ?1")?
        .execute(params![claim.now_ms.saturating_sub(window_ms(claim))])?;
    Ok(())
}

fn window_ms(claim: &IdempotencyClaim) -> i64 {
    i64::try_from(claim.window.as_millis()).unwrap_or(i64::MAX)
}

/// Runs left `running` by a process that died go back to `queued` (at-least-once).
pub fn resume_interrupted(conn: &Connection) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'queued', started_at = NULL WHERE status = 'running'",
    )?
    .execute([])
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
             delivery = ?7, answered_by = ?8, input_tokens = ?9, output_tokens = ?10,
             model_calls = ?11
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
        outcome.usage.map(|u| tokens(u.input_tokens)),
        outcome.usage.map(|u| tokens(u.output_tokens)),
        calls_json(&outcome.calls),
    ])?;
    if let Some(summary) = summary {
        summary.insert(conn)?;
    }
    Ok(())
}

/// A token count as SQLite stores it; a count past `i64::MAX` (no provider reports one) is
/// stored saturated.
fn tokens(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// A run's model calls as their column holds them; none as null.
fn calls_json(calls: &[ModelCall]) -> Option<String> {
    // Plain data: always serialises.
    (!calls.is_empty()).then(|| serde_json::to_string(calls).unwrap_or_default())
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

/// Sets a forwarded run's status, with the upstream's run id or its refusal, as the relay ended
/// (`finished_at`).
pub fn set_forwarded(
    conn: &Connection,
    run_id: &str,
    status: RunStatus,
    upstream: Option<&str>,
    error: Option<&str>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = ?2, upstream_run_id = ?3, error = ?4, finished_at = ?5
         WHERE run_id = ?1",
    )?
    .execute(params![run_id, status, upstream, error, now_rfc3339()])?;
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
pub(in crate::gateway) const HISTORY: &str = "SELECT prompt, reply FROM runs
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

#[cfg(test)]
pub(in crate::gateway) mod tests {
    use super::*;

    /// A queued run of session key `hook:x`, without a mapping.
    pub(in crate::gateway) fn run(run_id: &str) -> NewRun {
        let action = crate::hook::AgentAction {
            message: "m".into(),
            channel: Some(crate::hook::Channel::Last),
            timeout_seconds: Some(u64::MAX),
            ..Default::default()
        };
        NewRun {
            run_id: run_id.into(),
            admitted: crate::hook::AdmittedRun {
                action,
                target_agent: "main".into(),
                session_key: "hook:x".into(),
                session_key_chosen: false,
                source: crate::hook::envelope::ContentSource::Webhook,
                allow_unsafe_external_content: false,
                mapping_id: None,
                callback: None,
                request_id: None,
            },
            prompt: "p".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            priority: Default::default(),
        }
    }

    /// A queued run with every field set: what the golden tests of its forms write.
    pub(in crate::gateway) fn full_run(run_id: &str) -> NewRun {
        use crate::hook::{Channel, SessionMode, Thinking, WakeMode};
        let mut run = run(run_id);
        run.admitted.action = crate::hook::AgentAction {
            message: "m".into(),
            name: "GitHub".into(),
            agent_id: Some("ops".into()),
            session_key: Some("hook:asked".into()),
            wake_mode: WakeMode::NextHeartbeat,
            deliver: false,
            channel: Some(Channel::Telegram),
            to: Some("+1".into()),
            model: Some("a/b".into()),
            thinking: Some(Thinking::High),
            timeout_seconds: Some(30),
            session_mode: SessionMode::Persistent,
        };
        run.admitted.target_agent = "ops".into();
        run.admitted.session_key_chosen = true;
        run.admitted.source = crate::hook::envelope::ContentSource::Email;
        run.admitted.mapping_id = Some("github".into());
        run.priority = crate::config::lanes::Priority::Low;
        run
    }

    fn claim_at(now_ms: i64) -> Option<IdempotencyClaim> {
        Some(IdempotencyClaim {
            fingerprint: "f".into(),
            now_ms,
            window: Duration::from_secs(300),
        })
    }

    #[tokio::test]
    async fn idempotency_window_counts_from_the_first_delivery() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        let first = store.queue_run(run("r1"), claim_at(0)).await.unwrap();
        assert_eq!(
            first,
            RunQueued::New {
                run_id: "r1".into()
            }
        );
        let repeat = store.queue_run(run("r2"), claim_at(299_999)).await.unwrap();
        assert_eq!(
            repeat,
            RunQueued::Replayed {
                run_id: "r1".into()
            }
        );
        let late = store.queue_run(run("r3"), claim_at(300_000)).await.unwrap();
        assert_eq!(
            late,
            RunQueued::New {
                run_id: "r3".into()
            }
        );
        assert!(
            store.run("r2").await.unwrap().is_none(),
            "a replay writes nothing"
        );
        store.close();
    }

    #[tokio::test]
    async fn huge_timeouts_are_stored_saturated() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        store.queue_run(run("r"), None).await.unwrap();
        let record = store.run("r").await.unwrap().unwrap();
        assert_eq!(
            record.run.action().timeout_seconds,
            Some(i64::MAX.unsigned_abs())
        );
        store.close();
    }

    #[tokio::test]
    async fn a_run_starts_in_its_admission_only_when_nothing_waits_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        let admit = |new: NewRun, claim: Option<IdempotencyClaim>| {
            store.write(move |conn| queue_or_start(conn, &new, claim.as_ref(), Some("t")))
        };
        let (first, started) = admit(run("r1"), claim_at(0)).await.unwrap();
        assert_eq!(
            first,
            RunQueued::New {
                run_id: "r1".into()
            }
        );
        assert_eq!(started, Stored::Running);
        let stored = store.run("r1").await.unwrap().unwrap();
        assert_eq!(stored.status, RunStatus::Running);
        assert_eq!(stored.started_at.as_deref(), Some("t"));
        // Its session key is running: the next run of it waits.
        let (_, started) = admit(run("r2"), None).await.unwrap();
        assert_eq!(started, Stored::Waiting);
        assert_eq!(
            store.run("r2").await.unwrap().unwrap().status,
            RunStatus::Queued
        );
        // A run is queued: a run of another key waits behind it.
        let mut other = run("r3");
        other.admitted.session_key = "hook:y".into();
        assert_eq!(admit(other, None).await.unwrap().1, Stored::Waiting);
        // A repeat writes nothing and starts nothing.
        let (repeat, started) = admit(run("r4"), claim_at(1)).await.unwrap();
        assert_eq!(
            repeat,
            RunQueued::Replayed {
                run_id: "r1".into()
            }
        );
        assert_eq!(started, Stored::Waiting);
        assert!(store.run("r4").await.unwrap().is_none());
        store.close();
    }

    /// A run started in its admission runs from what it is stored as, as a claimed run would.
    #[tokio::test]
    async fn a_started_run_is_what_its_claim_would_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        let mut new = run("r");
        new.admitted.action.channel = None;
        new.admitted.action.session_key = Some("hook:x".into());
        new.admitted.session_key_chosen = true;
        new.admitted.allow_unsafe_external_content = true;
        let stored = new.clone().into_stored();
        store.queue_run(new, None).await.unwrap();
        let claimed = store.write(|conn| claim(conn, "r", "t")).await.unwrap();
        assert_eq!(format!("{:?}", claimed.unwrap()), format!("{stored:?}"));
        store.close();
    }

    /// Whether a run would wait is two look-ups on indexes, not a scan of the runs.
    #[test]
    fn whether_a_run_waits_is_read_from_indexes() {
        let plan = plan_of(WAITS, ["hook:x"]);
        assert!(
            plan.iter()
                .filter(|step| step.contains(" runs "))
                .all(|step| step.starts_with("SEARCH runs USING COVERING INDEX")),
            "{plan:?}"
        );
    }

    /// The steps of the query plan of `sql`, bound to `params`, on the schema of a new store.
    pub(in crate::gateway) fn plan_of(sql: &str, params: impl rusqlite::Params) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("plan.db")).unwrap();
        crate::gateway::store::schema::migrate(&conn).unwrap();
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        stmt.query_map(params, |row| row.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// A session's history is searched for on an index, in the order it is read: neither a scan
    /// of every run nor a sort of them.
    #[test]
    fn a_sessions_history_is_read_from_an_index() {
        let plan = plan_of(HISTORY, ["hook:x", "main", "run-1", "20"]);
        let runs = plan.iter().find(|step| step.contains(" runs ")).unwrap();
        assert!(
            runs.starts_with("SEARCH runs USING INDEX")
                && ["status=?", "session_key=?", "rowid<?"]
                    .iter()
                    .all(|term| runs.contains(term)),
            "{plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.contains("TEMP B-TREE")),
            "{plan:?}"
        );
    }
}
