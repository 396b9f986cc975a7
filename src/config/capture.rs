//! `hooks.capture` and a mapping's `capture`: what the request log keeps of headers and bodies.

use super::ConfigError;
use super::model::CaptureConfig;
use super::model::defaults::MAX_CAPTURE_BYTES;
use crate::hook::capture::{CapturePolicy, is_json_pointer};

/// `config` over `base`; problems are named under `key` (`hooks.capture` or
/// `hooks.mappings[2].capture`). A mapping's capture is on unless it says `enabled: false`.
pub(super) fn capture_policy(
    config: &CaptureConfig,
    base: &CapturePolicy,
    enabled_by_default: bool,
    key: &str,
    problems: &mut Vec<ConfigError>,
) -> CapturePolicy {
    let mut policy = base.clone();
    policy.enabled = config.enabled.unwrap_or(enabled_by_default);
    if let Some(bytes) = config.max_bytes {
        if bytes == 0 || bytes > MAX_CAPTURE_BYTES {
            problems.push(ConfigError::invalid(
                format!("{key}.maxBytes"),
                format!("must be from 1 to {MAX_CAPTURE_BYTES}"),
            ));
        } else {
            policy.max_bytes = bytes as usize;
        }
    }
    if let Some(pointers) = &config.redact {
        for (i, pointer) in pointers.iter().enumerate() {
            if !is_json_pointer(pointer) {
                problems.push(ConfigError::invalid(
                    format!("{key}.redact[{i}]"),
                    "must be a JSON pointer: empty, or starting with /",
                ));
            }
        }
        // Added to the base's: a mapping cannot un-redact what `hooks.capture` redacts.
        policy.redact_pointers.extend(pointers.iter().cloned());
    }
    if let Some(names) = &config.redact_headers {
        for (i, name) in names.iter().enumerate() {
            if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                problems.push(ConfigError::invalid(
                    format!("{key}.redactHeaders[{i}]"),
                    "must be a header name",
                ));
            }
        }
        policy
            .redact_headers
            .extend(names.iter().map(|name| name.to_ascii_lowercase()));
    }
    policy
}
