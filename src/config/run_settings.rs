//! What the settings that shape an agent mapping's runs (`runs`, `batch`, `budget`) have in
//! common: a wake mapping starts no run, so none of them applies to one.

use super::runtime::GatewayMode;
use super::{ConfigError, ConfigNotice, Settings};
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
        "applies to agent mappings only: a wake mapping starts no run",
    ));
    false
}

/// In forward mode the upstream runs the agent: each accepted run is relayed at once, so a
/// mapping's lane (`runs`) and `batch` shape nothing here. `check` says so for each one, rather
/// than let an operator believe a burst is bounded or gathered.
pub(super) fn forward_notices(settings: &Settings) -> Vec<ConfigNotice> {
    let (GatewayMode::Forward(_), Some(hooks)) = (&settings.runtime.mode, &settings.hooks) else {
        return Vec::new();
    };
    let mut notices = Vec::new();
    // The file's mappings come first, in its order; presets (appended) have neither setting.
    for (i, mapping) in hooks.mappings.iter().enumerate() {
        if hooks.lane_for(&mapping.id).is_some() {
            notices.push(ConfigNotice {
                key: format!("hooks.mappings[{i}].runs"),
                message: "does not apply in forward mode: each run is relayed as it is \
                          accepted, and the upstream decides when it starts"
                    .into(),
            });
        }
        if mapping.batch.is_some() {
            notices.push(ConfigNotice {
                key: format!("hooks.mappings[{i}].batch"),
                message: "does not apply in forward mode: each request is relayed as a run of \
                          its own"
                    .into(),
            });
        }
    }
    notices
}
