//! What the settings that shape an agent mapping's runs (`runs`, `batch`, `budget`) have in
//! common: a wake or notify mapping starts no run, so none of them applies to one.

use super::ConfigError;
use crate::mapping::{ActionKind, Mapping};

/// Whether `mapping` is an agent mapping; when it is not (a wake starts no run), adds to
/// `problems` that `key`, a run setting (`runs`, `batch`, `budget`), applies to agent mappings
/// only. The one wording of that refusal for every such key.
pub(super) fn agent_only(key: &str, mapping: &Mapping, problems: &mut Vec<ConfigError>) -> bool {
    if mapping.kind == ActionKind::Agent {
        return true;
    }
    problems.push(ConfigError::invalid(
        key,
        format!(
            "applies to agent mappings only: a {} mapping starts no run",
            mapping.kind.as_str()
        ),
    ));
    false
}
