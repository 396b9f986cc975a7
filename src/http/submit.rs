//! What an accepted hook request becomes: wakes committed to the main session, agent runs
//! admitted and queued, and the answer the client gets once they are durable (docs/http-contract.md and docs/hooks.md).

use std::time::Duration;

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use super::reply::HookError;
use super::request::HookRequest;
use super::trace::Trace;
use crate::config::HookSettings;
use crate::gateway::requests::Repeat;
use crate::gateway::{EventOutcome, RunQueued, RunStatus};
use crate::hook::{AgentRequest, WakeMode, WakeRequest, idempotency};
use crate::intake::{self, AgentAdmission, AgentOrigin};
use crate::mapping::{FinishedAction, Mapping};

/// `POST {prefix}/wake`: a durable, untrusted system event for the default agent's main session.
pub(super) async fn wake(
    app: &AppState,
    hooks: &HookSettings,
    wake: WakeRequest,
    source: String,
    trace: &mut Trace,
) -> Result<Response, HookError> {
    let outcome = commit_wake(app, hooks, &wake, source).await?;
    trace.event(outcome);
    Ok(Json(wake_answer(wake.mode, outcome)).into_response())
}

/// `POST {prefix}/agent`: an agent request admitted (see [`intake::admit_agent`]), then durably
/// queued as a run.
pub(super) async fn agent(
    app: &AppState,
    hooks: &HookSettings,
    request: &HookRequest<'_>,
    agent: AgentRequest,
    trace: &mut Trace,
) -> Result<Response, HookError> {
    let keys = idempotency_keys(request);
    let wait = agent
        .wait_for_completion
        .then_some(agent.action.timeout_seconds);
    let admission = intake::admit_agent(
        hooks,
        agent.action,
        AgentOrigin::Direct,
        keys,
        request.parts.uri.path(),
    )?;
    let (run_id, repeated) = queue(app, admission, trace).await?;
    if repeated {
        trace.repeat(Repeat::Idempotency);
    }
    let mut answer = json!({"ok": true, "runId": run_id});
    if let Some(timeout_seconds) = wait {
        answer["completion"] = completion(app, &run_id, timeout_seconds).await?;
    }
    Ok(Json(answer).into_response())
}

/// How long past its own time limit an answer waits for a run (its conclusion and summary).
const COMPLETION_MARGIN: Duration = Duration::from_secs(5);

/// `waitForCompletion`: the run's outcome once it has ended, `{status, reply}` (`error` instead
/// of `reply` when it failed), or `{status: "running"}` when its time limit and
/// [`COMPLETION_MARGIN`] have passed first. The run is read from the store (on NATS, this
/// node's view) every so often, so the answer follows the run by at most a quarter second.
async fn completion(
    app: &AppState,
    run_id: &str,
    timeout_seconds: Option<u64>,
) -> Result<Value, HookError> {
    let limit = match timeout_seconds {
        Some(seconds) if seconds > 0 => Duration::from_secs(seconds),
        _ => app.config.current().runtime.run_timeout,
    };
    let deadline = tokio::time::Instant::now() + limit + COMPLETION_MARGIN;
    let mut pause = Duration::from_millis(10);
    loop {
        if let Some(run) = app.store.run(run_id).await? {
            let waiting = run.status.is_pending() || run.status == RunStatus::Forwarding;
            if !waiting {
                let mut outcome = json!({"status": run.status.as_str()});
                if let Some(reply) = run.reply {
                    outcome["reply"] = Value::from(reply);
                }
                if let Some(error) = run.error {
                    outcome["error"] = Value::from(error);
                }
                return Ok(outcome);
            }
        }
        if tokio::time::Instant::now() + pause > deadline {
            return Ok(json!({"status": "running"}));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// A mapped request's actions: one, or one per element of a `forEach` list. Every agent action
/// is admitted before anything is stored, so that a refused element refuses the request and
/// stores nothing; then each is committed in order.
///
/// The answer is a wake's (`mode`, `eventOutcome`: `queued` when any event was) when there are
/// only wakes; a run's (`runId`) for one run; and for several runs, as the OpenClaw gateway
/// answers a batch, `{ok, runId: <first>, runIds, dispatched}`. Wakes beside runs add their
/// `eventOutcome`.
pub(super) async fn mapped(
    app: &AppState,
    hooks: &HookSettings,
    request: &HookRequest<'_>,
    mapping: &Mapping,
    actions: Vec<FinishedAction>,
    trace: &mut Trace,
) -> Result<Response, HookError> {
    let keys = idempotency_keys(request);
    let chosen = idempotency::choose_key(keys);
    let path = request.parts.uri.path();
    let mut admitted = Vec::with_capacity(actions.len());
    for (i, action) in actions.into_iter().enumerate() {
        admitted.push(match action {
            FinishedAction::Wake(wake) => Admitted::Wake(wake),
            FinishedAction::Agent {
                action: agent,
                key_origin,
                allow_unsafe_external_content,
            } => {
                let origin = AgentOrigin::Mapped {
                    mapping,
                    key_origin,
                    allow_unsafe: allow_unsafe_external_content,
                };
                // Each element of a batch has a key of its own, so that a retried batch finds
                // each of its runs again, and two equal elements are two runs.
                let element_key = chosen.filter(|_| i > 0).map(|key| format!("{key}#{i}"));
                let keys = match &element_key {
                    Some(key) => [Some(key.as_str()), None, None, None, None],
                    None => keys,
                };
                Admitted::Agent(Box::new(intake::admit_agent(
                    hooks, agent, origin, keys, path,
                )?))
            }
        });
    }
    let mut run_ids = Vec::new();
    let mut every_run_repeated = true;
    let mut woke: Option<(WakeMode, EventOutcome)> = None;
    for action in admitted {
        match action {
            Admitted::Wake(wake) => {
                let source = format!("hook:{}", request.name);
                let outcome = commit_wake(app, hooks, &wake, source).await?;
                trace.event(outcome);
                let any_queued = woke.is_some_and(|(_, o)| o == EventOutcome::Queued);
                let outcome = if any_queued {
                    EventOutcome::Queued
                } else {
                    outcome
                };
                woke = Some((wake.mode, outcome));
            }
            Admitted::Agent(admission) => {
                let (run_id, repeated) = queue(app, *admission, trace).await?;
                every_run_repeated &= repeated;
                run_ids.push(run_id);
            }
        }
    }
    // A repeat only when all of it was: a batch with one new run made work of its own.
    if every_run_repeated && woke.is_none() && !run_ids.is_empty() {
        trace.repeat(Repeat::Idempotency);
    }
    let mut answer = match (run_ids.as_slice(), woke) {
        ([], Some((mode, outcome))) => return Ok(Json(wake_answer(mode, outcome)).into_response()),
        ([], None) => unreachable!("a mapped request has at least one action"),
        ([run_id], _) => json!({"ok": true, "runId": run_id}),
        ([first, ..], _) => json!({
            "ok": true,
            "runId": first,
            "runIds": run_ids,
            "dispatched": run_ids.len(),
        }),
    };
    if let Some((_, outcome)) = woke {
        answer["eventOutcome"] = Value::from(outcome.as_str());
    }
    Ok(Json(answer).into_response())
}

/// An action of a mapped request that passed every policy.
enum Admitted {
    Wake(WakeRequest),
    /// Boxed: an admission carries the whole run record.
    Agent(Box<AgentAdmission>),
}

async fn commit_wake(
    app: &AppState,
    hooks: &HookSettings,
    wake: &WakeRequest,
    source: String,
) -> Result<EventOutcome, HookError> {
    let event = intake::admit_wake(hooks, wake, source)?;
    Ok(app.runtime.submit_wake(event, wake.mode).await?)
}

fn wake_answer(mode: WakeMode, outcome: EventOutcome) -> Value {
    json!({"ok": true, "mode": mode.as_str(), "eventOutcome": outcome.as_str()})
}

/// Queues an admitted run, which the trace records: its id, or the first run's when it repeats
/// one (idempotency), and whether it did.
async fn queue(
    app: &AppState,
    admission: AgentAdmission,
    trace: &mut Trace,
) -> Result<(String, bool), HookError> {
    let queued = app
        .runtime
        .submit_run(
            admission.run,
            admission.claim,
            &admission.admitted,
            admission.idempotency_key.as_deref(),
        )
        .await?;
    let (run_id, repeated) = match queued {
        RunQueued::New { run_id } => (run_id, false),
        RunQueued::Replayed { run_id } => (run_id, true),
    };
    trace.run(&run_id);
    Ok((run_id, repeated))
}

/// The idempotency key candidates of a request, in order of precedence: the headers, the body's
/// `idempotencyKey`, a signed delivery's id.
fn idempotency_keys<'a>(request: &HookRequest<'a>) -> [Option<&'a str>; 5] {
    let headers = &request.parts.headers;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    [
        header("idempotency-key"),
        header("x-idempotency-key"),
        header("x-openclaw-idempotency-key"),
        idempotency::body_key(request.payload),
        request.signed.and_then(|s| s.key),
    ]
}
