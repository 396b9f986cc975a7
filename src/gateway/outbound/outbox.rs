//! The outbox: what a backend committed to send, kept in the store until it is done or given up,
//! and the worker that sends it with retries. The embedded backend's rows are deliveries of
//! replies to chat channels; forward mode's are relays to the upstream gateway.
//!
//! A chat message is sent at most once: a row is marked `sending` before the attempt, and a
//! process that dies mid-attempt leaves it `uncertain` rather than sending it again. Relays are
//! safe to repeat (they carry an idempotency key) and are retried until they land or the upstream
//! refuses them. Webhooks are safe to repeat too (each carries one `webhook-id` however often it
//! is sent, which receivers dedupe by) and are retried for `outbound.retry.for`.

use std::sync::Arc;
use std::time::Duration;

use super::chat::{self, Next, SendError, next_attempt};
pub use super::outbox_rows::{
    Lane, OutboxItem, Row, WebhookAttempt, due, next_due_ms, resend_delivery,
};
use super::outbox_rows::{RowStatus, abandon_in_flight, mark_sending, record_parts, settle};
use super::relay::{Landed, Relayed, relay};
use super::webhook_send;
use super::webhooks;
use crate::config::Settings;
use crate::config::outbound::{Event, OutboundSettings};
use crate::config::runtime::{GatewayMode, RetryPolicy};
use crate::gateway::clock::{millis, now_ms};
use crate::gateway::context::Context;
use crate::gateway::signals::Signals;
use crate::gateway::store::records::{DeliveryRecord, NewRun, RunOutcome, RunStatus};
use crate::gateway::store::runs;
use crate::metrics::{DeliveryLabels, RelayLabels};

/// The base delay of relays' backoff at least.
const MIN_RELAY_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two attempts of a relay.
const MAX_RELAY_BACKOFF: Duration = Duration::from_secs(30);
/// The longest the worker sleeps without looking at the outbox.
pub(super) const POLL: Duration = Duration::from_secs(1);
/// The base delay of webhooks' backoff, doubled per attempt up to `outbound.retry.maxDelay`.
const WEBHOOK_BACKOFF: Duration = Duration::from_millis(500);

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
        let ready = match lane {
            Lane::Webhooks => &signals.webhooks_ready,
            Lane::Deliveries | Lane::Relays => &signals.outbox_ready,
        };
        let _ = tokio::time::timeout(wait, ready.notified()).await;
    }
}

/// How long the worker of `lane` may sleep: until its next row is due, at most [`POLL`].
pub async fn next_wait(ctx: &Context, lane: Lane) -> Duration {
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
    let (result, policy, max_delay) = send(ctx, &settings, item, &mut parts).await;
    let attempts = row.attempts + 1;
    let next = result.as_ref().err().map(|error| match item {
        // Past `outbound.retry.for` since it was written, a webhook is kept as failed.
        OutboxItem::Webhook(message)
            if now_ms().saturating_sub(message.since_ms) >= millis(settings.outbound.retry_for) =>
        {
            Next::GiveUp
        }
        _ => next_attempt(&policy, attempts, error, max_delay),
    });
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
    settings: &Settings,
    item: &OutboxItem,
    parts: &mut usize,
) -> (Result<Landed, SendError>, RetryPolicy, Duration) {
    let runtime = &settings.runtime;
    match item {
        OutboxItem::Webhook(message) => {
            let sent = webhook_send::send(&ctx.webhooks, settings, message).await;
            let policy = RetryPolicy {
                attempts: u32::MAX,
                base_delay: WEBHOOK_BACKOFF,
            };
            let max_delay = settings.outbound.max_delay;
            (sent.map(|()| Landed::default()), policy, max_delay)
        }
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
    let outbound = active_outbound(ctx);
    let announced = outbound.is_some();
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
                        .as_deref()
                        .filter(|status| *status != "ok")
                        .map(|status| format!("the upstream's run ended {status}"));
                    let status = RunStatus::Forwarded;
                    runs::set_forwarded(conn, run_id, status, upstream, ended.as_deref())?;
                    if let Some(settings) = &outbound {
                        relay_ended(conn, &settings.outbound, run_id, &landed)?;
                    }
                }
                _ => {}
            }
            Ok(())
        })
        .await;
    if let Err(err) = result {
        tracing::error!(%err, id = row.id, "cannot record a completed send");
    }
    if announced {
        signals.webhooks_ready.notify_one();
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
    let endpoints = webhooks::with_endpoints(&ctx.config.current());
    let outbound = active_outbound(ctx);
    // A relay's end or a reply's `delivery.failed` may make webhooks pending: their worker is
    // woken once they are committed.
    let announces = match &row.item {
        Some(OutboxItem::Relay(_)) => outbound.is_some(),
        Some(OutboxItem::Delivery(_)) => endpoints.is_some(),
        _ => false,
    };
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
                        if let Some(settings) = &endpoints {
                            delivery_failed(conn, &settings.outbound, run_id, &error)?;
                        }
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
                    if let Some(settings) = &outbound {
                        relay_failed(conn, &settings.outbound, run_id, &error)?;
                    }
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
    if announces && result.is_ok() {
        signals.webhooks_ready.notify_one();
    }
    let wake_now = matches!(&row.item, Some(OutboxItem::Delivery(job)) if job.wake_now && job.summary.is_some());
    match result {
        // The run's summary was just recorded: its heartbeat need not wait for the next period.
        Ok(()) if wake_now => signals.heartbeat.request(),
        Ok(()) => {}
        Err(err) => tracing::error!(%err, id = row.id, "cannot record a failed send"),
    }
}

/// The settings in force when `outbound` has a callback or an endpoint; `None` spares the
/// rest a look at the outbox.
fn active_outbound(ctx: &Context) -> Option<Arc<Settings>> {
    let settings = ctx.config.current();
    settings.outbound.is_active().then_some(settings)
}

/// What a relayed run's end sends (forward mode): its callback and `run.finished` or
/// `run.failed`, made of the upstream's completion as the upstream answered it.
fn relay_ended(
    conn: &rusqlite::Connection,
    outbound: &OutboundSettings,
    run_id: &str,
    landed: &Landed,
) -> rusqlite::Result<()> {
    let status = match landed.completion.as_deref() {
        Some("ok") | None => RunStatus::Ok,
        Some("timeout") => RunStatus::Timeout,
        Some(_) => RunStatus::Error,
    };
    let error = match (status, &landed.error) {
        (RunStatus::Ok, _) => None,
        (_, Some(error)) => Some(error.clone()),
        (_, None) => landed
            .completion
            .as_ref()
            .map(|s| format!("the upstream's run ended {s}")),
    };
    let outcome = relay_outcome(status, landed.reply.clone(), error);
    if let Some(run) = NewRun::select(conn, run_id)? {
        webhooks::on_end(conn, outbound, &run, &outcome)?;
    }
    Ok(())
}

/// What a relay given up sends (forward mode): `relay.failed` with why, and the run's callback
/// and `run.failed`, since the run ends there.
fn relay_failed(
    conn: &rusqlite::Connection,
    outbound: &OutboundSettings,
    run_id: &str,
    error: &str,
) -> rusqlite::Result<()> {
    let Some(run) = NewRun::select(conn, run_id)? else {
        return Ok(());
    };
    webhooks::on_event(conn, outbound, Event::RelayFailed, &run, Some(error))?;
    let outcome = relay_outcome(RunStatus::Error, None, Some(error.to_string()));
    webhooks::on_end(conn, outbound, &run, &outcome)?;
    Ok(())
}

/// A relayed run's outcome as this gateway knows it: no model, usage or calls of its own.
fn relay_outcome(status: RunStatus, reply: Option<String>, error: Option<String>) -> RunOutcome {
    RunOutcome {
        status,
        summary: None,
        reply,
        error,
        model: None,
        usage: None,
        calls: Vec::new(),
        finished_at: crate::gateway::clock::now_rfc3339(),
    }
}

/// `delivery.failed` of the run `run_id` to the endpoints subscribed, with why.
fn delivery_failed(
    conn: &rusqlite::Connection,
    outbound: &OutboundSettings,
    run_id: &str,
    error: &SendError,
) -> rusqlite::Result<()> {
    if let Some(run) = NewRun::select(conn, run_id)? {
        let why = error.to_string();
        webhooks::on_event(conn, outbound, Event::DeliveryFailed, &run, Some(&why))?;
    }
    Ok(())
}

/// Sends the webhook of `row` once, as the worker does, and says what came of it without
/// writing it: `None` for a row that is not a webhook. The caller decided this node sends it.
pub async fn attempt_webhook(ctx: &Context, row: &Row) -> Option<WebhookAttempt> {
    let Some(OutboxItem::Webhook(message)) = &row.item else {
        return None;
    };
    let settings = ctx.config.current();
    let attempts = row.attempts + 1;
    let item = OutboxItem::Webhook(message.clone());
    let (result, policy, max_delay) = send(ctx, &settings, &item, &mut 0).await;
    let (status, last_error, next_at_ms) = match result {
        Ok(_) => ("done", None, now_ms()),
        Err(error) => {
            let expired =
                now_ms().saturating_sub(message.since_ms) >= millis(settings.outbound.retry_for);
            match next_attempt(&policy, attempts, &error, max_delay) {
                Next::RetryAfter(backoff) if !expired => {
                    tracing::info!(id = row.id, attempts, %error, ?backoff, "send failed; will retry");
                    let next = now_ms().saturating_add(millis(backoff));
                    ("pending", Some(error.to_string()), next)
                }
                _ => {
                    tracing::warn!(id = row.id, attempts, %error, "giving up a send");
                    ("failed", Some(error.to_string()), now_ms())
                }
            }
        }
    };
    Some(WebhookAttempt {
        row: row.id,
        webhook_id: message.id.clone(),
        status: status.to_string(),
        attempts,
        last_error,
        next_at_ms,
    })
}
