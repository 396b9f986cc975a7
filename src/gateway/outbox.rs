//! The outbox worker: sends what the runtime committed to send (replies to chat channels, and in
//! forward mode every accepted wake and run), retrying with backoff, and records the result.
//!
//! A chat message is sent at most once: a row is marked `sending` before the attempt, and a
//! process that dies mid-attempt leaves it `uncertain` rather than sending it again. Forwarded
//! requests are safe to repeat (they carry an idempotency key) and are retried until they land.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::channels::send;
use super::runs::{self, DueEntry, SummaryEvent};
use super::runtime::{Runtime, now_ms, now_rfc3339};
use crate::config::runtime::{GatewayMode, Route};
use crate::hook::Channel;

/// The longest wait between two attempts of a forwarded request.
const MAX_FORWARD_BACKOFF: Duration = Duration::from_secs(30);
/// The longest the worker sleeps without looking at the outbox.
const POLL: Duration = Duration::from_secs(1);

/// Runs the worker until the process ends.
pub async fn run(runtime: Arc<Runtime>) {
    match runtime.store.write(runs::abandon_in_flight).await {
        Ok(abandoned) => {
            for entry in abandoned {
                tracing::warn!(
                    id = entry.id,
                    "a send interrupted by a stop is not repeated"
                );
                give_up(
                    &runtime,
                    &entry,
                    "interrupted by a stop; not sent again to avoid a duplicate",
                    "uncertain",
                )
                .await;
            }
        }
        Err(err) => tracing::error!(%err, "cannot recover the outbox"),
    }
    while !runtime.stopping() {
        let due = runtime
            .store
            .read(|conn| runs::due(conn, now_ms(), 32))
            .await;
        let store_ok = match due {
            Ok(due) => {
                let mut ok = true;
                for entry in due.into_iter().take_while(|_| !runtime.stopping()) {
                    if !attempt(&runtime, entry).await {
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
        let wait = runtime
            .store
            .read(runs::next_due_ms)
            .await
            .ok()
            .flatten()
            .map_or(POLL, |at| {
                Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0)).min(POLL)
            });
        let _ = tokio::time::timeout(wait, runtime.outbox_ready.notified()).await;
    }
}

/// One attempt at a row; false when the store could not even mark it.
async fn attempt(runtime: &Runtime, entry: DueEntry) -> bool {
    let id = entry.id;
    match runtime
        .store
        .write(move |conn| runs::mark_sending(conn, id))
        .await
    {
        Ok(true) => {}
        Ok(false) => return true,
        Err(err) => {
            tracing::error!(%err, id, "cannot mark an outbox row as sending");
            return false;
        }
    }
    let result = match entry.kind.as_str() {
        "delivery" => deliver(runtime, &entry.payload).await.map(|()| None),
        "forward-wake" | "forward-run" => forward(runtime, &entry).await.map(Some),
        other => Err(format!("unknown outbox kind {other}")),
    };
    match result {
        Ok(upstream) => succeed(runtime, &entry, upstream).await,
        Err(error) => retry_or_give_up(runtime, &entry, &error).await,
    }
    true
}

/// Sends a reply to its channel.
pub(super) async fn deliver(runtime: &Runtime, payload: &Value) -> Result<(), String> {
    let settings = runtime.config.current();
    let channel = payload["channel"]
        .as_str()
        .and_then(Channel::parse)
        .ok_or("delivery without a channel")?;
    let endpoint = settings
        .runtime
        .channels
        .endpoint(channel)
        .ok_or_else(|| format!("channel {} is not configured", channel.as_str()))?;
    send(
        &runtime.http,
        endpoint,
        payload["to"].as_str(),
        payload["text"].as_str().unwrap_or(""),
    )
    .await
}

/// Relays a wake or a run to the upstream gateway; returns the upstream run id, if any.
async fn forward(runtime: &Runtime, entry: &DueEntry) -> Result<String, String> {
    let settings = runtime.config.current();
    let GatewayMode::Forward { url, token } = &settings.runtime.mode else {
        return Err("forward mode is off; kept for when it is on again".into());
    };
    let path = if entry.kind == "forward-wake" {
        "wake"
    } else {
        "agent"
    };
    let mut request = runtime
        .http
        .post(format!("{url}/hooks/{path}"))
        .bearer_auth(token)
        .json(&entry.payload["body"]);
    if let Some(key) = entry.payload["idempotencyKey"].as_str() {
        request = request.header("idempotency-key", key);
    }
    let response = request
        .timeout(super::channels::SEND_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("upstream unreachable: {}", e.without_url()))?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        Ok(body["runId"].as_str().unwrap_or("").to_string())
    } else if matches!(status.as_u16(), 400 | 413 | 422) {
        // The upstream refuses the request itself: sending it again cannot help. Anything else
        // (401 during a token rotation, 404 during a redeploy, 5xx) may pass later.
        Err(format!(
            "refused:{status}: {}",
            body["error"].as_str().unwrap_or("")
        ))
    } else {
        Err(format!("upstream answered {status}"))
    }
}

async fn succeed(runtime: &Runtime, entry: &DueEntry, upstream: Option<String>) {
    let (id, run_id, payload, attempts) = (
        entry.id,
        entry.run_id.clone(),
        entry.payload.clone(),
        entry.attempts + 1,
    );
    let kind = entry.kind.clone();
    let result = runtime
        .store
        .write(move |conn| {
            runs::settle(conn, id, "done", None, attempts, now_ms())?;
            match (kind.as_str(), &run_id) {
                ("delivery", _) => {
                    let route = Route {
                        channel: payload["channel"].as_str().and_then(Channel::parse).unwrap_or(Channel::Whatsapp),
                        to: payload["to"].as_str().map(String::from),
                    };
                    let agent = payload["agent"].as_str().unwrap_or("main");
                    runs::set_last_route(conn, agent, &route, &now_rfc3339())?;
                    if let Some(run_id) = &run_id {
                        let delivery = json!({"status": "sent", "channel": route.channel.as_str(), "to": route.to, "attempts": attempts});
                        runs::set_delivery(conn, run_id, &delivery)?;
                    }
                }
                ("forward-run", Some(run_id)) => {
                    runs::set_forwarded(conn, run_id, "forwarded", upstream.as_deref().filter(|u| !u.is_empty()), None)?;
                }
                _ => {}
            }
            Ok(())
        })
        .await;
    if let Err(err) = result {
        tracing::error!(%err, id = entry.id, "cannot record a completed send");
    }
}

async fn retry_or_give_up(runtime: &Runtime, entry: &DueEntry, error: &str) {
    let settings = runtime.config.current();
    let attempts = entry.attempts + 1;
    let forward = entry.kind.starts_with("forward-");
    let permanent = is_permanent(error);
    let policy = settings.runtime.channels.retry;
    if permanent || (!forward && attempts >= policy.attempts) {
        tracing::warn!(id = entry.id, attempts, %error, "giving up a send");
        give_up(runtime, entry, error, "failed").await;
        return;
    }
    let backoff = policy
        .base_delay
        .saturating_mul(1 << (attempts - 1).min(16));
    let backoff = if forward {
        backoff.min(MAX_FORWARD_BACKOFF)
    } else {
        backoff
    };
    tracing::info!(id = entry.id, attempts, %error, ?backoff, "send failed; will retry");
    let (id, error) = (entry.id, error.to_string());
    let next = now_ms().saturating_add(i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX));
    if let Err(err) = runtime
        .store
        .write(move |conn| runs::settle(conn, id, "pending", Some(&error), attempts, next))
        .await
    {
        tracing::error!(%err, id = entry.id, "cannot schedule a retry");
    }
    runtime.outbox_ready.notify_one();
}

/// Whether a send failed in a way no retry can mend.
pub(super) fn is_permanent(error: &str) -> bool {
    error.starts_with("refused:")
        || error.contains("is not configured")
        || error.starts_with("no recipient")
}

/// Ends a row without success. A reply that was not delivered becomes the run's summary event.
async fn give_up(runtime: &Runtime, entry: &DueEntry, error: &str, status: &'static str) {
    let (id, run_id, payload, attempts) = (
        entry.id,
        entry.run_id.clone(),
        entry.payload.clone(),
        entry.attempts + 1,
    );
    let (kind, error) = (entry.kind.clone(), error.to_string());
    let wake_now = payload["wakeNow"].as_bool() == Some(true);
    let result = runtime
        .store
        .write(move |conn| {
            runs::settle(conn, id, status, Some(&error), attempts, now_ms())?;
            match (kind.as_str(), &run_id) {
                ("delivery", Some(run_id)) => {
                    let delivery = json!({"status": status, "channel": payload["channel"], "to": payload["to"], "attempts": attempts, "error": error});
                    runs::set_delivery(conn, run_id, &delivery)?;
                    if let Ok(summary) = serde_json::from_value::<SummaryEvent>(payload["summary"].clone()) {
                        summary.insert(conn)?;
                    }
                }
                ("forward-run", Some(run_id)) => runs::set_forwarded(conn, run_id, "forward_failed", None, Some(&error))?,
                _ => {}
            }
            Ok(())
        })
        .await;
    match result {
        Ok(()) if wake_now => runtime.heartbeat.request(),
        Ok(()) => {}
        Err(err) => tracing::error!(%err, id = entry.id, "cannot record a failed send"),
    }
}
