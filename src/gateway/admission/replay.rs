//! Replay protection for signed deliveries: each delivery id is claimed before it is processed,
//! and its answer kept for 24 hours, so that a redelivery, even one arriving while the first is
//! still in progress, runs nothing.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

/// How long a delivery id is remembered.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// A claim older than this whose answer never came (the process died) may be taken over.
pub const STALE_CLAIM: Duration = Duration::from_secs(5 * 60);

/// The answer a delivery got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedAnswer {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// What claiming a delivery id found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The id is ours to process; [`answer`] or [`release`] it afterwards.
    Claimed,
    /// Another request is processing the same delivery right now.
    InProgress,
    /// Processed before: this is its answer.
    Answered(RecordedAnswer),
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Claims `key` (status 0 marks a claim without an answer yet), or reports what holds it.
/// Expired answers and stale claims are taken over.
pub fn claim(conn: &Connection, key: &str, now_ms: i64) -> rusqlite::Result<Claim> {
    let expired = now_ms.saturating_sub(ms(REPLAY_WINDOW));
    let stale = now_ms.saturating_sub(ms(STALE_CLAIM));
    let taken = conn
        .prepare_cached(
            "INSERT INTO deliveries (key, status, content_type, body, first_at_ms)
             VALUES (?1, 0, NULL, x'', ?2)
             ON CONFLICT (key) DO UPDATE
               SET status = 0, content_type = NULL, body = x'', first_at_ms = ?2
               WHERE deliveries.first_at_ms <= ?3
                  OR (deliveries.status = 0 AND deliveries.first_at_ms <= ?4)",
        )?
        .execute(params![key, now_ms, expired, stale])?;
    if taken == 1 {
        return Ok(Claim::Claimed);
    }
    let held = conn
        .query_row(
            "SELECT status, content_type, body FROM deliveries WHERE key = ?1",
            params![key],
            |row| {
                Ok(RecordedAnswer {
                    status: row.get(0)?,
                    content_type: row.get(1)?,
                    body: row.get(2)?,
                })
            },
        )
        .optional()?;
    Ok(match held {
        Some(answer) if answer.status != 0 => Claim::Answered(answer),
        _ => Claim::InProgress,
    })
}

/// Records the answer of a claimed delivery. Entries past [`REPLAY_WINDOW`] are left to the
/// retention pass (`gateway::retention`), which prunes them in batches off the request path.
pub fn answer(conn: &Connection, key: &str, answer: &RecordedAnswer) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE deliveries SET status = ?2, content_type = ?3, body = ?4 WHERE key = ?1",
    )?
    .execute(params![
        key,
        answer.status,
        answer.content_type,
        answer.body
    ])?;
    Ok(())
}

/// Gives a claim up (the delivery failed on our side), so that the provider's retry runs.
pub fn release(conn: &Connection, key: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM deliveries WHERE key = ?1 AND status = 0")?
        .execute(params![key])?;
    Ok(())
}

/// Gives up every claim still without its answer. Only at a private node's start, before it
/// serves anything: its process is the only one writing this file, so such a claim is a dead
/// process's, whose work (if committed) is marked with its edge delivery, and which must not
/// answer the delivery pulled again `409 in progress` (docs/edge.md#exactly-once).
pub fn release_unanswered(conn: &Connection) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM deliveries WHERE status = 0")?
        .execute([])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE deliveries (key TEXT PRIMARY KEY, status INTEGER NOT NULL, content_type TEXT,
             body BLOB NOT NULL, first_at_ms INTEGER NOT NULL);",
        )
        .unwrap();
        conn
    }

    fn ok() -> RecordedAnswer {
        RecordedAnswer {
            status: 200,
            content_type: Some("application/json".into()),
            body: b"{}".to_vec(),
        }
    }

    #[test]
    fn a_claimed_delivery_is_in_progress_then_answered() {
        let conn = conn();
        assert_eq!(claim(&conn, "k", 1_000).unwrap(), Claim::Claimed);
        assert_eq!(claim(&conn, "k", 1_001).unwrap(), Claim::InProgress);
        answer(&conn, "k", &ok()).unwrap();
        assert_eq!(claim(&conn, "k", 1_003).unwrap(), Claim::Answered(ok()));
    }

    #[test]
    fn a_released_claim_can_be_claimed_again() {
        let conn = conn();
        claim(&conn, "k", 0).unwrap();
        release(&conn, "k").unwrap();
        assert_eq!(claim(&conn, "k", 1).unwrap(), Claim::Claimed);
    }

    #[test]
    fn stale_claims_and_expired_answers_are_taken_over() {
        let conn = conn();
        claim(&conn, "stale", 0).unwrap();
        assert_eq!(
            claim(&conn, "stale", ms(STALE_CLAIM)).unwrap(),
            Claim::Claimed
        );
        claim(&conn, "old", 0).unwrap();
        answer(&conn, "old", &ok()).unwrap();
        assert_eq!(
            claim(&conn, "old", ms(REPLAY_WINDOW) - 1).unwrap(),
            Claim::Answered(ok())
        );
        assert_eq!(
            claim(&conn, "old", ms(REPLAY_WINDOW)).unwrap(),
            Claim::Claimed
        );
    }
}
