//! The outbox: what a backend committed to send, kept in the store until it is done or given up,
//! and the worker that sends it with retries. The embedded backend's rows are deliveries of
//! replies to chat channels; forward mode's are relays to the upstream gateway.
//!
//! A chat message is sent at most once: a row is marked `sending` before the attempt, and a
//! process that dies mid-attempt leaves it `uncertain` rather than sending it again. Relays are
//! safe to repeat (they carry an idempotency key) and are retried until they land or the upstream
//! refuses them.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, params};

use super::chat::{self, Next, SendError, next_attempt, resolve_route};
use super::relay::{AgentBody, Landed, Relayed, WakeBody, relay};
use crate::config::runtime::{ChannelSettings, GatewayMode, RetryPolicy, RuntimeSettings};
use crate::gateway::clock::{millis, now_ms, now_rfc3339};
use crate::gateway::context::Context;
use crate::gateway::signals::Signals;
use crate::gateway::store::records::{DeliveryJob, DeliveryRecord, NewRun, RunStatus};
use crate::gateway::store::runs;
use crate::metrics::{DeliveryLabels, RelayLabels};

/// The base delay of relays' backoff at least.
const MIN_RELAY_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two attempts of a relay.
const MAX_RELAY_BACKOFF: Duration = Duration::from_secs(30);
/// The longest the worker sleeps without looking at the outbox.
pub(super) const POLL: Duration = Duration::from_secs(1);

/// One thing to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboxItem {
    Delivery(DeliveryJob),
    Relay(Relayed),
}

/// The rows one worker sends, by their `kind` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Replies to chat channels (embedded backend).
    Deliveries,
    /// Relays upstream (forward backend).
    Relays,
}

impl Lane {
    fn kinds(self) -> (&'static str, &'static str) {
        match self {
            Lane::Deliveries => ("delivery", "delivery"),
            Lane::Relays => ("forward-wake", "forward-run"),
        }
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AgentRow {
    body: AgentBody,
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
    pub(super) fn agent_payload(body: AgentBody, idempotency_key: String) -> String {
        let row = AgentRow {
            body,
            idempotency_key,
        };
        serde_json::to_string(&row).unwrap_or_default()
    }

    /// The relay of a waiting row's payload.
    pub(super) fn agent_of(payload: &str) -> Option<(AgentBody, String)> {
        let row: AgentRow = serde_json::from_str(payload).ok()?;
        Some((row.body, row.idempotency_key))
    }
}

/// Where a row is; spelled in lower case in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowStatus {
    /// A run's relay whose run waits for its lane (forward mode).
    Waiting,
    Pending,
    Done,
    Failed,
    Uncertain,
}

impl RowStatus {
    fn as_str(self) -> &'static str {
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
pub(super) struct Row {
    id: i64,
    run_id: Option<String>,
    pub(super) item: Option<OutboxItem>,
    attempts: u32,
    /// Parts of a split reply already sent.
    parts_sent: usize,
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

pub(super) fn due(
    conn: &Connection,
    lane: Lane,
    now_ms: i64,
    limit: u32,
) -> rusqlite::Result<Vec<Row>> {
    let (a, b) = lane.kinds();
    let mut stmt = conn.prepare_cached(
        "SELECT id, kind, run_id, payload, attempts, parts_sent FROM outbox
         WHERE status = 'pending' AND next_at_ms <= ?1 AND kind IN (?3, ?4) ORDER BY id LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![now_ms, limit, a, b], Row::read)?;
    rows.collect()
}

pub(super) fn next_due_ms(conn: &Connection, lane: Lane) -> rusqlite::Result<Option<i64>> {
    let (a, b) = lane.kinds();
    conn.prepare_cached(
        "SELECT MIN(next_at_ms) FROM outbox WHERE status = 'pending' AND kind IN (?1, ?2)",
    )?
    .query_row(params![a, b], |row| row.get(0))
}

/// Marks a row as being sent; a process that dies now leaves it `sending`, which the next start
/// does not resend (see [`abandon_in_flight`]).
fn mark_sending(conn: &Connection, id: i64) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE outbox SET status = 'sending' WHERE id = ?1 AND status = 'pending'",
        )?
        .execute(params![id])?
        == 1)
}

fn settle(
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

/// Records how many parts of a split reply went out, before they are known to be all.
fn record_parts(conn: &Connection, id: i64, parts_sent: usize) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE outbox SET parts_sent = ?2 WHERE id = ?1")?
        .execute(params![id, i64::try_from(parts_sent).unwrap_or(i64::MAX)])?;
    Ok(())
}

/// Rows of `lane` a dead process was sending: relays go back to pending (safe to repeat);
/// deliveries are returned, to be given up as uncertain (a chat message is never sent twice).
fn abandon_in_flight(conn: &Connection, lane: Lane) -> rusqlite::Result<Vec<Row>> {
    if lane == Lane::Relays {
        conn.prepare_cached(
            "UPDATE outbox SET status = 'pending'
             WHERE status = 'sending' AND kind LIKE 'forward-%'",
        )?
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

/// Runs the worker of `lane` until the stop.
pub async fn run(ctx: Context, signals: Arc<Signals>, lane: Lane) {
    recover(&ctx, &signals, lane).await;
    while !signals.stopping() {
        let due = ctx
            .store
            .read(move |conn| due(conn, lane, now_ms(), 32))
            .await;
        let store_ok = match due {
            Ok(due) => {
                let mut ok = true;
                for row in due.into_iter().take_while(|_| !signals.stopping()) {
                    if !attempt(&ctx, &signals, row).await {
                        ok = false;
                        break;
                    }
                }
                ok
            }
            Err(err) => {
                tracing::error!(%err, "cannot read the outbox");
                false
            }
        };
        if !store_ok {
            // The store is failing (disk full, read-only): do not spin on rows it cannot mark.
            tokio::time::sleep(POLL).await;
            continue;
        }
        let wait = next_wait(&ctx, lane).await;
        let _ = tokio::time::timeout(wait, signals.outbox_ready.notified()).await;
    }
}

/// How long the worker of `lane` may sleep: until its next row is due, at most [`POLL`].
pub(super) async fn next_wait(ctx: &Context, lane: Lane) -> Duration {
    ctx.store
        .read(move |conn| next_due_ms(conn, lane))
        .await
        .ok()
        .flatten()
        .map_or(POLL, |at| {
            Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0)).min(POLL)
        })
}

/// What a start does before sending: the rows of `lane` a dead process was sending are taken
/// up again (relays) or given up as uncertain (replies).
pub(super) async fn recover(ctx: &Context, signals: &Signals, lane: Lane) {
    match ctx
        .store
        .write(move |conn| abandon_in_flight(conn, lane))
        .await
    {
        Ok(abandoned) => {
            for row in abandoned {
                tracing::warn!(id = row.id, "a send interrupted by a stop is not repeated");
                give_up(ctx, signals, &row, &SendError::Interrupted).await;
            }
        }
        Err(err) => tracing::error!(%err, "cannot recover the outbox"),
    }
}

/// One attempt at a row; false when the store could not even mark it.
pub(super) async fn attempt(ctx: &Context, signals: &Signals, row: Row) -> bool {
    match mark(ctx, &row).await {
        Some(true) => send_marked(ctx, signals, row).await,
        Some(false) => {}
        None => return false,
    }
    true
}

/// Marks `row` as being sent: whether it was still pending; `None` when the store failed.
pub(super) async fn mark(ctx: &Context, row: &Row) -> Option<bool> {
    let id = row.id;
    match ctx.store.write(move |conn| mark_sending(conn, id)).await {
        Ok(marked) => Some(marked),
        Err(err) => {
            tracing::error!(%err, id, "cannot mark an outbox row as sending");
            None
        }
    }
}

/// Sends a row marked as being sent, and records what came of it.
pub(super) async fn send_marked(ctx: &Context, signals: &Signals, row: Row) {
    let id = row.id;
    let settings = ctx.config.current();
    let Some(item) = &row.item else {
        let unreadable = SendError::Refused {
            service: "outbox",
            reason: "a row this version cannot read".into(),
        };
        give_up(ctx, signals, &row, &unreadable).await;
        return;
    };
    let mut parts = row.parts_sent;
    let (result, policy, max_delay) = send(ctx, &settings.runtime, item, &mut parts).await;
    let attempts = row.attempts + 1;
    let next = result
        .as_ref()
        .err()
        .map(|error| next_attempt(&policy, attempts, error, max_delay));
    if let OutboxItem::Relay(relayed) = item {
        count_relay(ctx, relayed, next);
    }
    match result {
        Ok(landed) => succeed(ctx, signals, &row, landed).await,
        Err(error) => match next.unwrap_or(Next::GiveUp) {
            Next::GiveUp => {
                match &error {
                    // Every reply routed there fails alike: said once, not per reply.
                    SendError::NotConfigured(channel) => {
                        settings.missing_channels.warn_once(*channel)
                    }
                    _ => tracing::warn!(id, attempts, %error, "giving up a send"),
                }
                give_up(ctx, signals, &row, &error).await;
            }
            Next::RetryAfter(backoff) => {
                retry_later(ctx, signals, &row, &error, backoff, parts).await;
            }
        },
    }
}

/// Sends `item` once, counting in `parts` the parts of a split reply that went out; returns the
/// outcome (a relay's upstream run id), with the retry policy and the longest backoff of its kind.
async fn send(
    ctx: &Context,
    runtime: &RuntimeSettings,
    item: &OutboxItem,
    parts: &mut usize,
) -> (Result<Landed, SendError>, RetryPolicy, Duration) {
    match item {
        OutboxItem::Delivery(job) => {
            let sent = chat::deliver(&ctx.http, &runtime.channels, job, parts);
            let policy = runtime.channels.retry;
            (
                sent.await.map(|()| Landed::default()),
                policy,
                Duration::MAX,
            )
        }
        OutboxItem::Relay(relayed) => {
            let relayed = match &runtime.mode {
                GatewayMode::Forward(upstream) => relay(&ctx.http, upstream, relayed).await,
                // A store written in forward mode, opened by an embedded gateway: kept.
                GatewayMode::Embedded => Err(SendError::Unreachable {
                    service: "upstream",
                    detail: "forward mode is off".into(),
                }),
            };
            // Relays are retried until they land: the client already has its 200. At least
            // MIN_RELAY_BACKOFF apart, so that a zero base delay does not hammer the upstream.
            let policy = RetryPolicy {
                attempts: u32::MAX,
                base_delay: runtime.channels.retry.base_delay.max(MIN_RELAY_BACKOFF),
            };
            (relayed, policy, MAX_RELAY_BACKOFF)
        }
    }
}

/// Counts an attempt at a relay (`hookgate_relays_total`) by what comes `next` (`None`: it
/// landed).
fn count_relay(ctx: &Context, relayed: &Relayed, next: Option<Next>) {
    let outcome = match next {
        None => "forwarded",
        Some(Next::RetryAfter(_)) => "retried",
        Some(Next::GiveUp) => "failed",
    };
    let kind = match relayed {
        Relayed::Wake { .. } => "wake",
        Relayed::Agent { .. } => "agent",
    };
    ctx.metrics
        .relays
        .get_or_create(&RelayLabels { kind, outcome })
        .inc();
}

/// Puts a row that failed with `error` back as pending, due after `backoff`, with the `parts`
/// of a split reply that went out: the retry sends only the rest.
async fn retry_later(
    ctx: &Context,
    signals: &Signals,
    row: &Row,
    error: &SendError,
    backoff: Duration,
    parts: usize,
) {
    let (id, attempts) = (row.id, row.attempts + 1);
    tracing::info!(id, attempts, %error, ?backoff, "send failed; will retry");
    let (error, next) = (error.to_string(), now_ms().saturating_add(millis(backoff)));
    let retried = ctx
        .store
        .write(move |conn| {
            settle(conn, id, RowStatus::Pending, Some(&error), attempts, next)?;
            record_parts(conn, id, parts)
        })
        .await;
    if let Err(err) = retried {
        tracing::error!(%err, id, "cannot schedule a retry");
    }
    signals.outbox_ready.notify_one();
}

async fn succeed(ctx: &Context, signals: &Signals, row: &Row, landed: Landed) {
    let (id, attempts) = (row.id, row.attempts + 1);
    let (run_id, item) = (row.run_id.clone(), row.item.clone());
    let result = ctx
        .store
        .write(move |conn| {
            settle(conn, id, RowStatus::Done, None, attempts, now_ms())?;
            match (item, &run_id) {
                (Some(OutboxItem::Delivery(job)), Some(run_id)) => {
                    runs::set_delivery(conn, run_id, &DeliveryRecord::sent(&job, attempts))?;
                }
                (Some(OutboxItem::Relay(Relayed::Agent { .. })), Some(run_id)) => {
                    let upstream = landed.upstream_run_id.as_deref().filter(|u| !u.is_empty());
                    // The upstream's run ended other than `ok`: said on the run, which the
                    // upstream took (it is not relayed again).
                    let ended = landed
                        .completion
                        .filter(|status| status != "ok")
                        .map(|status| format!("the upstream's run ended {status}"));
                    let status = RunStatus::Forwarded;
                    runs::set_forwarded(conn, run_id, status, upstream, ended.as_deref())?;
                }
                _ => {}
            }
            Ok(())
        })
        .await;
    if let Err(err) = result {
        tracing::error!(%err, id = row.id, "cannot record a completed send");
    }
    // A relayed run ended: its lane slot is free for the next.
    signals.outbox_ready.notify_one();
    count_delivery(ctx, row, "sent");
}

/// Counts a reply to a chat channel that ended `outcome` (`hookgate_deliveries_total`); a
/// relay is counted by its own metric.
fn count_delivery(ctx: &Context, row: &Row, outcome: &'static str) {
    if let Some(OutboxItem::Delivery(_)) = &row.item {
        ctx.metrics
            .deliveries
            .get_or_create(&DeliveryLabels { outcome })
            .inc();
    }
}

/// Ends a row without success. A reply that was not delivered becomes the run's summary event;
/// a relay the upstream refused leaves its run `forward_failed`, with the upstream's answer.
async fn give_up(ctx: &Context, signals: &Signals, row: &Row, error: &SendError) {
    let (status, outcome) = match error {
        SendError::Interrupted => (RowStatus::Uncertain, "uncertain"),
        _ => (RowStatus::Failed, "failed"),
    };
    count_delivery(ctx, row, outcome);
    let (id, attempts) = (row.id, row.attempts + 1);
    let (run_id, item, error) = (row.run_id.clone(), row.item.clone(), error.clone());
    let result = ctx
        .store
        .write(move |conn| {
            settle(
                conn,
                id,
                status,
                Some(&error.to_string()),
                attempts,
                now_ms(),
            )?;
            match (item, &run_id) {
                (Some(OutboxItem::Delivery(job)), run_id) => {
                    if let Some(run_id) = run_id {
                        let record = chat::given_up(&job, attempts, &error);
                        runs::set_delivery(conn, run_id, &record)?;
                    }
                    if let Some(summary) = &job.summary {
                        summary.insert(conn)?;
                    }
                }
                (Some(OutboxItem::Relay(Relayed::Agent { .. })), Some(run_id)) => {
                    let error = error.to_string();
                    runs::set_forwarded(
                        conn,
                        run_id,
                        RunStatus::ForwardFailed,
                        None,
                        Some(&error),
                    )?;
                }
                _ => {}
            }
            Ok(())
        })
        .await;
    if matches!(&row.item, Some(OutboxItem::Relay(_))) {
        // A relayed run failed for good: its lane slot is free for the next.
        signals.outbox_ready.notify_one();
    }
    let wake_now = matches!(&row.item, Some(OutboxItem::Delivery(job)) if job.wake_now && job.summary.is_some());
    match result {
        // The run's summary was just recorded: its heartbeat need not wait for the next period.
        Ok(()) if wake_now => signals.heartbeat.request(),
        Ok(()) => {}
        Err(err) => tracing::error!(%err, id = row.id, "cannot record a failed send"),
    }
}
