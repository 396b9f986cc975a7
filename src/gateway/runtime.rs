//! The gateway runtime: a thin façade over the one backend chosen at start (embedded, forward or
//! NATS). Intake hands it what it accepted; it answers once that is durable, and owns the
//! backend's workers.

use std::sync::Mutex;
use std::time::Duration;

use super::admission::batches::{BatchItem, Joined};
use super::admission::budget::{HeldBy, held};
use super::admission::lanes::{self, LaneError};
use super::admission::replay::{self, Claim, RecordedAnswer};
use super::clock::{now_ms, now_rfc3339};
use super::context::{Context, Worker, WorkerName};
use super::embedded::{Embedded, queue_with_callback};
use super::forward::Forward;
use super::nats::{Batches, Cluster, Fact};
use super::outbound::refusals::RefusalGate;
use super::outbound::webhook_api::Resent;
use super::outbound::webhooks;
use super::signals::Signals;
use super::store::records::{EventOutcome, NewEvent, NewRun};
use super::store::run_view::RunRecord;
use super::store::runs::{self, IdempotencyClaim, RunQueued};
use super::store::{Store, StoreError};
use super::turns::retry::Retry;
use crate::config::outbound::Event;
use crate::config::runtime::{GatewayMode, Route};
use crate::config::{HookSettings, LiveConfig};
use crate::hook::WakeMode;
use crate::metrics::Metrics;

/// Shared by the request handlers.
pub struct Runtime {
    pub(super) backend: Backend,
    /// The store: the embedded file, or on a NATS cluster this node's view of the stream.
    pub(super) store: Store,
    workers: Mutex<Vec<Worker>>,
    /// What the runtime counts at admission (a lane's refusals).
    pub(super) metrics: Metrics,
    /// The configuration in force: where a notification goes (`gateway::notify`).
    pub(super) config: LiveConfig,
    /// The bound on `request.refused` messages per endpoint (`gateway::refused`).
    pub(super) refusals: RefusalGate,
}

/// Which backend a [`Runtime`] runs on. The methods a hook request calls (admission, wakes,
/// runs, batches, deliveries) box their calls into the cluster or the forward client: a future
/// is as large as its largest branch, and theirs (several kilobytes of NATS and HTTP client
/// state) would otherwise be carried, and copied at each step up the handler's chain, by every
/// request an embedded server answers. A box is one allocation beside a network round trip.
pub(super) enum Backend {
    Embedded(Embedded),
    Forward(Forward),
    /// Boxed: a cluster handle is several kilobytes.
    Nats(Box<Cluster>),
}

/// Why a run cannot be retried.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    #[error("run not found")]
    NotFound,
    #[error("nothing of this run failed")]
    NothingFailed,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Runtime {
    /// Starts the backend the configuration names: the NATS cluster's when one is given, else
    /// forward mode's or the embedded one. The choice holds until the process ends (a reload
    /// that would change it is refused).
    pub fn start(
        store: Store,
        config: LiveConfig,
        cluster: Option<Cluster>,
        metrics: Metrics,
    ) -> Runtime {
        let mode = config.current().runtime.mode.clone();
        let ctx = Context::new(store.clone(), config.clone(), metrics.clone());
        let (backend, workers) = match (cluster, mode) {
            (Some(cluster), _) => {
                let workers = super::nats::start_workers(&ctx, &cluster);
                (Backend::Nats(Box::new(cluster)), workers)
            }
            (None, GatewayMode::Forward(_)) => {
                let (forward, workers) = Forward::start(ctx);
                (Backend::Forward(forward), workers)
            }
            (None, GatewayMode::Embedded) => {
                let (embedded, workers) = Embedded::start(ctx);
                (Backend::Embedded(embedded), workers)
            }
        };
        Runtime {
            backend,
            store,
            workers: Mutex::new(workers),
            metrics,
            config,
            refusals: RefusalGate::default(),
        }
    }

    /// The NATS cluster, when that is the backend.
    pub fn cluster(&self) -> Option<&Cluster> {
        match &self.backend {
            Backend::Nats(cluster) => Some(cluster.as_ref()),
            _ => None,
        }
    }

    /// The signals of the embedded and forward backends' workers; `None` on a NATS cluster.
    pub(super) fn signals(&self) -> Option<&Signals> {
        match &self.backend {
            Backend::Embedded(embedded) => Some(embedded.signals()),
            Backend::Forward(forward) => Some(forward.signals()),
            Backend::Nats(_) => None,
        }
    }

    fn lock_workers(&self) -> std::sync::MutexGuard<'_, Vec<Worker>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The names of workers that have stopped (they never should while serving), as logs and
    /// `/readyz` give them.
    pub fn dead_workers(&self) -> Vec<&'static str> {
        self.lock_workers()
            .iter()
            .filter(|worker| worker.handle.is_finished())
            .map(|worker| worker.name.as_str())
            .collect()
    }

    /// Stops the workers. The outbox first gets up to `grace` to finish the send it is making
    /// (a send cut off halfway is recorded as uncertain and never repeated); then everything is
    /// aborted. What the workers committed stays committed; runs in progress are resumed by the
    /// next start. On a NATS cluster the runs, heartbeats and deliveries in hand are given back
    /// for the other nodes to take at once (a send cut off halfway is again not repeated).
    pub async fn stop(&self, grace: Duration) {
        if let Backend::Nats(cluster) = &self.backend {
            // No more pulls; then what this node holds goes back to the cluster.
            for worker in self.lock_workers().iter() {
                worker.handle.abort();
            }
            cluster.stop().await;
            return;
        }
        if let Some(signals) = self.signals() {
            signals.stop();
        }
        if let Backend::Forward(forward) = &self.backend {
            forward.notices().stop();
        }
        // Forward mode's notification sender is an outbox worker too.
        let senders: Vec<_> = {
            let mut workers = self.lock_workers();
            let (senders, rest) = std::mem::take(&mut *workers)
                .into_iter()
                .partition(|w| matches!(w.name, WorkerName::Outbox | WorkerName::Delivery));
            *workers = rest;
            senders
        };
        let deadline = tokio::time::Instant::now() + grace;
        for mut sender in senders {
            if tokio::time::timeout_at(deadline, &mut sender.handle)
                .await
                .is_err()
            {
                sender.handle.abort();
            }
        }
        for worker in self.lock_workers().iter() {
            worker.handle.abort();
        }
    }

    /// Puts an admitted run in its mapping's lane ([`lanes::enter`]): its priority, or a refusal
    /// past `runs.maxQueued` (counted by mapping), unless `claim` finds the request a repeat of
    /// one admitted before, which queues nothing and is answered with its first run.
    pub async fn enter_lane(
        &self,
        hooks: &HookSettings,
        run: &mut NewRun,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<(), LaneError> {
        match lanes::enter(&self.store, hooks, run).await {
            Err(LaneError::Full(full)) => {
                if self.repeat_of(claim).await?.is_some() {
                    return Ok(());
                }
                self.metrics.count_lane_refusal(&full.mapping);
                Err(full.into())
            }
            entered => entered,
        }
    }

    /// The actions of the edge delivery being run (a private node's, docs/edge.md#exactly-once)
    /// already committed, by index: a delivery pulled again makes only the others. None (and
    /// no read) outside a delivery's scope.
    pub async fn edge_actions_taken(&self) -> Result<Vec<u32>, StoreError> {
        self.store.edge_actions_taken().await
    }

    /// The run that an earlier request with `claim`'s idempotency key was answered with, within
    /// the key's window: a repeat is answered as before, never refused by a limit. Costs one
    /// read of the store, or on a NATS cluster of its idempotency bucket; none without a claim.
    pub async fn repeat_of(
        &self,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Option<String>, StoreError> {
        let Some(claim) = claim else {
            return Ok(None);
        };
        if let Backend::Nats(cluster) = &self.backend {
            return Ok(Box::pin(cluster.repeat_of(claim)).await?);
        }
        let claim = claim.clone();
        self.store
            .read(move |conn| runs::repeat_of(conn, &claim))
            .await
    }

    /// Commits a wake; answers once durable.
    ///
    /// A wake that repeats the newest pending event of its session is [`EventOutcome::Coalesced`]
    /// and stores nothing new. On a NATS cluster the event is always published and each view
    /// coalesces it in stream order; the answer is read from this node's view at intake, so two
    /// identical wakes racing on two nodes may both be answered `queued`.
    pub async fn submit_wake(
        &self,
        event: NewEvent,
        mode: WakeMode,
    ) -> Result<EventOutcome, StoreError> {
        match &self.backend {
            Backend::Embedded(embedded) => embedded.submit_wake(event, mode).await,
            Backend::Forward(forward) => Box::pin(forward.submit_wake(event, mode)).await,
            Backend::Nats(cluster) => {
                let peek = event.clone();
                let repeats = self
                    .store
                    .read(move |conn| peek.repeats_newest_pending(conn))
                    .await?;
                Box::pin(cluster.submit_wake(event, mode)).await?;
                Ok(if repeats {
                    EventOutcome::Coalesced
                } else {
                    EventOutcome::Queued
                })
            }
        }
    }

    /// Queues a run (unless `claim` finds it a repeat of an earlier one); answers once durable.
    /// In forward mode the queued run is relayed upstream when its lane has room (see
    /// [`Forward::submit_run`]).
    pub async fn submit_run(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
    ) -> Result<RunQueued, StoreError> {
        match &self.backend {
            Backend::Embedded(embedded) => embedded.submit_run(run, claim).await,
            Backend::Forward(forward) => Box::pin(forward.submit_run(run, claim)).await,
            Backend::Nats(cluster) => Ok(Box::pin(cluster.submit_run(run, claim)).await?),
        }
    }

    /// Stores a run `held` by the budget `by` (unless `claim` finds it a repeat): the runner
    /// never starts it until it is released ([`Runtime::release_held`]). On a NATS cluster it
    /// is a fact of its own, which the runner consumer does not read; in forward mode it is
    /// stored with its relay, waiting ([`Forward::hold_run`]).
    pub(super) async fn hold_run(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
        by: HeldBy,
    ) -> Result<RunQueued, StoreError> {
        let embedded = match &self.backend {
            Backend::Nats(cluster) => {
                let settings = self.config.current();
                let held = cluster.hold_run(run, claim, by, &settings.outbound);
                return Ok(Box::pin(held).await?);
            }
            Backend::Forward(forward) => return Box::pin(forward.hold_run(run, claim, by)).await,
            Backend::Embedded(embedded) => embedded,
        };
        let endpoints = webhooks::with_endpoints(&embedded.settings());
        let (queued, announced) = self
            .store
            .write(move |conn| {
                let (queued, _, _) = queue_with_callback(conn, &run, claim.as_ref(), None, None)?;
                let mut announced = false;
                if let RunQueued::New { run_id } = &queued {
                    held::hold(conn, run_id, &by)?;
                    if let Some(settings) = &endpoints {
                        announced = webhooks::on_event(
                            conn,
                            &settings.outbound,
                            Event::RunHeld,
                            &run,
                            None,
                        )?;
                    }
                }
                Ok((queued, announced))
            })
            .await?;
        if announced {
            embedded.signals().webhooks_ready.notify_one();
        }
        Ok(queued)
    }

    /// Adds a batch mapping's request to the open batch of its mapping and session key, and
    /// with `open` opens one when there is none (docs/runtime.md "Batches"); answers once
    /// durable (on a NATS cluster, once its item is on the stream). In forward mode the closed
    /// batch is relayed as one agent request ([`Forward::join_batch`]).
    pub async fn join_batch(&self, item: BatchItem, open: bool) -> Result<Joined, StoreError> {
        match &self.backend {
            Backend::Embedded(embedded) => embedded.join_batch(item, open).await,
            Backend::Forward(forward) => Box::pin(forward.join_batch(item, open)).await,
            Backend::Nats(cluster) => {
                let (cluster, view) = (Cluster::clone(cluster), self.store.clone());
                Ok(Box::pin(Batches::join_detached(cluster, view, item, open)).await?)
            }
        }
    }

    /// Sends the failed callback or webhook `id` again, its `webhook-id` unchanged and its
    /// retry window restarted (`POST /api/outbound/{id}/retry`). On a NATS cluster the retry
    /// is a fact every view applies, answered once this node's view has (or after 2 s).
    pub async fn retry_outbound(&self, id: i64) -> Result<Resent, StoreError> {
        let resent = match &self.backend {
            Backend::Nats(cluster) => {
                super::nats::webhooks::retry(cluster, &self.store, id).await?
            }
            Backend::Embedded(_) | Backend::Forward(_) => {
                super::outbound::webhook_api::retry(&self.store, id).await?
            }
        };
        if let (Resent::Resent, Backend::Embedded(embedded)) = (resent, &self.backend) {
            embedded.signals().webhooks_ready.notify_one();
        }
        Ok(resent)
    }

    /// Recovers what failed of a run, once the operator mended the cause ([`Retry`]): its turn
    /// run again, its reply or its relay sent again. On a NATS cluster a failed turn runs again
    /// (a fact on the stream, which any node's runner takes); a given-up reply is not sent
    /// again there.
    pub async fn retry_run(&self, run_id: &str) -> Result<Retry, RetryError> {
        let run = self.store.run(run_id).await?.ok_or(RetryError::NotFound)?;
        let retry = self.retry_offered(&run).ok_or(RetryError::NothingFailed)?;
        let retried = match &self.backend {
            Backend::Embedded(embedded) => embedded.retry(run_id, retry).await?,
            Backend::Forward(forward) => forward.retry(run_id).await?,
            Backend::Nats(cluster) => match retry {
                Retry::Run => super::nats::run::retry(cluster, &self.store, &run).await?,
                Retry::Delivery | Retry::Relay => false,
            },
        };
        // False when the run changed since it was read (another retry took it).
        retried.then_some(retry).ok_or(RetryError::NothingFailed)
    }

    /// What [`Runtime::retry_run`] would do to `run` here; `None` when it would do nothing.
    /// The embedded backend runs turns and sends replies; forward mode relays; a NATS cluster
    /// runs turns.
    pub fn retry_offered(&self, run: &RunRecord) -> Option<Retry> {
        let retry = Retry::of(run)?;
        let here = match &self.backend {
            Backend::Embedded(_) => matches!(retry, Retry::Run | Retry::Delivery),
            Backend::Forward(_) => retry == Retry::Relay,
            Backend::Nats(_) => retry == Retry::Run,
        };
        here.then_some(retry)
    }

    /// The main session's route as its owner set it, if they did.
    pub async fn owner_route(&self, agent: &str) -> Result<Option<Route>, StoreError> {
        let agent = agent.to_string();
        self.store
            .read(move |conn| runs::owner_route(conn, &agent))
            .await
    }

    /// Sets the main session's route (`None` clears it): where `channel: last` replies and
    /// heartbeat replies go. Only the operator sets it; no hook run changes it.
    pub async fn set_owner_route(
        &self,
        agent: &str,
        route: Option<Route>,
    ) -> Result<(), StoreError> {
        let (agent, at) = (agent.to_string(), now_rfc3339());
        if let Backend::Nats(cluster) = &self.backend {
            let id = format!("route-{}", uuid::Uuid::new_v4());
            let sequence = cluster
                .publish(&Fact::RouteSet { agent, route, at }, &id)
                .await?;
            // Read-your-writes for the operator: this node's view shows the route (and its runs
            // use it) once the answer is given. Other nodes follow within their view's lag.
            cluster
                .wait_applied(sequence, Duration::from_secs(10))
                .await;
            return Ok(());
        }
        self.store
            .write(move |conn| runs::set_owner_route(conn, &agent, route.as_ref(), &at))
            .await
    }

    /// Claims a signed delivery's id before it is processed (see [`replay::claim`]), in the
    /// cluster's replay bucket when there is one, else in the store.
    pub async fn claim_delivery(&self, key: &str) -> Result<Claim, StoreError> {
        if let Backend::Nats(cluster) = &self.backend {
            return Ok(Box::pin(cluster.claim_delivery(key)).await?);
        }
        let key = key.to_string();
        self.store
            .write_unmarked(move |conn| replay::claim(conn, &key, now_ms()))
            .await
    }

    /// Records the answer of a claimed delivery, for its redeliveries.
    pub async fn answer_delivery(
        &self,
        key: String,
        answer: RecordedAnswer,
    ) -> Result<(), StoreError> {
        if let Backend::Nats(cluster) = &self.backend {
            return Ok(Box::pin(cluster.answer_delivery(&key, &answer)).await?);
        }
        self.store
            .write(move |conn| replay::answer(conn, &key, &answer))
            .await
    }

    /// Gives a claimed delivery up, so that a retry is processed.
    pub async fn release_delivery(&self, key: String) -> Result<(), StoreError> {
        if let Backend::Nats(cluster) = &self.backend {
            return Ok(Box::pin(cluster.release_delivery(&key)).await?);
        }
        self.store
            .write_unmarked(move |conn| replay::release(conn, &key))
            .await
    }
}
