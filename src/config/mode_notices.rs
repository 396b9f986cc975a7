//! Notices of the keys that the gateway's mode makes moot: in forward mode the upstream runs
//! the agent, so what shapes this gateway's runs shapes nothing (`hookgate check` says so).

use super::model::MappingConfig;
use super::runtime::GatewayMode;
use super::{ConfigNotice, Settings};

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
                key: key!(MappingConfig[i].runs),
                message: "does not apply in forward mode: each run is relayed as it is \
                          accepted, and the upstream decides when it starts"
                    .into(),
            });
        }
        if mapping.batch.is_some() {
            notices.push(ConfigNotice {
                key: key!(MappingConfig[i].batch),
                message: "does not apply in forward mode: each request is relayed as a run of \
                          its own"
                    .into(),
            });
        }
    }
    notices
}
