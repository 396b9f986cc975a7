//! What every backend's workers use: the store (a NATS node's view of the stream, on a cluster),
//! the configuration in force, one HTTP client for model providers, chat channels and the upstream
//! gateway, and the metrics. Cheap to clone: each part is a shared handle.

use tokio::task::JoinHandle;

use super::store::Store;
use crate::config::LiveConfig;
use crate::metrics::Metrics;

/// A backend's long-running task, by name (for `/readyz`).
pub type Worker = (&'static str, JoinHandle<()>);

#[derive(Clone)]
pub struct Context {
    pub store: Store,
    pub config: LiveConfig,
    pub http: reqwest::Client,
    pub metrics: Metrics,
}

impl Context {
    pub fn new(store: Store, config: LiveConfig, metrics: Metrics) -> Context {
        let http = reqwest::Client::builder()
            .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Context {
            store,
            config,
            http,
            metrics,
        }
    }
}
