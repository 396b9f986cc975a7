//! Retention: finished work older than `gateway.retention` is deleted from the store in small
//! batches, each its own short transaction in the writer's queue, so that pruning never holds
//! intake up for long. Done outbox rows go at once; idempotency and replay records once their
//! window has passed. Events no heartbeat has taken and runs still to be run or relayed are
//! never deleted.

use std::time::Duration;

use rusqlite::{Connection, params};

use super::clock::{millis, now_ms};
use super::context::Context;
use super::deliveries::REPLAY_WINDOW;
use crate::config::runtime::Retention;
use crate::hook::idempotency;

/// Rows of one kind one transaction deletes at most.
const BATCH: u32 = 500;
/// Runs one transaction deletes at most.
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

/// One pass: batches until nothing is left to delete. Returns the transactions it took.
pub async fn prune(ctx: &Context, retention: Retention) -> Result<usize, super::store::StoreError> {
    let mut batches = 0;
    loop {
        let now = now_ms();
        let more = ctx
            .store
            .write(move |conn| prune_batch(conn, retention, now))
            .await?;
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
    let at = now_ms.saturating_sub(millis(age));
    chrono::DateTime::from_timestamp_millis(at)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Deletes at most [`BATCH`] rows of each kind ([`RUN_BATCH`] runs, whose prompts and replies
/// may be large); returns whether any kind had a full batch (more may be left). Each statement
/// is a range scan of an index over exactly the rows it may delete, so rows that must stay
/// (pending events, runs still to run or relay) cost nothing and never hold pruning up.
fn prune_batch(conn: &Connection, retention: Retention, now_ms: i64) -> rusqlite::Result<bool> {
    let mut full = conn.execute(
        "DELETE FROM outbox WHERE id IN
           (SELECT id FROM outbox WHERE status = 'done' LIMIT ?1)",
        params![BATCH],
    )? == BATCH as usize;
    if let Some(age) = retention.events {
        // Only events a heartbeat has taken: a pending event is work not yet done.
        full |= conn.execute(
            "DELETE FROM events WHERE seq IN
               (SELECT seq FROM events WHERE consumed = 1 AND at < ?2 ORDER BY consumed, at LIMIT ?1)",
            params![BATCH, cutoff(now_ms, age)],
        )? == BATCH as usize;
    }
    if let Some(age) = retention.runs {
        let before = cutoff(now_ms, age);
        // A run an idempotency record still names stays: a repeat of its request is answered
        // with its id, which must then be found.
        full |= conn.execute(
            "DELETE FROM runs WHERE rowid IN
               (SELECT rowid FROM runs WHERE created_at < ?2
                  AND status NOT IN ('queued', 'running', 'forwarding')
                  AND run_id NOT IN (SELECT run_id FROM idempotency WHERE first_at_ms >= ?3)
                ORDER BY created_at LIMIT ?1)",
            params![
                RUN_BATCH,
                before,
                now_ms.saturating_sub(millis(idempotency::WINDOW))
            ],
        )? == RUN_BATCH as usize;
        // Failed and uncertain sends stay as long as their runs, for a retry.
        full |= conn.execute(
            "DELETE FROM outbox WHERE id IN
               (SELECT id FROM outbox WHERE status IN ('failed', 'uncertain') AND created_at < ?2
                LIMIT ?1)",
            params![BATCH, before],
        )? == BATCH as usize;
    }
    full |= conn.execute(
        "DELETE FROM idempotency WHERE fingerprint IN
           (SELECT fingerprint FROM idempotency WHERE first_at_ms < ?2 ORDER BY first_at_ms LIMIT ?1)",
        params![BATCH, now_ms.saturating_sub(millis(idempotency::WINDOW))],
    )? == BATCH as usize;
    full |= conn.execute(
        "DELETE FROM deliveries WHERE key IN
           (SELECT key FROM deliveries WHERE first_at_ms < ?2 ORDER BY first_at_ms LIMIT ?1)",
        params![BATCH, now_ms.saturating_sub(millis(REPLAY_WINDOW))],
    )? == BATCH as usize;
    Ok(full)
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

    #[tokio::test]
    async fn old_finished_work_goes_and_pending_work_and_zero_retention_stay() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        store
            .write(|conn| insert_old(conn, "2020-01-01T00:00:00.000Z"))
            .await
            .unwrap();
        let keep = Retention {
            events: None,
            runs: None,
        };
        let now = now_ms();
        store
            .write(move |conn| prune_batch(conn, keep, now))
            .await
            .unwrap();
        let kept = store
            .read(|conn| Ok((count(conn, "events")?, count(conn, "runs")?)))
            .await;
        assert_eq!(kept.unwrap(), (2, 6), "0 keeps everything");
        let day = Some(Duration::from_secs(86_400));
        let month = Retention {
            events: day,
            runs: day,
        };
        store
            .write(move |conn| prune_batch(conn, month, now))
            .await
            .unwrap();
        let left = store
            .read(|conn| {
                let mut stmt = conn.prepare("SELECT status FROM runs ORDER BY status")?;
                let statuses = stmt.query_map([], |row| row.get::<_, String>(0))?;
                Ok((
                    count(conn, "events")?,
                    statuses.collect::<rusqlite::Result<Vec<_>>>()?,
                ))
            })
            .await
            .unwrap();
        assert_eq!(
            left,
            (
                1,
                vec!["forwarding".into(), "queued".into(), "running".into()]
            ),
            "the pending event and the runs still to run or relay stay"
        );
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
