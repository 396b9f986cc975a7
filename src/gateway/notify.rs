//! Notify-only hooks (docs/hooks.md#notify-only-hooks): a notify mapping's message, rendered at
//! intake, stored as a run that needs no turn (no model is called: it is stored finished, `ok`,
//! its reply the message) together with the delivery of that reply, in one commit, before the
//! sender is answered. The outbox (on a NATS cluster, the delivery consumer) then sends it as
//! it sends any run's reply: retried alike, its outcome on the run's `delivery`.

use super::clock::now_rfc3339;
use super::nats::Fact;
use super::outbound::chat::resolve_route;
use super::outbound::outbox::OutboxItem;
use super::runtime::{Backend, Runtime};
use super::store::StoreError;
use super::store::records::{DeliveryJob, DeliveryRecord, NewRun, RunOutcome, RunStatus};
use super::store::runs::{self, IdempotencyClaim, RunQueued};

/// A notification admitted: its run record (the message as its prompt) and its claim.
pub struct NewNotice {
    pub run: NewRun,
    pub claim: Option<IdempotencyClaim>,
}

/// What a notification's run holds once stored: its outcome (`ok`, the message as its reply, no
/// model) and the delivery to make.
struct Notice {
    pub outcome: RunOutcome,
    pub job: DeliveryJob,
}

impl Notice {
    /// The run as it is stored and the reply to deliver, to the route its channel and
    /// recipient resolve to (the channel's default recipient when it names none).
    fn of(run: &NewRun, channels: &crate::config::runtime::ChannelSettings) -> Notice {
        let action = run.action();
        let route = resolve_route(run.channel(), action.to.clone(), None, channels);
        Notice {
            outcome: RunOutcome {
                status: RunStatus::Ok,
                reply: Some(action.message.clone()),
                summary: None,
                error: None,
                model: None,
                usage: None,
                calls: Vec::new(),
                finished_at: now_rfc3339(),
            },
            job: DeliveryJob {
                run_id: Some(run.run_id.clone()),
                agent: run.admitted.target_agent.clone(),
                channel: route.channel,
                to: route.to,
                text: action.message.clone(),
                // Nothing is told to a session when a notification is not delivered: no
                // agent's turn made it.
                summary: None,
                wake_now: false,
            },
        }
    }
}

/// Stores a notification's `run` finished with `outcome` and `job` pending, in the caller's
/// transaction: the embedded store's writer, or a NATS view applying its fact. A run already
/// stored is left as it is.
pub(super) fn store(
    conn: &rusqlite::Connection,
    run: &NewRun,
    outcome: &RunOutcome,
    job: &DeliveryJob,
) -> rusqlite::Result<()> {
    if runs::status(conn, &run.run_id)?.is_some() {
        return Ok(());
    }
    run.insert(conn)?;
    let pending = DeliveryRecord::Pending {
        channel: job.channel,
        to: job.to.clone(),
    };
    runs::finish(conn, &run.run_id, outcome, &pending, None)
}

impl Runtime {
    /// Stores a notification with its delivery (unless `claim` finds it a repeat of an earlier
    /// request's); answers once durable. Embedded and in forward mode (the upstream has no
    /// notify: hookgate delivers it itself) the run and its outbox row are one commit; on a
    /// NATS cluster one fact, which the delivery consumer hands to one node.
    pub async fn submit_notify(&self, notice: NewNotice) -> Result<RunQueued, StoreError> {
        let NewNotice { run, claim } = notice;
        let prepared = Notice::of(&run, &self.config.current().runtime.channels);
        if let Backend::Nats(cluster) = &self.backend {
            let fact = |run| Fact::Notified {
                run,
                outcome: prepared.outcome,
                job: Box::new(prepared.job),
            };
            return Ok(Box::pin(cluster.submit_notify(run, claim, fact)).await?);
        }
        let queued = self
            .store
            .write(move |conn| {
                if let Some(claim) = &claim {
                    if let Some(run_id) = runs::repeat_of(conn, claim)? {
                        return Ok(RunQueued::Replayed { run_id });
                    }
                    runs::record_claim(conn, claim, &run.run_id)?;
                }
                store(conn, &run, &prepared.outcome, &prepared.job)?;
                OutboxItem::Delivery(prepared.job).insert(conn, Some(&run.run_id))?;
                Ok(RunQueued::New { run_id: run.run_id })
            })
            .await?;
        let sender = match &self.backend {
            Backend::Forward(forward) => Some(forward.notices()),
            _ => self.signals(),
        };
        if let Some(signals) = sender {
            signals.outbox_ready.notify_one();
        }
        Ok(queued)
    }
}
