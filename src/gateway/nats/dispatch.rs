//! Heartbeats and deliveries on the cluster, and the clock of periodic heartbeats.

use std::time::Duration;

use async_nats::jetstream::{Message, kv};

use super::work::{VIEW_WAIT, done, later, next_period, position, with_progress};
use super::{Cluster, Consumer, Fact};
use crate::config::outbound::Event;
use crate::gateway::clock::now_ms;
use crate::gateway::context::Context;
use crate::gateway::outbound::chat::{self, Next, SendError, next_attempt};
use crate::gateway::outbound::webhooks::{self, WebhookMessage};
use crate::gateway::store::records::{DeliveryJob, DeliveryRecord, NewRun};
use crate::gateway::turns::agent;

/// A send marker's value while the send is under way: a node finding it knows a send may have
/// happened and does not risk a duplicate.
const SENDING: &[u8] = b"sending";

/// A send marker's value once the message went out, until that is recorded.
const SENT: &[u8] = b"sent";

/// A send marker's value once the delivery is settled, sent or given up.
const DONE: &[u8] = b"done";

/// A send marker's prefix after a failed attempt, before the number of parts it sent.
const RETRY: &str = "retry:";

/// One heartbeat, on one node at a time (its consumer lets one message out at a time).
pub(super) async fn beat(ctx: Context, cluster: Cluster, message: Message) {
    let (sequence, _) = position(&message);
    let ready = async {
        if let Ok(Fact::BeatRequested { not_before_ms }) = serde_json::from_slice(&message.payload)
        {
            // The end of the window whose requests this one stands for (bounded, whatever a
            // clock says).
            let wait = u64::try_from(not_before_ms.saturating_sub(now_ms())).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait.min(1000))).await;
        }
        // The view must hold every earlier heartbeat's consumption, or this one would take the
        // same events again: it waits for everything the stream has now, or hands the request
        // back (a node still building its view from a long stream, a stream it cannot read).
        match cluster.last_sequence().await {
            Ok(current) => cluster.wait_applied(current.max(sequence), VIEW_WAIT).await,
            Err(_) => false,
        }
    };
    if !with_progress(&cluster, &message, || async {}, ready).await {
        return later(&message, Duration::from_secs(1)).await;
    }
    let settings = ctx.config.current();
    let compose = agent::heartbeat(&ctx.http, &settings, &ctx.store);
    let composed = with_progress(&cluster, &message, || async {}, compose).await;
    let Some(beat) = composed else {
        return done(&message).await;
    };
    let more = beat.more;
    let fact = Fact::Beat {
        agent: beat.agent,
        up_to: beat.up_to,
        job: beat.job,
        usage: beat.usage,
        finished_at: Some(beat.finished_at),
    };
    match cluster.publish(&fact, &format!("beat-{sequence}")).await {
        Ok(_) => done(&message).await,
        Err(err) => {
            tracing::error!(%err, "cannot record the heartbeat");
            return later(&message, Duration::from_secs(1)).await;
        }
    }
    if more && let Err(err) = cluster.request_beat().await {
        tracing::warn!(%err, "cannot request a heartbeat");
    }
}

/// One delivery of a run's reply or a heartbeat's: at most once per chat message, retried with
/// the channels' backoff until it lands or is given up.
pub(super) async fn deliver(ctx: Context, cluster: Cluster, message: Message) {
    let (sequence, delivered) = position(&message);
    let Some(job) = job_of(&message) else {
        return done(&message).await;
    };
    let attempts = u32::try_from(delivered).unwrap_or(u32::MAX);
    // One marker per run (a run's outcome may reach the stream twice: its reply is still sent
    // once), one per heartbeat.
    let marker = match &job.run_id {
        Some(run_id) => format!("run-{run_id}"),
        None => format!("beat-{sequence}"),
    };
    let sends = &cluster.buckets.sends;
    let entry = match sends.entry(&marker).await {
        Ok(entry) => entry.filter(|e| e.operation == kv::Operation::Put),
        Err(_) => return later(&message, Duration::from_secs(1)).await,
    };
    if entry.as_ref().is_some_and(|e| e.value == DONE) {
        return done(&message).await;
    }
    if entry.as_ref().is_some_and(|e| e.value == SENT) {
        // Sent by a node that stopped before recording it.
        return record_sent(&cluster, &message, &job, &marker, attempts).await;
    }
    if entry.as_ref().is_some_and(|e| e.value == SENDING) {
        // A node died while sending it: it may have arrived; it is not sent again.
        let error = SendError::Interrupted;
        return give_up(&ctx, &cluster, &message, &job, &marker, attempts, &error).await;
    }
    let Some(mut parts) = mark_sending(sends, &marker, entry).await else {
        return later(&message, Duration::from_secs(1)).await;
    };
    let settings = ctx.config.current();
    let send = chat::deliver(&ctx.http, &settings.runtime.channels, &job, &mut parts);
    let sent = with_progress(&cluster, &message, || async {}, send).await;
    match sent {
        Ok(()) => {
            // Known to be sent before it is recorded: a node that takes over records it.
            if let Err(err) = sends.put(&marker, SENT.into()).await {
                tracing::warn!(%err, %marker, "cannot mark a send as made");
            }
            record_sent(&cluster, &message, &job, &marker, attempts).await;
        }
        Err(error) => {
            let mut policy = settings.runtime.channels.retry;
            // The server offers a delivery `max_deliver` times at most: the last offer gives up.
            let offers = Consumer::Delivery.max_deliver();
            policy.attempts = policy
                .attempts
                .min(u32::try_from(offers).unwrap_or(u32::MAX));
            match next_attempt(&policy, attempts, &error, Duration::MAX) {
                Next::GiveUp => {
                    match &error {
                        // Every reply routed there fails alike: said once, not per reply.
                        SendError::NotConfigured(channel) => {
                            settings.missing_channels.warn_once(*channel)
                        }
                        _ => tracing::warn!(sequence, attempts, %error, "giving up a send"),
                    }
                    give_up(&ctx, &cluster, &message, &job, &marker, attempts, &error).await;
                }
                Next::RetryAfter(backoff) => {
                    tracing::info!(sequence, attempts, %error, ?backoff, "send failed; will retry");
                    let _ = sends.put(&marker, format!("{RETRY}{parts}").into()).await;
                    later(&message, backoff).await;
                }
            }
        }
    }
}

/// The delivery a message of the delivery consumer carries; `None` for anything else.
fn job_of(message: &Message) -> Option<DeliveryJob> {
    match serde_json::from_slice::<Fact>(&message.payload) {
        Ok(fact) => fact.job().cloned(),
        Err(_) => None,
    }
}

/// Marks the send of `marker` as under way, over its current `entry` (a failed attempt's, or
/// none) and only if no other node changed it meanwhile. Returns how many parts of a split reply
/// earlier attempts sent (`retry:<n>`), or `None` when the mark was not made.
async fn mark_sending(sends: &kv::Store, marker: &str, entry: Option<kv::Entry>) -> Option<usize> {
    let parts = entry
        .as_ref()
        .and_then(|e| {
            std::str::from_utf8(&e.value)
                .ok()?
                .strip_prefix(RETRY)?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    let marked = match entry {
        Some(entry) => sends
            .update(marker, SENDING.into(), entry.revision)
            .await
            .is_ok(),
        None => sends.create(marker, SENDING.into()).await.is_ok(),
    };
    marked.then_some(parts)
}

async fn record_sent(
    cluster: &Cluster,
    message: &Message,
    job: &DeliveryJob,
    marker: &str,
    attempts: u32,
) {
    let fact = delivered_fact(job, DeliveryRecord::sent(job, attempts), false);
    settle(cluster, message, &fact, marker).await;
}

/// Records a delivery's outcome, marks its send done for good (a repeat of the job then sends
/// nothing) and acknowledges it; whether the outcome landed.
async fn settle(cluster: &Cluster, message: &Message, fact: &Fact, marker: &str) -> bool {
    if let Err(err) = cluster.publish(fact, &format!("delivered-{marker}")).await {
        tracing::error!(%err, marker, "cannot record a delivery");
        return false;
    }
    if let Err(err) = cluster.buckets.sends.put(marker, DONE.into()).await {
        tracing::warn!(%err, marker, "cannot mark a send done");
    }
    done(message).await;
    true
}

/// Ends a delivery without success; a run's reply that was not delivered becomes its summary.
async fn give_up(
    ctx: &Context,
    cluster: &Cluster,
    message: &Message,
    job: &DeliveryJob,
    marker: &str,
    attempts: u32,
    error: &SendError,
) {
    let record = chat::given_up(job, attempts, error);
    let mut fact = delivered_fact(job, record, true);
    if let Fact::Delivered { webhooks, .. } = &mut fact {
        *webhooks = delivery_failed(ctx, job, error).await;
    }
    if settle(cluster, message, &fact, marker).await && job.wake_now && job.summary.is_some() {
        // The run's summary was just recorded: its heartbeat need not wait for the next period.
        if let Err(err) = cluster.request_beat().await {
            tracing::warn!(%err, "cannot request a heartbeat");
        }
    }
}

/// The `delivery.failed` messages of a run's reply given up with `error`, to the endpoints
/// subscribed (none without endpoints, at no cost).
async fn delivery_failed(
    ctx: &Context,
    job: &DeliveryJob,
    error: &SendError,
) -> Vec<WebhookMessage> {
    let settings = ctx.config.current();
    let Some(run_id) = job.run_id.clone() else {
        return Vec::new();
    };
    if settings.outbound.endpoints.is_empty() {
        return Vec::new();
    }
    let run = ctx
        .store
        .read(move |conn| NewRun::select(conn, &run_id))
        .await;
    let Ok(Some(run)) = run else {
        return Vec::new();
    };
    let why = error.to_string();
    webhooks::event_messages(&settings.outbound, Event::DeliveryFailed, &run, Some(&why))
}

/// The fact of a settled delivery; a reply given up carries its run's summary.
fn delivered_fact(job: &DeliveryJob, delivery: DeliveryRecord, given_up: bool) -> Fact {
    Fact::Delivered {
        run_id: job.run_id.clone(),
        agent: job.agent.clone(),
        delivery,
        summary: job.summary.clone().filter(|_| given_up),
        webhooks: Vec::new(),
    }
}

/// Requests a heartbeat every `agents.defaults.heartbeat.every`, at multiples of it since the
/// epoch: every node requests each period's heartbeat under the same message id, and the stream
/// keeps one.
pub(super) async fn clock(ctx: Context, cluster: Cluster) {
    loop {
        let Some(every) = ctx.config.current().runtime.heartbeat_every else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let (wait, index) = next_period(every, now_ms());
        // The period is read again every second, so that a reload applies at once.
        if wait > Duration::from_secs(1) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        tokio::time::sleep(wait).await;
        let id = format!("beat-every-{}-{index}", every.as_millis());
        let request = Fact::BeatRequested { not_before_ms: 0 };
        if let Err(err) = cluster.publish(&request, &id).await {
            tracing::warn!(%err, "cannot request the periodic heartbeat");
        }
    }
}
