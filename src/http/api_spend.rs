//! `GET /api/spend`: what each agent mapping's runs and each agent's runs and heartbeat turns
//! cost over a rolling window, the last 24 hours unless `since` says otherwise
//! (docs/runtime.md#what-runs-cost). The console's spend table reads it.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::api_error::{ApiError, ApiQuery};
use super::query_params::time_ms;
use crate::config::Settings;
use crate::config::runtime::GatewayMode;
use crate::gateway::runtime_clock::{now_ms, rfc3339};
use crate::gateway::store::spend::Spend;
use crate::mapping::ActionKind;

/// The window when the request names none: a day.
const DEFAULT_WINDOW_MS: i64 = 24 * 60 * 60 * 1000;

/// The parameters of `GET /api/spend`; another name is refused. Its JSON Schema is what the
/// MCP tool `spend` shows an agent.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpendQuery {
    /// RFC 3339: the window's start (default 24 hours ago).
    since: Option<String>,
}

/// `GET /api/spend?since=`: each agent mapping of the configuration in force, in its order,
/// with the runs it admitted since `since` and the tokens of its runs that finished since then;
/// and each agent (the default first), with its runs, its heartbeat turns, and the tokens of
/// both. Costs a few index lookups per mapping and agent, and a step per run of the window.
pub async fn spend(
    State(app): State<AppState>,
    ApiQuery(query): ApiQuery<SpendQuery>,
) -> Result<Response, ApiError> {
    let since_ms = match query.since {
        Some(text) => time_ms(&text, "since")?,
        None => now_ms() - DEFAULT_WINDOW_MS,
    };
    let since = rfc3339(since_ms);
    let (mappings, agents) = scope_spend(&app, since.clone()).await?;
    Ok(Json(SpendView {
        since,
        mappings,
        agents,
    })
    .into_response())
}

/// The agent mappings of the configuration in force (`agent_mappings`) and its agents, each
/// with its spend since `since` (RFC 3339, the store's form).
pub(super) async fn scope_spend(
    app: &AppState,
    since: String,
) -> Result<(Vec<MappingSpend>, Vec<AgentSpend>), ApiError> {
    let settings = app.config.current();
    // In forward mode the upstream runs the model: no provider reports tokens here.
    let tokens_known = matches!(settings.runtime.mode, GatewayMode::Embedded);
    let agents = settings.agents.ids().map(String::from).collect();
    let (mappings, agents) = app
        .store
        .spend_by_scope(agent_mappings(&settings), agents, since)
        .await?;
    let mappings = mappings
        .into_iter()
        .map(|(mapping_id, spend)| MappingSpend::of(mapping_id, spend, tokens_known))
        .collect();
    let agents = agents
        .into_iter()
        .map(|(agent_id, spend)| AgentSpend::of(agent_id, spend, tokens_known))
        .collect();
    Ok((mappings, agents))
}

/// The ids of the agent mappings of `settings`, in their order.
pub(super) fn agent_mappings(settings: &Settings) -> Vec<String> {
    settings
        .hooks
        .iter()
        .flat_map(|hooks| &hooks.mappings)
        .filter(|mapping| mapping.kind == ActionKind::Agent)
        .map(|mapping| mapping.id.clone())
        .collect()
}

/// The answer of `GET /api/spend`.
#[derive(Serialize)]
struct SpendView {
    /// The window's start, as the store compares it.
    since: String,
    mappings: Vec<MappingSpend>,
    agents: Vec<AgentSpend>,
}

/// One mapping's spend; tokens null when they are not known here (forward mode).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct MappingSpend {
    mapping_id: String,
    runs: u64,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl MappingSpend {
    fn of(mapping_id: String, spend: Spend, tokens_known: bool) -> MappingSpend {
        let known = |tokens| tokens_known.then_some(tokens);
        MappingSpend {
            mapping_id,
            runs: spend.runs,
            input_tokens: known(spend.input_tokens),
            output_tokens: known(spend.output_tokens),
        }
    }
}

/// One agent's spend: its runs, whatever admitted them, and its heartbeat turns, whose tokens
/// are in its sums (what its budget's `tokensPerDay` counts); tokens null when not known here.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AgentSpend {
    agent_id: String,
    runs: u64,
    heartbeats: u64,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl AgentSpend {
    fn of(agent_id: String, spend: Spend, tokens_known: bool) -> AgentSpend {
        let known = |tokens| tokens_known.then_some(tokens);
        AgentSpend {
            agent_id,
            runs: spend.runs,
            heartbeats: spend.heartbeats,
            input_tokens: known(spend.input_tokens),
            output_tokens: known(spend.output_tokens),
        }
    }
}
