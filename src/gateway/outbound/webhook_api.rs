//! The operator's view of the callbacks and lifecycle webhooks in the outbox: listed by status
//! (`GET /api/outbound?status=failed`) and a failed one sent again (`POST
//! /api/outbound/{id}/retry`), with its `webhook-id` unchanged and its retry window restarted.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::outbox_rows::OutboxItem;
use super::webhooks::Destination;
use crate::gateway::clock::{now_ms, rfc3339};
use crate::gateway::store::{Store, StoreError};

/// A status the list is filtered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboundStatus {
    /// A callback whose run has not ended.
    Waiting,
    Pending,
    Sending,
    Done,
    /// Given up: refused, or past `outbound.retry.for`.
    Failed,
}

crate::hook::wire::wire_names!(OutboundStatus, expected = "status must be one of " {
    Waiting => "waiting",
    Pending => "pending",
    Sending => "sending",
    Done => "done",
    Failed => "failed",
});

/// One message as the API shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboundRecord {
    /// The outbox row: what `POST /api/outbound/{id}/retry` names.
    pub id: i64,
    /// The `webhook-id` every attempt carried.
    pub webhook_id: String,
    pub event: String,
    /// `callback:<mapping>` or `endpoint:<id>`.
    pub destination: String,
    /// A callback's URL (an endpoint's is in the configuration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub run_id: Option<String>,
    pub status: String,
    pub attempts: u32,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    pub created_at: String,
    /// When it is (or was last) due.
    pub next_at: String,
}

/// What a retry did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resent {
    Resent,
    NotFound,
    /// It is not failed: pending, sending or done.
    NotFailed,
}

/// The webhooks of the outbox, newest first, those of `status` only when given.
pub async fn list(
    store: &Store,
    status: Option<OutboundStatus>,
    limit: u32,
) -> Result<Vec<OutboundRecord>, StoreError> {
    store
        .read(move |conn| select(conn, status.map(OutboundStatus::as_str), limit))
        .await
}

/// The columns [`record`] reads (a macro, so that each statement is one literal).
macro_rules! columns {
    () => {
        "id, run_id, payload, status, attempts, last_error, created_at, next_at_ms"
    };
}

fn select(
    conn: &Connection,
    status: Option<&str>,
    limit: u32,
) -> rusqlite::Result<Vec<OutboundRecord>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        columns!(),
        " FROM outbox WHERE kind = 'webhook' AND (?1 IS NULL OR status = ?1)
         ORDER BY id DESC LIMIT ?2"
    ))?;
    let rows = stmt.query_map(params![status, limit], record)?;
    rows.collect()
}

/// The webhooks of the run `run_id`, oldest first (at most 100): what its record shows.
pub async fn of_run(store: &Store, run_id: String) -> Result<Vec<OutboundRecord>, StoreError> {
    store
        .read(move |conn| {
            let mut stmt = conn.prepare_cached(concat!(
                "SELECT ",
                columns!(),
                " FROM outbox WHERE kind = 'webhook' AND run_id = ?1 ORDER BY id LIMIT 100"
            ))?;
            let rows = stmt.query_map(params![run_id], record)?;
            rows.collect()
        })
        .await
}

/// A row of [`columns`] as the API shows it.
fn record(row: &rusqlite::Row<'_>) -> rusqlite::Result<OutboundRecord> {
    let payload: String = row.get(2)?;
    let message = match OutboxItem::decode("webhook", &payload) {
        Some(OutboxItem::Webhook(message)) => Some(message),
        _ => None,
    };
    let url = message.as_ref().and_then(|m| match &m.to {
        Destination::Callback { url, .. } => Some(url.clone()),
        Destination::Endpoint { .. } => None,
    });
    Ok(OutboundRecord {
        id: row.get(0)?,
        webhook_id: message.as_ref().map(|m| m.id.clone()).unwrap_or_default(),
        event: message
            .as_ref()
            .map(|m| m.event.clone())
            .unwrap_or_default(),
        destination: message.as_ref().map(|m| m.to.label()).unwrap_or_default(),
        url,
        run_id: row.get(1)?,
        status: row.get(3)?,
        attempts: row.get(4)?,
        last_error: row.get(5)?,
        created_at: row.get(6)?,
        next_at: rfc3339(row.get(7)?),
    })
}

/// Sends the failed webhook `id` again: pending now, its attempts reset and its retry window
/// starting again, its `webhook-id` and body unchanged.
pub async fn retry(store: &Store, id: i64) -> Result<Resent, StoreError> {
    store
        .write(move |conn| resend(conn, id, None, now_ms()))
        .await
}

/// The status and `webhook-id` of the webhook row `id`, if there is one.
pub fn status_of(conn: &Connection, id: i64) -> rusqlite::Result<Option<(String, String)>> {
    conn.prepare_cached(
        "SELECT status, json_extract(payload, '$.id') FROM outbox WHERE id = ?1 AND kind = 'webhook'",
    )?
    .query_row(params![id], |row| Ok((row.get(0)?, row.get(1)?)))
    .optional()
}

/// Makes the failed webhook row `id` (with the `webhook-id` `webhook_id`, when given) pending
/// from `now`, as [`retry`] does; a NATS view applies an operator's retry this way.
pub fn resend(
    conn: &Connection,
    id: i64,
    webhook_id: Option<&str>,
    now: i64,
) -> rusqlite::Result<Resent> {
    match status_of(conn, id)? {
        None => return Ok(Resent::NotFound),
        Some((_, found)) if webhook_id.is_some_and(|w| w != found) => {
            return Ok(Resent::NotFound);
        }
        Some((status, _)) if status != "failed" => return Ok(Resent::NotFailed),
        Some(_) => {}
    }
    conn.prepare_cached(
        "UPDATE outbox SET status = 'pending', attempts = 0, last_error = NULL,
             next_at_ms = ?2, payload = json_set(payload, '$.sinceMs', ?2)
         WHERE id = ?1",
    )?
    .execute(params![id, now])?;
    Ok(Resent::Resent)
}
