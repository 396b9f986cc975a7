//! The bounds of a hook request's body (`hooks.maxBodyBytes`) and of transform calls:
//! `hooks.transformLimits` for every call, and a mapping's `transform.limits` over those for its
//! own (an interpreted guest, JavaScript say, needs more memory and time than a small Rust
//! transform, without raising the bounds of all the others).

use std::time::Duration;

use super::ConfigError;
pub use super::model::defaults::DEFAULT_MAX_BODY_BYTES;
use super::model::{HooksConfig, TransformConfig, TransformLimitsConfig};
use crate::mapping::javascript_component;
use crate::transform::TransformLimits;

/// `hooks.maxBodyBytes`: greater than 0.
pub(super) fn max_body_bytes(value: Option<u64>, problems: &mut Vec<ConfigError>) -> u64 {
    let max_body_bytes = value.unwrap_or(DEFAULT_MAX_BODY_BYTES);
    if max_body_bytes == 0 {
        problems.push(ConfigError::invalid(
            key!(HooksConfig.max_body_bytes),
            "must be greater than 0",
        ));
    }
    max_body_bytes
}

/// `config` over `base`, each value checked to be positive; problems are named under `key`
/// (`hooks.transformLimits` or `hooks.mappings[2].transform.limits`).
pub(super) fn transform_limits(
    config: &TransformLimitsConfig,
    base: TransformLimits,
    key: &str,
    problems: &mut Vec<ConfigError>,
) -> TransformLimits {
    let mut limits = base;
    let mut positive = |field: &str, value: Option<u64>| -> Option<u64> {
        match value {
            Some(0) => {
                problems.push(ConfigError::invalid(
                    format!("{key}.{field}"),
                    "must be greater than 0",
                ));
                None
            }
            other => other,
        }
    };
    let size = |bytes: u64| usize::try_from(bytes).unwrap_or(usize::MAX);
    if let Some(ms) = positive("timeoutMs", config.timeout_ms) {
        limits.timeout = Duration::from_millis(ms);
    }
    if let Some(bytes) = positive("memoryBytes", config.memory_bytes) {
        limits.memory_bytes = size(bytes);
    }
    if let Some(bytes) = positive("outputBytes", config.output_bytes) {
        limits.output_bytes = size(bytes);
    }
    if let Some(bytes) = positive("logBytes", config.log_bytes) {
        limits.log_bytes = size(bytes);
    }
    if let Some(n) = positive("maxConcurrent", config.max_concurrent.map(u64::from)) {
        limits.max_concurrent = u32::try_from(n).unwrap_or(u32::MAX);
    }
    limits
}

/// A mapping's own bounds, when its `transform` sets `limits` or `reuse` or names a JavaScript
/// module: `limits` over `global` (raised to the JavaScript minimum for a JavaScript module), and
/// `reuse`. `maxConcurrent` is refused: the call slots are shared by all
/// transforms, so only `hooks.transformLimits` can size them. `key` names the `transform`.
pub(super) fn mapping_limits(
    config: &TransformConfig,
    global: TransformLimits,
    key: &str,
    problems: &mut Vec<ConfigError>,
) -> Option<TransformLimits> {
    let javascript = javascript_component(config.module.trim()).is_some();
    if config.limits.is_none() && config.reuse.is_none() && !javascript {
        return None;
    }
    let mut limits = global;
    if javascript {
        // An openclaw.json has no limits to give: a JavaScript module gets what its engine
        // needs (docs/transforms.md#limits).
        limits = limits.for_javascript();
    }
    if let Some(own) = &config.limits {
        let key = format!("{key}.limits");
        if own.max_concurrent.is_some() {
            problems.push(ConfigError::invalid(
                format!("{key}.maxConcurrent"),
                "bounds all transforms together; set it in hooks.transformLimits",
            ));
        }
        limits = transform_limits(own, limits, &key, problems);
    }
    match config.reuse {
        Some(0) => problems.push(ConfigError::invalid(
            format!("{key}.reuse"),
            "must be greater than 0",
        )),
        Some(calls) => limits.reuse = calls,
        None => {}
    }
    Some(limits)
}
