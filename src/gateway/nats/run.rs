//! One agent run on the cluster: taken from the runner consumer, run by one node at a time, its
//! session key held for the whole cluster while it runs, its outcome on the stream before the
//! message is acknowledged.

use std::time::Duration;

use async_nats::jetstream::Message;

use super::lanes;
use super::session_lock::SessionLock;
use super::work::{RETRY, VIEW_WAIT, done, later, position, with_progress};
use super::{Cluster, ClusterError, Consumer, Fact};
use crate::config::outbound::{Event, OutboundSettings};
use crate::gateway::clock::now_rfc3339;
use crate::gateway::context::Context;
use crate::gateway::outbound::webhooks::{self, RunEndStamp, WebhookMessage};
use crate::gateway::store::records::{DeliveryRecord, NewRun, RunOutcome, RunStatus, SkipReason};
use crate::gateway::store::run_view::RunRecord;
use crate::gateway::store::runs;
use crate::gateway::store::{Store, StoreError};
use crate::gateway::turns::agent::{self, Conclusion};
use crate::gateway::turns::token_metrics;
use crate::hook::SessionMode;

/// How long a persistent run waits for this node's view to show its session's earlier runs.
const HISTORY_CATCH_UP: Duration = Duration::from_secs(2);

/// One agent run from the runner consumer: never two of one session key at once in the
/// cluster, and not again once its outcome is on the stream. Every step, the waits included,
/// runs under in-progress acks, so that the server never hands the run to a second node while
/// this one is still on it.
pub(super) async fn run(ctx: Context, cluster: Cluster, message: Message) {
    let (sequence, delivered) = position(&message);
    let (work, attempt) = match serde_json::from_slice::<Fact>(&message.payload) {
        Ok(Fact::Run { run, .. } | Fact::Released { run, .. }) => (run, Attempt(1)),
        Ok(Fact::Retried { run, attempt }) => (run, Attempt(attempt)),
        _ => {
            tracing::warn!(
                sequence,
                "the runner consumer got something other than a run"
            );
            return done(&message).await;
        }
    };
    if delivered >= Consumer::Runner.max_deliver() {
        return give_up(&ctx, &cluster, &message, &work, attempt, delivered).await;
    }
    let prepare = prepare(&ctx, &cluster, &work, attempt, sequence, delivered);
    let (lock, started_at) = match with_progress(&cluster, &message, || async {}, prepare).await {
        Prepared::Run(lock, started_at) => (lock, started_at),
        Prepared::Done => return done(&message).await,
        Prepared::Later(delay) => return later(&message, delay).await,
    };
    let refresh = || lock.refresh();
    let settings = ctx.config.current();
    if work.action().session_mode == SessionMode::Persistent {
        // The session's previous run finished before this one took its lock, but this node's
        // view may not show it yet: bring the view up to the stream (briefly) first.
        if let Ok(last) = cluster.last_sequence().await {
            cluster.wait_applied(last, HISTORY_CATCH_UP).await;
        }
    }
    let history = agent::history(&ctx.store, &work).await;
    let turn = agent::turn(&ctx.http, &settings, &work, &history);
    let outcome = with_progress(&cluster, &message, refresh, turn).await;
    token_metrics::count_tokens(&ctx.metrics, &settings, &work, &outcome);
    let owner = agent::owner_route_for(&ctx.store, &settings, &work, &outcome).await;
    let conclusion = agent::conclude(&settings, &work, outcome, owner);
    let wakes_now = conclusion.wakes_now(&work);
    let end = RunEnd::new(&settings.outbound, &work, Some(&started_at));
    let record = record_outcome(&cluster, &work.run_id, attempt, conclusion, &end);
    if !with_progress(&cluster, &message, refresh, record).await {
        // Left unacknowledged: offered again after the ack wait, its lock taken over then.
        return;
    }
    lock.release().await;
    done(&message).await;
    if wakes_now {
        request_beat(&cluster).await;
    }
}

/// What to do with a run that was offered.
enum Prepared<'a> {
    /// Run it: its session (and a slot of its mapping's lane) is this run's now, and its start
    /// (at the time given) is on the stream.
    Run(Held<'a>, String),
    /// It is finished already.
    Done,
    /// Not now: offered again after the delay.
    Later(Duration),
}

/// Checks that the run still needs running, takes its session and records its start.
async fn prepare<'a>(
    ctx: &Context,
    cluster: &'a Cluster,
    work: &'a NewRun,
    attempt: Attempt,
    sequence: u64,
    delivered: i64,
) -> Prepared<'a> {
    // A run offered again may have been finished by a node that stopped before acknowledging
    // it: this node's view must have caught up with everything published so far to tell.
    let current = match delivered {
        1 => Ok(sequence),
        _ => cluster.last_sequence().await.map(|last| last.max(sequence)),
    };
    let caught_up = match current {
        Ok(current) => cluster.wait_applied(current, VIEW_WAIT).await,
        Err(_) => false,
    };
    if !caught_up {
        return Prepared::Later(RETRY);
    }
    let run_id = work.run_id.clone();
    let status = ctx
        .store
        .read(move |conn| runs::status(conn, &run_id))
        .await;
    match status {
        Ok(Some(status)) if status.is_pending() => {}
        Ok(Some(_)) => return Prepared::Done,
        Ok(None) | Err(_) => return Prepared::Later(RETRY),
    }
    if lanes::steps_aside(ctx, work, delivered).await {
        return Prepared::Later(lanes::STEP_ASIDE);
    }
    // Its session or its lane has runs in progress elsewhere: offered again, later each time.
    let busy = Duration::from_millis(250 * u64::try_from(delivered).unwrap_or(1));
    let busy = Prepared::Later(busy.min(Duration::from_secs(5)));
    let Ok(lane) = lanes::take_slot(cluster, &ctx.config.current(), work, delivered).await else {
        return busy;
    };
    let session = SessionLock::new(cluster, &work.admitted.session_key, &work.run_id, delivered);
    let lock = Held { session, lane };
    if !lock.session.take().await {
        lock.release().await;
        return busy;
    }
    let started_at = now_rfc3339();
    let outbound = &ctx.config.current().outbound;
    let started = Fact::Started {
        run_id: work.run_id.clone(),
        started_at: started_at.clone(),
        webhooks: webhooks::event_messages(outbound, Event::RunStarted, work, None),
    };
    let started_id = format!("started-{}{attempt}-{delivered}", work.run_id);
    if let Err(err) = cluster.publish(&started, &started_id).await {
        tracing::warn!(%err, run_id = %work.run_id, "cannot record the start of a run");
        lock.release().await;
        return Prepared::Later(RETRY);
    }
    Prepared::Run(lock, started_at)
}

/// The last offer of a run: the server drops the message after it, so the run gets an error
/// outcome instead of staying queued for good.
async fn give_up(
    ctx: &Context,
    cluster: &Cluster,
    message: &Message,
    work: &NewRun,
    attempt: Attempt,
    delivered: i64,
) {
    let error = format!(
        "given up after {delivered} offers (its session key or its mapping's lane stayed busy, or no node could record it)"
    );
    let outcome = RunOutcome {
        status: RunStatus::Error,
        reply: None,
        summary: None,
        error: Some(error),
        model: None,
        usage: None,
        calls: Vec::new(),
        finished_at: now_rfc3339(),
    };
    let settings = ctx.config.current();
    // An error outcome: nothing is delivered, no route is needed.
    let conclusion = agent::conclude(&settings, work, outcome, None);
    let wakes_now = conclusion.wakes_now(work);
    let end = RunEnd::new(&settings.outbound, work, None);
    let record = record_outcome(cluster, &work.run_id, attempt, conclusion, &end);
    if !with_progress(cluster, message, || async {}, record).await {
        tracing::error!(run_id = %work.run_id, "a run given up could not be recorded; it stays queued");
    }
    done(message).await;
    if wakes_now {
        request_beat(cluster).await;
    }
}

async fn request_beat(cluster: &Cluster) {
    if let Err(err) = cluster.request_beat().await {
        tracing::warn!(%err, "cannot request a heartbeat");
    }
}

/// Publishes a run's outcome under an id of its own (a repeat is dropped), trying for up to an
/// ack wait: the model's answer is not thrown away because NATS was away for a moment, and a
/// publish the stream refuses for good (a limit an operator set) does not hold the run's slot
/// and session forever. Whether it landed.
async fn record_outcome(
    cluster: &Cluster,
    run_id: &str,
    attempt: Attempt,
    conclusion: Conclusion,
    end: &RunEnd<'_>,
) -> bool {
    let limit = cluster.max_payload().saturating_sub(1024);
    let mut fact = finished(run_id, conclusion, limit, end);
    let id = format!("finished-{run_id}{attempt}");
    let deadline = tokio::time::Instant::now() + cluster.ack_wait;
    let mut stripped = false;
    while tokio::time::Instant::now() < deadline {
        match cluster.publish(&fact, &id).await {
            Ok(_) => return true,
            Err(err @ ClusterError::TooLarge { .. }) if !stripped => {
                tracing::error!(%err, %run_id, "the outcome does not fit; recording it without its reply");
                if let Fact::Finished {
                    outcome,
                    job,
                    delivery,
                    webhooks,
                    ..
                } = &mut fact
                {
                    outcome.reply = None;
                    *webhooks = end.endpoint_messages(outcome);
                    *job = None;
                    *delivery = DeliveryRecord::Skipped {
                        reason: SkipReason::TooLarge,
                    };
                }
                stripped = true;
            }
            Err(err) => {
                tracing::error!(%err, %run_id, "cannot record the run's outcome; trying again");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
    false
}

/// The outcome as a fact the servers take in one message, with the webhooks `end` makes of
/// it and the stamp of the run's callbacks (each view fills its own: they take no room in the
/// fact). A reply too long for it is cut, in the record, the delivery and the webhooks alike,
/// and says so.
fn finished(run_id: &str, conclusion: Conclusion, limit: usize, end: &RunEnd<'_>) -> Fact {
    let webhooks = end.endpoint_messages(&conclusion.outcome);
    let mut fact = Fact::Finished {
        run_id: run_id.to_string(),
        outcome: conclusion.outcome,
        delivery: conclusion.delivery,
        summary: conclusion.summary_now,
        job: conclusion.job.map(Box::new),
        webhooks,
        callbacks: end.callbacks.clone(),
    };
    let mut keep = limit / 2;
    while fact.to_bytes().len() > limit && keep > 0 {
        if let Fact::Finished {
            outcome,
            job,
            webhooks,
            ..
        } = &mut fact
        {
            if let Some(reply) = &mut outcome.reply {
                cut(reply, keep);
            }
            if let Some(job) = job {
                cut(&mut job.text, keep);
            }
            *webhooks = end.endpoint_messages(outcome);
        }
        keep /= 2;
    }
    fact
}

/// What a run's end sends besides its record: the stamp of its callbacks when its mapping has
/// one, and the `run.finished` or `run.failed` webhooks of the endpoints subscribed. Nothing,
/// at no cost, when neither.
struct RunEnd<'a> {
    outbound: &'a OutboundSettings,
    work: &'a NewRun,
    stamp: Option<RunEndStamp>,
    callbacks: Option<RunEndStamp>,
}

impl<'a> RunEnd<'a> {
    fn new(outbound: &'a OutboundSettings, work: &'a NewRun, started_at: Option<&str>) -> Self {
        let mapping = work.admitted.mapping_id.as_deref();
        let has_callback = mapping.is_some_and(|m| outbound.callbacks.contains_key(m));
        let listened = [Event::RunFinished, Event::RunFailed]
            .into_iter()
            .any(|event| webhooks::has_subscribers(outbound, event, work));
        let stamp = (has_callback || listened).then(|| {
            let start = webhooks::RunStart {
                started_at,
                upstream_run_id: None,
            };
            RunEndStamp::new(outbound, work, start)
        });
        let callbacks = stamp.clone().filter(|_| has_callback);
        RunEnd {
            outbound,
            work,
            stamp,
            callbacks,
        }
    }

    /// The `run.finished` or `run.failed` webhooks of `outcome`.
    fn endpoint_messages(&self, outcome: &RunOutcome) -> Vec<WebhookMessage> {
        match &self.stamp {
            Some(stamp) => {
                webhooks::endpoint_end_messages(self.outbound, self.work, outcome, stamp)
            }
            None => Vec::new(),
        }
    }
}

/// Cuts `text` to at most `keep` bytes (at a character boundary) and says so.
fn cut(text: &mut String, keep: usize) {
    const NOTE: &str = " [cut: too long for one NATS message]";
    if text.len() <= keep {
        return;
    }
    let mut at = keep.saturating_sub(NOTE.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    text.truncate(at);
    text.push_str(NOTE);
}

/// Which attempt of a run a message of the runner consumer is: 1 for a new or released run,
/// one more for each operator's retry. Shown in the ids of the run's facts, `-a<n>` after the
/// first (the first's are as earlier versions wrote them): the stream drops a fact whose id it
/// has seen, and a retried run's start and outcome are new facts.
#[derive(Debug, Clone, Copy)]
struct Attempt(u32);

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 | 1 => Ok(()),
            n => write!(f, "-a{n}"),
        }
    }
}

/// Publishes an operator's retry of a run whose turn failed, as its next attempt, and waits for
/// this node's view to apply it: whether the run is queued again (false when the view shows it
/// changed since `record` was read). A retry the stream took counts as accepted when the view
/// lags past [`RETRY_APPLY_WAIT`]: the runner consumer runs it whatever this view shows.
pub(crate) async fn retry(
    cluster: &Cluster,
    store: &Store,
    record: &RunRecord,
) -> Result<bool, StoreError> {
    let attempt = record.attempts.saturating_add(1);
    let run_id = record.run.run_id.clone();
    let fact = Fact::Retried {
        run: record.run.clone(),
        attempt,
    };
    let sequence = cluster
        .publish(&fact, &format!("retry-{run_id}-{attempt}"))
        .await?;
    if !cluster.wait_applied(sequence, RETRY_APPLY_WAIT).await {
        tracing::warn!(run = %run_id, attempt, "retry published; this node's view has not applied it yet");
        return Ok(true);
    }
    let (id, now) = (run_id, attempt);
    let attempts = store
        .read(move |conn| {
            conn.query_row(
                "SELECT attempts FROM runs WHERE run_id = ?1",
                [&id],
                |row| row.get::<_, u32>(0),
            )
        })
        .await?;
    Ok(attempts == now)
}

/// How long a retry waits for this node's view to show it.
const RETRY_APPLY_WAIT: Duration = Duration::from_secs(10);

/// What a run holds while it runs: its session key's lock, and a slot of its mapping's lane
/// when the lane has a `maxConcurrent`.
struct Held<'a> {
    session: SessionLock<'a>,
    lane: Option<SessionLock<'a>>,
}

impl Held<'_> {
    async fn refresh(&self) {
        self.session.refresh().await;
        if let Some(lane) = &self.lane {
            lane.refresh().await;
        }
    }

    async fn release(&self) {
        self.session.release().await;
        if let Some(lane) = &self.lane {
            lane.release().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_text_fits_and_ends_on_a_character() {
        let mut text = "é".repeat(100);
        cut(&mut text, 60);
        assert!(text.len() <= 60, "{}", text.len());
        assert!(text.ends_with("[cut: too long for one NATS message]"));
        let mut short = "short".to_string();
        cut(&mut short, 60);
        assert_eq!(short, "short");
    }
}
