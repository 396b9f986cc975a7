//! The SQL of runs and the main session: queueing runs (once per idempotency key), claiming
//! them, recording outcomes and deliveries, summaries at most once per run, pending events, and
//! the main session's route as its owner set it. Each function runs inside one transaction of
//! the store's writer (or on its read connection), so a crash leaves either all of an outcome
//! or none of it. [`Store::queue_run`] and [`Store::gauges`] wrap the two a caller needs alone.

use std::collections::HashSet;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::provider::Exchange;
use super::records::{DeliveryRecord, NewRun, RunOutcome, RunStatus, SummaryEvent};
use super::store::{Store, StoreError};
use crate::config::runtime::Route;

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
    if let Some(claim) = claim {
        let window_ms = i64::try_from(claim.window.as_millis()).unwrap_or(i64::MAX);
        let earlier: Option<(String, i64)> = conn
            .query_row(
                "SELECT run_id, first_at_ms FROM idempotency WHERE fingerprint = ?1",
                params![claim.fingerprint],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        if let Some((run_id, first_at_ms)) = earlier {
            if claim.now_ms.saturating_sub(first_at_ms) < window_ms {
                return Ok(RunQueued::Replayed { run_id });
            }
        }
        conn.prepare_cached(
            "INSERT OR REPLACE INTO idempotency (fingerprint, run_id, first_at_ms)
             VALUES (?1, ?2, ?3)",
        )?
        .execute(params![claim.fingerprint, run.run_id, claim.now_ms])?;
        conn.prepare_cached("DELETE FROM idempotency WHERE first_at_ms < ?1")?
            .execute(params![claim.now_ms.saturating_sub(window_ms)])?;
    }
    run.insert(conn)?;
    Ok(RunQueued::New {
        run_id: run.run_id.clone(),
    })
}

/// Runs left `running` by a process that died go back to `queued` (at-least-once).
pub fn resume_interrupted(conn: &Connection) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'queued', started_at = NULL WHERE status = 'running'",
    )?
    .execute([])
}

/// A queued run the runner may start: its id, its session key, and the mapping whose lane it
/// waits in, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Startable {
    pub run_id: String,
    pub session_key: String,
    pub mapping_id: Option<String>,
}

impl Startable {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Startable> {
        Ok(Startable {
            run_id: row.get(0)?,
            session_key: row.get(1)?,
            mapping_id: row.get(2)?,
        })
    }
}

/// What the runner cannot start now: the session keys of the runs this process is running, and
/// the mappings whose lanes are full.
#[derive(Debug, Default)]
pub struct Busy {
    pub sessions: HashSet<String>,
    pub lanes: Vec<String>,
}

impl Busy {
    /// The full lanes as the JSON list the queue's statements read with `json_each`.
    pub(crate) fn lanes_json(&self) -> String {
        // A list of strings: always serialises.
        serde_json::to_string(&self.lanes).unwrap_or_else(|_| "[]".into())
    }
}

/// Queued runs the runner may start, at most `limit`, highest priority first, then oldest: the
/// oldest queued run of each session key that has none running and is not in `busy`, whose
/// mapping's lane is not full. `want` is how many the caller can start now. A session key's
/// runs start in arrival order whatever their priorities: its newer run never passes its older.
///
/// Hooks usually give each run a key of its own, and then the first `limit` queued runs hold
/// `want` of them: one indexed read of `limit` rows ([`oldest_queued`]). Only when those hold
/// fewer (a backlog of busy keys in front) is the queue walked key by key ([`queued_heads`]),
/// so one busy key with a long backlog never hides the runs of others, nor leaves slots idle.
/// The queued runs of a full lane are left out, but read past: a read costs as many more rows
/// as the full lanes have queued ahead of the first it returns (about 11 ms for 17,000 of them
/// among 100,000 queued, against 0.5 ms with no lane full), which their `maxQueued` bounds.
pub fn queued(
    conn: &Connection,
    limit: u32,
    busy: &Busy,
    want: usize,
) -> rusqlite::Result<Vec<Startable>> {
    let lanes = busy.lanes_json();
    let oldest = oldest_queued(conn, limit, &lanes)?;
    let whole_queue = oldest.len() < limit as usize;
    let mut seen = HashSet::new();
    let startable: Vec<Startable> = oldest
        .into_iter()
        .filter(|run| {
            seen.insert(run.session_key.clone()) && !busy.sessions.contains(&run.session_key)
        })
        .collect();
    if startable.len() >= want || whole_queue {
        return Ok(startable);
    }
    // Keys in `busy` are running in the store too, and so not among the heads; the margin
    // covers a key that is busy here before its claim is committed.
    let margin = u32::try_from(busy.sessions.len()).unwrap_or(u32::MAX);
    Ok(queued_heads(conn, limit.saturating_add(margin), &lanes)?
        .into_iter()
        .filter(|run| !busy.sessions.contains(&run.session_key))
        .take(limit as usize)
        .collect())
}

const OLDEST_QUEUED: &str = "SELECT run_id, session_key, mapping_id FROM runs AS q
     WHERE status = 'queued'
       AND session_key NOT IN (SELECT session_key FROM runs WHERE status = 'running')
       AND (mapping_id IS NULL OR mapping_id NOT IN (SELECT value FROM json_each(?2)))
       AND NOT EXISTS (SELECT 1 FROM runs WHERE status = 'queued'
                         AND session_key = q.session_key AND rowid < q.rowid)
     ORDER BY priority, rowid LIMIT ?1";

/// The first `limit` queued runs, highest priority first, then oldest, of keys with none
/// running and no older run queued, outside the full lanes (`lanes`, a JSON list), on the
/// `runs_by_priority` index (the running runs are few: at most the runner's slots; an older
/// run of the same key is looked up on `runs_queue`).
fn oldest_queued(conn: &Connection, limit: u32, lanes: &str) -> rusqlite::Result<Vec<Startable>> {
    let mut stmt = conn.prepare_cached(OLDEST_QUEUED)?;
    let rows = stmt.query_map(params![limit, lanes], Startable::from_row)?;
    rows.collect()
}

/// The oldest queued run of each session key that has none running, outside the full lanes
/// (`lanes`, a JSON list): highest priority first, then oldest.
///
/// Costs O(k log n) for k session keys with queued runs and n runs, not O(n): the keys are
/// walked on the `runs_queue` index one `MIN(session_key) > previous` step at a time (a loose
/// index scan, which SQLite does not plan by itself), and each key's oldest run is the first
/// entry of that key in the same index. A scan of every queued run here made a backlog of one
/// busy session quadratic to drain, since the runner asks after every run.
pub fn queued_heads(
    conn: &Connection,
    limit: u32,
    lanes: &str,
) -> rusqlite::Result<Vec<Startable>> {
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
         SELECT runs.run_id, heads.key, runs.mapping_id FROM heads JOIN runs ON runs.rowid = heads.head
         WHERE runs.mapping_id IS NULL
            OR runs.mapping_id NOT IN (SELECT value FROM json_each(?2))
         ORDER BY runs.priority, heads.head LIMIT ?1",
    )?;
    let rows = stmt.query_map(params![limit, lanes], Startable::from_row)?;
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
             delivery = ?7, answered_by = ?8, input_tokens = ?9, output_tokens = ?10
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::lanes::Priority;

    fn run(run_id: &str) -> NewRun {
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
            },
            prompt: "p".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            priority: Default::default(),
        }
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
    async fn the_queue_offers_each_idle_session_its_oldest_run_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        for (id, key) in [
            ("a1", "hook:b"),
            ("b1", "hook:a"),
            ("a2", "hook:b"),
            ("c1", "hook:c"),
        ] {
            let mut new = run(id);
            new.admitted.session_key = key.into();
            store.queue_run(new, None).await.unwrap();
        }
        let queued_for = |limit: u32, busy: &[&str], want: usize| {
            let busy = Busy {
                sessions: busy.iter().map(|k| k.to_string()).collect(),
                lanes: Vec::new(),
            };
            store.read(move |conn| queued(conn, limit, &busy, want))
        };
        let queued = |limit: u32, busy: &[&str]| queued_for(limit, busy, 1);
        assert_eq!(ids(queued(10, &[]).await.unwrap()), ["a1", "b1", "c1"]);

        let claimed = store.write(|conn| claim(conn, "a1", "now")).await.unwrap();
        assert!(claimed.is_some());
        assert_eq!(
            ids(queued(10, &["hook:b"]).await.unwrap()),
            ["b1", "c1"],
            "a session with a run in progress offers nothing, not even its next run"
        );
        assert_eq!(ids(queued(1, &[]).await.unwrap()), ["b1"]);
        // The walk by key skips the keys running in the store.
        let heads = store.read(|conn| queued_heads(conn, 10, "[]"));
        assert_eq!(ids(heads.await.unwrap()), ["b1", "c1"]);
        // A first batch with nothing to start is not the end: the walk finds the others.
        assert_eq!(ids(queued(1, &["hook:a"]).await.unwrap()), ["c1"]);
        // Nor is one with fewer than the free slots could start: the walk looks further (and
        // `limit` still bounds the answer).
        assert_eq!(ids(queued_for(1, &[], 2).await.unwrap()), ["b1"]);
        assert_eq!(ids(queued_for(2, &["hook:c"], 2).await.unwrap()), ["b1"]);
        store.close();
    }

    fn ids(rows: Vec<Startable>) -> Vec<String> {
        rows.into_iter().map(|run| run.run_id).collect()
    }

    #[tokio::test]
    async fn the_queue_offers_high_priority_first_and_nothing_of_a_full_lane() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        for (id, key, mapping, priority) in [
            ("low1", "hook:1", "gmail", Priority::Low),
            ("low2", "hook:2", "gmail", Priority::Low),
            ("chat", "hook:3", "chat", Priority::High),
            ("plain", "hook:4", "ci", Priority::Normal),
            // Newer and high, but behind an older run of its own key.
            ("later", "hook:1", "chat", Priority::High),
        ] {
            let mut new = run(id);
            new.admitted.session_key = key.into();
            new.admitted.mapping_id = Some(mapping.into());
            new.priority = priority;
            store.queue_run(new, None).await.unwrap();
        }
        let offered = |limit: u32, lanes: &[&str]| {
            let busy = Busy {
                sessions: HashSet::new(),
                lanes: lanes.iter().map(|l| l.to_string()).collect(),
            };
            store.read(move |conn| queued(conn, limit, &busy, 1))
        };
        assert_eq!(
            ids(offered(10, &[]).await.unwrap()),
            ["chat", "plain", "low1", "low2"]
        );
        assert_eq!(
            ids(offered(10, &["chat", "ci"]).await.unwrap()),
            ["low1", "low2"]
        );
        let heads = store.read(|conn| queued_heads(conn, 10, r#"["gmail"]"#));
        assert_eq!(ids(heads.await.unwrap()), ["chat", "plain"]);
        let heads = store.read(|conn| queued_heads(conn, 10, "[]"));
        assert_eq!(ids(heads.await.unwrap()), ["chat", "plain", "low1", "low2"]);
        store.close();
    }

    /// The runner's read of the queue walks the queued runs in its own order on an index: no
    /// sort of every queued run each time it looks.
    #[test]
    fn the_queue_is_read_in_priority_order_from_an_index() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("plan.db")).unwrap();
        crate::gateway::schema::migrate(&conn).unwrap();
        let plan = |sql: &str| -> Vec<String> {
            conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map(params![10, "[]"], |row| row.get(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        let oldest = plan(OLDEST_QUEUED);
        assert!(
            oldest
                .iter()
                .any(|step| step.contains("SEARCH q USING INDEX runs_by_priority (status=?)")),
            "{oldest:?}"
        );
        assert!(
            !oldest.iter().any(|step| step.contains("TEMP B-TREE")),
            "{oldest:?}"
        );
    }

    /// A session's history is searched for on an index, in the order it is read: neither a scan
    /// of every run nor a sort of them.
    #[test]
    fn a_sessions_history_is_read_from_an_index() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("plan.db")).unwrap();
        crate::gateway::schema::migrate(&conn).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", HISTORY))
            .unwrap()
            .query_map(["hook:x", "main", "run-1", "20"], |row| row.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
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
