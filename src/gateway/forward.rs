//! The forward backend: accepted hooks are committed to the local store together with their
//! relay to the upstream gateway (one transaction), and the outbox relays them with retries.
//! Nothing runs here; the upstream runs agents and heartbeats.

use std::sync::Arc;

use super::context::{Context, Worker, WorkerName};
use super::outbound::outbox::{self, Lane, OutboxItem};
use super::outbound::relay::{AgentBody, Relayed, WakeBody};
use super::signals::Signals;
use super::store::StoreError;
use super::store::records::{EventOutcome, NewEvent, NewRun, RunStatus};
use super::store::runs::{self, IdempotencyClaim, RunQueued};
use crate::config::runtime::GatewayMode;
use crate::hook::WakeMode;

pub struct Forward {
    ctx: Context,
    signals: Arc<Signals>,
}

impl Forward {
    /// Starts the relay outbox.
    pub fn start(ctx: Context) -> (Forward, Vec<Worker>) {
        let signals = Arc::new(Signals::default());
        let workers = vec![
            Worker::spawn(
                WorkerName::Outbox,
                outbox::run(ctx.clone(), Arc::clone(&signals), Lane::Relays),
            ),
            Worker::spawn(
                WorkerName::Retention,
                super::store::retention::run(ctx.clone()),
            ),
        ];
        (Forward { ctx, signals }, workers)
    }

    pub fn signals(&self) -> &Signals {
        &self.signals
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

    /// Records a run as `forwarding` with its relay, which carries the client's idempotency key
    /// (else the run id) so that a repeated relay never makes a second upstream run.
    pub async fn submit_run(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
        idempotency_key: Option<&str>,
    ) -> Result<RunQueued, StoreError> {
        let relay_session_key = match &self.ctx.config.current().runtime.mode {
            GatewayMode::Forward(upstream) => upstream.relay_session_key,
            GatewayMode::Embedded => false,
        };
        let relay = OutboxItem::Relay(Relayed::Agent {
            body: AgentBody::of(&run.admitted, relay_session_key),
            idempotency_key: idempotency_key.unwrap_or(&run.run_id).to_string(),
        });
        let queued = self
            .ctx
            .store
            .write(move |conn| {
                let queued = runs::queue_run(conn, &run, claim.as_ref())?;
                if let RunQueued::New { run_id } = &queued {
                    conn.execute(
                        "UPDATE runs SET status = ?2 WHERE run_id = ?1",
                        rusqlite::params![run_id, RunStatus::Forwarding],
                    )?;
                    relay.insert(conn, Some(run_id))?;
                }
                Ok(queued)
            })
            .await?;
        self.signals.outbox_ready.notify_one();
        Ok(queued)
    }

    /// Relays a run the upstream refused again; whether there was one.
    pub async fn retry(&self, run_id: &str) -> Result<bool, StoreError> {
        let run_id = run_id.to_string();
        let retried = self
            .ctx
            .store
            .write(move |conn| outbox::resend_relay(conn, &run_id))
            .await?;
        self.signals.outbox_ready.notify_one();
        Ok(retried)
    }
}
