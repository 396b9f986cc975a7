//! The gateway runtime: what an accepted wake or run sets in motion, and the workers that carry
//! it out (agent runner, heartbeats, outbox), or, in forward mode, relay it upstream.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::deliveries::{self, Claim, RecordedAnswer};
use super::heartbeat::HeartbeatTrigger;
use super::nats::Cluster;
use super::runs::OutboxEntry;
use super::{IdempotencyClaim, NewEvent, NewRun, RunQueued, Store, StoreError};
use crate::config::LiveConfig;
use crate::config::runtime::GatewayMode;
use crate::hook::{AdmittedRun, WakeMode};

/// Shared by the workers and the request handlers.
pub struct Runtime {
    pub store: Store,
    pub config: LiveConfig,
    /// For the model provider, chat channels and the upstream gateway.
    pub http: reqwest::Client,
    /// Signalled when a run is queued.
    pub runs_queued: Notify,
    /// Signalled when the outbox has something new.
    pub outbox_ready: Notify,
    pub heartbeat: HeartbeatTrigger,
    /// The NATS cluster, when `gateway.store` is nats; `store` is then this node's view of it.
    pub cluster: Option<Cluster>,
    workers: Mutex<Vec<(&'static str, JoinHandle<()>)>>,
    stopping: std::sync::atomic::AtomicBool,
}

impl Runtime {
    /// Starts the workers of the configured mode: in embedded mode the runner, heartbeats and the
    /// outbox; in forward mode the outbox alone; on a NATS cluster the view's projection and the
    /// workers that pull runs, heartbeats and deliveries from the cluster.
    pub fn start(store: Store, config: LiveConfig, cluster: Option<Cluster>) -> Arc<Runtime> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        let forward = matches!(config.current().runtime.mode, GatewayMode::Forward { .. });
        let runtime = Arc::new(Runtime {
            store,
            config,
            http,
            runs_queued: Notify::new(),
            outbox_ready: Notify::new(),
            heartbeat: HeartbeatTrigger::default(),
            cluster: cluster.clone(),
            workers: Mutex::new(Vec::new()),
            stopping: std::sync::atomic::AtomicBool::new(false),
        });
        if let Some(cluster) = &cluster {
            *runtime.lock_workers() = super::nats::start_workers(&runtime, cluster);
            return runtime;
        }
        let mut workers = vec![(
            "outbox",
            tokio::spawn(super::outbox::run(Arc::clone(&runtime))),
        )];
        if !forward {
            workers.push((
                "runner",
                tokio::spawn(super::runner::run(Arc::clone(&runtime))),
            ));
            workers.push((
                "heartbeat",
                tokio::spawn(super::heartbeat::run(Arc::clone(&runtime))),
            ));
        }
        *runtime.lock_workers() = workers;
        runtime
    }

    fn lock_workers(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, JoinHandle<()>)>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The names of workers that have stopped (they never should while serving).
    pub fn dead_workers(&self) -> Vec<&'static str> {
        self.lock_workers()
            .iter()
            .filter(|(_, handle)| handle.is_finished())
            .map(|(name, _)| *name)
            .collect()
    }

    /// Stops the workers. The outbox first gets up to `grace` to finish the send it is making
    /// (a send cut off halfway is recorded as uncertain and never repeated); then everything is
    /// aborted. What the workers committed stays committed; runs in progress are resumed by the
    /// next start. On a NATS cluster the runs, heartbeats and deliveries in hand are given back
    /// for the other nodes to take at once (a send cut off halfway is again not repeated).
    pub async fn stop(&self, grace: std::time::Duration) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(cluster) = &self.cluster {
            // No more pulls; then what this node holds goes back to the cluster.
            for (_, handle) in self.lock_workers().iter() {
                handle.abort();
            }
            cluster.stop().await;
            return;
        }
        self.outbox_ready.notify_one();
        let outbox = {
            let mut workers = self.lock_workers();
            let at = workers.iter().position(|(name, _)| *name == "outbox");
            at.map(|at| workers.remove(at).1)
        };
        if let Some(mut outbox) = outbox {
            if tokio::time::timeout(grace, &mut outbox).await.is_err() {
                outbox.abort();
            }
        }
        for (_, handle) in self.lock_workers().iter() {
            handle.abort();
        }
    }

    /// Whether [`Runtime::stop`] has begun.
    pub fn stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn forwarding(&self) -> bool {
        matches!(
            self.config.current().runtime.mode,
            GatewayMode::Forward { .. }
        )
    }

    /// Commits a wake; answers once durable. `now` asks for a heartbeat (embedded) or is passed
    /// upstream (forward).
    pub async fn submit_wake(&self, event: NewEvent, mode: WakeMode) -> Result<(), StoreError> {
        if let Some(cluster) = &self.cluster {
            return Ok(cluster.submit_wake(event, mode).await?);
        }
        if self.forwarding() {
            let entry = OutboxEntry {
                kind: "forward-wake",
                run_id: None,
                payload: json!({"body": {"text": event.text, "mode": mode.as_str()}}),
                created_at: event.at.clone(),
                now_ms: now_ms(),
            };
            self.store
                .write(move |conn| {
                    let seq = event.insert(conn)?;
                    // Handled upstream, not by a heartbeat here.
                    conn.execute("UPDATE events SET consumed = 1 WHERE seq = ?1", [seq])?;
                    entry.insert(conn)?;
                    Ok(())
                })
                .await?;
            self.outbox_ready.notify_one();
            return Ok(());
        }
        self.store.append_event(event).await?;
        if mode == WakeMode::Now {
            self.heartbeat.request();
        }
        Ok(())
    }

    /// Queues a run (unless it repeats an earlier one); answers once durable. In forward mode
    /// the run is relayed upstream instead, with the client's idempotency key (else the run id)
    /// so that retried relays never make a second upstream run.
    pub async fn submit_run(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
        admitted: &AdmittedRun,
        idempotency_key: Option<&str>,
    ) -> Result<RunQueued, StoreError> {
        if let Some(cluster) = &self.cluster {
            return Ok(cluster.submit_run(run, claim).await?);
        }
        if !self.forwarding() {
            let queued = self.store.queue_run(run, claim).await?;
            self.runs_queued.notify_one();
            return Ok(queued);
        }
        let entry = OutboxEntry {
            kind: "forward-run",
            run_id: Some(run.run_id.clone()),
            payload: json!({
                "body": forward_body(admitted),
                "idempotencyKey": idempotency_key.unwrap_or(&run.run_id),
            }),
            created_at: run.created_at.clone(),
            now_ms: now_ms(),
        };
        let queued = self
            .store
            .write(move |conn| {
                let queued = super::store::queue_run(conn, &run, claim.as_ref())?;
                if let RunQueued::New { run_id } = &queued {
                    conn.execute(
                        "UPDATE runs SET status = 'forwarding' WHERE run_id = ?1",
                        [run_id],
                    )?;
                    entry.insert(conn)?;
                }
                Ok(queued)
            })
            .await?;
        self.outbox_ready.notify_one();
        Ok(queued)
    }
}

impl Runtime {
    /// Claims a signed delivery's id before it is processed (see [`deliveries::claim`]), in the
    /// cluster's replay bucket when there is one, else in the store.
    pub async fn claim_delivery(&self, key: &str) -> Result<Claim, StoreError> {
        if let Some(cluster) = &self.cluster {
            return Ok(cluster.claim_delivery(key).await?);
        }
        let key = key.to_string();
        self.store
            .write(move |conn| deliveries::claim(conn, &key, now_ms()))
            .await
    }

    /// Records the answer of a claimed delivery, for its redeliveries.
    pub async fn answer_delivery(
        &self,
        key: String,
        answer: RecordedAnswer,
    ) -> Result<(), StoreError> {
        if let Some(cluster) = &self.cluster {
            return Ok(cluster.answer_delivery(&key, &answer).await?);
        }
        self.store
            .write(move |conn| deliveries::answer(conn, &key, &answer, now_ms()))
            .await
    }

    /// Gives a claimed delivery up, so that a retry is processed.
    pub async fn release_delivery(&self, key: String) -> Result<(), StoreError> {
        if let Some(cluster) = &self.cluster {
            return Ok(cluster.release_delivery(&key).await?);
        }
        self.store
            .write(move |conn| deliveries::release(conn, &key))
            .await
    }
}

/// The `/hooks/agent` body an upstream gateway receives for a run accepted here.
pub fn forward_body(run: &AdmittedRun) -> Value {
    let mut body = json!({
        "message": run.message,
        "name": run.name,
        "wakeMode": run.wake_mode.as_str(),
        "deliver": run.deliver,
        "channel": run.channel.as_str(),
    });
    let optional = [
        ("agentId", run.agent_id.clone()),
        (
            "sessionKey",
            run.session_key_chosen.then(|| run.session_key.clone()),
        ),
        ("to", run.to.clone()),
        ("model", run.model.clone()),
        ("thinking", run.thinking.clone()),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            body[key] = json!(value);
        }
    }
    if let Some(timeout) = run.timeout_seconds {
        body["timeoutSeconds"] = json!(timeout);
    }
    body
}

/// RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
