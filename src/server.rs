//! Wiring: from a loaded configuration to a running server, and its orderly stop.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::config::LiveConfig;
use crate::gateway::{Store, StoreError};
use crate::http::{AppState, AuthFailureLimiter, router};

/// A started server's parts, before it accepts connections.
pub struct Server {
    state: AppState,
    listener: TcpListener,
}

impl Server {
    /// Opens the store and binds `listen` (or `gateway.bind`:`gateway.port`).
    pub async fn start(config: LiveConfig, listen: Option<SocketAddr>) -> anyhow::Result<Server> {
        let settings = config.current();
        let store = Store::open(&settings.state_dir, settings.group_commit)?;
        let listener = match listen {
            Some(addr) => TcpListener::bind(addr).await?,
            None => TcpListener::bind((settings.bind.as_str(), settings.port)).await?,
        };
        let state = AppState {
            config,
            store,
            limiter: Arc::new(AuthFailureLimiter::default()),
        };
        Ok(Server { state, listener })
    }

    /// The address the socket is bound to (with the port the system chose for port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then finishes in-flight requests, commits what the store
    /// has queued and closes it.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StoreError> {
        let watcher = tokio::spawn(crate::config::watch(self.state.config.clone()));
        let app = router(self.state.clone()).into_make_service_with_connect_info::<SocketAddr>();
        let served = axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown)
            .await;
        watcher.abort();
        if let Err(err) = served {
            tracing::error!(%err, "server stopped with an error");
        }
        let store = self.state.store;
        tokio::task::spawn_blocking(move || store.close())
            .await
            .map_err(|_| StoreError::Closed)
    }
}
