//! Replay protection for signed deliveries: the answer to each provider delivery id, kept for 24
//! hours, so that a redelivery gets the same answer and runs nothing.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

/// How long a delivery id is remembered.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The answer a delivery got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedAnswer {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// The answer remembered for `key`, if it is younger than the window.
pub fn recall(
    conn: &Connection,
    key: &str,
    now_ms: i64,
) -> rusqlite::Result<Option<RecordedAnswer>> {
    let oldest = now_ms.saturating_sub(window_ms());
    conn.query_row(
        "SELECT status, content_type, body FROM deliveries WHERE key = ?1 AND first_at_ms > ?2",
        params![key, oldest],
        |row| {
            Ok(RecordedAnswer {
                status: row.get(0)?,
                content_type: row.get(1)?,
                body: row.get(2)?,
            })
        },
    )
    .optional()
}

/// Remembers the first answer for `key`; a later one never replaces it. Drops expired entries.
pub fn remember(
    conn: &Connection,
    key: &str,
    answer: &RecordedAnswer,
    now_ms: i64,
) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM deliveries WHERE first_at_ms <= ?1",
        params![now_ms.saturating_sub(window_ms())],
    )?;
    conn.execute(
        "INSERT OR IGNORE INTO deliveries (key, status, content_type, body, first_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![key, answer.status, answer.content_type, answer.body, now_ms],
    )?;
    Ok(())
}

fn window_ms() -> i64 {
    i64::try_from(REPLAY_WINDOW.as_millis()).unwrap_or(i64::MAX)
}
