//! What the outbox holds: each row a thing to send ([`OutboxItem`]: a reply to a chat channel, a
//! relay to the upstream gateway, or a signed webhook), in its lane ([`Lane`]), with its status, attempts and next
//! time, and the statements the worker (`outbox.rs`) and the operator's retry move it by.

use rusqlite::{Connection, params};

use super::chat::resolve_route;
use super::relay::{AgentBody, Relayed, WakeBody};
use super::webhooks::WebhookMessage;
use crate::config::runtime::ChannelSettings;
use crate::gateway::clock::{now_ms, now_rfc3339};
use crate::gateway::store::records::{DeliveryJob, DeliveryRecord, NewRun};
use crate::gateway::store::runs;

/// One thing to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboxItem {
    Delivery(DeliveryJob),
    Relay(Relayed),
    /// A callback or a lifecycle webhook (`super::webhooks`).
    Webhook(WebhookMessage),
}

/// The rows one worker sends, by their `kind` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Replies to chat channels (embedded backend).
    Deliveries,
    /// Relays upstream (forward backend).
    Relays,
    /// Callbacks and lifecycle webhooks (both backends).
    Webhooks,
}

/// A statement on the rows of one lane: `$head`, the lane's kinds, then `$tail`, each lane's
/// a literal built at compile time; the one place a lane's kinds are spelled. The kinds are
/// written in rather than bound as a list: a bound list (`kind IN (?, ?)`, even of one kind
/// twice) costs SQLite an ephemeral table at every query (about 20k instructions of a
/// callback's `due`) and keeps it from reading a one-kind lane's rows in the index's order.
macro_rules! per_lane {
    ($lane:expr, $head:expr, $tail:expr) => {
        match $lane {
            Lane::Deliveries => concat!($head, "kind = 'delivery'", $tail),
            Lane::Relays => concat!($head, "kind IN ('forward-wake', 'forward-run')", $tail),
            Lane::Webhooks => concat!($head, "kind = 'webhook'", $tail),
        }
    };
}

/// A webhook row is due only when no earlier message of its run to the same destination is
/// still to be sent: a run's events reach each endpoint in the order they happened.
/// (A macro, so that the statements using it are literals built at compile time.)
macro_rules! in_order {
    () => {
        "(kind != 'webhook' OR run_id IS NULL OR NOT EXISTS (
         SELECT 1 FROM outbox AS e WHERE e.kind = 'webhook' AND e.status IN ('pending', 'sending')
           AND e.id < outbox.id AND e.run_id = outbox.run_id
           AND json_extract(e.payload, '$.to') = json_extract(outbox.payload, '$.to')))"
    };
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AgentRow {
    body: Box<AgentBody>,
    idempotency_key: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct WakeRow {
    body: WakeBody,
}

impl OutboxItem {
    /// The `kind` column and the `payload` JSON.
    pub(super) fn encode(&self) -> (&'static str, String) {
        // Plain data: always serialises.
        let json = |value: serde_json::Result<String>| value.unwrap_or_default();
        match self {
            OutboxItem::Delivery(job) => ("delivery", json(serde_json::to_string(job))),
            OutboxItem::Relay(Relayed::Wake { body }) => (
                "forward-wake",
                json(serde_json::to_string(&WakeRow { body: body.clone() })),
            ),
            OutboxItem::Relay(Relayed::Agent {
                body,
                idempotency_key,
            }) => (
                "forward-run",
                json(serde_json::to_string(&AgentRow {
                    body: body.clone(),
                    idempotency_key: idempotency_key.clone(),
                })),
            ),
            OutboxItem::Webhook(message) => ("webhook", json(serde_json::to_string(message))),
        }
    }

    pub(super) fn decode(kind: &str, payload: &str) -> Option<OutboxItem> {
        Some(match kind {
            "delivery" => OutboxItem::Delivery(serde_json::from_str(payload).ok()?),
            "forward-wake" => {
                let row: WakeRow = serde_json::from_str(payload).ok()?;
                OutboxItem::Relay(Relayed::Wake { body: row.body })
            }
            "forward-run" => {
                let row: AgentRow = serde_json::from_str(payload).ok()?;
                OutboxItem::Relay(Relayed::Agent {
                    body: row.body,
                    idempotency_key: row.idempotency_key,
                })
            }
            "webhook" => OutboxItem::Webhook(serde_json::from_str(payload).ok()?),
            _ => return None,
        })
    }

    /// Adds the item to the outbox, due now.
    pub fn insert(&self, conn: &Connection, run_id: Option<&str>) -> rusqlite::Result<()> {
        self.insert_as(conn, run_id, RowStatus::Pending)
    }

    /// Adds a run's relay to the outbox, `waiting` until the run's lane has room (forward
    /// mode's [`super::relays::dispatch`] makes it pending): the body is what the request set,
    /// which the stored run no longer tells apart from defaults.
    pub fn insert_waiting(&self, conn: &Connection, run_id: &str) -> rusqlite::Result<()> {
        self.insert_as(conn, Some(run_id), RowStatus::Waiting)
    }

    /// Makes the waiting row `id` this item, pending now (a callback whose run ended).
    pub(super) fn release(&self, conn: &Connection, id: i64) -> rusqlite::Result<()> {
        let (_, payload) = self.encode();
        conn.prepare_cached(
            "UPDATE outbox SET status = 'pending', payload = ?2, next_at_ms = ?3
             WHERE id = ?1 AND status = 'waiting'",
        )?
        .execute(params![id, payload, now_ms()])?;
        Ok(())
    }

    fn insert_as(
        &self,
        conn: &Connection,
        run_id: Option<&str>,
        status: RowStatus,
    ) -> rusqlite::Result<()> {
        let (kind, payload) = self.encode();
        conn.prepare_cached(
            "INSERT INTO outbox (kind, run_id, payload, next_at_ms, created_at, status)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            kind,
            run_id,
            payload,
            now_ms(),
            now_rfc3339(),
            status.as_str()
        ])?;
        Ok(())
    }

    /// The payload column of a relay of `body` (for a waiting row whose message changes).
    pub(super) fn agent_payload(body: Box<AgentBody>, idempotency_key: String) -> String {
        let row = AgentRow {
            body,
            idempotency_key,
        };
        serde_json::to_string(&row).unwrap_or_default()
    }

    /// The relay of a waiting row's payload.
    pub(super) fn agent_of(payload: &str) -> Option<(Box<AgentBody>, String)> {
        let row: AgentRow = serde_json::from_str(payload).ok()?;
        Some((row.body, row.idempotency_key))
    }
}

/// Where a row is; spelled in lower case in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowStatus {
    /// A run's relay whose run waits for its lane (forward mode).
    Waiting,
    Pending,
    Done,
    Failed,
    Uncertain,
}

impl RowStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RowStatus::Waiting => "waiting",
            RowStatus::Pending => "pending",
            RowStatus::Done => "done",
            RowStatus::Failed => "failed",
            RowStatus::Uncertain => "uncertain",
        }
    }
}

/// An outbox row due for an attempt. `item` is `None` for a row this version cannot read.
#[derive(Debug, Clone)]
pub struct Row {
    pub(super) id: i64,
    pub(super) run_id: Option<String>,
    pub(super) item: Option<OutboxItem>,
    pub(super) attempts: u32,
    /// Parts of a split reply already sent.
    pub(super) parts_sent: usize,
}

impl Row {
    /// From a row of `SELECT id, kind, run_id, payload, attempts, parts_sent`.
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
        let (kind, payload): (String, String) = (row.get(1)?, row.get(3)?);
        Ok(Row {
            id: row.get(0)?,
            run_id: row.get(2)?,
            item: OutboxItem::decode(&kind, &payload),
            attempts: row.get(4)?,
            // A count the store holds as an integer; a negative one (never written) reads as 0.
            parts_sent: usize::try_from(row.get::<_, i64>(5)?).unwrap_or(0),
        })
    }
}

/// The rows of `lane` pending and due by `now_ms`, the longest due first (then the oldest), at
/// most `limit`. Read in the order of the index of each kind's pending rows by due time, so a
/// lane steps through its own due rows only, and through no more of them than it takes: not
/// those of other lanes, nor its own that wait for a retry, nor the rest of a backlog. Named:
/// without statistics SQLite takes `outbox_due` to spare a sort, and that index holds the
/// pending rows of every lane.
pub fn due(conn: &Connection, lane: Lane, now_ms: i64, limit: u32) -> rusqlite::Result<Vec<Row>> {
    let mut stmt = conn.prepare_cached(due_statement(lane))?;
    let rows = stmt.query_map(params![now_ms, limit], Row::read)?;
    rows.collect()
}

/// The statement of [`due`] for `lane`.
fn due_statement(lane: Lane) -> &'static str {
    per_lane!(
        lane,
        "SELECT id, kind, run_id, payload, attempts, parts_sent
         FROM outbox INDEXED BY outbox_due_by_kind
         WHERE status = 'pending' AND next_at_ms <= ?1 AND ",
        concat!(" AND ", in_order!(), " ORDER BY next_at_ms, id LIMIT ?2")
    )
}

/// When the next row of `lane` falls due (now or earlier where one is due already), `None`
/// when it has none pending; read like [`due`], from the first of the lane's pending rows.
pub fn next_due_ms(conn: &Connection, lane: Lane) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached(per_lane!(
        lane,
        "SELECT MIN(next_at_ms) FROM outbox INDEXED BY outbox_due_by_kind
         WHERE status = 'pending' AND ",
        concat!(" AND ", in_order!())
    ))?
    .query_row([], |row| row.get(0))
}

/// Marks a row as being sent; a process that dies now leaves it `sending`, which the next start
/// does not resend (see [`abandon_in_flight`]).
pub(super) fn mark_sending(conn: &Connection, id: i64) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE outbox SET status = 'sending' WHERE id = ?1 AND status = 'pending'",
        )?
        .execute(params![id])?
        == 1)
}

pub(super) fn settle(
    conn: &Connection,
    id: i64,
    status: RowStatus,
    error: Option<&str>,
    attempts: u32,
    next_at_ms: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE outbox SET status = ?2, last_error = ?3, attempts = ?4, next_at_ms = ?5
         WHERE id = ?1",
    )?
    .execute(params![id, status.as_str(), error, attempts, next_at_ms])?;
    Ok(())
}

/// What one attempt at a webhook came to, for a store that records it as a fact (a NATS
/// cluster): every view applies it to the row of the same id alike ([`WebhookAttempt::apply`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAttempt {
    pub row: i64,
    pub webhook_id: String,
    /// `done`, `pending` (tried again at `next_at_ms`) or `failed`.
    pub status: String,
    pub attempts: u32,
    pub last_error: Option<String>,
    pub next_at_ms: i64,
}

impl WebhookAttempt {
    /// Records the attempt on its row, unless the row moved on (settled by an earlier fact).
    pub fn apply(&self, conn: &rusqlite::Connection) -> rusqlite::Result<()> {
        let status = match self.status.as_str() {
            "done" => RowStatus::Done,
            "failed" => RowStatus::Failed,
            _ => RowStatus::Pending,
        };
        settle_webhook(conn, self, status)
    }
}

/// Records a webhook's attempt as a NATS view applies it: on its row while the row is still
/// to send and still the same message.
fn settle_webhook(
    conn: &Connection,
    attempt: &WebhookAttempt,
    status: RowStatus,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE outbox SET status = ?3, last_error = ?4, attempts = ?5, next_at_ms = ?6
         WHERE id = ?1 AND kind = 'webhook' AND status IN ('pending', 'sending')
           AND json_extract(payload, '$.id') = ?2",
    )?
    .execute(params![
        attempt.row,
        attempt.webhook_id,
        status.as_str(),
        attempt.last_error,
        attempt.attempts,
        attempt.next_at_ms
    ])?;
    Ok(())
}

impl Row {
    /// The key under which one node of a cluster takes this attempt at a webhook: its
    /// `webhook-id`, its retry window and its attempt (`None` for another kind of row).
    pub fn webhook_claim_key(&self) -> Option<String> {
        match &self.item {
            Some(OutboxItem::Webhook(m)) => {
                Some(format!("{}-{}-{}", m.id, m.since_ms, self.attempts))
            }
            _ => None,
        }
    }
}

/// Records how many parts of a split reply went out, before they are known to be all.
pub(super) fn record_parts(conn: &Connection, id: i64, parts_sent: usize) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE outbox SET parts_sent = ?2 WHERE id = ?1")?
        .execute(params![id, i64::try_from(parts_sent).unwrap_or(i64::MAX)])?;
    Ok(())
}

/// Rows of `lane` a dead process was sending: relays and webhooks go back to pending (safe to
/// repeat: a relay carries its idempotency key, a webhook its `webhook-id`); deliveries are
/// returned, to be given up as uncertain (a chat message is never sent twice).
pub(super) fn abandon_in_flight(conn: &Connection, lane: Lane) -> rusqlite::Result<Vec<Row>> {
    if lane != Lane::Deliveries {
        conn.prepare_cached(per_lane!(
            lane,
            "UPDATE outbox SET status = 'pending' WHERE status = 'sending' AND ",
            ""
        ))?
        .execute([])?;
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(
        "SELECT id, kind, run_id, payload, attempts, parts_sent FROM outbox
         WHERE status = 'sending' AND kind = 'delivery'",
    )?;
    let rows = stmt.query_map([], Row::read)?;
    rows.collect()
}

/// Sends a run's given-up reply again, once the operator mended the cause: its row goes back to
/// pending with its attempts reset, addressed to the route the run resolves to now, as a run's
/// conclusion resolves it. The owner may have set a route since (`channel: "last"` with none
/// had no recipient); a reply whose route changed is sent whole, since the parts sent before
/// went elsewhere. Whether there was one.
pub fn resend_delivery(
    conn: &Connection,
    run_id: &str,
    channels: &ChannelSettings,
) -> rusqlite::Result<bool> {
    let Some(run) = NewRun::select(conn, run_id)? else {
        return Ok(false);
    };
    let given_up: Vec<(i64, String)> = conn
        .prepare_cached(
            "SELECT id, payload FROM outbox
             WHERE run_id = ?1 AND kind = 'delivery' AND status IN ('failed', 'uncertain')",
        )?
        .query_map(params![run_id], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut resent = false;
    for (id, payload) in given_up {
        // A row this version cannot read stays given up.
        let Some(OutboxItem::Delivery(mut job)) = OutboxItem::decode("delivery", &payload) else {
            continue;
        };
        let owner = runs::owner_route(conn, &job.agent)?;
        let route = resolve_route(run.channel(), run.action().to.clone(), owner, channels);
        let moved = route != job.route();
        (job.channel, job.to) = (route.channel, route.to.clone());
        let (_, payload) = OutboxItem::Delivery(job).encode();
        conn.prepare_cached(
            "UPDATE outbox SET status = 'pending', attempts = 0, last_error = NULL,
                 next_at_ms = ?2, payload = ?3,
                 parts_sent = CASE WHEN ?4 THEN 0 ELSE parts_sent END
             WHERE id = ?1",
        )?
        .execute(params![id, now_ms(), payload, moved])?;
        let pending = DeliveryRecord::Pending {
            channel: route.channel,
            to: route.to,
        };
        runs::set_delivery(conn, run_id, &pending)?;
        resent = true;
    }
    Ok(resent)
}

#[cfg(test)]
mod tests {
    use rusqlite::StatementStatus;

    use super::*;

    /// A store with `webhooks` webhook rows of runs of their own, due at 0, and replies due at
    /// each of `replies`, written in that order.
    fn outbox_with(webhooks: usize, replies: &[i64]) -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("outbox.db")).unwrap();
        crate::gateway::store::schema::migrate(&conn).unwrap();
        let mut insert = conn
            .prepare(
                "INSERT INTO outbox (kind, run_id, payload, next_at_ms, created_at)
                 VALUES (?1, ?2, '{}', ?3, '2026-11-30T00:00:00Z')",
            )
            .unwrap();
        for i in 0..webhooks {
            insert
                .execute(params!["webhook", format!("run-{i}"), 0])
                .unwrap();
        }
        for at in replies {
            insert.execute(params!["delivery", "reply", at]).unwrap();
        }
        drop(insert);
        (dir, conn)
    }

    /// The virtual machine steps [`due`] took for `lane` (its statement's count since prepared).
    fn steps_of_due(conn: &Connection, lane: Lane) -> i32 {
        conn.prepare_cached(due_statement(lane))
            .unwrap()
            .get_status(StatementStatus::VmStep)
    }

    #[test]
    fn a_lane_takes_its_rows_longest_due_first_and_only_those_due() {
        let (_dir, conn) = outbox_with(3, &[30, 10, 20, 50]);
        let due_at = |rows: Vec<Row>| -> Vec<i64> { rows.iter().map(|row| row.id).collect() };
        // Ids 4 to 7 are the replies due at 30, 10, 20 and 50.
        assert_eq!(
            due_at(due(&conn, Lane::Deliveries, 40, 32).unwrap()),
            [5, 6, 4]
        );
        assert_eq!(due_at(due(&conn, Lane::Deliveries, 40, 2).unwrap()), [5, 6]);
        assert_eq!(next_due_ms(&conn, Lane::Deliveries).unwrap(), Some(10));
        assert_eq!(
            due_at(due(&conn, Lane::Webhooks, 40, 32).unwrap()),
            [1, 2, 3]
        );
        assert!(due(&conn, Lane::Relays, 40, 32).unwrap().is_empty());
        assert_eq!(next_due_ms(&conn, Lane::Relays).unwrap(), None);
    }

    /// A backlog of one lane costs another nothing, and its own lane no more than what it
    /// takes: counted in SQLite's steps, which a scan of the 2000 rows would take thousands of.
    #[test]
    fn a_backlog_is_not_stepped_through() {
        let (_dir, conn) = outbox_with(2000, &[10]);
        assert_eq!(due(&conn, Lane::Deliveries, 40, 32).unwrap().len(), 1);
        let replies = steps_of_due(&conn, Lane::Deliveries);
        assert!(replies < 100, "{replies} steps for one reply");
        assert_eq!(due(&conn, Lane::Webhooks, 40, 32).unwrap().len(), 32);
        let webhooks = steps_of_due(&conn, Lane::Webhooks);
        assert!(webhooks < 32 * 50, "{webhooks} steps for 32 webhooks");
    }
}
