//! `mcp.*`: the credentials of the MCP endpoint (docs/mcp.md).

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
    /// request), `subscriptions` (reserved for runtime subscriptions).
    #[schemars(extend("items" = {"enum": ["read", "replay", "subscriptions"]}))]
    pub scopes: Vec<String>,
}
