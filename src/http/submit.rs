//! The answers to accepted hook requests, once admission ([`intake::admit`]) has made their
//! actions durable (docs/http-contract.md and docs/hooks.md): a wake's mode and event outcome, a
//! run's id, a batch's ids, and for `waitForCompletion` the run's outcome.

use std::time::Duration;

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::AppState;
use super::reply::HookError;
use super::request::HookRequest;
use super::trace::Trace;
use crate::config::HookSettings;
use crate::gateway::requests::Repeat;
use crate::gateway::{EventOutcome, RunStatus};
use crate::hook::{AgentRequest, WakeMode, WakeRequest, idempotency};
use crate::intake::{self, Actions, AdmitError, Committed, Intake};
use crate::mapping::{FinishedAction, Mapping};

/// `POST {prefix}/wake`: a durable, untrusted system event for the default agent's main session.
pub(super) async fn wake(
    app: &AppState,
    hooks: &HookSettings,
    wake: WakeRequest,
    source: String,
    trace: &Trace,
) -> Result<Response, HookError> {
    let intake = Intake {
        keys: [None; 5],
        path: "",
        event_source: source,
        request_id: None,
    };
    let committed = admit(app, hooks, &intake, Actions::Wake(wake), trace).await?;
    Ok(Json(Answer::of(&committed)).into_response())
}

/// `POST {prefix}/agent`: an agent request admitted and durably queued as a run.
pub(super) async fn agent(
    app: &AppState,
    hooks: &HookSettings,
    request: &HookRequest<'_>,
    agent: AgentRequest,
    run_timeout: Duration,
    trace: &Trace,
) -> Result<Response, HookError> {
    // A run without a limit of its own waits as long as its generation lets runs take.
    let wait = agent
        .wait_for_completion
        .then(|| match agent.action.timeout_seconds {
            Some(seconds) if seconds > 0 => Duration::from_secs(seconds),
            _ => run_timeout,
        });
    let intake = intake_of(request);
    let committed = admit(app, hooks, &intake, Actions::Agent(agent.action), trace).await?;
    let mut answer = Answer::of(&committed);
    if let (Some(limit), Some(run)) = (wait, committed.runs.first()) {
        answer.completion = Some(completion(app, &run.run_id, limit).await?);
    }
    Ok(Json(answer).into_response())
}

/// A mapped request's actions: one, or one per element of a `forEach` list (see
/// [`intake::admit`]), answered as [`Answer::of`] says.
pub(super) async fn mapped(
    app: &AppState,
    hooks: &HookSettings,
    request: &HookRequest<'_>,
    mapping: &Mapping,
    actions: Vec<FinishedAction>,
    trace: &Trace,
) -> Result<Response, HookError> {
    let intake = intake_of(request);
    let actions = Actions::Mapped { mapping, actions };
    let committed = admit(app, hooks, &intake, actions, trace).await?;
    Ok(Json(Answer::of(&committed)).into_response())
}

/// Admits and commits, and records in the trace what was committed, also when admission
/// stopped part way.
async fn admit(
    app: &AppState,
    hooks: &HookSettings,
    intake: &Intake<'_>,
    actions: Actions<'_>,
    trace: &Trace,
) -> Result<Committed, HookError> {
    match intake::admit(&app.runtime, hooks, intake, actions).await {
        Ok(committed) => {
            record(trace, &committed);
            if committed.repeated() {
                trace.repeat(Repeat::Idempotency);
            }
            Ok(committed)
        }
        Err(stopped) => {
            record(trace, &stopped.committed);
            Err(match stopped.error {
                AdmitError::Rejected(rejected) => rejected.into(),
                AdmitError::Limited(limit) => {
                    tracing::info!(reason = %limit.reason, "run refused: a limit is reached");
                    HookError::LimitReached(limit)
                }
                AdmitError::Store(error) => error.into(),
            })
        }
    }
}

fn record(trace: &Trace, committed: &Committed) {
    for run in &committed.runs {
        trace.run(&run.run_id);
    }
    if let Some(outcome) = committed.outcome() {
        trace.outcome(outcome);
    }
    if let Some((_, outcome)) = committed.wake {
        trace.event(outcome);
    }
}

/// The answer to an admitted request; fields left `None` are not sent.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Answer<'a> {
    ok: bool,
    /// Only wakes: the last one's mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<WakeMode>,
    /// The first run's.
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<&'a str>,
    /// A batch mapping's: the first run's request's position in its batch, from 1
    /// (docs/hooks.md "Batches").
    #[serde(skip_serializing_if = "Option::is_none")]
    batched: Option<u32>,
    /// A batch's (several runs): every run's, in order, and how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    run_ids: Option<Vec<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dispatched: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_outcome: Option<EventOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion: Option<Completion>,
}

impl<'a> Answer<'a> {
    /// A wake's (`mode`, `eventOutcome`: `queued` when any event was) when there are only
    /// wakes; a run's (`runId`) for one run; and for several runs, as the OpenClaw gateway
    /// answers a batch, `{ok, runId: <first>, runIds, dispatched}`. Wakes beside runs add their
    /// `eventOutcome`.
    fn of(committed: &'a Committed) -> Answer<'a> {
        let runs = &committed.runs;
        let batch: Option<Vec<&str>> =
            (runs.len() > 1).then(|| runs.iter().map(|run| run.run_id.as_str()).collect());
        Answer {
            ok: true,
            mode: committed
                .wake
                .filter(|_| runs.is_empty())
                .map(|(mode, _)| mode),
            run_id: runs.first().map(|run| run.run_id.as_str()),
            batched: runs.first().and_then(|run| run.batched),
            dispatched: batch.as_ref().map(Vec::len),
            run_ids: batch,
            event_outcome: committed.wake.map(|(_, outcome)| outcome),
            completion: None,
        }
    }
}

/// How long past its own time limit an answer waits for a run (its conclusion and summary).
const COMPLETION_MARGIN: Duration = Duration::from_secs(5);

/// `waitForCompletion`: the run's outcome once it has ended, `{status, reply}` (`error` instead
/// of `reply` when it failed).
#[derive(Debug, Serialize)]
struct Completion {
    status: RunStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The run's [`Completion`], or `{status: "running"}` when its time limit and
/// [`COMPLETION_MARGIN`] have passed first. The run is read from the store (on NATS, this
/// node's view) every so often, so the answer follows the run by at most a quarter second.
async fn completion(
    app: &AppState,
    run_id: &str,
    limit: Duration,
) -> Result<Completion, HookError> {
    let deadline = tokio::time::Instant::now() + limit + COMPLETION_MARGIN;
    let mut pause = Duration::from_millis(10);
    loop {
        if let Some(run) = app.store.run(run_id).await? {
            let waiting = run.status.is_pending() || run.status == RunStatus::Forwarding;
            if !waiting {
                return Ok(Completion {
                    status: run.status,
                    reply: run.reply,
                    error: run.error,
                });
            }
        }
        if tokio::time::Instant::now() + pause > deadline {
            return Ok(Completion {
                status: RunStatus::Running,
                reply: None,
                error: None,
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// Where a request came in, for admission: its idempotency key candidates in order of
/// precedence (the headers, the body's `idempotencyKey`, a signed delivery's id), its path and
/// the source of its wakes' events.
pub(super) fn intake_of<'a>(request: &HookRequest<'a>) -> Intake<'a> {
    let headers = &request.parts.headers;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    Intake {
        keys: [
            header("idempotency-key"),
            header("x-idempotency-key"),
            header("x-openclaw-idempotency-key"),
            idempotency::body_key(request.payload),
            request.signed.and_then(|s| s.replay_key.as_deref()),
        ],
        path: request.parts.uri.path(),
        event_source: format!("hook:{}", request.name),
        request_id: request
            .parts
            .extensions
            .get::<super::request_id::RequestId>()
            .map(super::request_id::RequestId::as_str),
    }
}
