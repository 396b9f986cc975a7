//! Which recorded requests an operator means: the filters of `GET /api/requests`, parsed once
//! into a [`RequestFilter`] (docs/operations.md#the-request-log). Every endpoint that takes a
//! selection of the log (a listing, and the operations over many requests) reads it here, so
//! that one filter means the same requests everywhere.

use serde::Deserialize;

use super::api::{limit, time_ms};
use super::api_error::ApiError;
use crate::gateway::requests::{ListOrder, RequestFilter, RequestOutcome};

/// The filters of a selection of the request log, as `GET /api/requests` takes them in its
/// query. A parameter of another name is refused, so that a typo cannot widen the selection
/// silently.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestsQuery {
    hook: Option<String>,
    mapping: Option<String>,
    #[serde(rename = "requestId")]
    request_id: Option<String>,
    /// `2xx`, `3xx`, `4xx` or `5xx`.
    status: Option<String>,
    /// One of [`RequestOutcome`]'s wire names.
    outcome: Option<String>,
    /// RFC 3339.
    since: Option<String>,
    /// RFC 3339.
    until: Option<String>,
    /// The previous page's `next`.
    before: Option<String>,
    limit: Option<String>,
}

impl RequestsQuery {
    /// The filter these parameters name, newest first; an invalid one answered 400 naming the
    /// parameter.
    pub fn filter(self) -> Result<RequestFilter, ApiError> {
        Ok(RequestFilter {
            status_class: status_class(self.status.as_deref())?,
            outcome: outcome(self.outcome.as_deref())?,
            since_ms: self.since.map(|t| time_ms(&t, "since")).transpose()?,
            until_ms: self.until.map(|t| time_ms(&t, "until")).transpose()?,
            limit: limit(self.limit.as_deref())?,
            hook: self.hook,
            mapping_id: self.mapping,
            request_id: self.request_id,
            cursor: self.before,
            order: ListOrder::NewestFirst,
        })
    }
}

/// `status`: the first digit of a status class.
fn status_class(status: Option<&str>) -> Result<Option<u16>, ApiError> {
    match status {
        None => Ok(None),
        Some("2xx") => Ok(Some(2)),
        Some("3xx") => Ok(Some(3)),
        Some("4xx") => Ok(Some(4)),
        Some("5xx") => Ok(Some(5)),
        Some(_) => Err(ApiError::Invalid(
            "status must be 2xx, 3xx, 4xx or 5xx".into(),
        )),
    }
}

/// `outcome`: one of [`RequestOutcome`]'s wire names.
fn outcome(outcome: Option<&str>) -> Result<Option<RequestOutcome>, ApiError> {
    outcome
        .map(|text| {
            RequestOutcome::from_wire(text)
                .ok_or_else(|| ApiError::Invalid(RequestOutcome::EXPECTED.into()))
        })
        .transpose()
}
