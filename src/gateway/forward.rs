//! The forward backend: accepted wakes are committed to the local store together with their
//! relay to the upstream gateway (one transaction); accepted runs are queued, held or batched
//! as on the embedded runtime, and forward mode's worker ([`relays`]) relays each queued run
//! when its lane has room, with retries. Nothing runs here; the upstream runs agents and
//! heartbeats. A run's callback and lifecycle webhooks are written as on the embedded runtime,
//! its end's from the upstream's completion (docs/outbound.md#forward-mode).

use std::sync::Arc;

use super::admission::batches::{self, BatchItem, Joined};
use super::admission::budget::{HeldBy, held};
use super::clock::now_ms;
use super::context::{Context, Worker, WorkerName};
use super::outbound::outbox::{self, Lane, OutboxItem};
use super::outbound::relay::{AgentBody, Relayed, WakeBody};
use super::outbound::relays;
use super::outbound::webhooks;
use super::signals::Signals;
use super::store::StoreError;
use super::store::records::{EventOutcome, NewEvent, NewRun};
use super::store::runs::{self, IdempotencyClaim, RunQueued};
use crate::config::outbound::Event;
use crate::config::runtime::GatewayMode;
use crate::hook::WakeMode;

pub struct Forward {
    ctx: Context,
    signals: Arc<Signals>,
    /// The notification sender's own: a wake meant for the relays is never taken by it.
    notices: Arc<Signals>,
}

impl Forward {
    /// Starts the relays' worker and the batches' closer.
    pub fn start(ctx: Context) -> (Forward, Vec<Worker>) {
        let signals = Arc::new(Signals::default());
        let notices = Arc::new(Signals::default());
        let workers = vec![
            Worker::spawn(
                WorkerName::Outbox,
                relays::run(ctx.clone(), Arc::clone(&signals)),
            ),
            // Notifications: the upstream has no notify action, so hookgate sends them itself
            // (docs/hooks.md#notify-only-hooks).
            Worker::spawn(
                WorkerName::Delivery,
                outbox::run(ctx.clone(), Arc::clone(&notices), Lane::Deliveries),
            ),
            Worker::spawn(
                WorkerName::Batches,
                batches::closer(ctx.clone(), Arc::clone(&signals)),
            ),
            Worker::spawn(WorkerName::Retention, super::retention::run(ctx.clone())),
            // Callbacks and lifecycle webhooks of the relayed runs' completions.
            Worker::spawn(
                WorkerName::Webhooks,
                outbox::run(ctx.clone(), Arc::clone(&signals), Lane::Webhooks),
            ),
        ];
        let forward = Forward {
            ctx,
            signals,
            notices,
        };
        (forward, workers)
    }

    pub fn signals(&self) -> &Signals {
        &self.signals
    }

    /// The signals of the worker that sends notifications.
    pub fn notices(&self) -> &Signals {
        &self.notices
    }

    /// Commits a wake's event (marked consumed: the upstream's heartbeat handles it, and
    /// coalesces it) with its relay; always [`EventOutcome::Queued`] here.
    pub async fn submit_wake(
        &self,
        event: NewEvent,
        mode: WakeMode,
    ) -> Result<EventOutcome, StoreError> {
        let relay = OutboxItem::Relay(Relayed::Wake {
            body: WakeBody {
                text: event.text.clone(),
                mode,
            },
        });
        self.ctx
            .store
            .write(move |conn| {
                let seq = event.insert(conn)?;
                conn.execute("UPDATE events SET consumed = 1 WHERE seq = ?1", [seq])?;
                relay.insert(conn, None)
            })
            .await?;
        self.signals.outbox_ready.notify_one();
        Ok(EventOutcome::Queued)
    }

    /// Queues a run (unless `claim` finds it a repeat of an earlier one) with its relay,
    /// waiting for the run's lane ([`relays::dispatch`]); answers once durable. The relay
    /// carries the run id as the idempotency key that keeps a repeated relay from making a
    /// second upstream run (a repeat of the client's own key never gets here: `claim` answers
    /// it with its first run).
    pub async fn submit_run(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
    ) -> Result<RunQueued, StoreError> {
        let relay = self.relay_of(&run);
        let queued = self
            .ctx
            .store
            .write(move |conn| {
                let queued = runs::queue_run(conn, &run, claim.as_ref())?;
                if let RunQueued::New { run_id } = &queued {
                    relay.insert_waiting(conn, run_id)?;
                    webhooks::await_callback(conn, &run)?;
                }
                Ok(queued)
            })
            .await?;
        self.signals.run_queued();
        Ok(queued)
    }

    /// Stores `run` held by the budget `by` (unless `claim` finds it a repeat), with its relay
    /// waiting: a release queues it, and it is relayed as any queued run.
    pub async fn hold_run(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
        by: HeldBy,
    ) -> Result<RunQueued, StoreError> {
        let relay = self.relay_of(&run);
        let endpoints = webhooks::with_endpoints(&self.ctx.config.current());
        self.ctx
            .store
            .write(move |conn| {
                let queued = runs::queue_run(conn, &run, claim.as_ref())?;
                if let RunQueued::New { run_id } = &queued {
                    held::hold(conn, run_id, &by)?;
                    relay.insert_waiting(conn, run_id)?;
                    webhooks::await_callback(conn, &run)?;
                    if let Some(settings) = &endpoints {
                        webhooks::on_event(conn, &settings.outbound, Event::RunHeld, &run, None)?;
                    }
                }
                Ok(queued)
            })
            .await
    }

    /// Adds a batch mapping's request to its open batch, opening one with `open` (see
    /// [`batches::join`]); answers once durable. The request that opens a batch stores the
    /// batch's relay, waiting: the closed batch is relayed as one agent request with the
    /// batch's prompt. Each request's callback waits for the relay's completion.
    pub async fn join_batch(&self, item: BatchItem, open: bool) -> Result<Joined, StoreError> {
        let relay = self.relay_of(&item.run);
        let callback = webhooks::callback_of(&item.run);
        let join = self
            .ctx
            .store
            .write(move |conn| {
                let join = batches::join(conn, item, open, now_ms())?;
                webhooks::await_joined(conn, callback, &join.joined)?;
                if let Joined::Added(added) = &join.joined
                    && added.opened
                {
                    relay.insert_waiting(conn, &added.run_id)?;
                }
                Ok(join)
            })
            .await?;
        if matches!(&join.joined, Joined::Added(added) if added.opened) {
            self.signals.batch_opened.notify_one();
        }
        if join.queued {
            self.signals.run_queued();
        }
        Ok(join.joined)
    }

    /// The relay of an admitted run, with what the request and mapping set.
    fn relay_of(&self, run: &NewRun) -> OutboxItem {
        let relay_session_key = match &self.ctx.config.current().runtime.mode {
            GatewayMode::Forward(upstream) => upstream.relay_session_key,
            GatewayMode::Embedded => false,
        };
        OutboxItem::Relay(Relayed::Agent {
            body: Box::new(AgentBody::of(&run.admitted, relay_session_key)),
            idempotency_key: run.run_id.clone(),
        })
    }

    /// Relays a run the upstream refused again; whether there was one.
    pub async fn retry(&self, run_id: &str) -> Result<bool, StoreError> {
        let run_id = run_id.to_string();
        let retried = self
            .ctx
            .store
            .write(move |conn| relays::resend_relay(conn, &run_id))
            .await?;
        self.signals.outbox_ready.notify_one();
        Ok(retried)
    }
}
