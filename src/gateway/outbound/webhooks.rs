//! Callbacks and lifecycle webhooks as the outbox keeps them: a [`WebhookMessage`] is written in
//! the transaction of what it tells (a run's end, its start), before anything is sent, with its
//! `webhook-id` fixed once, so that every attempt of it, after a crash too, carries the same id.
//! A callback is written `waiting` with its run, its URL rendered from the request's payload,
//! and made pending with the run's outcome when the run ends (docs/outbound.md).

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::outbox_rows::OutboxItem;
use crate::config::Settings;
use crate::config::outbound::{CallbackFormat, Event, OutboundSettings};
use crate::gateway::admission::batches::Joined;
use crate::gateway::clock::{now_ms, now_rfc3339};
use crate::gateway::store::records::{NewRun, RunOutcome, RunStatus};
use crate::gateway::store::runs;
use crate::gateway::store::turn_record::Usage;

/// One message to send: its `webhook-id`, where it goes, and its body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookMessage {
    /// The `webhook-id` of every attempt.
    pub id: String,
    pub to: Destination,
    /// The event's type (`run.finished`, ...).
    pub event: String,
    /// The JSON body; empty while a callback waits for its run's end.
    pub body: String,
    /// When it was written (Unix ms): retries stop `outbound.retry.for` after it.
    pub since_ms: i64,
    /// A callback's request (its `X-Request-Id`), kept from admission for its body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The callback of a request that joined a batch: its position in the batch (from 1, the
    /// `batched` of its answer), kept for its body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batched: Option<u32>,
}

/// Where a message goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Destination {
    /// The callback of the mapping `mapping` (its secrets), to the URL rendered at admission.
    Callback { mapping: String, url: String },
    /// The endpoint `id` of `outbound.endpoints` (its URL and secrets as configured now).
    Endpoint { id: String },
}

impl Destination {
    /// How the operator API names it.
    pub fn label(&self) -> String {
        match self {
            Destination::Callback { mapping, .. } => format!("callback:{mapping}"),
            Destination::Endpoint { id } => format!("endpoint:{id}"),
        }
    }
}

impl WebhookMessage {
    /// A message pending now, with a fresh `webhook-id`.
    pub(super) fn new(to: Destination, event: &str, body: String) -> WebhookMessage {
        WebhookMessage {
            id: format!("msg_{}", uuid::Uuid::now_v7().simple()),
            to,
            event: event.to_string(),
            body,
            since_ms: now_ms(),
            request_id: None,
            batched: None,
        }
    }
}

/// The envelope every body has: the event's `type`, when it happened and its `data`, the shape
/// Standard Webhooks recommends.
#[derive(Serialize)]
pub(super) struct Envelope<'a, T: Serialize> {
    #[serde(rename = "type")]
    pub(super) kind: &'a str,
    pub(super) timestamp: &'a str,
    pub(super) data: T,
}

/// A run's outcome as a callback and the `run.*` events carry it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RunData<'a> {
    run_id: &'a str,
    /// The request that admitted the run (`X-Request-Id` of its answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
    /// A batch's run: the request's position in the batch (its answer's `batched`).
    #[serde(skip_serializing_if = "Option::is_none")]
    batched: Option<u32>,
    status: RunStatus,
    agent: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    mapping: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageData>,
    created_at: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<&'a str>,
    /// Forward mode: the run the upstream gateway ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    upstream_run_id: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageData {
    input_tokens: u64,
    output_tokens: u64,
}

impl From<Usage> for UsageData {
    fn from(usage: Usage) -> Self {
        UsageData {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
        }
    }
}

/// A reply to a Slack slash command's `response_url`, in the form Slack documents for delayed
/// responses (docs/outbound.md#callbacks cites the page).
#[derive(Serialize)]
struct SlackResponse<'a> {
    response_type: &'static str,
    text: &'a str,
}

/// The callback of a run just admitted, waiting for the run's end (its body empty); `None`
/// when the run has none.
pub fn callback_of(run: &NewRun) -> Option<WebhookMessage> {
    let (Some(url), Some(mapping)) = (&run.admitted.callback, &run.admitted.mapping_id) else {
        return None;
    };
    let to = Destination::Callback {
        mapping: mapping.clone(),
        url: url.clone(),
    };
    let mut message = WebhookMessage::new(to, "", String::new());
    message.request_id = run.admitted.request_id.clone();
    Some(message)
}

/// Keeps `callback` ([`callback_of`] the request, taken before it joined its batch) `waiting`
/// with the batch's run for its end, in the transaction of the join: each request of a batch
/// gets the run's outcome at the URL its own payload rendered, with its own request id and
/// position. A retry of a request that joined (nothing written) keeps none: the first one's
/// waits.
pub fn await_joined(
    conn: &Connection,
    callback: Option<WebhookMessage>,
    joined: &Joined,
) -> rusqlite::Result<()> {
    if let (Some(message), Joined::Added(added)) = (callback, joined)
        && !added.repeated
        && let Some(position) = added.position
    {
        let callback = member_callback(message, position, &added.run_id, None);
        write(conn, &added.run_id, &[callback])?;
    }
    Ok(())
}

/// A batch's request's callback ([`callback_of`] it) with its `position` in the batch. With
/// the request's idempotency `fingerprint`, its `webhook-id` is the batch run's and the
/// fingerprint's: a retry that took another position (its first publish landed after it timed
/// out) names the same callback, which [`await_member`] keeps once.
pub fn member_callback(
    mut callback: WebhookMessage,
    position: u32,
    run_id: &str,
    fingerprint: Option<&str>,
) -> WebhookMessage {
    use sha2::{Digest, Sha256};
    callback.batched = Some(position);
    if let Some(fingerprint) = fingerprint {
        let digest = Sha256::new()
            .chain_update(run_id.as_bytes())
            .chain_update([0])
            .chain_update(fingerprint.as_bytes())
            .finalize();
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        callback.id = format!("msg_{hex}");
    }
    callback
}

/// Keeps the callbacks of a request that joined batch `run_id` (a NATS batch item's) waiting
/// for the run's end, each once by its `webhook-id`, and only while the batch is still
/// `batching`: a callback that came after the batch's run was closed would wait forever, so it
/// is logged and dropped.
pub fn await_member(
    conn: &Connection,
    run_id: &str,
    callbacks: &[WebhookMessage],
) -> rusqlite::Result<()> {
    if callbacks.is_empty() {
        return Ok(());
    }
    if runs::status(conn, run_id)? != Some(RunStatus::Batching) {
        tracing::warn!(%run_id, "a batch item's callback came after its batch closed; it is not kept");
        return Ok(());
    }
    for callback in callbacks {
        let known: bool = conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM outbox WHERE run_id = ?1 AND kind = 'webhook'
                   AND json_extract(payload, '$.id') = ?2)",
            )?
            .query_row(params![run_id, callback.id], |row| row.get(0))?;
        if !known {
            OutboxItem::Webhook(callback.clone()).insert_waiting(conn, run_id)?;
        }
    }
    Ok(())
}

/// Keeps the callback of a run just stored, `waiting` for the run's end.
pub fn await_callback(conn: &Connection, run: &NewRun) -> rusqlite::Result<()> {
    match callback_of(run) {
        Some(message) => write(conn, &run.run_id, &[message]),
        None => Ok(()),
    }
}

/// What a run's end sends, written in its transaction: its waiting callback made pending with
/// the outcome, and a `run.finished` or `run.failed` message to each endpoint subscribed.
/// Whether anything became pending.
pub fn on_end(
    conn: &Connection,
    outbound: &OutboundSettings,
    run: &NewRun,
    outcome: &RunOutcome,
) -> rusqlite::Result<bool> {
    let waiting = waiting_callbacks(conn, &run.run_id)?;
    if waiting.is_empty() && !has_subscribers(outbound, end_event(outcome), run) {
        return Ok(false);
    }
    let (started_at, upstream_run_id): (Option<String>, Option<String>) = conn
        .prepare_cached("SELECT started_at, upstream_run_id FROM runs WHERE run_id = ?1")?
        .query_row(params![run.run_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?
        .unwrap_or_default();
    let start = RunStart {
        started_at: started_at.as_deref(),
        upstream_run_id: upstream_run_id.as_deref(),
    };
    let stamp = RunEndStamp::new(outbound, run, start);
    let released = release_waiting(conn, &stamp, &run.run_id, outcome, waiting)?;
    let endpoints = endpoint_end_messages(outbound, run, outcome, &stamp);
    write(conn, &run.run_id, &endpoints)?;
    Ok(released > 0 || !endpoints.is_empty())
}

/// `run.finished` for a run that ended `ok`, `run.failed` otherwise.
fn end_event(outcome: &RunOutcome) -> Event {
    match outcome.status {
        RunStatus::Ok => Event::RunFinished,
        _ => Event::RunFailed,
    }
}

/// Whether an endpoint subscribes to `event` of `run`.
pub fn has_subscribers(outbound: &OutboundSettings, event: Event, run: &NewRun) -> bool {
    let admitted = &run.admitted;
    let mapping = admitted.mapping_id.as_deref();
    outbound
        .subscribers(event, mapping, &admitted.target_agent)
        .next()
        .is_some()
}

/// A run's start as the store recorded it, which the messages of its end carry: when it
/// began, and in forward mode the upstream's run id.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunStart<'a> {
    /// When the run began, if it did.
    pub started_at: Option<&'a str>,
    /// Forward mode: the upstream's run id, when the relay landed.
    pub upstream_run_id: Option<&'a str>,
}

/// What the messages of a run's end say besides its outcome and each callback's request, fixed
/// once by the node that ends the run. A NATS fact of a run's end carries it with the outcome
/// once, and every view fills the callbacks waiting in it ([`RunEndStamp::callbacks`]) with the
/// same bodies: a batch's hundreds of callbacks do not each carry the reply in the fact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEndStamp {
    /// The body of the run's mapping's callbacks.
    format: CallbackFormat,
    /// The envelope's `timestamp`.
    timestamp: String,
    /// When the callbacks became pending (Unix ms).
    since_ms: i64,
    agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mapping: Option<String>,
    created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    upstream_run_id: Option<String>,
}

impl RunEndStamp {
    /// The stamp of `run`'s end now.
    pub fn new(outbound: &OutboundSettings, run: &NewRun, start: RunStart<'_>) -> RunEndStamp {
        let admitted = &run.admitted;
        let mapping = admitted.mapping_id.clone();
        let format = mapping
            .as_deref()
            .and_then(|m| outbound.callbacks.get(m))
            .map_or(CallbackFormat::Outcome, |c| c.format);
        RunEndStamp {
            format,
            timestamp: now_rfc3339(),
            since_ms: now_ms(),
            agent: admitted.target_agent.clone(),
            mapping,
            created_at: run.created_at.clone(),
            started_at: start.started_at.map(str::to_string),
            upstream_run_id: start.upstream_run_id.map(str::to_string),
        }
    }

    /// The `waiting` callbacks of run `run_id` made pending with `outcome` as their bodies,
    /// each with its own request id and position; their `webhook-id`s kept.
    pub fn callbacks(
        &self,
        run_id: &str,
        outcome: &RunOutcome,
        waiting: Vec<WebhookMessage>,
    ) -> Vec<WebhookMessage> {
        let event = end_event(outcome);
        let mut messages = Vec::with_capacity(waiting.len());
        for mut message in waiting {
            message.event = event.as_str().to_string();
            message.body = match self.format {
                CallbackFormat::Outcome => {
                    let (request_id, batched) = (message.request_id.as_deref(), message.batched);
                    self.body(run_id, outcome, request_id, batched)
                }
                CallbackFormat::Slack => slack_body(outcome),
            };
            message.since_ms = self.since_ms;
            messages.push(message);
        }
        messages
    }

    /// The outcome body of run `run_id`'s end, for the request `request_id`.
    fn body(
        &self,
        run_id: &str,
        outcome: &RunOutcome,
        request_id: Option<&str>,
        batched: Option<u32>,
    ) -> String {
        let data = RunData {
            run_id,
            request_id,
            batched,
            status: outcome.status,
            agent: &self.agent,
            mapping: self.mapping.as_deref(),
            reply: outcome.reply.as_deref(),
            error: outcome.error.as_deref(),
            model: outcome.model.as_deref(),
            usage: outcome.usage.map(UsageData::from),
            created_at: &self.created_at,
            started_at: self.started_at.as_deref(),
            finished_at: Some(&outcome.finished_at),
            upstream_run_id: self.upstream_run_id.as_deref(),
        };
        let envelope = Envelope {
            kind: end_event(outcome).as_str(),
            timestamp: &self.timestamp,
            data,
        };
        serde_json::to_string(&envelope).unwrap_or_default()
    }
}

/// A `run.finished` or `run.failed` message of `run`'s end to each endpoint subscribed.
pub fn endpoint_end_messages(
    outbound: &OutboundSettings,
    run: &NewRun,
    outcome: &RunOutcome,
    stamp: &RunEndStamp,
) -> Vec<WebhookMessage> {
    let event = end_event(outcome);
    let admitted = &run.admitted;
    let mapping = admitted.mapping_id.as_deref();
    let mut subscribers = outbound
        .subscribers(event, mapping, &admitted.target_agent)
        .peekable();
    if subscribers.peek().is_none() {
        return Vec::new();
    }
    let body = stamp.body(&run.run_id, outcome, admitted.request_id.as_deref(), None);
    subscribers
        .map(|endpoint| {
            let to = Destination::Endpoint {
                id: endpoint.id.clone(),
            };
            WebhookMessage::new(to, event.as_str(), body.clone())
        })
        .collect()
}

/// Writes `messages` of the run `run_id` to the outbox: a callback without a body waits for
/// its run's end; a callback with one makes its waiting row (the same `webhook-id`) pending
/// with it, or is pending itself when there is none (and not at all when that row was made
/// pending already); any other is pending. A NATS view writes what a fact carries this way.
pub fn write(conn: &Connection, run_id: &str, messages: &[WebhookMessage]) -> rusqlite::Result<()> {
    for message in messages {
        let item = OutboxItem::Webhook(message.clone());
        match (&message.to, message.body.is_empty()) {
            (Destination::Callback { .. }, true) => item.insert_waiting(conn, run_id)?,
            (Destination::Callback { .. }, false) => {
                let row: Option<(i64, String)> = conn
                    .prepare_cached(
                        "SELECT id, status FROM outbox WHERE run_id = ?1 AND kind = 'webhook'
                           AND json_extract(payload, '$.id') = ?2",
                    )?
                    .query_row(params![run_id, message.id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                match row {
                    Some((id, status)) if status == "waiting" => item.release(conn, id)?,
                    Some(_) => {}
                    None => item.insert(conn, Some(run_id))?,
                }
            }
            (Destination::Endpoint { .. }, _) => item.insert(conn, Some(run_id))?,
        }
    }
    Ok(())
}

/// A Slack `response_url` message: the reply for everyone in the channel, or why there is none
/// for the one who asked.
fn slack_body(outcome: &RunOutcome) -> String {
    let (response_type, text) = match (&outcome.status, outcome.reply.as_deref()) {
        (RunStatus::Ok, Some(reply)) => ("in_channel", reply),
        _ => ("ephemeral", "The agent could not answer this time."),
    };
    serde_json::to_string(&SlackResponse {
        response_type,
        text,
    })
    .unwrap_or_default()
}

/// The settings whose endpoints a run's events go to; `None` without endpoints, which spares
/// the hot path a clone.
pub fn with_endpoints(settings: &Arc<Settings>) -> Option<Arc<Settings>> {
    (!settings.outbound.endpoints.is_empty()).then(|| Arc::clone(settings))
}

/// Sends an event of a run that is not its end (`run.started`, `run.held`, `delivery.failed`
/// with why) to the endpoints subscribed, written in the transaction that recorded it.
/// Whether any was written.
pub fn on_event(
    conn: &Connection,
    outbound: &OutboundSettings,
    event: Event,
    run: &NewRun,
    error: Option<&str>,
) -> rusqlite::Result<bool> {
    let messages = event_messages(outbound, event, run, error);
    write(conn, &run.run_id, &messages)?;
    Ok(!messages.is_empty())
}

/// The messages of an event of a run that is not its end, one to each endpoint subscribed.
pub fn event_messages(
    outbound: &OutboundSettings,
    event: Event,
    run: &NewRun,
    error: Option<&str>,
) -> Vec<WebhookMessage> {
    let admitted = &run.admitted;
    let mapping = admitted.mapping_id.as_deref();
    let now = now_rfc3339();
    let mut messages = Vec::new();
    for endpoint in outbound.subscribers(event, mapping, &admitted.target_agent) {
        let status = match event {
            Event::RunHeld => RunStatus::Held,
            // Only a run that ended with a reply has one to deliver.
            Event::DeliveryFailed => RunStatus::Ok,
            _ => RunStatus::Running,
        };
        let data = RunData {
            run_id: &run.run_id,
            request_id: admitted.request_id.as_deref(),
            batched: None,
            status,
            agent: &admitted.target_agent,
            mapping,
            reply: None,
            error,
            model: None,
            usage: None,
            created_at: &run.created_at,
            started_at: (event == Event::RunStarted).then_some(now.as_str()),
            finished_at: None,
            upstream_run_id: None,
        };
        let body = Envelope {
            kind: event.as_str(),
            timestamp: &now,
            data,
        };
        let body = serde_json::to_string(&body).unwrap_or_default();
        let to = Destination::Endpoint {
            id: endpoint.id.clone(),
        };
        messages.push(WebhookMessage::new(to, event.as_str(), body));
    }
    messages
}

/// A callback waiting in the outbox for its run's end.
pub struct Waiting {
    /// Its outbox row.
    row: i64,
    message: WebhookMessage,
}

/// The waiting callbacks of `run_id`, with their rows: found by the run (the index named, since
/// by kind and status SQLite would step through the waiting callbacks of every run).
pub fn waiting_callbacks(conn: &Connection, run_id: &str) -> rusqlite::Result<Vec<Waiting>> {
    let rows = conn
        .prepare_cached(
            "SELECT id, payload FROM outbox INDEXED BY outbox_webhooks_by_run
             WHERE run_id = ?1 AND kind = 'webhook' AND status = 'waiting'",
        )?
        .query_map(params![run_id], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows
        .into_iter()
        .filter_map(|(row, payload)| {
            let message = serde_json::from_str(&payload).ok()?;
            Some(Waiting { row, message })
        })
        .collect())
}

/// Makes the `waiting` callbacks of run `run_id` pending with `outcome` as their bodies
/// ([`RunEndStamp::callbacks`]), each in its own row, read in this transaction: none is looked
/// for again by its `webhook-id`, as [`write`] does for a callback it is given. How many.
pub fn release_waiting(
    conn: &Connection,
    stamp: &RunEndStamp,
    run_id: &str,
    outcome: &RunOutcome,
    waiting: Vec<Waiting>,
) -> rusqlite::Result<usize> {
    let (rows, messages): (Vec<i64>, Vec<WebhookMessage>) = waiting
        .into_iter()
        .map(|waiting| (waiting.row, waiting.message))
        .unzip();
    // One message a row, in the rows' order.
    let pending = stamp.callbacks(run_id, outcome, messages);
    let released = pending.len();
    for (row, message) in rows.into_iter().zip(pending) {
        OutboxItem::Webhook(message).release(conn, row)?;
    }
    Ok(released)
}
