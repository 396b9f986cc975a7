//! `GET /api/overview`: is everything all right, and where does the spend go
//! (docs/operations.md#the-overview). Requests by minute and by how they ended over the last
//! hours, each budget against its limit, each agent mapping's spend over 24 hours, each lane's
//! running, queued and held runs, the runs by status and the oldest held run. The console's
//! overview draws it. Costs a step of the request log per request of the window, a walk of
//! the runs' status index, and admission's count of each budget.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::api_error::{ApiError, ApiQuery};
use super::api_spend::{MappingSpend, agent_mappings, scope_spend};
use super::edge::LinkView;
use crate::gateway::RunStatus;
use crate::gateway::admission::budget::BudgetStanding;
use crate::gateway::requests::{MAX_MINUTES, OutcomeCounts, RequestMinute};
use crate::gateway::runtime_clock::{now_ms, rfc3339};
use crate::gateway::store::overview::{LaneRuns, OldestHeld};

/// The hours of requests counted when the request names none.
const DEFAULT_HOURS: i64 = 3;
/// A minute, in milliseconds.
const MINUTE_MS: i64 = 60_000;
/// The window of the spend per mapping: a day, as `GET /api/spend`'s.
const SPEND_WINDOW_MS: i64 = 24 * 60 * MINUTE_MS;

/// The parameters of `GET /api/overview`; another name is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverviewQuery {
    /// Hours of requests to count, 1 to 24.
    hours: Option<String>,
}

/// `GET /api/overview?hours=`: the overview now, its requests over the last `hours` (3 unless
/// given, at most 24).
pub async fn overview(
    State(app): State<AppState>,
    ApiQuery(query): ApiQuery<OverviewQuery>,
) -> Result<Response, ApiError> {
    let hours = match query.hours.as_deref() {
        None => DEFAULT_HOURS,
        Some(text) => text
            .parse()
            .ok()
            .filter(|hours| (1..=MAX_MINUTES / 60).contains(hours))
            .ok_or_else(|| ApiError::Invalid("hours must be an integer from 1 to 24".into()))?,
    };
    let now = now_ms();
    // The window's minutes end with the current one.
    let since_ms = (now / MINUTE_MS - (hours * 60 - 1)) * MINUTE_MS;
    let minutes = app.request_log.minutes(since_ms).await?;
    let mut totals = OutcomeCounts::default();
    for minute in &minutes {
        totals.add_all(&minute.counts);
    }
    let settings = app.config.current();
    let budgets = match &settings.hooks {
        Some(hooks) => app.store.budget_standing(&hooks.budgets, now).await?,
        None => Vec::new(),
    };
    let (spend, _) = scope_spend(&app, rfc3339(now - SPEND_WINDOW_MS)).await?;
    let runs_now = app.store.runs_now().await?;
    let lanes = lanes(&settings, runs_now.lanes);
    let runs = runs_now
        .by_status
        .into_iter()
        .map(|(status, runs)| StatusRuns { status, runs })
        .collect();
    let oldest_held = runs_now.oldest_held.map(|run| HeldView::of(run, now));
    let edge = edge_view(&app).await;
    Ok(Json(Overview {
        at: rfc3339(now),
        requests: RequestsView {
            since: rfc3339(since_ms),
            minute_ms: MINUTE_MS,
            minutes,
            totals,
        },
        budgets,
        spend,
        lanes,
        runs,
        oldest_held,
        edge,
    })
    .into_response())
}

/// The link of docs/edge.md as this node sees it: its own queue on an edge, its last pull on a
/// private node; `None` on every other node.
async fn edge_view(app: &AppState) -> Option<EdgeView> {
    if let Some(queue) = &app.edge_queue {
        let status = queue.status().await.ok()?;
        return Some(EdgeView {
            role: "edge",
            edge_url: None,
            link: status.into(),
            error: None,
        });
    }
    let seen = app.edge_link.seen()?;
    Some(EdgeView {
        role: "private",
        edge_url: Some(seen.edge_url),
        link: LinkView {
            last_acked: seen.last_acked.max(seen.link.last_acked),
            ..seen.link
        },
        error: seen.error,
    })
}

/// The overview's `edge`: connected, backlog, oldest waiting age, last acknowledged.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EdgeView {
    /// `edge` or `private`.
    role: &'static str,
    /// The edge a private node pulls from.
    edge_url: Option<String>,
    #[serde(flatten)]
    link: LinkView,
    /// Why a private node's last attempt to reach the edge failed, while it fails.
    error: Option<String>,
}

/// The answer of `GET /api/overview`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Overview {
    /// RFC 3339: when it was read.
    at: String,
    requests: RequestsView,
    budgets: Vec<BudgetStanding>,
    /// Each agent mapping's runs and tokens over the last 24 hours, as `GET /api/spend`.
    spend: Vec<MappingSpend>,
    lanes: Vec<LaneView>,
    /// Every run status, with the runs the store keeps in it.
    runs: Vec<StatusRuns>,
    oldest_held: Option<HeldView>,
    /// The edge link (docs/edge.md); absent on a node that is neither an edge nor dials one.
    #[serde(skip_serializing_if = "Option::is_none")]
    edge: Option<EdgeView>,
}

/// The requests of the window, by minute.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RequestsView {
    /// RFC 3339: the window's first minute.
    since: String,
    /// The width of a bucket, in milliseconds.
    minute_ms: i64,
    /// The minutes that had requests, oldest first.
    minutes: Vec<RequestMinute>,
    totals: OutcomeCounts,
}

/// One lane's runs now, and its bounds.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LaneView {
    #[serde(flatten)]
    runs: LaneRuns,
    /// `runs.maxConcurrent` of the mapping; null when it sets none.
    max_concurrent: Option<u32>,
    /// `runs.maxQueued` of the mapping; null when it sets none.
    max_queued: Option<u32>,
}

/// Every agent mapping of the configuration in force, in its order, then any other lane with
/// runs (a mapping since removed, an agent's runs of no mapping).
fn lanes(settings: &crate::config::Settings, mut busy: Vec<LaneRuns>) -> Vec<LaneView> {
    let hooks = settings.hooks.as_ref();
    let view = |runs: LaneRuns| {
        let lane = runs
            .mapping_id
            .as_deref()
            .and_then(|id| hooks?.lane_for(id));
        LaneView {
            max_concurrent: lane.and_then(|l| l.max_concurrent).map(|n| n.get()),
            max_queued: lane.and_then(|l| l.max_queued).map(|n| n.get()),
            runs,
        }
    };
    let mut lanes: Vec<LaneView> = agent_mappings(settings)
        .into_iter()
        .map(|id| {
            let at = busy
                .iter()
                .position(|lane| lane.mapping_id.as_deref() == Some(&id));
            view(at.map(|at| busy.remove(at)).unwrap_or(LaneRuns {
                mapping_id: Some(id),
                ..LaneRuns::default()
            }))
        })
        .collect();
    lanes.extend(busy.into_iter().map(view));
    lanes
}

/// One status, and the runs in it.
#[derive(Serialize)]
struct StatusRuns {
    status: RunStatus,
    runs: u64,
}

/// The held run that has waited longest, and for how long.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HeldView {
    #[serde(flatten)]
    run: OldestHeld,
    /// Whole seconds since it was accepted.
    waited_seconds: u64,
}

impl HeldView {
    fn of(run: OldestHeld, now_ms: i64) -> HeldView {
        let created = chrono::DateTime::parse_from_rfc3339(&run.created_at)
            .map_or(now_ms, |at| at.timestamp_millis());
        HeldView {
            waited_seconds: u64::try_from((now_ms - created) / 1000).unwrap_or(0),
            run,
        }
    }
}
