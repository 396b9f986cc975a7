//! The accept loop: HTTP/1.1 connections within the bounds of `gateway.*` (how many, how many per
//! client, how long to send headers, how long an answer may wait to be read), served by the
//! router, and a stop that lets requests in flight finish within a deadline.
//!
//! `axum::serve` sets none of these bounds, so a client could hold unlimited sockets open by
//! sending headers one byte at a time, or by never reading its answers. When every slot is held,
//! a new connection takes the slot of the connection idle longest of those that may go
//! ([`idle`]), so that slow headers or a flood of silent connections from many addresses
//! cannot keep real senders out.

mod idle;

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;
use tower::ServiceExt;

use self::idle::{Answer, Evicted, IdleConnections, Tenant, Watched};
use super::write_deadline::WriteDeadline;
use crate::client::ClientKey;
use crate::config::Settings;
use crate::metrics::EvictionLabels;
use crate::slots::Slots;

/// What a client over its connection cap is told before its connection is closed.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
x-content-type-options: nosniff\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 60\r\n\r\n\
{\"ok\":false,\"error\":\"too many connections from this client\"}";

/// Serves `router` on `listener` until `shutdown` completes; then stops accepting, closes the
/// idle connections, lets the requests in flight finish within `gateway.shutdownTimeoutSeconds`,
/// closes the connections still open after that, and returns when the stop began.
///
/// `settings` is asked for each accepted connection, so that reloaded bounds apply to the
/// connections that follow (a lower `maxConnections` as connections end or give way). The
/// connections that give way are counted in `evicted`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: impl Fn() -> Arc<Settings>,
    evicted: &Family<EvictionLabels, Counter>,
    shutdown: impl Future<Output = ()>,
) -> Instant {
    let slots = Slots::new(settings().connections.max);
    let idle = IdleConnections::new(evicted);
    let per_client = PerClient::default();
    let refusals = Arc::new(tokio::sync::Semaphore::new(REFUSALS_CLOSING));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
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
            () = &mut shutdown => break,
        };
        // The cap is checked before a slot is sought: a client over it gets its 503 at once and
        // makes no other connection give way.
        let seat = match per_client.seat(peer.ip(), &settings()) {
            Ok(seat) => seat,
            Err(client) => {
                refuse(stream, client, &refusals);
                continue;
            }
        };
        let slot = tokio::select! {
            slot = take_slot(&slots, &idle, || settings().connections.max) => slot,
            () = &mut shutdown => break,
        };
        let tenant = idle.admit();
        // Read again: the wait for a slot may have outlasted a reload.
        let connection = connection(stream, peer, &router, &settings(), &tenant, &graceful);
        connections.spawn(run(connection, tenant, peer, (slot, seat)));
    }
    let began = Instant::now();
    drop(listener);
    idle.evict_all();
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

/// A slot for a connection just accepted. When every slot is held, the connections idle longest
/// (of those that never completed a request, and those idle for [`idle::MIN_IDLE`] at least
/// since their last answer) are evicted to free as many as it takes (more than one while a
/// lowered `maxConnections` is retiring slots); when too few may go, it waits for connections
/// to end or to have been idle long enough, looking again each second at least, so that a
/// reload raising `maxConnections` also lets it in. Connections it evicted count as freed for a
/// second: one not yet closed on a busy core is waited for, not followed by another eviction.
async fn take_slot(
    slots: &Slots,
    idle: &IdleConnections,
    max: impl Fn() -> usize,
) -> OwnedSemaphorePermit {
    const LOOK_AGAIN: Duration = Duration::from_secs(1);
    let (mut closing, mut evicted_at) = (0, Instant::now());
    loop {
        slots.resize(max());
        let now = Instant::now();
        if now.duration_since(evicted_at) >= LOOK_AGAIN {
            // Whatever was evicted has closed by now, or started a request instead.
            closing = 0;
        }
        let evicted = idle.evict_oldest(slots.shortfall().saturating_sub(closing), now);
        if evicted > 0 {
            (closing, evicted_at) = (closing + evicted, now);
        }
        let next = idle
            .next_eviction()
            .map_or(LOOK_AGAIN, |at| at.saturating_duration_since(now))
            .clamp(Duration::from_millis(10), LOOK_AGAIN);
        tokio::select! {
            slot = slots.take() => return slot,
            () = tokio::time::sleep(next) => {}
        }
    }
}

/// The HTTP/1.1 connection on `stream`, within `settings`' bounds, serving `router`, keeping
/// `tenant` told whether it holds a request, and watched by `graceful` for the stop.
fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: &Router,
    settings: &Settings,
    tenant: &Arc<Tenant>,
    graceful: &GracefulShutdown,
) -> impl Future<Output = hyper::Result<()>> + Send + 'static {
    let bounds = &settings.connections;
    let router = router.clone();
    let served = Arc::clone(tenant);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        // Decided here, as the head completes, and not in the future: the connection now holds
        // a request and cannot be evicted, or it was evicted a moment before and this request
        // must not run.
        let admitted = served.begin_request();
        request.extensions_mut().insert(ConnectInfo(peer));
        let (router, tenant) = (router.clone(), Arc::clone(&served));
        async move {
            if !admitted {
                return Err(Evicted);
            }
            // Router's error type is Infallible: `oneshot` cannot fail.
            let Ok(response) = router.oneshot(request.map(Body::new)).await;
            Ok(response.map(|body| Answer::new(body, &tenant)))
        }
    });
    let stream = Watched::new(WriteDeadline::new(stream, bounds.write_timeout), tenant);
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_timeout)
        .serve_connection(TokioIo::new(stream), service);
    graceful.watch(connection)
}

/// Serves one connection until it ends or is evicted, then gives back `held` (its slot and its
/// place under its client's cap), after the socket is closed.
async fn run(
    connection: impl Future<Output = hyper::Result<()>>,
    tenant: Arc<Tenant>,
    peer: SocketAddr,
    held: impl Send,
) {
    tokio::select! {
        biased;
        // Looked at first: an evicted connection is dropped without reading any further.
        () = tenant.evicted() => tracing::debug!(%peer, "connection closed to serve a new one"),
        ended = connection => if let Err(err) = ended {
            tracing::debug!(%err, %peer, "connection ended with an error");
        },
    }
    // Out of the idle queue before the slot is free, so that the connection waiting for the
    // slot cannot evict this one again.
    drop(tenant);
    drop(held);
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

/// One connection counted under its client's cap; uncounted when dropped.
struct Seat {
    clients: PerClient,
    client: ClientKey,
}

impl PerClient {
    /// Counts a connection from `peer` under its client's cap: `Ok(None)` for a trusted proxy,
    /// which is not capped (every client behind it shares its address); the client when it
    /// already holds `gateway.maxConnectionsPerClient`.
    fn seat(&self, peer: IpAddr, settings: &Settings) -> Result<Option<Seat>, ClientKey> {
        if settings.trusted_proxies.contains(peer) {
            return Ok(None);
        }
        let client = ClientKey::of(peer);
        match self.open(client, settings.connections.per_client) {
            Some(seat) => Ok(Some(seat)),
            None => Err(client),
        }
    }

    /// Counts one more connection of `client`, unless it already holds `cap`.
    fn open(&self, client: ClientKey, cap: usize) -> Option<Seat> {
        let mut open = self.lock();
        let count = open.entry(client).or_insert(0);
        if *count >= cap {
            if *count == 0 {
                open.remove(&client);
            }
            return None;
        }
        *count += 1;
        Some(Seat {
            clients: self.clone(),
            client,
        })
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

impl Drop for Seat {
    fn drop(&mut self) {
        self.clients.close(self.client);
    }
}
