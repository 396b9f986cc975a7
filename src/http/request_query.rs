//! Which recorded requests an operator means: the filters of `GET /api/requests`, parsed once
//! into a [`RequestFilter`] (docs/operations.md#the-request-log). Every endpoint that takes a
//! selection of the log (a listing, and the operations over many requests) reads it here, so
//! that one filter means the same requests everywhere.

use serde::{Deserialize, Deserializer};

use super::api_error::ApiError;
use super::query_params::{limit, time_ms};
use crate::gateway::requests::{
    BodyMatch, ErrorText, HeaderMatch, ListOrder, RequestFilter, RequestOutcome,
};

/// The filters of a selection of the request log, as `GET /api/requests` takes them in its
/// query. A parameter of another name is refused, so that a typo cannot widen the selection
/// silently. Its JSON Schema (the field docs) is what the MCP tools that take it show an agent.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestsQuery {
    /// The hook name: what follows the hooks prefix in the path (`github` for `/hooks/github`).
    hook: Option<String>,
    /// The id of the mapping that took the request.
    mapping: Option<String>,
    /// The `X-Request-Id` the sender was answered with.
    #[serde(rename = "requestId")]
    request_id: Option<String>,
    /// The status class: `2xx`, `3xx`, `4xx` or `5xx`.
    #[schemars(extend("enum" = ["2xx", "3xx", "4xx", "5xx"]))]
    status: Option<String>,
    /// How a request ended when its status alone does not say.
    #[schemars(extend("enum" = ["filtered", "batched", "limited", "refused", "held"]))]
    outcome: Option<String>,
    /// `name:value`: a captured header's value, e.g. `x-github-event:issues`.
    header: Option<String>,
    /// `/pointer:value`: a captured JSON body's value at an RFC 6901 pointer, e.g.
    /// `/action:opened`.
    body: Option<String>,
    /// Text in the error or the reason, ASCII letters in any case.
    error: Option<String>,
    /// RFC 3339: requests at or after it.
    since: Option<String>,
    /// RFC 3339: requests before it.
    until: Option<String>,
    /// The previous page's `next`.
    before: Option<String>,
    /// How many, 1 to 1000 (default 100). A string in a query; a number or a string in a JSON
    /// body.
    #[serde(default, deserialize_with = "number_or_text")]
    #[schemars(with = "Option<u32>", range(min = 1, max = 1000))]
    limit: Option<String>,
}

impl RequestsQuery {
    /// Whether the query continues a newest-first listing (`before`): an operation that takes
    /// requests oldest first refuses it, as the cursor would mean the other side of the log.
    pub fn continues_a_listing(&self) -> bool {
        self.before.is_some()
    }

    /// The filter these parameters name, newest first; an invalid one answered 400 naming the
    /// parameter.
    pub fn filter(self) -> Result<RequestFilter, ApiError> {
        Ok(RequestFilter {
            status_class: status_class(self.status.as_deref())?,
            outcome: parsed(
                self.outcome,
                RequestOutcome::from_wire,
                RequestOutcome::EXPECTED,
            )?,
            header: parsed(self.header, HeaderMatch::parse, HEADER_EXPECTED)?,
            body: parsed(self.body, BodyMatch::parse, BODY_EXPECTED)?,
            error: parsed(self.error, ErrorText::new, ERROR_EXPECTED)?,
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

const HEADER_EXPECTED: &str =
    "header must be a header name, a colon and a value: x-github-event:issues";
const BODY_EXPECTED: &str =
    "body must be a JSON pointer (RFC 6901), a colon and a value: /action:opened";
const ERROR_EXPECTED: &str = "error must be some text";

/// A parameter read by `parse`; the 400 `expected` (which names the parameter, never echoes
/// its value) when it names nothing.
fn parsed<T>(
    text: Option<String>,
    parse: impl FnOnce(&str) -> Option<T>,
    expected: &str,
) -> Result<Option<T>, ApiError> {
    text.map(|text| parse(&text).ok_or_else(|| ApiError::Invalid(expected.into())))
        .transpose()
}

/// `limit` as a query string has it (text) or a JSON body may (a number, or text).
fn number_or_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrText {
        Number(u64),
        Text(String),
    }
    Ok(
        Option::<NumberOrText>::deserialize(deserializer)?.map(|limit| match limit {
            NumberOrText::Number(n) => n.to_string(),
            NumberOrText::Text(text) => text,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_selection_takes_its_limit_as_a_number_or_text() {
        for body in [r#"{"limit": 7, "header": "x-a:b"}"#, r#"{"limit": "7"}"#] {
            let query: RequestsQuery = serde_json::from_str(body).unwrap();
            assert_eq!(query.filter().unwrap().limit, 7);
        }
        assert!(serde_json::from_str::<RequestsQuery>(r#"{"limt": 7}"#).is_err());
    }

    #[test]
    fn a_bad_search_filter_is_refused_naming_its_parameter() {
        for (body, name) in [
            (r#"{"header": "no colon"}"#, "header"),
            (r#"{"body": "action:opened"}"#, "body"),
            (r#"{"error": ""}"#, "error"),
            (r#"{"outcome": "lost"}"#, "outcome"),
        ] {
            let query: RequestsQuery = serde_json::from_str(body).unwrap();
            match query.filter() {
                Err(ApiError::Invalid(message)) => assert!(message.starts_with(name), "{message}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }
}
