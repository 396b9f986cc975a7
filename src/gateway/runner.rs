//! The agent runner: takes queued runs from the store, at most `agents.defaults.maxConcurrent` at
//! once and never two of one session key together, runs each as one turn with the model provider,
//! and records the outcome together with its summary or its delivery.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::Semaphore;

use super::channels::resolve_route;
use super::provider::{ChatTurn, complete, is_silent, summary_of};
use super::runs::{self, OutboxEntry, RunOutcome, RunWork, SummaryEvent};
use super::runtime::{Runtime, now_ms, now_rfc3339};
use crate::hook::Channel;
use crate::hook::envelope::sanitize_summary_name;

/// Queued runs are looked for at least this often, besides whenever a run is queued.
const POLL: Duration = Duration::from_secs(1);

/// The longest a run may take, whatever it asks for.
const MAX_RUN_SECONDS: u64 = 86_400;

/// Session keys with a run in progress.
type BusySessions = Arc<Mutex<HashSet<String>>>;

/// Runs the runner until the process ends.
pub async fn run(runtime: Arc<Runtime>) {
    match runtime.store.write(runs::resume_interrupted).await {
        Ok(0) => {}
        Ok(resumed) => tracing::warn!(resumed, "runs interrupted by a stop are queued again"),
        Err(err) => tracing::error!(%err, "cannot resume interrupted runs"),
    }
    let slots = Arc::new(Semaphore::new(
        runtime.config.current().runtime.max_concurrent,
    ));
    let busy: BusySessions = Arc::default();
    loop {
        if let Err(err) = start_queued(&runtime, &slots, &busy).await {
            tracing::error!(%err, "runner cannot read queued runs");
        }
        let _ = tokio::time::timeout(POLL, runtime.runs_queued.notified()).await;
    }
}

async fn start_queued(
    runtime: &Arc<Runtime>,
    slots: &Arc<Semaphore>,
    busy: &BusySessions,
) -> Result<(), super::StoreError> {
    let queued = runtime.store.read(|conn| runs::queued(conn, 256)).await?;
    for (run_id, session_key) in queued {
        let Ok(slot) = Arc::clone(slots).try_acquire_owned() else {
            return Ok(());
        };
        if !lock(busy).insert(session_key.clone()) {
            continue;
        }
        let started_at = now_rfc3339();
        let claimed = runtime
            .store
            .write(move |conn| runs::claim(conn, &run_id, &started_at))
            .await;
        let Ok(Some(work)) = claimed else {
            lock(busy).remove(&session_key);
            continue;
        };
        let runtime = Arc::clone(runtime);
        let release = Release {
            busy: Arc::clone(busy),
            session_key,
            runtime: Arc::clone(&runtime),
            _slot: slot,
        };
        tokio::spawn(async move {
            execute(&runtime, work).await;
            drop(release);
        });
    }
    Ok(())
}

/// Frees a run's session key and slot when its task ends, even by a panic.
struct Release {
    busy: BusySessions,
    session_key: String,
    runtime: Arc<Runtime>,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Release {
    fn drop(&mut self) {
        lock(&self.busy).remove(&self.session_key);
        // A run of this session key may have been waiting for this one.
        self.runtime.runs_queued.notify_one();
    }
}

fn lock(busy: &BusySessions) -> std::sync::MutexGuard<'_, HashSet<String>> {
    busy.lock().unwrap_or_else(|p| p.into_inner())
}

/// One run: the turn, then its outcome, summary or delivery in one transaction.
async fn execute(runtime: &Runtime, work: RunWork) {
    let outcome = turn(runtime, &work).await;
    let conclusion = conclude(runtime, &work, outcome).await;
    let wakes_now = conclusion.wakes_now(&work);
    let Conclusion {
        outcome,
        delivery,
        summary_now,
        job,
    } = conclusion;
    let outbox = job.map(|payload| OutboxEntry {
        kind: "delivery",
        run_id: Some(work.run_id.clone()),
        payload,
        created_at: now_rfc3339(),
        now_ms: now_ms(),
    });
    let run_id = work.run_id.clone();
    let recorded = runtime
        .store
        .write(move |conn| {
            runs::finish(
                conn,
                &run_id,
                &outcome,
                &delivery,
                summary_now.as_ref(),
                outbox.as_ref(),
            )
        })
        .await;
    match recorded {
        Ok(()) => {
            runtime.outbox_ready.notify_one();
            if wakes_now {
                runtime.heartbeat.request();
            }
        }
        // The run stays `running`; the next start queues it again.
        Err(err) => tracing::error!(%err, run_id = %work.run_id, "cannot record the run's outcome"),
    }
}

/// What a finished run leaves behind, whatever the store.
#[derive(Debug)]
pub(super) struct Conclusion {
    pub outcome: RunOutcome,
    /// The run's delivery record: pending, or skipped with the reason.
    pub delivery: serde_json::Value,
    /// The summary event, now when nothing is delivered; after the delivery otherwise.
    pub summary_now: Option<SummaryEvent>,
    /// The delivery to make (an outbox payload), if the reply goes to a chat channel.
    pub job: Option<serde_json::Value>,
}

impl Conclusion {
    /// Whether the run asks for a heartbeat now (a delivered run asks after its delivery).
    pub fn wakes_now(&self, work: &RunWork) -> bool {
        self.job.is_none() && work.wake_mode == "now"
    }
}

/// Decides, from a run's outcome, what is delivered where and what the main session is told.
pub(super) async fn conclude(runtime: &Runtime, work: &RunWork, outcome: RunOutcome) -> Conclusion {
    tracing::info!(run_id = %work.run_id, status = %outcome.status, "run finished");
    let settings = runtime.config.current();
    let default_agent = settings.agents.default_id().to_string();
    let reply = outcome.reply.as_deref().unwrap_or("");
    let deliverable = outcome.status == "ok" && work.deliver && !is_silent(reply);
    let summary = summary_event(work, &outcome, &default_agent);
    if !deliverable {
        let reason = if !work.deliver {
            "deliver is false"
        } else if outcome.status != "ok" {
            "the run did not succeed"
        } else {
            "the reply is an acknowledgement"
        };
        return Conclusion {
            outcome,
            delivery: json!({"status": "skipped", "reason": reason}),
            summary_now: Some(summary),
            job: None,
        };
    }
    let last = runtime
        .store
        .read({
            let agent = default_agent.clone();
            move |conn| runs::last_route(conn, &agent)
        })
        .await
        .ok()
        .flatten();
    let channel = Channel::parse(&work.channel).unwrap_or(Channel::Last);
    let route = resolve_route(channel, work.to.clone(), last, &settings.runtime.channels);
    let job = json!({
        "runId": work.run_id, "agent": default_agent, "channel": route.channel.as_str(),
        "to": route.to, "text": reply, "summary": summary, "wakeNow": work.wake_mode == "now",
    });
    Conclusion {
        outcome,
        delivery: json!({"status": "pending", "channel": route.channel.as_str(), "to": route.to}),
        summary_now: None,
        job: Some(job),
    }
}

/// The summary event of a finished run: `Hook <name>: <summary>`, or with the status and error
/// when it did not succeed.
fn summary_event(work: &RunWork, outcome: &RunOutcome, agent: &str) -> SummaryEvent {
    let name = sanitize_summary_name(&work.hook_name);
    let text = if outcome.status == "ok" {
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
        run_id: work.run_id.clone(),
        text,
        at: now_rfc3339(),
    }
}

/// Calls the model for one run.
pub(super) async fn turn(runtime: &Runtime, work: &RunWork) -> RunOutcome {
    let settings = runtime.config.current();
    let agent = settings.runtime.agent(&work.target_agent);
    let failed = |status: &str, error: String| RunOutcome {
        status: status.into(),
        reply: None,
        summary: None,
        error: Some(error),
        finished_at: now_rfc3339(),
    };
    let Some(provider) = &agent.provider else {
        return failed("error", "no model provider configured".into());
    };
    let Some(model) = work.model.as_deref().or(agent.model.as_deref()) else {
        return failed(
            "error",
            "no model configured for the run or its agent".into(),
        );
    };
    // A request may shorten or lengthen its run, but not beyond a day: a run that never ends
    // would hold a slot and its session key for good.
    let timeout = work
        .timeout_seconds
        .and_then(|t| u64::try_from(t).ok())
        .map_or(settings.runtime.run_timeout, |t| {
            Duration::from_secs(t.min(MAX_RUN_SECONDS))
        });
    let turn = ChatTurn {
        model,
        prompt: &work.prompt,
        thinking: work.thinking.as_deref(),
        timeout,
    };
    match complete(&runtime.http, provider, &turn).await {
        Ok(reply) => RunOutcome {
            status: "ok".into(),
            summary: Some(summary_of(&reply)),
            reply: Some(reply),
            error: None,
            finished_at: now_rfc3339(),
        },
        Err(err @ super::provider::ChatError::Timeout(_)) => failed("timeout", err.to_string()),
        Err(err) => failed("error", err.to_string()),
    }
}
