//! The filters of the request log as command-line flags: the same for `requests list` and a
//! bulk `requests replay`, as the API's `GET /api/requests` and `POST /api/requests/replay`
//! take the same filter.

use clap::Args;

/// Which recorded requests a command means.
#[derive(Args)]
pub struct RequestFilters {
    /// Only this hook name.
    #[arg(long)]
    hook: Option<String>,
    /// Only this mapping id.
    #[arg(long)]
    mapping: Option<String>,
    /// Only this status class: 2xx, 4xx or 5xx.
    #[arg(long)]
    status: Option<String>,
    /// Only requests that ended so: filtered (no mapping's conditions held), batched,
    /// limited (a full lane), refused or held (a budget).
    #[arg(long)]
    outcome: Option<String>,
    /// Only captured requests with this header value: NAME:VALUE (x-github-event:issues).
    #[arg(long)]
    header: Option<String>,
    /// Only captured JSON bodies with this value at a JSON pointer: POINTER:VALUE
    /// (/action:opened).
    #[arg(long)]
    body: Option<String>,
    /// Only requests whose error or reason contains this text (ASCII case ignored).
    #[arg(long)]
    error: Option<String>,
    /// Only requests at or after this time: RFC 3339, or a duration back from now (`1h`, `2d`).
    #[arg(long, value_name = "TIME", value_parser = time_or_ago)]
    since: Option<String>,
    /// Only requests before this time: RFC 3339, or a duration back from now.
    #[arg(long, value_name = "TIME", value_parser = time_or_ago)]
    until: Option<String>,
}

impl RequestFilters {
    /// The API's `filter` object: the flags that are set, by their API names.
    pub fn json(&self) -> serde_json::Map<String, serde_json::Value> {
        filter_object(self.pairs())
    }

    /// The API's parameters, named as it names them; `None` for a flag not given.
    pub fn pairs(&self) -> [(&'static str, Option<String>); 9] {
        [
            ("hook", self.hook.clone()),
            ("mapping", self.mapping.clone()),
            ("status", self.status.clone()),
            ("outcome", self.outcome.clone()),
            ("header", self.header.clone()),
            ("body", self.body.clone()),
            ("error", self.error.clone()),
            ("since", self.since.clone()),
            ("until", self.until.clone()),
        ]
    }
}

/// The API's `filter` object of `pairs` (a parameter's name, and its value when its flag was
/// given): the ones that are set.
pub(super) fn filter_object(
    pairs: impl IntoIterator<Item = (&'static str, Option<String>)>,
) -> serde_json::Map<String, serde_json::Value> {
    pairs
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_string(), value?.into())))
        .collect()
}

/// A time flag as the RFC 3339 time the API takes: one given so is kept as it is, a duration
/// is that long before now.
pub(super) fn time_or_ago(text: &str) -> Result<String, String> {
    if chrono::DateTime::parse_from_rfc3339(text).is_ok() {
        return Ok(text.to_string());
    }
    let ago = humantime::parse_duration(text)
        .map_err(|_| "an RFC 3339 time, or a duration back from now such as 1h")?;
    // A duration past the earliest time there is a date for (about 262,000 years back) names
    // no time: refused, not a panic.
    let at = chrono::Duration::from_std(ago)
        .ok()
        .and_then(|ago| chrono::Utc::now().checked_sub_signed(ago))
        .ok_or("further back than a date can be: give a shorter duration, or an RFC 3339 time")?;
    Ok(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_is_kept_and_a_duration_counts_back_from_now() {
        let at = "2026-01-02T03:04:05Z";
        assert_eq!(time_or_ago(at).unwrap(), at);
        let hour_ago = chrono::DateTime::parse_from_rfc3339(&time_or_ago("1h").unwrap()).unwrap();
        let back = chrono::Utc::now().signed_duration_since(hour_ago);
        assert!(back >= chrono::Duration::hours(1) && back < chrono::Duration::hours(2));
        assert!(time_or_ago("an hour").is_err());
        assert!(time_or_ago("300000y").is_err());
    }
}
