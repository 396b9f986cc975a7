//! `mcp.*`: the credentials of the MCP endpoint (docs/mcp.md), and the caps on what an agent
//! may subscribe to.

use schemars::JsonSchema;
use serde::Deserialize;

use super::SecretValue;

/// `mcp.*`: who may call the MCP endpoint (`/mcp`, and `hookgate mcp` through it).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpConfig {
    /// The bearer credentials of `/mcp`, each with its scopes; none leaves the endpoint closed.
    /// Never the hook token nor the gateway token.
    #[serde(default)]
    pub tokens: Vec<McpTokenConfig>,
    /// The most an agent (a credential with the `subscriptions` scope) may make a subscription
    /// do (docs/mcp.md#what-an-agent-may-subscribe-to). Unset, agents may list, test, pause and
    /// delete subscriptions agents made, but create none.
    pub subscriptions: Option<McpSubscriptionsConfig>,
}

/// `mcp.tokens[]`: one credential of the MCP endpoint.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpTokenConfig {
    /// What the request log calls the credential's calls (never the token itself).
    #[schemars(extend("x-default" = "`token-<index>`"))]
    pub name: Option<String>,
    /// The bearer token; a `{file: ...}` or `${NAME}` like every secret.
    pub token: SecretValue,
    /// What it may do: `read` (the request log, runs, spend, dry runs), `replay` (replay a
    /// request), `subscriptions` (list, create, test, pause, resume and delete subscriptions,
    /// within `mcp.subscriptions`).
    #[schemars(extend("items" = {"enum": ["read", "replay", "subscriptions"]}))]
    pub scopes: Vec<String>,
}

/// `mcp.subscriptions`: the caps on subscriptions agents make. An agent-made subscription that
/// asks for more is refused, naming the cap; one that leaves a capped key unset gets the cap.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpSubscriptionsConfig {
    /// The most subscriptions agents may have made at once, all MCP credentials together
    /// (paused ones count; deleting one frees its place).
    #[schemars(extend("default" = 10), range(min = 1))]
    pub max_subscriptions: Option<u32>,
    /// The actions an agent-made subscription may take: `agent`, `wake`, `notify`.
    #[schemars(extend("default" = ["agent"], "items" = {"enum": ["agent", "wake", "notify"]}))]
    pub actions: Option<Vec<String>>,
    /// The highest budget of an agent-made `agent` subscription (required).
    pub budget: Option<McpBudgetCapConfig>,
    /// The highest lane of an agent-made `agent` subscription.
    pub runs: Option<McpLaneCapConfig>,
}

/// `mcp.subscriptions.budget`: an agent-made subscription's budget may not exceed these.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpBudgetCapConfig {
    /// Tokens a day (required).
    #[schemars(range(min = 1))]
    pub tokens_per_day: Option<u64>,
    /// Runs an hour (required).
    #[schemars(range(min = 1))]
    pub runs_per_hour: Option<u32>,
}

/// `mcp.subscriptions.runs`: an agent-made subscription's lane may not exceed these.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpLaneCapConfig {
    /// Runs at once.
    #[schemars(extend("default" = 1), range(min = 1))]
    pub max_concurrent: Option<u32>,
    /// Runs waiting to start.
    #[schemars(extend("default" = 100), range(min = 1))]
    pub max_queued: Option<u32>,
    /// The highest priority its runs may have.
    #[schemars(extend("default" = "normal", "enum" = ["high", "normal", "low"]))]
    pub priority: Option<String>,
}
