//! Heartbeats: the agent's main-session turn over the events that arrived since the last one.
//! They run every `agents.defaults.heartbeat.every` and when a hook asks for one now; requests
//! that come within 250 ms of each other make one heartbeat.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::Notify;

use super::channels::resolve_route;
use super::provider::{ChatTurn, complete, is_silent};
use super::runs::{self, OutboxEntry};
use super::runtime::{Runtime, now_ms, now_rfc3339};
use crate::hook::Channel;

/// Requests closer together than this make one heartbeat.
pub const COALESCE: Duration = Duration::from_millis(250);

/// Events one heartbeat takes at most; the rest wait for the next.
const MAX_EVENTS: u32 = 100;

/// Asks for a heartbeat. Cheap to clone.
#[derive(Clone, Default)]
pub struct HeartbeatTrigger {
    notify: Arc<Notify>,
}

impl HeartbeatTrigger {
    /// Requests a heartbeat soon; many requests in a short time make one.
    pub fn request(&self) {
        self.notify.notify_one();
    }
}

/// Runs heartbeats until the process ends.
pub async fn run(runtime: Arc<Runtime>) {
    let every = runtime.config.current().runtime.heartbeat_every;
    let mut periodic = every.map(|every| {
        let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval
    });
    loop {
        tokio::select! {
            () = runtime.heartbeat.notify.notified() => {
                // Requests arriving in the window are absorbed by this heartbeat: `notified`
                // keeps at most one permit, which the extra wait below consumes.
                tokio::time::sleep(COALESCE).await;
                let _ = tokio::time::timeout(Duration::ZERO, runtime.heartbeat.notify.notified()).await;
            }
            _ = tick(&mut periodic) => {}
        }
        beat(&runtime).await;
    }
}

async fn tick(interval: &mut Option<tokio::time::Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// One heartbeat: pending events → one turn → events consumed → reply delivered to the last
/// route unless it is only `HEARTBEAT_OK`. Without a provider the events stay pending.
async fn beat(runtime: &Runtime) {
    let Some(beat) = compose(runtime).await else {
        return;
    };
    let Beat {
        agent,
        up_to,
        more,
        job,
    } = beat;
    let recorded = runtime
        .store
        .write(move |conn| {
            runs::consume_events(conn, &agent, up_to)?;
            if let Some(payload) = job {
                OutboxEntry {
                    kind: "delivery",
                    run_id: None,
                    payload,
                    created_at: now_rfc3339(),
                    now_ms: now_ms(),
                }
                .insert(conn)?;
            }
            Ok(())
        })
        .await;
    match recorded {
        Ok(()) => {
            runtime.outbox_ready.notify_one();
            if more {
                // Events past this heartbeat's share do not wait for the next period.
                runtime.heartbeat.request();
            }
        }
        Err(err) => tracing::error!(%err, "cannot record the heartbeat"),
    }
}

/// What one heartbeat did: the events it consumed, and the reply to deliver, if any.
#[derive(Debug)]
pub(super) struct Beat {
    pub agent: String,
    /// The last event (by sequence) the turn was given.
    pub up_to: i64,
    /// More events are pending than one heartbeat takes.
    pub more: bool,
    /// The delivery of the reply (an outbox payload), unless it is only `HEARTBEAT_OK`.
    pub job: Option<serde_json::Value>,
}

/// The heartbeat's turn over the pending events; `None` when there was nothing to do or the turn
/// failed (the events then stay pending).
pub(super) async fn compose(runtime: &Runtime) -> Option<Beat> {
    let settings = runtime.config.current();
    let agent = settings.agents.default_id().to_string();
    let agent_runtime = settings.runtime.agent(&agent).clone();
    let (Some(provider), Some(model)) = (agent_runtime.provider, agent_runtime.model) else {
        tracing::debug!("heartbeat skipped: no model provider or model configured");
        return None;
    };
    let pending = {
        let agent = agent.clone();
        runtime
            .store
            .read(move |conn| runs::pending_events(conn, &agent, MAX_EVENTS))
            .await
    };
    let pending = match pending {
        Ok(pending) if !pending.is_empty() => pending,
        Ok(_) => return None,
        Err(err) => {
            tracing::error!(%err, "heartbeat cannot read the main session");
            return None;
        }
    };
    let prompt = heartbeat_prompt(&pending);
    let turn = ChatTurn {
        model: &model,
        prompt: &prompt,
        thinking: None,
        timeout: settings.runtime.run_timeout,
    };
    let reply = match complete(&runtime.http, &provider, &turn).await {
        Ok(reply) => reply,
        Err(err) => {
            tracing::warn!(%err, "heartbeat turn failed; its events stay pending");
            return None;
        }
    };
    let job = if is_silent(&reply) {
        None
    } else {
        let last = {
            let agent = agent.clone();
            runtime
                .store
                .read(move |conn| runs::last_route(conn, &agent))
                .await
                .ok()
                .flatten()
        };
        let route = resolve_route(Channel::Last, None, last, &settings.runtime.channels);
        Some(json!({
            "runId": null, "agent": agent, "channel": route.channel.as_str(),
            "to": route.to, "text": reply, "summary": null, "wakeNow": false,
        }))
    };
    Some(Beat {
        up_to: pending.last().map_or(0, |e| e.seq),
        more: pending.len() == MAX_EVENTS as usize,
        agent,
        job,
    })
}

/// Each pending event as `System (untrusted): [<time>] <text>`, one per line.
pub fn heartbeat_prompt(events: &[runs::PendingEvent]) -> String {
    let lines: Vec<String> = events
        .iter()
        .map(|e| format!("System (untrusted): [{}] {}", e.at, e.text))
        .collect();
    format!(
        "{}\n\nIf nothing needs attention, reply HEARTBEAT_OK.",
        lines.join("\n")
    )
}
