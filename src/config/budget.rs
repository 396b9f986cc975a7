//! `budget` of a mapping (`hooks.mappings[i].budget`) and of an agent
//! (`agents.list[i].budget`): how many runs an hour and tokens a day their runs may take, and
//! what becomes of a run past that (docs/hooks.md#budgets). Read once at load into a [`Budget`];
//! admission and the release of held runs only compare numbers.

use std::collections::HashMap;
use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

pub use super::model::BudgetConfig;
use super::model::{AgentEntryConfig, MappingConfig};
use super::runtime::GatewayMode;
use super::{ConfigError, ConfigNotice, Settings};
use crate::hook::policy::normalize_agent_id;
use crate::mapping::Mapping;

/// The rolling window of `runsPerHour`.
pub const RUNS_WINDOW: Duration = Duration::from_secs(3600);
/// The rolling window of `tokensPerDay`.
pub const TOKENS_WINDOW: Duration = Duration::from_secs(86_400);

/// What becomes of a run its budget has no room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnExceeded {
    /// Stored as `held`, started when the window has room or the operator releases it.
    Hold,
    /// Answered `429` with `Retry-After`; nothing is stored.
    Refuse,
}

/// A budget, its limits checked at load: at least one, none zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub tokens_per_day: Option<NonZeroU64>,
    pub runs_per_hour: Option<NonZeroU32>,
    pub on_exceeded: OnExceeded,
}

/// Every budget of a configuration: mappings' by mapping id, agents' by normalised agent id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budgets {
    pub mappings: HashMap<String, Budget>,
    pub agents: HashMap<String, Budget>,
    /// Every budget with the key it was read at, for the notices that need the rest of the
    /// configuration (forward mode's `tokensPerDay`).
    pub declared: Vec<(String, Budget)>,
}

impl Budgets {
    /// Whether no mapping and no agent has a budget: then admission counts nothing.
    pub fn is_empty(&self) -> bool {
        self.mappings.is_empty() && self.agents.is_empty()
    }
}

/// The budget at `key`, or `None` with its problems added to `problems`. The values are never
/// repeated in a message.
pub fn budget(config: &BudgetConfig, key: &str, problems: &mut Vec<ConfigError>) -> Option<Budget> {
    let before = problems.len();
    let on_exceeded = match config.on_exceeded.as_deref().map(str::trim) {
        None | Some("hold") => OnExceeded::Hold,
        Some("refuse") => OnExceeded::Refuse,
        Some(_) => {
            problems.push(ConfigError::invalid(
                format!("{key}.onExceeded"),
                "must be hold or refuse",
            ));
            OnExceeded::Hold
        }
    };
    let tokens_per_day = config.tokens_per_day.map(NonZeroU64::new);
    if tokens_per_day == Some(None) {
        problems.push(ConfigError::invalid(
            format!("{key}.tokensPerDay"),
            "must be at least 1 (leave it out for no token limit)",
        ));
    }
    let runs_per_hour = config.runs_per_hour.map(NonZeroU32::new);
    if runs_per_hour == Some(None) {
        problems.push(ConfigError::invalid(
            format!("{key}.runsPerHour"),
            "must be at least 1 (leave it out for no run limit)",
        ));
    }
    if tokens_per_day.is_none() && runs_per_hour.is_none() {
        problems.push(ConfigError::invalid(
            key,
            "needs tokensPerDay or runsPerHour (or both)",
        ));
    }
    (problems.len() == before).then(|| Budget {
        tokens_per_day: tokens_per_day.flatten(),
        runs_per_hour: runs_per_hour.flatten(),
        on_exceeded,
    })
}

impl Budgets {
    /// Adds mapping `i`'s budget: only an agent mapping starts runs to count.
    pub fn add_mapping(
        &mut self,
        i: usize,
        mapping: &Mapping,
        config: &BudgetConfig,
        problems: &mut Vec<ConfigError>,
    ) {
        let key = key!(MappingConfig[i].budget);
        if !super::run_settings::agent_only(&key, mapping, problems) {
            return;
        }
        if let Some(budget) = self.read(config, key, problems) {
            self.mappings.insert(mapping.id.clone(), budget);
        }
    }

    /// Adds the budget of agent `id` at `agents.list[index]`, by normalised agent id.
    pub fn add_agent(
        &mut self,
        index: usize,
        id: &str,
        config: &BudgetConfig,
        problems: &mut Vec<ConfigError>,
    ) {
        let key = key!(AgentEntryConfig[index].budget);
        if let Some(budget) = self.read(config, key, problems) {
            self.agents.insert(normalize_agent_id(id), budget);
        }
    }

    fn read(
        &mut self,
        config: &BudgetConfig,
        key: String,
        problems: &mut Vec<ConfigError>,
    ) -> Option<Budget> {
        let budget = budget(config, &key, problems)?;
        self.declared.push((key, budget));
        Some(budget)
    }
}

/// In forward mode the upstream runs the model, and OpenClaw's answer to a relayed run (its
/// `completion`) carries its status and delivery facts, never its token usage: this gateway never
/// learns a run's tokens, so a `tokensPerDay` cannot apply there (`runsPerHour` counts the runs
/// relayed, and `hold` holds them). `check` says so for each one.
pub(super) fn budget_notices(settings: &Settings) -> Vec<ConfigNotice> {
    let (GatewayMode::Forward(_), Some(hooks)) = (&settings.runtime.mode, &settings.hooks) else {
        return Vec::new();
    };
    hooks
        .budgets
        .declared
        .iter()
        .filter(|(_, budget)| budget.tokens_per_day.is_some())
        .map(|(key, _)| ConfigNotice {
            key: format!("{key}.tokensPerDay"),
            message: "does not apply in forward mode: the upstream runs the model and its answer \
                      to a relayed run reports no token usage, so this gateway cannot count \
                      tokens (runsPerHour applies)"
                .into(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn checked(config: serde_json::Value) -> (Option<Budget>, Vec<String>) {
        let config: BudgetConfig = serde_json::from_value(config).unwrap();
        let mut problems = Vec::new();
        let budget = budget(&config, "hooks.mappings[2].budget", &mut problems);
        (budget, problems.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_budget_is_read_once_into_its_limits() {
        let (budget, problems) = checked(json!({"runsPerHour": 5, "onExceeded": "refuse"}));
        assert!(problems.is_empty(), "{problems:?}");
        let budget = budget.unwrap();
        assert_eq!(budget.runs_per_hour, NonZeroU32::new(5));
        assert_eq!(budget.tokens_per_day, None);
        assert_eq!(budget.on_exceeded, OnExceeded::Refuse);
        let (held, _) = checked(json!({"tokensPerDay": 1000}));
        assert_eq!(held.unwrap().on_exceeded, OnExceeded::Hold);
    }

    #[test]
    fn bad_budgets_name_the_key_and_never_the_value() {
        let (budget, problems) = checked(json!({"runsPerHour": 0, "onExceeded": "drop-it"}));
        assert!(budget.is_none());
        assert_eq!(
            problems,
            [
                "hooks.mappings[2].budget.onExceeded: must be hold or refuse",
                "hooks.mappings[2].budget.runsPerHour: must be at least 1 (leave it out for no run limit)",
            ]
        );
        assert!(!problems.iter().any(|p| p.contains("drop-it")));
        let (_, problems) = checked(json!({"onExceeded": "hold"}));
        assert_eq!(
            problems,
            ["hooks.mappings[2].budget: needs tokensPerDay or runsPerHour (or both)"]
        );
    }
}
