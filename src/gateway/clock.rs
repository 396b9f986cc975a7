//! The wall clock of the runtime: run and event timestamps, outbox schedules and replay windows
//! all read it here, so that they agree on its units.

use std::time::{SystemTime, UNIX_EPOCH};

/// RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// RFC 3339 UTC with milliseconds of a time in milliseconds since the Unix epoch: the store's
/// form, which orders like the times it stands for.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `duration` in whole milliseconds, saturated.
pub fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
