//! Agent work shared by every backend that runs agents (embedded and NATS): one run's turn with
//! the model provider, what its outcome leaves behind (summary, delivery), and a heartbeat's turn
//! over the main session's pending events. Backends decide when and store what these return.

use std::time::Duration;

use super::model_call::{self, Calls};
use super::provider::{
    Answer, ChatError, ChatTurn, Exchange, Usage, complete, is_acknowledgement, summary_of,
};
use crate::config::Settings;
use crate::config::runtime::{AgentRuntime, MAX_RUN_SECONDS, Route};
use crate::gateway::clock::now_rfc3339;
use crate::gateway::outbound::chat::resolve_route;
use crate::gateway::store::Store;
use crate::gateway::store::records::{
    DeliveryJob, DeliveryRecord, NewRun, RunOutcome, RunStatus, SkipReason, SummaryEvent,
};
use crate::gateway::store::runs::{self, PendingEvent};
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

/// What a turn's calls to its models came to: the answer (with the usage of the model that gave
/// it, not of the calls that failed before) and that model's id, or the last failure; and every
/// call made, for the run's record.
struct Asked {
    answer: Result<Answer, TurnError>,
    model: Option<String>,
    calls: Calls,
}

/// How long a turn keeps calling its models.
#[derive(Debug, Clone, Copy)]
enum Patience {
    /// One pass over the model chain (a heartbeat's turn: its events stay pending for the
    /// next).
    OnePass,
    /// Passes over the chain while every model fails in a way that may pass, with a growing
    /// wait between passes ([`model_call::backoff`]); every call ends by the deadline, and no
    /// pass starts past it or past [`model_call::RETRY_SPAN`] after the first failed pass.
    Until(tokio::time::Instant),
}

/// One turn through the model chain: each model in order until one answers or fails in a way
/// that no other model mends (a refusal, an unreadable answer). When every model failed for a
/// moment (no answer, a timeout, 408, 429, a 5xx), the chain is walked again after a wait, as
/// `patience` allows.
async fn ask(
    http: &reqwest::Client,
    settings: &Settings,
    agent: &AgentRuntime,
    chain: &[String],
    question: &Question<'_>,
    timeout: Duration,
    patience: Patience,
) -> Asked {
    let unconfigured = settings.runtime.providers.is_empty() && agent.provider.is_none();
    let mut asked = Asked {
        answer: Err(match unconfigured {
            true => TurnError::NoProviders,
            false => TurnError::NoModel,
        }),
        model: None,
        calls: Calls::default(),
    };
    // A heartbeat's one pass ends by the hard cap; a run's passes end by its deadline, so a
    // chain of models never runs past the run's timeout.
    let cap = tokio::time::Instant::now() + Duration::from_secs(MAX_RUN_SECONDS);
    let end = match patience {
        Patience::OnePass => cap,
        Patience::Until(deadline) => deadline.min(cap),
    };
    // When the first pass failed for a moment: the span of retrying starts there.
    let mut first_failed = None;
    for pass in 1u32.. {
        let Pass::Transient(asked_wait) = ask_once(
            http,
            settings,
            agent,
            chain,
            question,
            (timeout, end),
            &mut asked,
        )
        .await
        else {
            break;
        };
        let Patience::Until(deadline) = patience else {
            break;
        };
        let now = tokio::time::Instant::now();
        let first_failed = *first_failed.get_or_insert(now);
        let wait = model_call::backoff(pass, asked_wait);
        if !model_call::may_call_again(first_failed, now + wait, deadline) {
            break;
        }
        asked.calls.waited(wait);
        tracing::warn!(
            calls = asked.calls.count,
            wait_ms = wait.as_millis() as u64,
            "every model failed for a moment; calling again after a wait"
        );
        tokio::time::sleep(wait).await;
    }
    asked
}

/// How a pass over the model chain ended.
enum Pass {
    /// A model answered, or one failed in a way no other call mends, or nothing could be called.
    Over,
    /// Every model failed in a way that may pass; the longest `Retry-After` asked, if any.
    Transient(Option<Duration>),
}

/// One pass over `chain`, each call given `timeout` and ending by `end`; records each call and
/// the outcome in `asked`.
async fn ask_once(
    http: &reqwest::Client,
    settings: &Settings,
    agent: &AgentRuntime,
    chain: &[String],
    question: &Question<'_>,
    (timeout, end): (Duration, tokio::time::Instant),
    asked: &mut Asked,
) -> Pass {
    let mut pass = Pass::Over;
    for id in chain {
        // A model that took what was left ends the pass: the next would be called for nothing.
        let left = end.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Pass::Over;
        }
        let Some((provider, model)) = settings.runtime.route_model(agent, id) else {
            tracing::warn!(model = %id, "no model provider for this model id; trying the next");
            asked.answer = Err(TurnError::NoProvider(id.clone()));
            continue;
        };
        let turn = ChatTurn {
            model,
            history: question.history,
            prompt: question.prompt,
            thinking: question.thinking,
            timeout: timeout.min(left),
        };
        let at = model_call::started_at();
        let result = complete(http, provider, &turn).await;
        asked
            .calls
            .push(id, &provider.label, at, result.as_ref().err());
        match result {
            Ok(answer) => {
                asked.answer = Ok(answer);
                asked.model = Some(id.clone());
                return Pass::Over;
            }
            Err(err) => {
                let transient = err.is_transient();
                tracing::warn!(model = %id, provider = %provider.label, call = asked.calls.count, %err,
                    transient, "model call failed");
                let wait = match pass {
                    Pass::Transient(wait) => wait.max(err.retry_after()),
                    Pass::Over => err.retry_after(),
                };
                asked.answer = Err(TurnError::Chat {
                    provider: provider.label.clone(),
                    error: err,
                    calls: asked.calls.count,
                });
                if !transient {
                    return Pass::Over;
                }
                pass = Pass::Transient(wait);
            }
        }
    }
    pass
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
    /// The last call's failure, with the provider's name and how many calls the turn made.
    #[error("provider {provider} {error}{}", Attempts::of(.calls))]
    Chat {
        provider: String,
        error: ChatError,
        calls: u32,
    },
}

/// ` (after N calls)` when a turn made more than one.
struct Attempts(u32);

impl Attempts {
    fn of(calls: &u32) -> Attempts {
        Attempts(*calls)
    }
}

impl std::fmt::Display for Attempts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 | 1 => Ok(()),
            n => write!(f, " (after {n} calls)"),
        }
    }
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

/// Calls the model for one run, trying the agent's fallbacks when a model fails for a while,
/// and the whole chain again, after a wait, while every model fails for a moment, for at most
/// [`model_call::RETRY_SPAN`] after the first failed pass; no call runs past the run's timeout.
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
    let deadline = tokio::time::Instant::now() + timeout;
    let Asked {
        answer,
        model,
        calls,
    } = ask(
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
        Patience::Until(deadline),
    )
    .await;
    let (status, answer, error) = match answer {
        Ok(answer) => (RunStatus::Ok, Some(answer), None),
        Err(
            err @ TurnError::Chat {
                error: ChatError::Timeout(_),
                ..
            },
        ) => (RunStatus::Timeout, None, Some(err.to_string())),
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
        calls: calls.into_vec(),
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
    /// The tokens the turn used, as its provider reported them: the agent's spend
    /// (`spend::record_heartbeat`).
    pub usage: Option<Usage>,
    /// When the turn ended (RFC 3339, the store's form).
    pub finished_at: String,
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
    let asked = ask(
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
        Patience::OnePass,
    )
    .await;
    let (reply, usage) = match asked.answer {
        Ok(answer) => (answer.reply, answer.usage),
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
        usage,
        finished_at: now_rfc3339(),
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
