//! The request log counted by minute and by how each request ended, for the console's overview
//! (`GET /api/overview`, docs/operations.md#the-overview): a read of the log's b-tree from the
//! window's first id on, and one of its outcome index. Ids are UUIDv7s, in time order, so the
//! window is a range of each and the reads cost a step per request of the window, never one
//! per request kept.

use std::collections::BTreeMap;

use rusqlite::{Connection, params};
use serde::Serialize;

use super::{RequestLogStore, RequestOutcome, StoreError, first_id_at};

/// The most minutes a count spans: a day.
pub const MAX_MINUTES: i64 = 24 * 60;

/// How many requests ended each way. A request with an outcome (`filtered`, `batched`,
/// `limited`, `refused`, `held`) counts under it alone, whatever its status (`limited` and
/// `refused` are 429s and are not counted again as 4xx); any other counts by its status:
/// `accepted` below 400, then `clientErrors` (4xx) and `serverErrors` (5xx).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutcomeCounts {
    pub accepted: u64,
    pub filtered: u64,
    pub batched: u64,
    pub limited: u64,
    pub refused: u64,
    pub held: u64,
    pub client_errors: u64,
    pub server_errors: u64,
}

impl OutcomeCounts {
    /// Adds `count` requests of `outcome` (or, without one, of `status`).
    fn add(&mut self, outcome: Option<RequestOutcome>, status: i64, count: u64) {
        let slot = match outcome {
            Some(RequestOutcome::Filtered) => &mut self.filtered,
            Some(RequestOutcome::Batched) => &mut self.batched,
            Some(RequestOutcome::Limited) => &mut self.limited,
            Some(RequestOutcome::Refused) => &mut self.refused,
            Some(RequestOutcome::Held) => &mut self.held,
            None if status >= 500 => &mut self.server_errors,
            None if status >= 400 => &mut self.client_errors,
            None => &mut self.accepted,
        };
        *slot += count;
    }

    /// Moves a request counted by its status to its outcome's count: an outcome's status is
    /// known (`filtered`, `batched` and `held` are answered below 400, `limited` and `refused`
    /// 429), so its request was counted as `accepted` or `clientErrors`.
    fn move_to(&mut self, outcome: RequestOutcome) {
        let by_status = match outcome {
            RequestOutcome::Limited | RequestOutcome::Refused => &mut self.client_errors,
            _ => &mut self.accepted,
        };
        *by_status = by_status.saturating_sub(1);
        self.add(Some(outcome), 0, 1);
    }

    /// Adds every count of `other`.
    pub fn add_all(&mut self, other: &OutcomeCounts) {
        self.accepted += other.accepted;
        self.filtered += other.filtered;
        self.batched += other.batched;
        self.limited += other.limited;
        self.refused += other.refused;
        self.held += other.held;
        self.client_errors += other.client_errors;
        self.server_errors += other.server_errors;
    }
}

/// The requests of one minute that had any, by the minute of their ids: when they arrived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestMinute {
    /// The minute's first millisecond since the Unix epoch.
    pub minute_ms: i64,
    #[serde(flatten)]
    pub counts: OutcomeCounts,
}

/// The status of each request of the window: a range of the key. Reads only columns before a
/// captured body, so a body spilled to overflow pages is not read; a request's minute is its
/// id's, as for [`WITH_OUTCOME`], so that both reads put it in the same one.
const BY_STATUS: &str = "SELECT id, status FROM requests WHERE id >= ?1";

/// The requests of the window that have an outcome, on their own index (schema 5: outcome
/// and id, which says the time), so that the outcome, the log's last column, is never read
/// from the table past a body. Measured on a log of 500,000 requests, 100,000 of them in a 3
/// hour window, with 4 KB captured bodies (docs/operations.md#the-overview): the two reads
/// took 140 ms in a debug build, against 210 ms for one read of the table grouping by outcome
/// (with SQLite 3.40 optimised, 54 and 22 ms against 155 ms).
const WITH_OUTCOME: &str = "SELECT outcome, id FROM requests INDEXED BY requests_by_outcome
       WHERE outcome IN ('filtered', 'batched', 'limited', 'refused', 'held') AND id >= ?1";

impl RequestLogStore {
    /// The requests recorded from `since_ms` on, by minute (oldest first; a minute without any
    /// is left out) and by how they ended. Costs a step of the log's key per request of the
    /// window, and one of the outcome index per request of the window with an outcome.
    pub async fn minutes(&self, since_ms: i64) -> Result<Vec<RequestMinute>, StoreError> {
        self.db.read(move |conn| minutes(conn, since_ms)).await
    }
}

fn minutes(conn: &Connection, since_ms: i64) -> rusqlite::Result<Vec<RequestMinute>> {
    let first = first_id_at(since_ms);
    let mut by_minute: BTreeMap<i64, OutcomeCounts> = BTreeMap::new();
    let mut stmt = conn.prepare_cached(BY_STATUS)?;
    let mut rows = stmt.query(params![first])?;
    while let Some(row) = rows.next()? {
        let Some(ms) = id_ms(row.get_ref(0)?.as_str()?) else {
            continue;
        };
        let counts = by_minute.entry(ms / 60_000 * 60_000).or_default();
        counts.add(None, row.get(1)?, 1);
    }
    let mut stmt = conn.prepare_cached(WITH_OUTCOME)?;
    let mut rows = stmt.query(params![first])?;
    while let Some(row) = rows.next()? {
        let (text, id): (String, String) = (row.get(0)?, row.get(1)?);
        let (Some(outcome), Some(ms)) = (RequestOutcome::from_wire(&text), id_ms(&id)) else {
            continue;
        };
        if let Some(counts) = by_minute.get_mut(&(ms / 60_000 * 60_000)) {
            counts.move_to(outcome);
        }
    }
    Ok(by_minute
        .into_iter()
        .map(|(minute_ms, counts)| RequestMinute { minute_ms, counts })
        .collect())
}

/// The millisecond a UUIDv7 was made at: its first 48 bits (`first_id_at` the other way).
fn id_ms(id: &str) -> Option<i64> {
    let high = i64::from_str_radix(id.get(..8)?, 16).ok()?;
    let low = i64::from_str_radix(id.get(9..13)?, 16).ok()?;
    Some(high << 16 | low)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::requests::RequestRecord;

    /// A record of `at_ms`, with a UUIDv7 of then (random past the time, so never repeated).
    fn record(at_ms: i64, status: u16, outcome: Option<RequestOutcome>) -> RequestRecord {
        let id = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            (at_ms / 1000) as u64,
            ((at_ms % 1000) * 1_000_000) as u32,
        ));
        RequestRecord {
            id: id.to_string(),
            at: crate::gateway::clock::rfc3339(at_ms),
            at_ms,
            method: "POST".into(),
            target: "/hooks/x".into(),
            status,
            outcome,
            ..Default::default()
        }
    }

    /// Each request counts once, under its outcome or else its status class, in its minute; a
    /// request before the window is not read.
    #[tokio::test]
    async fn requests_count_by_minute_and_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let log = RequestLogStore::open(dir.path()).unwrap();
        let minute = 1_800_000_000_000 / 60_000 * 60_000;
        let records = vec![
            record(minute - 1, 200, None),
            record(minute, 200, None),
            record(minute + 1, 204, Some(RequestOutcome::Filtered)),
            record(minute + 2, 429, Some(RequestOutcome::Limited)),
            record(minute + 60_000, 401, None),
            record(minute + 60_001, 500, None),
            record(minute + 60_002, 202, Some(RequestOutcome::Held)),
        ];
        log.insert(records.into()).await.unwrap();
        let counted = log.minutes(minute).await.unwrap();
        let first = OutcomeCounts {
            accepted: 1,
            filtered: 1,
            limited: 1,
            ..Default::default()
        };
        let second = OutcomeCounts {
            client_errors: 1,
            server_errors: 1,
            held: 1,
            ..Default::default()
        };
        assert_eq!(
            counted,
            vec![
                RequestMinute {
                    minute_ms: minute,
                    counts: first
                },
                RequestMinute {
                    minute_ms: minute + 60_000,
                    counts: second
                },
            ]
        );
    }
}
