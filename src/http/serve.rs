//! The accept loop: HTTP/1.1 connections within the bounds of `gateway.*` (how many, how many per
//! client, how long to send headers, how long an answer may wait to be read), served by the
//! router, and a stop that lets requests in flight finish within a deadline.
//!
//! `axum::serve` sets none of these bounds, so a client could hold unlimited sockets open by
//! sending headers one byte at a time, or by never reading its answers.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tower::ServiceExt;

use super::write_deadline::WriteDeadline;
use crate::client::ClientKey;
use crate::config::Settings;
use crate::slots::Slots;

/// What a client over its connection cap is told before its connection is closed.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
x-content-type-options: nosniff\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 60\r\n\r\n\
{\"ok\":false,\"error\":\"too many connections from this client\"}";

/// Serves `router` on `listener` until `shutdown` completes; then stops accepting, lets the
/// requests in flight finish within `gateway.shutdownTimeoutSeconds`, closes the connections
/// still open after that, and returns when the stop began.
///
/// `settings` is asked before each accepted connection, so that reloaded bounds apply to the
/// connections that follow (a lower `maxConnections` once enough connections ended).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: impl Fn() -> Arc<Settings>,
    shutdown: impl Future<Output = ()>,
) -> Instant {
    let slots = Slots::new(settings().connections.max);
    let per_client = PerClient::default();
    let refusals = Arc::new(tokio::sync::Semaphore::new(REFUSALS_CLOSING));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    'accept: loop {
        while connections.try_join_next().is_some() {}
        // While every slot is held, the bounds are read again each second: a reload that raises
        // `maxConnections` lets waiting clients in without a connection having to end first.
        let slot = loop {
            slots.resize(settings().connections.max);
            tokio::select! {
                slot = slots.take() => break slot,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = &mut shutdown => break 'accept,
            }
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors, usually: back off instead of spinning.
                    tracing::warn!(%err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break 'accept,
        };
        // Read again: the wait for a client may have outlasted a reload.
        let settings = settings();
        let bounds = &settings.connections;
        let client = if settings.trusted_proxies.contains(peer.ip()) {
            None
        } else {
            let client = ClientKey::of(peer.ip());
            if !per_client.open(client, bounds.per_client) {
                refuse(stream, client, &refusals);
                continue;
            }
            Some(client)
        };
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            // Router's error type is Infallible: `oneshot` cannot fail.
            router.clone().oneshot(request.map(Body::new))
        });
        let stream = WriteDeadline::new(stream, bounds.write_timeout);
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(bounds.header_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        let per_client = per_client.clone();
        connections.spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(%err, %peer, "connection ended with an error");
            }
            if let Some(client) = client {
                per_client.close(client);
            }
            drop(slot);
        });
    }
    let began = Instant::now();
    drop(listener);
    let deadline = settings().connections.shutdown_timeout;
    if tokio::time::timeout(deadline, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "requests still in flight at the shutdown deadline; closing their connections"
        );
    }
    connections.shutdown().await;
    began
}

/// Refused connections being closed politely at once; beyond this many, a refused connection is
/// dropped at once.
const REFUSALS_CLOSING: usize = 64;
/// How long a refused connection is given to take its answer, and how much of what it sent is
/// read meanwhile.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
const REFUSAL_DRAIN: usize = 64 * 1024;

/// Answers a client over its connection cap with a 503 and closes the connection, without
/// taking a connection slot. The client's unread bytes are read and discarded for a moment
/// first: closing a socket with unread data sends a reset, which can destroy the answer before
/// the client reads it. At most [`REFUSALS_CLOSING`] refusals linger at once, each for at most
/// [`REFUSAL_LINGER`]; past that a refused connection is simply dropped.
fn refuse(mut stream: TcpStream, client: ClientKey, closing: &Arc<tokio::sync::Semaphore>) {
    tracing::info!(%client, "connection refused: too many connections from this client");
    let Ok(permit) = Arc::clone(closing).try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let close = async {
            stream.write_all(TOO_MANY_CONNECTIONS).await?;
            stream.shutdown().await?;
            let mut buffer = [0u8; 4096];
            let mut drained = 0;
            while drained < REFUSAL_DRAIN {
                match stream.read(&mut buffer).await? {
                    0 => break,
                    n => drained += n,
                }
            }
            std::io::Result::Ok(())
        };
        let _ = tokio::time::timeout(REFUSAL_LINGER, close).await;
        drop(permit);
    });
}

/// Open connections per client. Memory is bounded by the number of open connections: a client
/// is forgotten when its last connection closes.
#[derive(Clone, Default)]
struct PerClient(Arc<Mutex<HashMap<ClientKey, usize>>>);

impl PerClient {
    /// Counts one more connection of `client`, unless it already holds `cap`.
    fn open(&self, client: ClientKey, cap: usize) -> bool {
        let mut open = self.lock();
        let count = open.entry(client).or_insert(0);
        if *count >= cap {
            if *count == 0 {
                open.remove(&client);
            }
            return false;
        }
        *count += 1;
        true
    }

    fn close(&self, client: ClientKey) {
        let mut open = self.lock();
        if let Some(count) = open.get_mut(&client) {
            *count -= 1;
            if *count == 0 {
                open.remove(&client);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ClientKey, usize>> {
        // Plain counters: a panic elsewhere cannot leave them inconsistent.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
