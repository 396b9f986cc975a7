//! Retention: finished work older than `gateway.retention` is deleted from the store in small
//! batches, each its own short transaction in the writer's queue, so that pruning never holds
//! intake up for long. Done outbox rows go at once; idempotency and replay records once their
//! window has passed. (The request log, in a file of its own, prunes itself:
//! `src/request_log.rs`.) Events no heartbeat has taken and runs still to be run or relayed are
//! never deleted.
//!
//! Events and runs are walked in insertion order (which is time order) with a cursor that a pass
//! carries from batch to batch: a batch looks at the next rows past the cursor and deletes those
//! that may go, and the pass ends at the first row too young. So a batch costs the same however
//! large the table, rows that must stay are stepped over rather than holding pruning up, and no
//! index beyond the row ids is needed: pruning adds nothing to the cost of a write.

use std::time::Duration;

use rusqlite::{Connection, params};

use crate::config::runtime::Retention;
use crate::gateway::admission::replay::REPLAY_WINDOW;
use crate::gateway::clock::{millis, now_ms};
use crate::gateway::context::Context;
use crate::hook::idempotency;

/// Rows of one kind one transaction looks at, at most.
const BATCH: u32 = 500;
/// Runs one transaction looks at, at most (their prompts and replies may be large).
const RUN_BATCH: u32 = 100;
/// How often a pass runs, at most; a shorter retention runs it more often, down to every second.
const EVERY: Duration = Duration::from_secs(60);

/// Prunes until the process ends.
pub async fn run(ctx: Context) {
    loop {
        let retention = ctx.config.current().runtime.retention;
        match prune(&ctx, retention).await {
            Ok(batches) => tracing::debug!(batches, "retention pass done"),
            Err(err) => tracing::warn!(%err, "retention pass failed; trying again later"),
        }
        let shortest = [retention.events, retention.runs]
            .into_iter()
            .flatten()
            .min();
        let pause = shortest.map_or(EVERY, |age| (age / 2).clamp(Duration::from_secs(1), EVERY));
        tokio::time::sleep(pause).await;
    }
}

/// Where a pass is: the last event `seq` and run `rowid` looked at, and whether each walk is
/// over (it reached a row too young to go).
#[derive(Debug, Clone, Copy, Default)]
struct Cursor {
    event: i64,
    events_done: bool,
    run: i64,
    runs_done: bool,
}

/// One pass: batches until nothing is left to delete. Returns the transactions it took.
pub async fn prune(ctx: &Context, retention: Retention) -> Result<usize, super::StoreError> {
    let mut cursor = Cursor {
        events_done: retention.events.is_none(),
        runs_done: retention.runs.is_none(),
        ..Cursor::default()
    };
    let mut batches = 0;
    loop {
        let now = now_ms();
        let (next, more) = ctx
            .store
            .write(move |conn| prune_batch(conn, retention, now, cursor))
            .await?;
        cursor = next;
        batches += 1;
        if !more {
            return Ok(batches);
        }
        tokio::task::yield_now().await;
    }
}

/// RFC 3339 UTC with milliseconds, `age` before `now_ms`, as the store's `at` columns are
/// written: such strings order like the times they stand for.
fn cutoff(now_ms: i64, age: Duration) -> String {
    crate::gateway::clock::rfc3339(now_ms.saturating_sub(millis(age)))
}

/// One batch: the next events and runs past `cursor`, and at most [`BATCH`] rows of each other
/// kind. Returns the cursor for the next batch and whether one is needed.
fn prune_batch(
    conn: &Connection,
    retention: Retention,
    now_ms: i64,
    mut cursor: Cursor,
) -> rusqlite::Result<(Cursor, bool)> {
    let mut more = conn.execute(
        "DELETE FROM outbox WHERE id IN
           (SELECT id FROM outbox WHERE status = 'done' LIMIT ?1)",
        params![BATCH],
    )? == BATCH as usize;
    if let (Some(age), false) = (retention.events, cursor.events_done) {
        (cursor.event, cursor.events_done) =
            prune_events(conn, cursor.event, &cutoff(now_ms, age))?;
        more |= !cursor.events_done;
    }
    if let Some(age) = retention.runs {
        // A repeat of a request within the idempotency window is answered with its first run's
        // id, which must then be found: no run younger than the window goes.
        let before = cutoff(now_ms, age.max(idempotency::WINDOW));
        if !cursor.runs_done {
            (cursor.run, cursor.runs_done) = prune_runs(conn, cursor.run, &before)?;
            more |= !cursor.runs_done;
        }
        // Heartbeat turns' tokens stay as long as the runs, whose spend they are part of.
        more |= conn.execute(
            "DELETE FROM heartbeat_turns WHERE rowid IN
               (SELECT rowid FROM heartbeat_turns WHERE finished_at < ?2 LIMIT ?1)",
            params![BATCH, before],
        )? == BATCH as usize;
        // Failed and uncertain sends stay as long as their runs, for a retry.
        more |= conn.execute(
            "DELETE FROM outbox WHERE id IN
               (SELECT id FROM outbox WHERE status IN ('failed', 'uncertain') AND created_at < ?2
                LIMIT ?1)",
            params![BATCH, before],
        )? == BATCH as usize;
    }
    more |= conn.execute(
        "DELETE FROM idempotency WHERE fingerprint IN
           (SELECT fingerprint FROM idempotency WHERE first_at_ms < ?2 ORDER BY first_at_ms LIMIT ?1)",
        params![BATCH, now_ms.saturating_sub(millis(idempotency::WINDOW))],
    )? == BATCH as usize;
    more |= conn.execute(
        "DELETE FROM deliveries WHERE key IN
           (SELECT key FROM deliveries WHERE first_at_ms < ?2 ORDER BY first_at_ms LIMIT ?1)",
        params![BATCH, now_ms.saturating_sub(millis(REPLAY_WINDOW))],
    )? == BATCH as usize;
    Ok((cursor, more))
}

/// Deletes the events a heartbeat took among the next [`BATCH`] past `after` that are older than
/// `before`; returns the last `seq` looked at and whether the walk is over.
fn prune_events(conn: &Connection, after: i64, before: &str) -> rusqlite::Result<(i64, bool)> {
    walk(
        conn,
        "SELECT seq, at < ?2, consumed = 0 FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?3",
        "DELETE FROM events WHERE seq = ?1",
        (after, before, BATCH),
    )
}

/// Deletes the finished runs among the next [`RUN_BATCH`] past `after` created before `before`;
/// returns the last rowid looked at and whether the walk is over. A held run stays however old:
/// it waits for its budget's window or the operator (docs/hooks.md, "Budgets").
fn prune_runs(conn: &Connection, after: i64, before: &str) -> rusqlite::Result<(i64, bool)> {
    walk(
        conn,
        "SELECT rowid, created_at < ?2, status IN ('queued', 'batching', 'held', 'running', 'forwarding')
         FROM runs WHERE rowid > ?1 ORDER BY rowid LIMIT ?3",
        "DELETE FROM runs WHERE rowid = ?1",
        (after, before, RUN_BATCH),
    )
}

/// One step of a walk in row order: `select` gives, for up to `limit` rows past `after`, each
/// row's id, whether it is old enough (`?2` is the cutoff) and whether it must stay anyway;
/// `delete` removes one by id. Stops at the first row too young. Returns the last id looked at
/// and whether the walk is over.
fn walk(
    conn: &Connection,
    select: &str,
    delete: &str,
    (after, before, limit): (i64, &str, u32),
) -> rusqlite::Result<(i64, bool)> {
    let rows = conn
        .prepare_cached(select)?
        .query_map(params![after, before, limit], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, bool>(1)?,
                row.get::<_, bool>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut delete = conn.prepare_cached(delete)?;
    let mut last = after;
    for &(id, old, stays) in &rows {
        if !old {
            return Ok((last, true));
        }
        if !stays {
            delete.execute(params![id])?;
        }
        last = id;
    }
    Ok((last, rows.len() < limit as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::store::Store;

    /// Events and runs (one per status) created at `at`.
    fn insert_old(conn: &Connection, at: &str) -> rusqlite::Result<()> {
        // One event a heartbeat took, one still pending.
        for consumed in [1, 0] {
            conn.execute(
                "INSERT INTO events (agent, kind, text, trusted, source, at, consumed)
                 VALUES ('main', 'system', 't', 0, 'hook:wake', ?1, ?2)",
                rusqlite::params![at, consumed],
            )?;
        }
        for status in [
            "ok",
            "error",
            "queued",
            "batching",
            "held",
            "cancelled",
            "running",
            "forwarding",
            "forward_failed",
        ] {
            conn.execute(
                "INSERT INTO runs (run_id, status, hook_name, target_agent, session_key, message,
                     prompt, deliver, channel, wake_mode, source, created_at)
                 VALUES (?1 || ?2, ?1, 'Hook', 'main', 'hook:x', 'm', 'p', 1, 'last', 'now', 'webhook', ?2)",
                [status, at],
            )?;
        }
        Ok(())
    }

    fn count(conn: &Connection, table: &str) -> rusqlite::Result<i64> {
        conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
            row.get(0)
        })
    }

    /// `gateway.retention` keeping everything it governs.
    const KEEP_ALL: Retention = Retention {
        events: None,
        runs: None,
        requests: None,
        requests_max_bytes: None,
    };

    /// One batch of a pass at `now`, from the start.
    async fn prune_once(store: &Store, retention: Retention, now: i64) {
        store
            .write(move |conn| prune_batch(conn, retention, now, Cursor::default()))
            .await
            .unwrap();
    }

    /// The first column of `sql`'s rows.
    fn strings(conn: &Connection, sql: &str) -> rusqlite::Result<Vec<String>> {
        let mut stmt = conn.prepare(sql)?;
        let rows = stmt.query_map([], |row| row.get::<_, String>(0))?;
        rows.collect()
    }

    #[tokio::test]
    async fn old_finished_work_goes_and_pending_work_and_zero_retention_stay() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        store
            .write(|conn| insert_old(conn, "2020-01-01T00:00:00.000Z"))
            .await
            .unwrap();
        let now = now_ms();
        prune_once(&store, KEEP_ALL, now).await;
        let kept = store
            .read(|conn| Ok((count(conn, "events")?, count(conn, "runs")?)))
            .await;
        assert_eq!(kept.unwrap(), (2, 9), "0 keeps everything");
        let day = Some(Duration::from_secs(86_400));
        let month = Retention {
            events: day,
            runs: day,
            requests: day,
            requests_max_bytes: None,
        };
        prune_once(&store, month, now).await;
        let left = store
            .read(|conn| {
                Ok((
                    count(conn, "events")?,
                    strings(conn, "SELECT status FROM runs ORDER BY status")?,
                ))
            })
            .await
            .unwrap();
        assert_eq!(
            left,
            (
                1,
                vec![
                    "batching".into(),
                    "forwarding".into(),
                    "held".into(),
                    "queued".into(),
                    "running".into()
                ]
            ),
            "the pending event and the runs still to run, held or relay stay"
        );
        store.close();
    }

    /// Replay records are the pass's alone to prune (answering a delivery leaves old ones be),
    /// and it prunes them whatever `gateway.retention` keeps.
    #[tokio::test]
    async fn replay_records_go_once_their_window_has_passed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        let now = now_ms();
        let window = millis(REPLAY_WINDOW);
        store
            .write(move |conn| {
                for (key, at) in [
                    ("expired", now - window - 1),
                    ("young", now - window + 60_000),
                ] {
                    conn.execute(
                        "INSERT INTO deliveries (key, status, content_type, body, first_at_ms)
                         VALUES (?1, 200, NULL, x'', ?2)",
                        params![key, at],
                    )?;
                }
                Ok(())
            })
            .await
            .unwrap();
        prune_once(&store, KEEP_ALL, now).await;
        let left = store
            .read(|conn| strings(conn, "SELECT key FROM deliveries"))
            .await
            .unwrap();
        assert_eq!(left, vec!["young".to_string()]);
        store.close();
    }

    #[test]
    fn cutoffs_order_like_the_stores_timestamps() {
        let day = Duration::from_secs(86_400);
        let at = cutoff(1_800_000_000_000, day);
        assert_eq!(at, "2027-01-14T08:00:00.000Z");
        assert!(at.as_str() > "2027-01-14T07:59:59.999Z");
        assert!(at.as_str() < "2027-01-14T08:00:00.001Z");
    }
}
