//! `mcp.subscriptions` into [`AgentCaps`]: the most an agent-made subscription may set, read
//! once (docs/mcp.md#what-an-agent-may-subscribe-to). Applying them to a subscription is
//! `crate::subscription::caps`'s.

use super::ConfigError;
use super::lanes::Priority;
use super::model::{McpBudgetCapConfig, McpLaneCapConfig, McpSubscriptionsConfig};
use crate::mapping::ActionKind;

/// The caps on subscriptions agents make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCaps {
    /// The most agent-made subscriptions at once, all MCP credentials together.
    pub max_subscriptions: u32,
    /// The actions an agent-made subscription may take.
    pub actions: Vec<ActionKind>,
    /// The highest `budget.tokensPerDay`, and the one given when none is.
    pub tokens_per_day: u64,
    /// The highest `budget.runsPerHour`, and the one given when none is.
    pub runs_per_hour: u32,
    /// The highest `runs.maxConcurrent`, and the one given when none is.
    pub max_concurrent: u32,
    /// The highest `runs.maxQueued`, and the one given when none is.
    pub max_queued: u32,
    /// The highest `runs.priority`.
    pub priority: Priority,
}

/// `mcp.subscriptions`, every problem (named by its key, never with its value) pushed to
/// `problems`; `None` when it is unset or has a problem.
pub(super) fn agent_caps(
    config: Option<McpSubscriptionsConfig>,
    problems: &mut Vec<ConfigError>,
) -> Option<AgentCaps> {
    let config = config?;
    let before = problems.len();
    let at_least_one = |value: Option<u32>, default: u32, key: String, problems: &mut Vec<_>| {
        let value = value.unwrap_or(default);
        if value == 0 {
            problems.push(ConfigError::invalid(key, "must be at least 1"));
        }
        value
    };
    let max_subscriptions = at_least_one(
        config.max_subscriptions,
        10,
        key!(McpSubscriptionsConfig.max_subscriptions),
        problems,
    );
    let actions = actions(config.actions, problems);
    let budget = config.budget.unwrap_or_default();
    let required = |value: Option<u64>, key: String, problems: &mut Vec<_>| match value {
        Some(0) | None => {
            problems.push(ConfigError::invalid(key, "must be set, at least 1"));
            0
        }
        Some(n) => n,
    };
    let tokens_per_day = required(
        budget.tokens_per_day,
        key!(McpBudgetCapConfig.tokens_per_day),
        problems,
    );
    let runs_per_hour = required(
        budget.runs_per_hour.map(u64::from),
        key!(McpBudgetCapConfig.runs_per_hour),
        problems,
    );
    let runs = config.runs.unwrap_or_default();
    let max_concurrent = at_least_one(
        runs.max_concurrent,
        1,
        key!(McpLaneCapConfig.max_concurrent),
        problems,
    );
    let max_queued = at_least_one(
        runs.max_queued,
        100,
        key!(McpLaneCapConfig.max_queued),
        problems,
    );
    if max_queued < max_concurrent {
        problems.push(ConfigError::invalid(
            key!(McpLaneCapConfig.max_queued),
            "must be at least maxConcurrent",
        ));
    }
    let priority = match runs.priority.as_deref() {
        None => Priority::Normal,
        Some(text) => Priority::parse(text).unwrap_or_else(|| {
            let key = key!(McpLaneCapConfig.priority);
            problems.push(ConfigError::invalid(key, Priority::EXPECTED));
            Priority::Normal
        }),
    };
    (problems.len() == before).then(|| AgentCaps {
        max_subscriptions,
        actions,
        tokens_per_day,
        runs_per_hour: u32::try_from(runs_per_hour).unwrap_or(u32::MAX),
        max_concurrent,
        max_queued,
        priority,
    })
}

/// `mcp.subscriptions.actions`: each `agent`, `wake` or `notify`; `agent` alone when unset.
fn actions(names: Option<Vec<String>>, problems: &mut Vec<ConfigError>) -> Vec<ActionKind> {
    let Some(names) = names else {
        return vec![ActionKind::Agent];
    };
    let key = key!(McpSubscriptionsConfig.actions);
    let mut actions = Vec::new();
    for name in &names {
        match ActionKind::from_wire(name.trim()) {
            Some(action) if !actions.contains(&action) => actions.push(action),
            Some(_) => {}
            None => problems.push(ConfigError::invalid(
                key.clone(),
                "each action must be one of agent, wake, notify",
            )),
        }
    }
    if names.is_empty() {
        problems.push(ConfigError::invalid(
            key,
            "must name at least one of agent, wake, notify",
        ));
    }
    actions
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(value: serde_json::Value) -> (Option<AgentCaps>, Vec<String>) {
        let mut problems = Vec::new();
        let caps = agent_caps(serde_json::from_value(value).unwrap(), &mut problems);
        (caps, problems.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn unset_keys_take_their_defaults() {
        let (caps, problems) = read(json!({"budget": {"tokensPerDay": 5000, "runsPerHour": 3}}));
        assert!(problems.is_empty(), "{problems:?}");
        let caps = caps.unwrap();
        assert_eq!(caps.max_subscriptions, 10);
        assert_eq!(caps.actions, vec![ActionKind::Agent]);
        assert_eq!((caps.max_concurrent, caps.max_queued), (1, 100));
        assert_eq!(caps.priority, Priority::Normal);
    }

    #[test]
    fn a_problem_names_its_key_and_never_its_value() {
        let (caps, problems) = read(json!({
            "actions": ["agent", "shell-xyz"],
            "budget": {"runsPerHour": 3},
            "runs": {"maxConcurrent": 5, "maxQueued": 2, "priority": "urgent-xyz"},
        }));
        assert!(caps.is_none());
        let text = problems.join("\n");
        for key in [
            "mcp.subscriptions.actions",
            "mcp.subscriptions.budget.tokensPerDay",
            "mcp.subscriptions.runs.maxQueued",
            "mcp.subscriptions.runs.priority",
        ] {
            assert!(text.contains(key), "{key}: {text}");
        }
        assert!(!text.contains("xyz"), "{text}");
    }
}
