//! A mapping's `batch` as the file states it, and the [`BatchRule`] it becomes at load. A bad
//! value is reported under its key (`hooks.mappings[2].batch.window`) and never repeated.

use std::time::Duration;

use super::ConfigError;
pub use super::model::BatchConfig;
use super::model::MappingConfig;
use super::model::defaults::{DEFAULT_MAX_ITEMS, MAX_ITEMS};
use crate::mapping::{BatchRule, Mapping};

/// The longest window a batch may gather for: a day.
const MAX_WINDOW: Duration = Duration::from_secs(86_400);

/// Mapping `i`'s batch rule, or `None` with every problem added to `problems`: a window of a
/// duration greater than 0 and at most a day, `maxItems` from 1 to 1000, on an agent mapping
/// whose session key is not templated per request (a key per request would make every request
/// a batch of its own).
pub(super) fn batch_rule(
    i: usize,
    mapping: &Mapping,
    config: &BatchConfig,
    problems: &mut Vec<ConfigError>,
) -> Option<BatchRule> {
    let key = key!(MappingConfig[i].batch);
    let before = problems.len();
    super::run_settings::agent_only(&key, mapping, problems);
    if mapping.session_key_is_templated() {
        problems.push(ConfigError::invalid(
            &key,
            "needs a sessionKey that is the same for every request: this mapping's is templated per request",
        ));
    }
    // The value is not repeated: a configuration message never echoes one.
    let window = humantime::parse_duration(config.window.trim())
        .ok()
        .filter(|window| !window.is_zero() && *window <= MAX_WINDOW);
    if window.is_none() {
        problems.push(ConfigError::invalid(
            format!("{key}.window"),
            "must be a duration greater than 0 and at most 1d, like 30s or 5m",
        ));
    }
    let max_items = config.max_items.unwrap_or(DEFAULT_MAX_ITEMS);
    if max_items == 0 || max_items > MAX_ITEMS {
        problems.push(ConfigError::invalid(
            format!("{key}.maxItems"),
            format!("must be a whole number from 1 to {MAX_ITEMS}"),
        ));
    }
    let window = window.filter(|_| problems.len() == before)?;
    Some(BatchRule { window, max_items })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::config::model::MappingConfig;

    fn rule(mapping: Value) -> Result<BatchRule, Vec<String>> {
        let config: MappingConfig = serde_json::from_value(mapping).unwrap();
        let built = crate::config::mapping::mapping(2, &config).unwrap();
        let mut problems = Vec::new();
        batch_rule(2, &built, config.batch.as_ref().unwrap(), &mut problems)
            .ok_or_else(|| problems.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_window_and_a_count_make_a_rule() {
        let built = rule(json!({"batch": {"window": "30s", "maxItems": 7}})).unwrap();
        assert_eq!(built.window, Duration::from_secs(30));
        assert_eq!(built.max_items, 7);
        let default = rule(json!({"batch": {"window": "1m"}})).unwrap();
        assert_eq!(default.max_items, DEFAULT_MAX_ITEMS);
    }

    #[test]
    fn each_bad_value_is_named_by_its_key_and_not_repeated() {
        let problems = rule(json!({"batch": {"window": "0s", "maxItems": 0}})).unwrap_err();
        assert_eq!(
            problems,
            [
                "hooks.mappings[2].batch.window: must be a duration greater than 0 and at most 1d, like 30s or 5m",
                "hooks.mappings[2].batch.maxItems: must be a whole number from 1 to 1000",
            ]
        );
        let problems = rule(json!({"batch": {"window": "soon-ish"}})).unwrap_err();
        assert!(problems[0].starts_with("hooks.mappings[2].batch.window: "));
        assert!(!problems[0].contains("soon-ish"));
        assert!(rule(json!({"batch": {"window": "2d"}})).is_err());
    }

    #[test]
    fn a_wake_or_a_key_per_request_gathers_nothing() {
        let wake = rule(json!({"action": "wake", "batch": {"window": "30s"}})).unwrap_err();
        assert_eq!(
            wake,
            [
                "hooks.mappings[2].batch: applies to agent mappings only: a wake mapping starts no run"
            ]
        );
        let templated =
            rule(json!({"sessionKey": "hook:{{id}}", "batch": {"window": "30s"}})).unwrap_err();
        assert_eq!(templated.len(), 1);
        assert!(templated[0].starts_with("hooks.mappings[2].batch: needs a sessionKey"));
        assert!(!templated[0].contains("{{id}}"));
        assert!(rule(json!({"sessionKey": "hook:inbox", "batch": {"window": "30s"}})).is_ok());
    }
}
