//! The query parameters the operator API's listings share: a page's `limit`, and a time
//! (`since`, `before`) in RFC 3339, each checked once with the API's own refusal.

use super::api_error::ApiError;

/// Items a listing returns when `limit` is not given.
const DEFAULT_LIMIT: u32 = 100;
/// The most items one call returns.
const MAX_LIMIT: u32 = 1000;

/// `limit`, checked: 1 to [`MAX_LIMIT`], [`DEFAULT_LIMIT`] when not given.
pub(super) fn limit(limit: Option<&str>) -> Result<u32, ApiError> {
    let Some(text) = limit else {
        return Ok(DEFAULT_LIMIT);
    };
    text.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or_else(|| ApiError::Invalid(format!("limit must be an integer from 1 to {MAX_LIMIT}")))
}

/// An RFC 3339 time of the query parameter `name`, as milliseconds since the epoch.
pub(super) fn time_ms(text: &str, name: &str) -> Result<i64, ApiError> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|at| at.timestamp_millis())
        .map_err(|_| ApiError::Invalid(format!("{name} must be an RFC 3339 time")))
}
