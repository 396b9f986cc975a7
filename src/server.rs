//! Wiring: from a configuration file to a running server, and its orderly stop.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::{self, Admission, ConfigError, LiveConfig, Settings};
use crate::gateway::edge_queue::{Bounds, EdgeQueue};
use crate::gateway::nats::Cluster;
use crate::gateway::{RequestLogStore, Runtime, Store, StoreError};
use crate::http::{AppParts, AppState, AuthFailureLimiter, router, serve};
use crate::metrics::Metrics;
use crate::request_log::RequestLog;
use crate::transform::{TransformEngine, TransformRegistry};

/// How often transform files are checked for replacement.
const TRANSFORM_POLL: Duration = Duration::from_millis(500);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration (or a transform it names) was refused; every problem is listed.
    #[error("invalid configuration")]
    Config(Vec<ConfigError>),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl From<Vec<ConfigError>> for StartError {
    fn from(problems: Vec<ConfigError>) -> Self {
        StartError::Config(problems)
    }
}

/// Loads the configuration at `path` with every transform it names, as `serve` would, without
/// binding anything. `hookgate check` uses this.
pub fn check(path: &Path) -> Result<(Settings, Arc<TransformRegistry>), StartError> {
    let settings = config::load(path)?;
    let registry = transform_registry(&settings)?;
    transform_admission(Arc::clone(&registry))(&settings)?;
    Ok((settings, registry))
}

/// Opens the embedded store, or connects to the NATS cluster (creating its stream, buckets and
/// consumers where missing) and opens this node's view of it.
async fn open_store(
    settings: &Settings,
    metrics: &Metrics,
) -> Result<(Store, Option<Cluster>), StartError> {
    let commit_time = Some(metrics.store_commit.clone());
    let Some(nats) = settings.store.nats() else {
        let store = Store::open_observed(&settings.state_dir, settings.group_commit, commit_time)
            .map_err(anyhow::Error::from)?;
        return Ok((store, None));
    };
    let cluster = Cluster::connect(nats, settings.runtime.run_timeout)
        .await
        .map_err(|e| anyhow::anyhow!("gateway.store: {e}"))?;
    let view = crate::gateway::nats::open_view(&cluster, &settings.state_dir, commit_time)
        .await
        .map_err(|e| anyhow::anyhow!("gateway.store: cannot open the view: {e}"))?;
    Ok((view, Some(cluster)))
}

/// The transform engine and registry, with its compile cache in the state directory. hookgate
/// runs the native code of that cache unchecked, so a state directory that another user could
/// write to (or replace, through a directory above it) is refused.
fn transform_registry(settings: &Settings) -> Result<Arc<TransformRegistry>, StartError> {
    if let Some(why) = crate::private_fs::untrusted_ancestry(&settings.state_dir) {
        return Err(StartError::Config(vec![ConfigError::invalid(
            "gateway.stateDir",
            format!(
                "must be writable by hookgate's user alone, with every directory above it (or sticky, like /tmp), but {why}"
            ),
        )]));
    }
    let engine = TransformEngine::new(&settings.engine_limits())
        .map_err(|e| anyhow::anyhow!("cannot start the transform engine: {e:#}"))?;
    Ok(Arc::new(TransformRegistry::new(
        engine,
        settings.state_dir.join("transform-cache"),
    )))
}

/// Admits a configuration only when every transform it names loads; the loaded set then becomes
/// the one in use.
fn transform_admission(registry: Arc<TransformRegistry>) -> Admission {
    Arc::new(move |settings: &Settings| {
        config::load_transforms(settings, |dir, names| registry.load_set(dir, names))
    })
}

/// A started server's parts, before it accepts connections.
pub struct Server {
    state: AppState,
    listener: TcpListener,
}

impl Server {
    /// Loads the configuration at `path` and its transforms, opens the store and binds `listen`
    /// (or `gateway.bind`:`gateway.port`).
    pub async fn start(path: PathBuf, listen: Option<SocketAddr>) -> Result<Server, StartError> {
        let initial = config::load(&path)?;
        let transforms = transform_registry(&initial)?;
        let config = LiveConfig::open(path, transform_admission(Arc::clone(&transforms)))?;
        let settings = config.current();
        let metrics = Metrics::default();
        let (store, cluster) = open_store(&settings, &metrics).await?;
        let bound = match listen {
            Some(addr) => TcpListener::bind(addr).await,
            None => TcpListener::bind((settings.bind.as_str(), settings.port)).await,
        };
        let listener = bound.map_err(|e| anyhow::anyhow!("cannot listen: {e}"))?;
        let runtime = Arc::new(Runtime::start(
            store.clone(),
            config.clone(),
            cluster,
            metrics.clone(),
        ));
        let log_store = RequestLogStore::open(&settings.state_dir)
            .map_err(|e| anyhow::anyhow!("cannot open the request log: {e}"))?;
        let shared = match runtime.cluster() {
            Some(cluster) => Some(
                crate::request_log::open_stream(cluster, &config)
                    .await
                    .map_err(|e| anyhow::anyhow!("gateway.store: {e}"))?,
            ),
            None => None,
        };
        let request_log = RequestLog::start(log_store, config.clone(), metrics.clone(), shared);
        let edge_queue = match settings.edge.serve() {
            Some(serve) => Some(
                EdgeQueue::open(
                    &settings.state_dir,
                    Bounds {
                        max_pending: serve.max_pending,
                        max_per_route: serve.max_pending_per_route,
                        max_bytes: serve.max_pending_bytes,
                    },
                )
                .map_err(|e| anyhow::anyhow!("cannot open the edge's queue: {e}"))?,
            ),
            None => None,
        };
        let subscriptions =
            crate::subscription::Subscriptions::open(config.clone(), runtime.cluster())
                .await
                .map_err(|e| anyhow::anyhow!("cannot open the subscriptions: {e}"))?;
        let state = AppState::new(AppParts {
            request_log,
            access_log: Default::default(),
            write_probe: Default::default(),
            replays: Default::default(),
            dry_runs: Default::default(),
            edge_queue,
            edge_link: Default::default(),
            subscriptions,
            config,
            store,
            runtime,
            metrics,
            limiter: Arc::new(AuthFailureLimiter::default()),
            api_limiter: Arc::new(AuthFailureLimiter::default()),
            signature_limiter: Arc::new(AuthFailureLimiter::new(
                20,
                Duration::from_secs(60),
                Duration::from_secs(60),
                65_536,
            )),
            transforms,
        });
        Ok(Server { state, listener })
    }

    /// Writes one log line per request (target `hookgate::access`).
    pub fn log_access(&self) {
        self.state
            .access_log
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The address the socket is bound to (with the port the system chose for port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then finishes in-flight requests and the outbox's
    /// current sends within `gateway.shutdownTimeoutSeconds`, commits what the store has queued
    /// and closes it.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StoreError> {
        let watcher = tokio::spawn(crate::config::watch(self.state.config.clone()));
        let refresher = tokio::spawn(refresh_transforms(Arc::clone(&self.state.transforms)));
        let edge_link = self
            .state
            .config
            .current()
            .edge
            .link()
            .cloned()
            .map(|link| crate::http::edge_link::spawn(self.state.clone(), link));
        let config = self.state.config.clone();
        let stop_began = serve(
            self.listener,
            router(self.state.clone()),
            move || config.current(),
            &self.state.metrics.connections_evicted,
            shutdown,
        )
        .await;
        watcher.abort();
        refresher.abort();
        if let Some(edge_link) = edge_link {
            // A delivery cut short is pulled again at the next start: its mark says whether
            // its work was committed.
            edge_link.abort();
        }
        // What is left of the shutdown deadline goes to the outbox's current sends; a send cut
        // short is made again at the next start.
        let deadline = self.state.config.current().connections.shutdown_timeout;
        let grace = deadline.saturating_sub(stop_began.elapsed());
        self.state.runtime.stop(grace).await;
        self.state.request_log.close().await;
        if let Some(queue) = &self.state.edge_queue {
            let queue = queue.clone();
            let _ = tokio::task::spawn_blocking(move || queue.close()).await;
        }
        let store = self.state.store.clone();
        tokio::task::spawn_blocking(move || store.close())
            .await
            .map_err(|_| StoreError::Closed)
    }
}

/// Picks up replaced transform files; compilation runs off the async threads.
async fn refresh_transforms(registry: Arc<TransformRegistry>) {
    let mut tick = tokio::time::interval(TRANSFORM_POLL);
    loop {
        tick.tick().await;
        let registry = Arc::clone(&registry);
        let _ = tokio::task::spawn_blocking(move || registry.refresh()).await;
    }
}
