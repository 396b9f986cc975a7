//! Agent work shared by every backend that runs agents (embedded and NATS): one run's turn with
//! the model provider, what its outcome leaves behind (summary, delivery), and a heartbeat's turn
//! over the main session's pending events. Backends decide when and store what these return.

use std::time::Duration;

use super::clock::now_rfc3339;
use super::delivery::resolve_route;
use super::provider::{
    Answer, ChatError, ChatTurn, Exchange, complete, is_acknowledgement, summary_of,
};
use super::records::{
    DeliveryJob, DeliveryRecord, NewRun, RunOutcome, RunStatus, SkipReason, SummaryEvent,
};
use super::runs::{self, PendingEvent};
use super::store::Store;
use crate::config::Settings;
use crate::config::runtime::{AgentRuntime, MAX_RUN_SECONDS, Route};
use crate::hook::envelope::{
    ContentSource, SECURITY_NOTICE, envelope, marker_id, sanitize_markers, sanitize_summary_name,
};
use crate::hook::{Channel, SessionMode, Thinking, WakeMode};

/// Events one heartbeat takes at most; the rest wait for the next.
const MAX_BEAT_EVENTS: u32 = 100;

/// The models a turn tries: the run's own (or the agent's primary), then the agent's fallbacks.
fn model_chain(agent: &AgentRuntime, requested: Option<&str>) -> Vec<String> {
    let mut chain: Vec<String> = Vec::new();
    let primary = requested.or(agent.model.as_ref().map(|m| m.primary.as_str()));
    chain.extend(primary.map(String::from));
    for fallback in agent.model.iter().flat_map(|m| &m.fallbacks) {
        if !chain.contains(fallback) {
            chain.push(fallback.clone());
        }
    }
    chain
}

/// What a turn asks of the model: the conversation so far, the prompt, the thinking level.
struct Question<'a> {
    history: &'a [Exchange],
    prompt: &'a str,
    thinking: Option<Thinking>,
}

/// One turn through the model chain: each model in order until one answers or fails in a way
/// that no other model mends (a refusal, an unreadable answer). Returns the answer (with the
/// usage of the model that gave it, not of the attempts that failed before) and that model's id,
/// or the last failure.
async fn ask(
    http: &reqwest::Client,
    settings: &Settings,
    agent: &AgentRuntime,
    chain: &[String],
    question: &Question<'_>,
    timeout: Duration,
) -> (Result<Answer, TurnError>, Option<String>) {
    let unconfigured = settings.runtime.providers.is_empty() && agent.provider.is_none();
    let mut last = match unconfigured {
        true => Err(TurnError::NoProviders),
        false => Err(TurnError::NoModel),
    };
    // Each model gets the run's timeout, and the whole chain no more than the hard cap.
    let cap = tokio::time::Instant::now() + Duration::from_secs(MAX_RUN_SECONDS);
    for id in chain {
        let Some((provider, model)) = settings.runtime.route_model(agent, id) else {
            tracing::warn!(model = %id, "no model provider for this model id; trying the next");
            last = Err(TurnError::NoProvider(id.clone()));
            continue;
        };
        let left = cap.saturating_duration_since(tokio::time::Instant::now());
        let turn = ChatTurn {
            model,
            history: question.history,
            prompt: question.prompt,
            thinking: question.thinking,
            timeout: timeout.min(left),
        };
        match complete(http, provider, &turn).await {
            Ok(answer) => return (Ok(answer), Some(id.clone())),
            Err(err) => {
                let transient = err.is_transient();
                tracing::warn!(model = %id, %err, transient, "model turn failed");
                last = Err(TurnError::Chat(err));
                if !transient || left.is_zero() {
                    break;
                }
            }
        }
    }
    (last, None)
}

/// Why a turn has no reply.
#[derive(Debug, thiserror::Error)]
enum TurnError {
    #[error("no model provider configured")]
    NoProviders,
    #[error("no model configured for the run or its agent")]
    NoModel,
    #[error("no model provider configured for {0}")]
    NoProvider(String),
    #[error(transparent)]
    Chat(ChatError),
}

/// The earlier exchanges of a persistent run's session, from `store` (on NATS, the node's view,
/// brought up to the stream first); none for an isolated run, or when they cannot be read (the
/// turn then starts the conversation afresh, and the failure is logged).
pub async fn history(store: &Store, run: &NewRun) -> Vec<Exchange> {
    if run.action().session_mode != SessionMode::Persistent {
        return Vec::new();
    }
    let of = run.clone();
    match store.read(move |conn| runs::history(conn, &of)).await {
        Ok(history) => history,
        Err(err) => {
            tracing::error!(%err, run = %run.run_id, "cannot read the session's history");
            Vec::new()
        }
    }
}

/// Calls the model for one run, trying the agent's fallbacks when a model fails for a while.
/// `history`: the earlier exchanges of a persistent run's session (see [`runs::history`]),
/// empty for an isolated one.
pub async fn turn(
    http: &reqwest::Client,
    settings: &Settings,
    run: &NewRun,
    history: &[Exchange],
) -> RunOutcome {
    let agent = settings.runtime.agent(&run.admitted.target_agent);
    // A request may shorten or lengthen its run, but not beyond a day (`0` asks for that): a
    // run that never ends would hold a slot and its session key for good.
    let timeout = match run.action().timeout_seconds {
        None => settings.runtime.run_timeout,
        Some(0) => Duration::from_secs(MAX_RUN_SECONDS),
        Some(t) => Duration::from_secs(t.min(MAX_RUN_SECONDS)),
    };
    let chain = model_chain(agent, run.action().model.as_deref());
    let (answer, model) = ask(
        http,
        settings,
        agent,
        &chain,
        &Question {
            history,
            prompt: &run.prompt,
            thinking: run.action().thinking,
        },
        timeout,
    )
    .await;
    let (status, answer, error) = match answer {
        Ok(answer) => (RunStatus::Ok, Some(answer), None),
        Err(err @ TurnError::Chat(ChatError::Timeout(_))) => {
            (RunStatus::Timeout, None, Some(err.to_string()))
        }
        Err(err) => (RunStatus::Error, None, Some(err.to_string())),
    };
    let (reply, usage) = answer.map_or((None, None), |a| (Some(a.reply), a.usage));
    RunOutcome {
        status,
        summary: reply.as_deref().map(summary_of),
        reply,
        error,
        model,
        usage,
        finished_at: now_rfc3339(),
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
    /// Whether the run asks for a heartbeat now: every `wakeMode: now` run does once it is
    /// recorded, its reply delivered or not, as the OpenClaw gateway does.
    pub fn wakes_now(&self, run: &NewRun) -> bool {
        run.action().wake_mode == WakeMode::Now
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
    // The error on the line that ends the run: the operator reading the log sees why.
    let error = outcome.error.as_deref();
    tracing::info!(run_id = %run.run_id, status = %outcome.status, error, "run finished");
    let default_agent = settings.agents.default_id().to_string();
    let reply = outcome.reply.as_deref().unwrap_or("");
    let summary = summary_event(run, &outcome, &default_agent);
    let skipped = if !run.action().deliver {
        Some(SkipReason::NotAsked)
    } else if outcome.status != RunStatus::Ok {
        Some(SkipReason::RunFailed)
    } else if is_acknowledgement(reply, settings.runtime.ack_max_chars) {
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
        run.channel(),
        run.action().to.clone(),
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
        wake_now: run.action().wake_mode == WakeMode::Now,
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
    let name = sanitize_summary_name(&run.action().name);
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

/// The route the owner set, for a run whose reply may be delivered (one store read); `None`
/// without a read for a run whose reply is not delivered (not asked for, or the run failed).
pub async fn owner_route_for(
    store: &Store,
    settings: &Settings,
    run: &NewRun,
    outcome: &RunOutcome,
) -> Option<Route> {
    if !run.action().deliver || outcome.status != RunStatus::Ok {
        return None;
    }
    owner_route(store, settings.agents.default_id()).await
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
    let chain = model_chain(agent_runtime, None);
    if chain.is_empty() {
        tracing::debug!("heartbeat skipped: no model configured");
        return None;
    }
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
    let timeout = settings.runtime.run_timeout;
    let (answer, _) = ask(
        http,
        settings,
        agent_runtime,
        &chain,
        &Question {
            history: &[],
            prompt: &prompt,
            thinking: None,
        },
        timeout,
    )
    .await;
    let reply = match answer {
        Ok(answer) => answer.reply,
        Err(err) => {
            tracing::warn!(%err, "heartbeat turn failed; its events stay pending");
            return None;
        }
    };
    let job = if is_acknowledgement(&reply, settings.runtime.ack_max_chars) {
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

/// The security notice once, then each pending event as `System (untrusted): [<time>]` over
/// its text in an untrusted-content envelope of its own (a fresh marker id each): a wake's text
/// and a run's summary event come from senders' payloads, so none of it reaches the prompt
/// outside an envelope, and a line break in it cannot start a line of its own.
pub fn heartbeat_prompt(events: &[PendingEvent]) -> String {
    let mut prompt = String::from(SECURITY_NOTICE);
    for event in events {
        prompt.push_str("\n\nSystem (untrusted): [");
        prompt.push_str(&sanitize_markers(&event.at));
        prompt.push_str("]\n");
        prompt.push_str(&envelope(
            ContentSource::Webhook,
            None,
            &event.text,
            &marker_id(),
        ));
    }
    prompt.push_str("\n\nIf nothing needs attention, reply HEARTBEAT_OK.");
    prompt
}
