//! A mapping's `batch` as the file writes it.

use schemars::JsonSchema;
use serde::Deserialize;

use super::defaults::{DEFAULT_MAX_ITEMS, MAX_ITEMS};

/// `batch` of an agent mapping: `{window: "30s", maxItems: 50}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BatchConfig {
    /// How long a batch gathers from its first request: `30s`, `5m`, `1h30m`.
    pub window: String,
    /// The most requests of one batch.
    #[schemars(extend("default" = DEFAULT_MAX_ITEMS), range(min = 1, max = MAX_ITEMS))]
    pub max_items: Option<u32>,
}
