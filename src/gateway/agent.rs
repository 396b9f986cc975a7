//! Agent work shared by every backend that runs agents (embedded and NATS): one run's turn with
//! the model provider, what its outcome leaves behind (summary, delivery), and a heartbeat's turn
//! over the main session's pending events. Backends decide when and store what these return.

use std::time::Duration;

use super::clock::now_rfc3339;
use super::delivery::{DeliveryJob, DeliveryRecord, SkipReason, resolve_route};
use super::provider::{ChatError, ChatTurn, complete, is_silent, summary_of};
use super::records::{NewRun, RunOutcome, RunStatus, SummaryEvent};
use super::runs::{self, PendingEvent};
use super::store::Store;
use crate::config::Settings;
use crate::config::runtime::Route;
use crate::hook::envelope::sanitize_summary_name;
use crate::hook::{Channel, WakeMode};

/// The longest a run may take, whatever it asks for.
const MAX_RUN_SECONDS: u64 = 86_400;

/// Events one heartbeat takes at most; the rest wait for the next.
const MAX_BEAT_EVENTS: u32 = 100;

/// Calls the model for one run.
pub async fn turn(http: &reqwest::Client, settings: &Settings, run: &NewRun) -> RunOutcome {
    let agent = settings.runtime.agent(&run.target_agent);
    let failed = |status, error: String| RunOutcome {
        status,
        reply: None,
        summary: None,
        error: Some(error),
        finished_at: now_rfc3339(),
    };
    let Some(provider) = &agent.provider else {
        return failed(RunStatus::Error, "no model provider configured".into());
    };
    let Some(model) = run.model.as_deref().or(agent.model.as_deref()) else {
        return failed(
            RunStatus::Error,
            "no model configured for the run or its agent".into(),
        );
    };
    // A request may shorten or lengthen its run, but not beyond a day: a run that never ends
    // would hold a slot and its session key for good.
    let timeout = run
        .timeout_seconds
        .map_or(settings.runtime.run_timeout, |t| {
            Duration::from_secs(t.min(MAX_RUN_SECONDS))
        });
    let turn = ChatTurn {
        model,
        prompt: &run.prompt,
        thinking: run.thinking.as_deref(),
        timeout,
    };
    match complete(http, provider, &turn).await {
        Ok(reply) => RunOutcome {
            status: RunStatus::Ok,
            summary: Some(summary_of(&reply)),
            reply: Some(reply),
            error: None,
            finished_at: now_rfc3339(),
        },
        Err(err @ ChatError::Timeout(_)) => failed(RunStatus::Timeout, err.to_string()),
        Err(err) => failed(RunStatus::Error, err.to_string()),
    }
}

/// What a finished run leaves behind, whatever the store.
#[derive(Debug)]
pub struct Conclusion {
    pub outcome: RunOutcome,
    /// The run's delivery record: pending, or skipped with the reason.
    pub delivery: DeliveryRecord,
    /// The summary event, now when nothing is delivered; after the delivery otherwise (it
    /// travels in the job).
    pub summary_now: Option<SummaryEvent>,
    /// The delivery to make, if the reply goes to a chat channel.
    pub job: Option<DeliveryJob>,
}

impl Conclusion {
    /// Whether the run asks for a heartbeat now (a delivered run asks after its delivery).
    pub fn wakes_now(&self, run: &NewRun) -> bool {
        self.job.is_none() && run.wake_mode == WakeMode::Now
    }
}

/// Decides, from a run's outcome, what is delivered where and what the main session is told.
/// `owner` is the main session's route as its owner set it (see [`owner_route`]).
pub fn conclude(
    settings: &Settings,
    run: &NewRun,
    outcome: RunOutcome,
    owner: Option<Route>,
) -> Conclusion {
    tracing::info!(run_id = %run.run_id, status = %outcome.status, "run finished");
    let default_agent = settings.agents.default_id().to_string();
    let reply = outcome.reply.as_deref().unwrap_or("");
    let summary = summary_event(run, &outcome, &default_agent);
    let skipped = if !run.deliver {
        Some(SkipReason::NotAsked)
    } else if outcome.status != RunStatus::Ok {
        Some(SkipReason::RunFailed)
    } else if is_silent(reply) {
        Some(SkipReason::Acknowledgement)
    } else {
        None
    };
    if let Some(reason) = skipped {
        return Conclusion {
            outcome,
            delivery: DeliveryRecord::Skipped { reason },
            summary_now: Some(summary),
            job: None,
        };
    }
    let route = resolve_route(
        run.channel,
        run.to.clone(),
        owner,
        &settings.runtime.channels,
    );
    let job = DeliveryJob {
        run_id: Some(run.run_id.clone()),
        agent: default_agent,
        channel: route.channel,
        to: route.to.clone(),
        text: reply.to_string(),
        summary: Some(summary),
        wake_now: run.wake_mode == WakeMode::Now,
    };
    Conclusion {
        outcome,
        delivery: DeliveryRecord::Pending {
            channel: route.channel,
            to: route.to,
        },
        summary_now: None,
        job: Some(job),
    }
}

/// The summary event of a finished run: `Hook <name>: <summary>`, or with the status and error
/// when it did not succeed.
fn summary_event(run: &NewRun, outcome: &RunOutcome, agent: &str) -> SummaryEvent {
    let name = sanitize_summary_name(&run.hook_name);
    let text = if outcome.status == RunStatus::Ok {
        format!("Hook {name}: {}", outcome.summary.as_deref().unwrap_or(""))
    } else {
        let detail = outcome
            .error
            .as_deref()
            .or(outcome.summary.as_deref())
            .unwrap_or("");
        format!("Hook {name} ({}): {detail}", outcome.status)
    };
    SummaryEvent {
        agent: agent.to_string(),
        run_id: run.run_id.clone(),
        text,
        at: now_rfc3339(),
    }
}

/// The main session's route as its owner set it through the operator API, if they did.
pub async fn owner_route(store: &Store, agent: &str) -> Option<Route> {
    let agent = agent.to_string();
    match store
        .read(move |conn| runs::owner_route(conn, &agent))
        .await
    {
        Ok(route) => route,
        Err(err) => {
            tracing::warn!(%err, "cannot read the main session's route; using the default");
            None
        }
    }
}

/// What one heartbeat did: the events it consumed, and the reply to deliver, if any.
#[derive(Debug)]
pub struct Beat {
    pub agent: String,
    /// The last event (by sequence) the turn was given.
    pub up_to: i64,
    /// More events are pending than one heartbeat takes.
    pub more: bool,
    /// The delivery of the reply, unless it is only an acknowledgement.
    pub job: Option<DeliveryJob>,
}

/// The heartbeat's turn over the default agent's pending events, read from `store`; `None` when
/// there was nothing to do or the turn failed (the events then stay pending).
pub async fn heartbeat(http: &reqwest::Client, settings: &Settings, store: &Store) -> Option<Beat> {
    let agent = settings.agents.default_id().to_string();
    let agent_runtime = settings.runtime.agent(&agent);
    let (Some(provider), Some(model)) = (&agent_runtime.provider, &agent_runtime.model) else {
        tracing::debug!("heartbeat skipped: no model provider or model configured");
        return None;
    };
    let pending = {
        let agent = agent.clone();
        store
            .read(move |conn| runs::pending_events(conn, &agent, MAX_BEAT_EVENTS))
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
        model,
        prompt: &prompt,
        thinking: None,
        timeout: settings.runtime.run_timeout,
    };
    let reply = match complete(http, provider, &turn).await {
        Ok(reply) => reply,
        Err(err) => {
            tracing::warn!(%err, "heartbeat turn failed; its events stay pending");
            return None;
        }
    };
    let job = if is_silent(&reply) {
        None
    } else {
        let owner = owner_route(store, &agent).await;
        let route = resolve_route(Channel::Last, None, owner, &settings.runtime.channels);
        Some(DeliveryJob {
            run_id: None,
            agent: agent.clone(),
            channel: route.channel,
            to: route.to,
            text: reply,
            summary: None,
            wake_now: false,
        })
    };
    Some(Beat {
        up_to: pending.last().map_or(0, |e| e.seq),
        more: pending.len() == MAX_BEAT_EVENTS as usize,
        agent,
        job,
    })
}

/// Each pending event as `System (untrusted): [<time>] <text>`, one per line.
pub fn heartbeat_prompt(events: &[PendingEvent]) -> String {
    let lines: Vec<String> = events
        .iter()
        .map(|e| format!("System (untrusted): [{}] {}", e.at, e.text))
        .collect();
    format!(
        "{}\n\nIf nothing needs attention, reply HEARTBEAT_OK.",
        lines.join("\n")
    )
}
