//! The embedded backend: accepted hooks are committed to the local store, and this process runs
//! them: the agent runner, heartbeats, and the outbox that delivers replies to chat channels.

use std::sync::Arc;

use super::admission::batches;
use super::admission::batches::{BatchItem, Joined};
use super::clock::{now_ms, now_rfc3339};
use super::context::{Context, Worker, WorkerName};
use super::outbound::outbox::{self, Lane};
use super::outbound::webhooks;
use super::retention;
use super::signals::Signals;
use super::store::records::{EventOutcome, NewEvent, NewRun};
use super::store::runs::{self, IdempotencyClaim, RunQueued, Stored};
use super::store::{StoreError, edge_marks};
use super::turns::retry::{self, Retry};
use super::turns::runner::Places;
use super::turns::{heartbeat, runner};
use crate::config::Settings;
use crate::config::outbound::{Event, OutboundSettings};
use crate::hook::WakeMode;

pub struct Embedded {
    ctx: Context,
    signals: Arc<Signals>,
    places: Places,
}

/// [`runs::queue_or_start`], with the run's callback kept waiting for its end when the run is
/// new (a repeat's callback is the first run's), and its `run.started` sent to the endpoints of
/// `outbound` when it is stored running; the last of the three is whether that message was
/// made pending (an endpoint subscribes), which gives the webhooks' worker work.
pub(super) fn queue_with_callback(
    conn: &rusqlite::Connection,
    run: &NewRun,
    claim: Option<&IdempotencyClaim>,
    started_at: Option<&str>,
    outbound: Option<&OutboundSettings>,
) -> rusqlite::Result<(RunQueued, Stored, bool)> {
    let (queued, stored) = runs::queue_or_start(conn, run, claim, started_at)?;
    let mut announced = false;
    if matches!(queued, RunQueued::New { .. }) {
        webhooks::await_callback(conn, run)?;
        if let (Stored::Running, Some(outbound)) = (stored, outbound) {
            announced = webhooks::on_event(conn, outbound, Event::RunStarted, run, None)?;
        }
    }
    Ok((queued, stored, announced))
}

impl Embedded {
    /// The configuration in force.
    pub(super) fn settings(&self) -> Arc<Settings> {
        self.ctx.config.current()
    }

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
                WorkerName::Webhooks,
                outbox::run(ctx.clone(), Arc::clone(&signals), Lane::Webhooks),
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
            let queued = match run.admitted.callback {
                None => self.ctx.store.queue_run(run, claim).await?,
                Some(_) => {
                    let store = &self.ctx.store;
                    store
                        .write(move |conn| {
                            queue_with_callback(conn, &run, claim.as_ref(), None, None)
                        })
                        .await?
                        .0
                }
            };
            self.signals.run_queued();
            return Ok(queued);
        };
        // The write and the start go on in a task of their own: a client that goes away while
        // the run is committed must not leave it stored `running` with nothing running it (and
        // its session key closed to later runs until a restart).
        let (ctx, signals) = (self.ctx.clone(), Arc::clone(&self.signals));
        let endpoints = webhooks::with_endpoints(&settings);
        let admitted = edge_marks::spawn_carried(async move {
            let started_at = now_rfc3339();
            let (queued, stored, announced, run) = ctx
                .store
                .write(move |conn| {
                    let outbound = endpoints.as_ref().map(|s| &s.outbound);
                    let (queued, stored, announced) = queue_with_callback(
                        conn,
                        &run,
                        claim.as_ref(),
                        Some(&started_at),
                        outbound,
                    )?;
                    Ok((queued, stored, announced, run))
                })
                .await?;
            if announced {
                signals.webhooks_ready.notify_one();
            }
            match stored {
                Stored::Running => reservation.start(&ctx, &signals, run.into_stored()),
                // Queued (or a repeat): the runner looks at the queue once the places are free.
                Stored::Waiting => {
                    drop(reservation);
                    signals.run_queued();
                }
            }
            Ok(queued)
        });
        admitted.await.map_err(|_| StoreError::Closed)?
    }

    /// Adds a batch mapping's request to its open batch, opening one with `open` (see
    /// [`batches::join`]), with its callback waiting for the batch's run to end; answers once
    /// durable.
    pub async fn join_batch(&self, item: BatchItem, open: bool) -> Result<Joined, StoreError> {
        let callback = webhooks::callback_of(&item.run);
        let join = self
            .ctx
            .store
            .write(move |conn| {
                let join = batches::join(conn, item, open, now_ms())?;
                webhooks::await_joined(conn, callback, &join.joined)?;
                Ok(join)
            })
            .await?;
        if let Joined::Added(added) = &join.joined
            && added.opened
        {
            self.signals.batch_opened.notify_one();
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

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::Poll;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::config::LiveConfig;
    use crate::gateway::store::Store;
    use crate::gateway::store::records::RunStatus;
    use crate::gateway::store::runs::tests::run;
    use crate::metrics::Metrics;

    /// Without a model provider a run ends as soon as it starts.
    fn embedded(dir: &std::path::Path) -> (Embedded, Store) {
        let path = dir.join("hookgate.json");
        let config = r#"{"gateway": {"auth": {"token": "a-gateway-token-0123456789"}}}"#;
        std::fs::write(&path, config).unwrap();
        let config = LiveConfig::open(path, Arc::new(|_| Ok(()))).unwrap();
        let store = Store::open(&dir.join("state"), true).unwrap();
        let ctx = Context::new(store.clone(), config, Metrics::default());
        (Embedded::start(ctx).0, store)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_started_at_admission_runs_when_its_client_goes_away() {
        let dir = tempfile::tempdir().unwrap();
        let (embedded, store) = embedded(dir.path());
        let deadline = Instant::now() + Duration::from_secs(10);
        // Admission starts runs once the runner has queued the runs a stop interrupted.
        let settings = embedded.ctx.config.current();
        while embedded
            .places
            .reserve(&settings, &embedded.signals, &run("probe"))
            .is_none()
        {
            assert!(Instant::now() < deadline, "the runner never resumed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Hold the writer, so that the run's commit waits for it.
        let held = store.hold_writer().await;
        // The request's admission is polled once, which hands the run to the writer, then
        // dropped, as hyper drops a handler whose client went away.
        {
            let mut admission = pin!(embedded.submit_run(run("r1"), None));
            std::future::poll_fn(|cx| {
                assert!(admission.as_mut().poll(cx).is_pending());
                Poll::Ready(())
            })
            .await;
        }
        held.let_go().await;
        loop {
            let status = store.run("r1").await.unwrap().map(|record| record.status);
            if status.is_some_and(|s| !matches!(s, RunStatus::Queued | RunStatus::Running)) {
                break;
            }
            assert!(Instant::now() < deadline, "the run stayed {status:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
