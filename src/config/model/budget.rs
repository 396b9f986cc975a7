//! `budget` of a mapping or an agent as the file writes it.

use schemars::JsonSchema;
use serde::Deserialize;

/// `budget` as the file writes it.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BudgetConfig {
    /// Input and output tokens the runs may use in any 24 hours.
    #[schemars(range(min = 1))]
    pub tokens_per_day: Option<u64>,
    /// Runs that may enter the queue in any hour: accepted, or released from hold, within it
    /// (whether they have started yet or not).
    #[schemars(range(min = 1))]
    pub runs_per_hour: Option<u32>,
    /// `hold`: a run past the budget is stored and waits; `refuse`: it is answered 429 and
    /// nothing is stored.
    #[schemars(extend("default" = "hold", "enum" = ["hold", "refuse"]))]
    pub on_exceeded: Option<String>,
}
