//! A mapping's `runs` (its lane) as the file writes it.

use schemars::JsonSchema;
use serde::Deserialize;

/// `runs` of a mapping, as written.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunsConfig {
    /// The most runs of the mapping at once.
    #[schemars(extend("x-default" = "only the global limit"), range(min = 1))]
    pub max_concurrent: Option<u32>,
    /// The most runs of the mapping waiting to start, queued or held by a budget; a request
    /// past it is answered 429 (at least `maxConcurrent`).
    #[schemars(extend("x-default" = "no bound"), range(min = 1))]
    pub max_queued: Option<u32>,
    /// Which queued run starts first.
    #[schemars(extend("default" = "normal", "enum" = ["high", "normal", "low"]))]
    pub priority: Option<String>,
}
