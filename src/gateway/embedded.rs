//! The embedded backend: accepted hooks are committed to the local store, and this process runs
//! them: the agent runner, heartbeats, and the outbox that delivers replies to chat channels.

use std::sync::Arc;

use super::batches::{BatchItem, Joined};
use super::clock::{now_ms, now_rfc3339};
use super::context::{Context, Worker, WorkerName};
use super::outbox::{self, Lane};
use super::records::{EventOutcome, NewEvent, NewRun};
use super::retry::{self, Retry};
use super::runner::Places;
use super::runs::{self, IdempotencyClaim, RunQueued, Stored};
use super::signals::Signals;
use super::store::StoreError;
use super::{batches, heartbeat, retention, runner};
use crate::hook::WakeMode;

pub struct Embedded {
    ctx: Context,
    signals: Arc<Signals>,
    places: Places,
}

impl Embedded {
    /// Starts the runner, heartbeats and the delivery outbox.
    pub fn start(ctx: Context) -> (Embedded, Vec<Worker>) {
        let signals = Arc::new(Signals::default());
        let places = Places::new(ctx.config.current().runtime.max_concurrent);
        let workers = vec![
            Worker::spawn(
                WorkerName::Outbox,
                outbox::run(ctx.clone(), Arc::clone(&signals), Lane::Deliveries),
            ),
            Worker::spawn(
                WorkerName::Runner,
                runner::run(ctx.clone(), Arc::clone(&signals), places.clone()),
            ),
            Worker::spawn(
                WorkerName::Heartbeat,
                heartbeat::run(ctx.clone(), Arc::clone(&signals)),
            ),
            Worker::spawn(WorkerName::Retention, retention::run(ctx.clone())),
            Worker::spawn(
                WorkerName::Batches,
                batches::closer(ctx.clone(), Arc::clone(&signals)),
            ),
        ];
        (
            Embedded {
                ctx,
                signals,
                places,
            },
            workers,
        )
    }

    pub fn signals(&self) -> &Signals {
        &self.signals
    }

    /// Commits a wake's event; `now` asks for a heartbeat.
    pub async fn submit_wake(
        &self,
        event: NewEvent,
        mode: WakeMode,
    ) -> Result<EventOutcome, StoreError> {
        let outcome = self
            .ctx
            .store
            .write(move |conn| event.append_wake(conn))
            .await?;
        if mode == WakeMode::Now {
            self.signals.heartbeat.request();
        }
        Ok(outcome)
    }

    /// Queues a run (unless `claim` finds it a repeat). When the runner has a slot, the run's
    /// session key and a place in its lane free, and nothing waits before it, the run is stored
    /// `running` instead and started here: the runner would start it next anyway, and this
    /// saves its read of the queue, the claim's commit and the read of the run it claimed
    /// (about 100k instructions a run, profiled under /hooks/agent).
    pub async fn submit_run(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
    ) -> Result<RunQueued, StoreError> {
        let settings = self.ctx.config.current();
        let Some(reservation) = self.places.reserve(&settings, &self.signals, &run) else {
            let queued = self.ctx.store.queue_run(run, claim).await?;
            self.signals.run_queued();
            return Ok(queued);
        };
        let started_at = now_rfc3339();
        let (queued, stored, run) = self
            .ctx
            .store
            .write(move |conn| {
                let (queued, stored) =
                    runs::queue_or_start(conn, &run, claim.as_ref(), Some(&started_at))?;
                Ok((queued, stored, run))
            })
            .await?;
        match stored {
            Stored::Running => reservation.start(&self.ctx, &self.signals, run.into_stored()),
            // Queued (or a repeat): the runner looks at the queue once the places are free.
            Stored::Waiting => {
                drop(reservation);
                self.signals.run_queued();
            }
        }
        Ok(queued)
    }

    /// Adds a batch mapping's request to its open batch, opening one with `open` (see
    /// [`batches::join`]); answers once durable.
    pub async fn join_batch(&self, item: BatchItem, open: bool) -> Result<Joined, StoreError> {
        let join = self
            .ctx
            .store
            .write(move |conn| batches::join(conn, item, open, now_ms()))
            .await?;
        if let Joined::Added(added) = &join.joined {
            if added.opened {
                self.signals.batch_opened.notify_one();
            }
        }
        // Filled, or one past its window closed on the way: its run is queued. Otherwise the
        // runner has nothing new to start, and waking it would cost a pass over the queue.
        if join.queued {
            self.signals.run_queued();
        }
        Ok(join.joined)
    }

    /// Runs a failed turn again or resends a given-up reply ([`Retry`]); whether there was one.
    pub async fn retry(&self, run_id: &str, what: Retry) -> Result<bool, StoreError> {
        let settings = self.ctx.config.current();
        let run_id = run_id.to_string();
        let retried = self
            .ctx
            .store
            .write(move |conn| match what {
                Retry::Run => retry::rerun(conn, &run_id),
                Retry::Delivery => {
                    outbox::resend_delivery(conn, &run_id, &settings.runtime.channels)
                }
                // Relays are forward mode's.
                Retry::Relay => Ok(false),
            })
            .await?;
        match what {
            Retry::Run => self.signals.run_queued(),
            Retry::Delivery | Retry::Relay => self.signals.outbox_ready.notify_one(),
        }
        Ok(retried)
    }
}
