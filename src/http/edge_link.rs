//! A private node's side of docs/edge.md: a worker dials the edge (`edge.link`), pulls what it
//! stored in order, runs each request through this node's hook pipeline as if it had arrived
//! here ([`hooks::dispatch`]: signature on the exact bytes, conditions, transforms, admission,
//! idempotency), and acknowledges up to the last one committed. Requests of one hook name run
//! one after another, in the edge's order; different names side by side.
//!
//! Exactly once: each request runs inside an [`edge_marks::scope`], so the commit of each of
//! its actions also marks that action taken; a request pulled again (the link dropped before
//! the acknowledgement, either side restarted) whose actions are all marked, or which was
//! answered, is acknowledged without running, and one that stopped part way makes only the
//! actions not marked. Every request is marked answered after its answer.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderName, HeaderValue, Method};
use futures_util::future::join_all;
use serde::Serialize;

use super::AppState;
use super::edge::{Ack, Acked, LinkView, Pulled};
use super::hooks;
use super::reply::{HookError, MappingFailure, Refused};
use super::request::Origin;
use super::request_id::RequestId;
use crate::config::EdgeLink;
use crate::gateway::edge_queue::{Delivery, EdgeStatus};
use crate::gateway::store::edge_marks::{self, EdgeMark};

/// How long a pull waits at the edge for a request to arrive.
const PULL_WAIT_SECONDS: u64 = 25;
/// The longest pause between attempts to reach an edge that does not answer.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The link as a private node last saw it, for the overview and the metrics.
#[derive(Clone, Default)]
pub struct LinkWatch(Arc<Mutex<Option<LinkSeen>>>);

/// The link as the overview shows it, on a private node.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkSeen {
    pub edge_url: String,
    #[serde(flatten)]
    pub link: LinkView,
    /// The last request this node acknowledged.
    pub last_acked: i64,
    /// Why the last attempt to reach the edge failed, while it is failing.
    pub error: Option<String>,
}

impl LinkWatch {
    /// Where the link stands, when this node is a private node.
    pub fn seen(&self) -> Option<LinkSeen> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn update(&self, app: &AppState, change: impl FnOnce(&mut LinkSeen)) {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let seen = seen.get_or_insert_with(|| LinkSeen {
            edge_url: String::new(),
            link: LinkView::default(),
            last_acked: 0,
            error: None,
        });
        change(seen);
        app.metrics.edge.show(&EdgeStatus {
            connected: seen.link.connected,
            backlog: seen.link.backlog,
            backlog_bytes: 0,
            oldest_waiting_ms: seen.link.oldest_waiting_ms,
            last_acked: seen.last_acked,
            last_acked_at_ms: seen.link.last_acked_at_ms,
        });
    }
}

/// Starts the worker of a private node; it runs until the process stops.
pub fn spawn(app: AppState, link: EdgeLink) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move { run(app, link).await })
}

async fn run(app: AppState, link: EdgeLink) {
    let mut backoff = Duration::from_millis(200);
    while let Err(err) = app.store.open_edge_marks().await {
        tracing::error!(error = %err, "edge link: cannot prepare the store");
        tokio::time::sleep(MAX_BACKOFF).await;
    }
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(PULL_WAIT_SECONDS + 30))
        .build()
    {
        Ok(client) => client,
        Err(err) => return tracing::error!(error = %err, "edge link: no HTTP client"),
    };
    app.edge_link
        .update(&app, |seen| seen.edge_url = link.url.clone());
    let routes = hooks::routes(app.clone());
    let mut cursor = Cursor::default();
    loop {
        match round(&app, &routes, &client, &link, &mut cursor).await {
            Ok(()) => backoff = Duration::from_millis(200),
            Err(why) => {
                tracing::warn!(error = %why, "edge link: pull failed; retrying");
                app.edge_link.update(&app, |seen| {
                    seen.link.connected = false;
                    seen.error = Some(why);
                });
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Where the worker is in the edge's queue: the queue's id, and the last sequence number
/// acknowledged in it.
#[derive(Default)]
struct Cursor {
    edge: Option<Arc<str>>,
    after: i64,
}

/// One pull, what it brought run, and the acknowledgement; moves `cursor` past what was
/// acknowledged.
async fn round(
    app: &AppState,
    routes: &hooks::HookRoutes,
    client: &reqwest::Client,
    link: &EdgeLink,
    cursor: &mut Cursor,
) -> Result<(), String> {
    let after = cursor.after;
    let url = format!(
        "{}/edge/pull?after={after}&wait={PULL_WAIT_SECONDS}",
        link.url
    );
    let answer = client
        .get(url)
        .bearer_auth(&link.pull_token)
        .send()
        .await
        .map_err(|e| format!("cannot reach the edge: {}", without_url(e)))?;
    if !answer.status().is_success() {
        return Err(format!("the edge answered {}", answer.status()));
    }
    let pulled: Pulled = answer
        .json()
        .await
        .map_err(|e| format!("unreadable pull answer: {}", without_url(e)))?;
    app.edge_link.update(app, |seen| {
        seen.link = pulled.link;
        seen.link.connected = true;
        seen.error = None;
    });
    let edge: Arc<str> = pulled.edge_id.into();
    if cursor.edge.as_ref().is_some_and(|known| *known != edge) {
        // A new queue file at the edge numbers from 1 again: start from its start.
        *cursor = Cursor::default();
        return Ok(());
    }
    cursor.edge = Some(Arc::clone(&edge));
    let Some(last) = pulled.deliveries.last().map(|d| d.seq) else {
        return Ok(());
    };
    let committed = take_all(app, routes, &edge, pulled.deliveries).await;
    if let Some(up_to) = committed {
        acknowledge(app, client, link, &edge, up_to).await?;
        cursor.after = up_to;
    }
    if committed != Some(last) {
        // Something could not be committed here (a full disk): pause, then pull it again.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

/// Tells the edge it may forget everything up to `up_to`, then forgets the marks it will not
/// send again.
async fn acknowledge(
    app: &AppState,
    client: &reqwest::Client,
    link: &EdgeLink,
    edge: &Arc<str>,
    up_to: i64,
) -> Result<(), String> {
    let ack = Ack {
        edge_id: edge.to_string(),
        up_to,
    };
    let answer = client
        .post(format!("{}/edge/ack", link.url))
        .bearer_auth(&link.pull_token)
        .json(&ack)
        .send()
        .await
        .map_err(|e| format!("cannot acknowledge: {}", without_url(e)))?;
    if !answer.status().is_success() {
        return Err(format!(
            "the edge answered the acknowledgement {}",
            answer.status()
        ));
    }
    let acked: Acked = answer
        .json()
        .await
        .map_err(|e| format!("unreadable acknowledgement: {}", without_url(e)))?;
    app.edge_link.update(app, |seen| {
        seen.last_acked = acked.acked;
        seen.link.last_acked = acked.acked;
    });
    if let Err(err) = app.store.forget_edge_marks(Arc::clone(edge), up_to).await {
        tracing::warn!(error = %err, "edge link: cannot forget acknowledged marks");
    }
    Ok(())
}

/// Runs `deliveries` (in the edge's order): each hook name's in order, the names side by side.
/// Returns the highest sequence number up to which every delivery is committed (`None` when
/// the first was not).
async fn take_all(
    app: &AppState,
    routes: &hooks::HookRoutes,
    edge: &Arc<str>,
    deliveries: Vec<Delivery>,
) -> Option<i64> {
    let seqs: Vec<i64> = deliveries.iter().map(|d| d.seq).collect();
    let mut by_route: BTreeMap<String, Vec<Delivery>> = BTreeMap::new();
    for delivery in deliveries {
        by_route
            .entry(delivery.route.clone())
            .or_default()
            .push(delivery);
    }
    let routes = by_route.into_values().map(|route| async move {
        let mut failed_at = None;
        for delivery in route {
            let seq = delivery.seq;
            if let Err(why) = take(app, routes, edge, delivery).await {
                tracing::warn!(seq, error = %why, "edge link: not committed; will pull it again");
                failed_at = Some(seq);
                break;
            }
        }
        failed_at
    });
    let first_failed = join_all(routes).await.into_iter().flatten().min();
    seqs.into_iter()
        .take_while(|seq| first_failed.is_none_or(|failed| *seq < failed))
        .last()
}

/// Runs one delivery unless it was taken before; `Err` when its work could not be committed.
async fn take(
    app: &AppState,
    routes: &hooks::HookRoutes,
    edge: &Arc<str>,
    delivery: Delivery,
) -> Result<(), String> {
    let mark = EdgeMark::answered(Arc::clone(edge), delivery.seq);
    let taken = app.store.edge_taken(Arc::clone(edge), delivery.seq).await;
    if taken.map_err(|e| e.to_string())? {
        app.metrics.edge.took("repeat");
        return Ok(());
    }
    let request = request_of(delivery)?;
    let dispatched = hooks::dispatch(app.clone(), routes.clone(), request);
    let answer = edge_marks::scope(mark.clone(), dispatched).await;
    if let Some(Refused(err)) = answer.extensions().get::<Refused>()
        && may_pass(err)
    {
        return Err(err.to_string());
    }
    // Test-only: the crash window between the commit and the acknowledgement.
    edge_marks::die_if_told(&mark);
    app.store
        .mark_edge_taken(mark)
        .await
        .map_err(|e| e.to_string())?;
    app.metrics.edge.took("run");
    Ok(())
}

/// Whether `err` left a delivery uncommitted for a reason that may pass: a full disk, busy
/// transforms, a store failure, a lockout, a transform not loaded (yet). Such a delivery is
/// pulled again, not acknowledged: the edge answered for it, so it must not be forgotten. A
/// refusal the request earns itself (its signature, a condition, a lane, a transform's failure)
/// is recorded here with its reason and final (docs/edge.md#what-the-sender-and-the-operator-see).
fn may_pass(err: &HookError) -> bool {
    matches!(
        err,
        HookError::StoreFull
            | HookError::TransformsBusy
            | HookError::Internal(_)
            | HookError::LockedOut { .. }
            | HookError::MappingFailed(MappingFailure::NotLoaded { .. })
    )
}

/// Marks a request pulled from the edge, for the hook pipeline's authentication
/// (`credential::Credential`): one the edge took the hook token of is admitted as the token
/// admits; any other is checked here (its signature, its form rule) with no lockout, since its
/// sender only ever saw the edge's answer.
#[derive(Debug, Clone, Copy)]
pub(super) struct FromEdge {
    /// [`Delivery::by_token`].
    pub by_token: bool,
}

/// The request as the edge received it: method, target, headers (but the hook token's) and body
/// byte for byte; its peer the sender's address as the edge resolved it, its `X-Request-Id` the
/// edge's record id.
fn request_of(delivery: Delivery) -> Result<Request, String> {
    let mut request = Request::new(Body::from(delivery.body));
    *request.method_mut() =
        Method::from_bytes(delivery.method.as_bytes()).map_err(|_| "a bad method".to_string())?;
    *request.uri_mut() = delivery
        .target
        .parse()
        .map_err(|_| "a bad target".to_string())?;
    let headers = request.headers_mut();
    for (name, value) in delivery.headers {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value),
        ) else {
            return Err("a bad header".into());
        };
        headers.append(name, value);
    }
    let client = delivery.client.unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let extensions = request.extensions_mut();
    extensions.insert(ConnectInfo(SocketAddr::new(client, 0)));
    extensions.insert(RequestId::linked(&delivery.request_id));
    extensions.insert(FromEdge {
        by_token: delivery.by_token,
    });
    // Its sender was answered by the edge: a refusal here is no sender's to be told.
    extensions.insert(Origin::EdgePull);
    Ok(request)
}

/// A client error's text without its URL (which holds no secret, but the query is noise).
fn without_url(err: reqwest::Error) -> String {
    err.without_url().to_string()
}
