//! What every backend's workers use: the store (a NATS node's view of the stream, on a cluster),
//! the configuration in force, one HTTP client for model providers, chat channels and the upstream
//! gateway, and the metrics. Cheap to clone: each part is a shared handle.

use std::future::Future;

use tokio::task::JoinHandle;

use super::store::Store;
use crate::config::LiveConfig;
use crate::metrics::Metrics;

/// A backend's long-running task, with its name.
pub struct Worker {
    pub name: WorkerName,
    pub handle: JoinHandle<()>,
}

impl Worker {
    /// Runs `task` on the runtime as the worker `name`.
    pub fn spawn(name: WorkerName, task: impl Future<Output = ()> + Send + 'static) -> Worker {
        Worker {
            name,
            handle: tokio::spawn(task),
        }
    }
}

/// What a backend's workers do: one of each at most per backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerName {
    /// Sends replies to chat channels (embedded) or relays to the upstream (forward).
    Outbox,
    /// Runs queued agent turns (on a NATS cluster: takes them from their consumer).
    Runner,
    /// Runs the main session's heartbeat turns (on a NATS cluster: takes their requests).
    Heartbeat,
    /// Deletes finished work past `gateway.retention`.
    Retention,
    /// On a NATS cluster: applies the stream to this node's view.
    Projection,
    /// On a NATS cluster: takes deliveries from their consumer; in forward mode, sends
    /// notifications from the outbox.
    Delivery,
    /// On a NATS cluster: asks for the periodic heartbeats.
    HeartbeatClock,
    /// On a NATS cluster: releases held runs as their budgets make room.
    Release,
    /// Closes batches whose window ended.
    Batches,
    /// Sends callbacks and lifecycle webhooks from the outbox.
    Webhooks,
}

impl WorkerName {
    /// The name in logs and in `/readyz`'s `runtime workers stopped: ...`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerName::Outbox => "outbox",
            WorkerName::Runner => "runner",
            WorkerName::Heartbeat => "heartbeat",
            WorkerName::Retention => "retention",
            WorkerName::Projection => "projection",
            WorkerName::Delivery => "delivery",
            WorkerName::HeartbeatClock => "heartbeat-clock",
            WorkerName::Release => "release",
            WorkerName::Batches => "batches",
            WorkerName::Webhooks => "webhooks",
        }
    }
}

impl std::fmt::Display for WorkerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone)]
pub struct Context {
    pub store: Store,
    pub config: LiveConfig,
    pub http: reqwest::Client,
    /// The client of callbacks and lifecycle webhooks: only to addresses `outbound.allowHosts`
    /// permits, checked as it connects.
    pub webhooks: reqwest::Client,
    pub metrics: Metrics,
}

impl Context {
    pub fn new(store: Store, config: LiveConfig, metrics: Metrics) -> Context {
        let http = reqwest::Client::builder()
            .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        let webhooks = super::outbound::webhook_send::client(config.clone());
        Context {
            store,
            config,
            http,
            webhooks,
            metrics,
        }
    }
}
