//! Which connection gives way when every connection slot is held (docs/configuration.md,
//! "Connections"): one that never completed a request, or one idle for [`MIN_IDLE`] since its
//! last answer; of those, the one idle longest.
//!
//! A connection is idle while it holds no request: from its accept, or from the moment hyper has
//! handed its last answer to the socket, until its next request head is complete. Those are the
//! connections a slow-header or connection flood holds, and closing one loses neither a request
//! nor an answer. A connection reading a body, running a handler or writing an answer is never
//! idle.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::{Body, Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use crate::metrics::EvictionLabels;

/// How long a connection must have been idle since its last answer before it may be evicted.
/// A connection whose answer was just written may already hold its client's next request,
/// unread, in the socket: closing it then makes the kernel reset the connection, which can drop
/// the answer before the client has read it. A client that sends its next request at once is
/// not evicted. A connection that never completed a request has no answer to lose and gets no
/// such grace: a flood of new connections then evicts one per connection it opens, instead of
/// `maxConnections` per this long while real senders wait.
pub(super) const MIN_IDLE: Duration = Duration::from_millis(500);

/// Why a connection was evicted, as `hookgate_connections_evicted_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Eviction {
    /// It never completed a request head: evicted at once.
    NoRequest,
    /// It was idle for [`MIN_IDLE`] at least since its last answer.
    Idle,
}

impl Eviction {
    /// Every reason, each shown at 0 from the start.
    pub(super) const ALL: [Eviction; 2] = [Eviction::NoRequest, Eviction::Idle];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Eviction::NoRequest => "no_request",
            Eviction::Idle => "idle",
        }
    }
}

/// Evictions are logged at most this often, each line with the count since the previous one: a
/// flood evicts a connection for every one it opens.
const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The idle connections, in the order they became idle, and the count of evictions by reason.
/// Cheap to clone (a shared handle).
#[derive(Clone)]
pub(super) struct IdleConnections {
    queue: Arc<Mutex<Queue>>,
    /// `hookgate_connections_evicted_total`, by [`Eviction`] in the order of [`Eviction::ALL`].
    evicted: Arc<[Counter; 2]>,
}

#[derive(Default)]
struct Queue {
    /// Each idle connection that never completed a request, by the turn it drew at its accept.
    unanswered: BTreeMap<u64, Arc<Notify>>,
    /// Each connection idle since its last answer, by the turn it drew then, with when that was.
    answered: BTreeMap<u64, (Instant, Arc<Notify>)>,
    /// Turns in the order connections became idle: the least in both maps is the connection
    /// idle longest.
    next_turn: u64,
    /// Evictions not logged yet, and when the last line was written.
    unlogged: u64,
    logged_at: Option<Instant>,
}

impl IdleConnections {
    /// No connection yet; evictions counted in `evicted`, whose series of every reason show
    /// from now on at 0.
    pub(super) fn new(evicted: &Family<EvictionLabels, Counter>) -> IdleConnections {
        let counter = |reason: Eviction| {
            evicted
                .get_or_create(&EvictionLabels {
                    reason: reason.as_str(),
                })
                .clone()
        };
        IdleConnections {
            queue: Arc::default(),
            evicted: Arc::new(Eviction::ALL.map(counter)),
        }
    }

    /// Registers a connection just accepted; it is idle until its first request head is complete.
    /// Costs an allocation and a lock.
    pub(super) fn admit(&self) -> Arc<Tenant> {
        let tenant = Arc::new(Tenant {
            connections: self.clone(),
            turn: Mutex::new(None),
            answered: AtomicBool::new(false),
            eviction: Arc::new(Notify::new()),
        });
        tenant.become_idle(&mut self.lock(), false);
        tenant
    }

    /// Evicts up to `count` connections, the idle longest first, of those that never completed
    /// a request and those idle since [`MIN_IDLE`] before `now` at least; returns how many it
    /// evicted (fewer when fewer may go). Each is signalled at once; its task closes it without
    /// an answer and gives back its slot. Logs at most once per [`LOG_INTERVAL`], also when
    /// `count` is 0, so that the tail of a flood is logged at the next connection after it.
    pub(super) fn evict_oldest(&self, count: usize, now: Instant) -> usize {
        let mut evicted = 0;
        let report = {
            let mut queue = self.lock();
            while evicted < count {
                let Some((reason, eviction)) = queue.take_oldest(now) else {
                    break;
                };
                eviction.notify_one();
                self.evicted[reason as usize].inc();
                evicted += 1;
            }
            queue.due_report(evicted)
        };
        if let Some(closed) = report {
            log_evictions(closed);
        }
        evicted
    }

    /// When the next connection may be evicted (in the past when one may be now); `None` when
    /// none is idle.
    pub(super) fn next_eviction(&self) -> Option<Instant> {
        let queue = self.lock();
        if !queue.unanswered.is_empty() {
            return Some(Instant::now());
        }
        let (since, _) = queue.answered.first_key_value()?.1;
        Some(*since + MIN_IDLE)
    }

    /// Evicts every idle connection, at a stop: they hold no request to finish, and a
    /// connection still sending its first head would otherwise hold the stop until its deadline.
    /// Logs the evictions not logged yet.
    pub(super) fn evict_all(&self) {
        let (unanswered, answered, unlogged) = {
            let mut queue = self.lock();
            let unlogged = std::mem::take(&mut queue.unlogged);
            let unanswered = std::mem::take(&mut queue.unanswered);
            (unanswered, std::mem::take(&mut queue.answered), unlogged)
        };
        let answered = answered.into_values().map(|(_, eviction)| eviction);
        for eviction in unanswered.into_values().chain(answered) {
            eviction.notify_one();
        }
        if unlogged > 0 {
            log_evictions(unlogged);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Plain bookkeeping: a panic elsewhere cannot leave it inconsistent.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn log_evictions(closed: u64) {
    tracing::warn!(
        closed,
        "every connection slot was held: closed the connections idle longest to serve new ones \
         (counted since the last such line)"
    );
}

impl Queue {
    /// Takes out the connection idle longest of those that may be evicted at `now`, with why.
    fn take_oldest(&mut self, now: Instant) -> Option<(Eviction, Arc<Notify>)> {
        let unanswered = self.unanswered.first_key_value().map(|(turn, _)| *turn);
        let answered = self
            .answered
            .first_key_value()
            .filter(|(_, (since, _))| now.saturating_duration_since(*since) >= MIN_IDLE)
            .map(|(turn, _)| *turn);
        match (unanswered, answered) {
            (Some(fresh), Some(idle)) if idle < fresh => self.take_answered(idle),
            (Some(fresh), _) => {
                let eviction = self.unanswered.remove(&fresh)?;
                Some((Eviction::NoRequest, eviction))
            }
            (None, Some(idle)) => self.take_answered(idle),
            (None, None) => None,
        }
    }

    fn take_answered(&mut self, turn: u64) -> Option<(Eviction, Arc<Notify>)> {
        let (_, eviction) = self.answered.remove(&turn)?;
        Some((Eviction::Idle, eviction))
    }

    /// Takes connection `turn` out of the queue; false when it was not in it (evicted).
    fn remove(&mut self, turn: u64) -> bool {
        self.unanswered.remove(&turn).is_some() || self.answered.remove(&turn).is_some()
    }

    /// Counts `evicted` more; the count to log, when a line is due.
    fn due_report(&mut self, evicted: usize) -> Option<u64> {
        self.unlogged += evicted as u64;
        let due = self.logged_at.is_none_or(|at| at.elapsed() >= LOG_INTERVAL);
        if self.unlogged == 0 || !due {
            return None;
        }
        self.logged_at = Some(Instant::now());
        Some(std::mem::take(&mut self.unlogged))
    }
}

/// One connection's standing: idle (its turn is in the queue), serving a request, or evicted
/// (its turn was taken out of the queue by [`IdleConnections::evict_oldest`]). Only the
/// connection's own task changes it, except for the eviction; both under the queue's lock.
pub(super) struct Tenant {
    connections: IdleConnections,
    /// The turn drawn when the connection last became idle; `None` while it serves a request.
    turn: Mutex<Option<u64>>,
    /// Set when an answer's body has been handed to hyper: the connection becomes idle once hyper
    /// has written the whole answer to the socket.
    answered: AtomicBool,
    eviction: Arc<Notify>,
}

impl Tenant {
    /// Called as a request head completes: the connection holds a request from now on, and is
    /// not evicted until its answer has been written. False when the connection was evicted a
    /// moment before: the request must then not be served, since the connection is being closed
    /// without an answer (the client may send it again elsewhere; nothing of it ran).
    pub(super) fn begin_request(&self) -> bool {
        let mut queue = self.connections.lock();
        let mut turn = self.turn();
        self.answered.store(false, Ordering::Relaxed);
        match *turn {
            // The previous answer is still being written and the next head, pipelined, is
            // already here: the connection was never idle in between.
            None => true,
            Some(idle) if queue.remove(idle) => {
                *turn = None;
                true
            }
            Some(_) => false,
        }
    }

    /// Completes when the connection has been evicted: its task then drops it.
    pub(super) async fn evicted(&self) {
        self.eviction.notified().await;
    }

    /// Called when hyper has written everything it holds to the socket: the connection becomes
    /// idle if an answer was among it.
    fn flushed(&self) {
        if self.answered.swap(false, Ordering::Relaxed) {
            self.become_idle(&mut self.connections.lock(), true);
        }
    }

    /// Draws the connection's turn in the queue, among the connections that never completed a
    /// request unless it has been `answered`.
    fn become_idle(&self, queue: &mut Queue, answered: bool) {
        let mut turn = self.turn();
        if turn.is_none() {
            let next = queue.next_turn;
            queue.next_turn += 1;
            let eviction = Arc::clone(&self.eviction);
            if answered {
                queue.answered.insert(next, (Instant::now(), eviction));
            } else {
                queue.unanswered.insert(next, eviction);
            }
            *turn = Some(next);
        }
    }

    fn turn(&self) -> MutexGuard<'_, Option<u64>> {
        self.turn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Tenant {
    /// A connection that ends while idle leaves the queue.
    fn drop(&mut self) {
        let mut queue = self.connections.lock();
        if let Some(idle) = *self.turn() {
            queue.remove(idle);
        }
    }
}

/// The error a request on an evicted connection is answered with: hyper ends the connection
/// without writing anything.
#[derive(Debug)]
pub(super) struct Evicted;

impl std::fmt::Display for Evicted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the connection was closed to serve a new one")
    }
}

impl std::error::Error for Evicted {}

/// An answer's body that tells its connection's [`Tenant`] when hyper is done with it (it drops
/// a body once it has taken its last frame). Costs nothing per frame.
pub(super) struct Answer<B> {
    body: B,
    tenant: Arc<Tenant>,
}

impl<B> Answer<B> {
    pub(super) fn new(body: B, tenant: &Arc<Tenant>) -> Answer<B> {
        Answer {
            body,
            tenant: Arc::clone(tenant),
        }
    }
}

impl<B: Body + Unpin> Body for Answer<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl<B> Drop for Answer<B> {
    fn drop(&mut self) {
        self.tenant.answered.store(true, Ordering::Relaxed);
    }
}

/// A connection's stream that tells its [`Tenant`] when a flush succeeds. hyper flushes the
/// stream only once it has written everything it buffered, so after an answer's body is dropped
/// the first successful flush means the whole answer is with the kernel. Reads and writes pass
/// through; a flush costs an atomic swap.
pub(super) struct Watched<S> {
    inner: S,
    tenant: Arc<Tenant>,
}

impl<S> Watched<S> {
    pub(super) fn new(inner: S, tenant: &Arc<Tenant>) -> Watched<S> {
        Watched {
            inner,
            tenant: Arc::clone(tenant),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = poll {
            self.tenant.flushed();
        }
        poll
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A moment at which every connection idle now has been idle long enough to go.
    fn later() -> Instant {
        Instant::now() + MIN_IDLE
    }

    fn connections() -> IdleConnections {
        IdleConnections::new(&Family::default())
    }

    /// A connection that has been answered, and is idle since.
    fn answered(connections: &IdleConnections) -> Arc<Tenant> {
        let tenant = connections.admit();
        assert!(tenant.begin_request());
        tenant.answered.store(true, Ordering::Relaxed);
        tenant.flushed();
        tenant
    }

    #[test]
    fn an_answered_connection_idle_for_less_than_the_minimum_stays() {
        let connections = connections();
        let tenant = answered(&connections);
        assert_eq!(connections.evict_oldest(1, Instant::now()), 0);
        assert!(!is_evicted(&tenant));
        let due = connections.next_eviction().unwrap();
        assert_eq!(connections.evict_oldest(1, due), 1);
        assert!(is_evicted(&tenant));
        assert_eq!(connections.next_eviction(), None);
        assert_eq!(connections.evicted[Eviction::Idle as usize].get(), 1);
    }

    #[test]
    fn a_connection_that_never_completed_a_request_goes_at_once() {
        let connections = connections();
        let kept = answered(&connections);
        let fresh = connections.admit();
        assert!(connections.next_eviction().unwrap() <= Instant::now());
        assert_eq!(connections.evict_oldest(2, Instant::now()), 1);
        assert!(is_evicted(&fresh) && !is_evicted(&kept));
        let counts = connections.evicted.each_ref().map(Counter::get);
        assert_eq!(counts, [1, 0], "counted as no_request");
    }

    fn is_evicted(tenant: &Tenant) -> bool {
        let mut evicted = std::pin::pin!(tenant.evicted());
        let waker = std::task::Waker::noop();
        evicted
            .as_mut()
            .poll(&mut Context::from_waker(waker))
            .is_ready()
    }

    #[test]
    fn the_connection_idle_longest_goes_first_and_busy_ones_never() {
        let connections = connections();
        let (first, second, third) = (
            connections.admit(),
            connections.admit(),
            connections.admit(),
        );
        assert!(first.begin_request(), "a head completed: serving");
        assert_eq!(connections.evict_oldest(1, later()), 1);
        assert!(is_evicted(&second) && !is_evicted(&first) && !is_evicted(&third));
        assert!(
            !second.begin_request(),
            "a head after the eviction is refused"
        );
        // The first connection's answer is written: idle again, and now after the third.
        first.answered.store(true, Ordering::Relaxed);
        first.flushed();
        assert_eq!(
            connections.evict_oldest(5, later()),
            2,
            "only the idle ones"
        );
        assert!(is_evicted(&third) && is_evicted(&first));
    }

    #[test]
    fn an_answer_not_yet_written_keeps_its_connection() {
        let connections = connections();
        let tenant = connections.admit();
        assert!(tenant.begin_request());
        drop(Answer::new(
            http_body_util::Empty::<bytes::Bytes>::new(),
            &tenant,
        ));
        assert_eq!(connections.evict_oldest(1, later()), 0, "not flushed yet");
        // A pipelined head arrives before the flush: still serving.
        assert!(tenant.begin_request());
        tenant.flushed();
        assert_eq!(
            connections.evict_oldest(1, later()),
            0,
            "its answer is not dropped yet"
        );
    }

    #[test]
    fn a_connection_that_ends_leaves_the_queue() {
        let connections = connections();
        drop(connections.admit());
        let queue = connections.lock();
        assert!(queue.unanswered.is_empty() && queue.answered.is_empty());
    }
}
