//! A mapping's `runs` (its lane) as the file states it, and the typed [`Lane`] it becomes at
//! load: how many of the mapping's runs may run at once, how many may wait, and which of the
//! queued runs the runner starts first (docs/hooks.md, "Lanes").

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::model::MappingConfig;
pub use super::model::RunsConfig;
use crate::mapping::Mapping;

/// Which queued run the runner starts first: every `high` run before any `normal` one, every
/// `normal` before any `low`; the oldest first within one priority. It orders the queued runs
/// of one session key alike, which run one at a time (docs/runtime.md, "Which run starts
/// next"). Stored with the run at
/// admission as its rank (0 for `high`), so that the queue's index gives the runner's order.
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    High,
    #[default]
    Normal,
    Low,
}

impl Priority {
    /// What `check` says a priority must be.
    pub const EXPECTED: &'static str = "must be high, normal or low";

    /// Reads a priority as the file writes it (case and surrounding blanks ignored).
    pub fn parse(text: &str) -> Option<Priority> {
        match text.trim().to_ascii_lowercase().as_str() {
            "high" => Some(Priority::High),
            "normal" => Some(Priority::Normal),
            "low" => Some(Priority::Low),
            _ => None,
        }
    }

    /// The lowercase name, as in the file and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }

    /// The stored rank: lower starts first.
    pub fn rank(self) -> i64 {
        match self {
            Priority::High => 0,
            Priority::Normal => 1,
            Priority::Low => 2,
        }
    }

    /// The priority of a stored rank; a rank no version wrote reads as `normal`.
    pub fn from_rank(rank: i64) -> Priority {
        match rank {
            0 => Priority::High,
            2 => Priority::Low,
            _ => Priority::Normal,
        }
    }
}

/// A mapping's lane, built once at load: the runner and admission read it as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane {
    /// The most of the mapping's runs at once; `None`: only the global limit of runs.
    pub max_concurrent: Option<NonZeroU32>,
    /// The most of the mapping's runs queued (not started); `None`: no bound.
    pub max_queued: Option<NonZeroU32>,
    pub priority: Priority,
}

/// Builds the lane of `mapping` (at `hooks.mappings[i]`) from its `runs`, adding each problem,
/// named by its key and without its value, to `problems`; `None` when there is one.
pub(super) fn lane(
    i: usize,
    mapping: &Mapping,
    runs: &RunsConfig,
    problems: &mut Vec<ConfigError>,
) -> Option<Lane> {
    let key = key!(MappingConfig[i].runs);
    let before = problems.len();
    super::run_settings::agent_only(&key, mapping, problems);
    let max_concurrent = match runs.max_concurrent {
        None => None,
        Some(n) => NonZeroU32::new(n).or_else(|| {
            problems.push(ConfigError::invalid(
                format!("{key}.maxConcurrent"),
                "must be at least 1",
            ));
            None
        }),
    };
    let max_queued = runs.max_queued.and_then(|n| {
        let floor = max_concurrent.map_or(1, NonZeroU32::get);
        if n < floor {
            let message = match max_concurrent {
                Some(_) => "must be at least maxConcurrent",
                None => "must be at least 1",
            };
            problems.push(ConfigError::invalid(format!("{key}.maxQueued"), message));
        }
        NonZeroU32::new(n)
    });
    let priority = match runs.priority.as_deref() {
        None => Priority::Normal,
        Some(text) => Priority::parse(text).unwrap_or_else(|| {
            problems.push(ConfigError::invalid(
                format!("{key}.priority"),
                Priority::EXPECTED,
            ));
            Priority::Normal
        }),
    };
    (problems.len() == before).then_some(Lane {
        max_concurrent,
        max_queued,
        priority,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::model::MappingConfig;

    fn built(config: serde_json::Value) -> Result<Option<Lane>, Vec<String>> {
        let config: MappingConfig = serde_json::from_value(config).unwrap();
        let mapping = crate::config::mapping::mapping(2, &config).unwrap();
        let mut problems = Vec::new();
        let lane = config
            .runs
            .as_ref()
            .and_then(|runs| lane(2, &mapping, runs, &mut problems));
        if problems.is_empty() {
            Ok(lane)
        } else {
            Err(problems.iter().map(ToString::to_string).collect())
        }
    }

    #[test]
    fn a_lane_is_typed_at_load() {
        let lane =
            built(json!({"runs": {"maxConcurrent": 2, "maxQueued": 5, "priority": " High "}}))
                .unwrap()
                .unwrap();
        assert_eq!(lane.max_concurrent.map(NonZeroU32::get), Some(2));
        assert_eq!(lane.max_queued.map(NonZeroU32::get), Some(5));
        assert_eq!(lane.priority, Priority::High);
        let default = built(json!({"runs": {}})).unwrap().unwrap();
        assert_eq!(default.priority, Priority::Normal);
        assert_eq!(default.max_concurrent, None);
        assert_eq!(built(json!({})).unwrap(), None);
    }

    #[test]
    fn bad_values_name_their_key_and_not_the_value() {
        let problems = |config| built(config).unwrap_err();
        assert_eq!(
            problems(json!({"runs": {"maxConcurrent": 0}})),
            ["hooks.mappings[2].runs.maxConcurrent: must be at least 1"]
        );
        assert_eq!(
            problems(json!({"runs": {"maxConcurrent": 4, "maxQueued": 3}})),
            ["hooks.mappings[2].runs.maxQueued: must be at least maxConcurrent"]
        );
        assert_eq!(
            problems(json!({"runs": {"maxQueued": 0}})),
            ["hooks.mappings[2].runs.maxQueued: must be at least 1"]
        );
        let urgent = problems(json!({"runs": {"priority": "urgent"}}));
        assert_eq!(
            urgent,
            ["hooks.mappings[2].runs.priority: must be high, normal or low"]
        );
        assert_eq!(
            problems(json!({"action": "wake", "runs": {"maxConcurrent": 1}})),
            [
                "hooks.mappings[2].runs: applies to agent mappings only: a wake mapping starts no run"
            ]
        );
    }

    #[test]
    fn ranks_order_high_first_and_read_back() {
        let mut all = [Priority::Low, Priority::High, Priority::Normal];
        all.sort_by_key(|p| p.rank());
        assert_eq!(all, [Priority::High, Priority::Normal, Priority::Low]);
        for p in all {
            assert_eq!(Priority::from_rank(p.rank()), p);
        }
    }
}
