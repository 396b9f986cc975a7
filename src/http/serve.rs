//! The accept loop: HTTP/1.1 connections with a bounded count and a deadline for request headers,
//! served by the router, and a graceful stop that lets requests in flight finish.
//!
//! `axum::serve` sets neither bound, so a client could hold unlimited sockets open by sending
//! headers one byte at a time, before any authentication.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::slots::Slots;

/// Bounds on connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections served at once; further clients wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Time a client has to send a request's headers (also bounds idle keep-alive connections).
    pub header_timeout: Duration,
}

/// Serves `router` on `listener` until `shutdown` completes; then stops accepting and waits for
/// the requests in flight to finish.
///
/// `limits` is asked before each accepted connection, so that reloaded limits apply to the
/// connections that follow (a lower `max_connections` once enough connections ended).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: impl Fn() -> ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Slots::new(limits().max_connections);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    'accept: loop {
        // While every slot is held, the limits are read again each second: a reload that raises
        // `max_connections` lets waiting clients in without a connection having to end first.
        let slot = loop {
            slots.resize(limits().max_connections);
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
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            // Router's error type is Infallible: `oneshot` cannot fail.
            router.clone().oneshot(request.map(Body::new))
        });
        // Read again: the wait for a client may have outlasted a reload.
        let header_timeout = limits().header_timeout;
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(%err, %peer, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
