//! A request whose path mappings matched, none of whose conditions held (docs/hooks.md#conditions):
//! answered `204` with no body, recorded with the outcome `filtered` and a reason naming the
//! mappings tried, counted under that outcome. It stores nothing: no event, no run, no
//! transform call, no idempotency key taken.

use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};

use super::reply::HookError;
use crate::mapping::{HeaderValues, Mapping, Unmet};

/// One lookup of the name, parsed at load, then every value the request carries under it
/// compared with each wanted one; nothing is allocated.
impl HeaderValues for HeaderMap {
    fn has_any(&self, name: &HeaderName, values: &[String]) -> bool {
        self.get_all(name)
            .iter()
            .any(|v| values.iter().any(|w| v.as_bytes() == w.as_bytes()))
    }
}

/// The answer to a filtered request, marked for the metrics (which otherwise see a 204 as a
/// request a transform skipped).
#[derive(Debug, Clone, Copy)]
pub struct Filtered;

impl IntoResponse for Filtered {
    fn into_response(self) -> Response {
        let mut response = StatusCode::NO_CONTENT.into_response();
        response.extensions_mut().insert(Filtered);
        response
    }
}

/// Why a request that `considered` (each mapping its path matched, with the condition it
/// found unmet) all let through was filtered. `refusal` says whether the way the request was
/// admitted opens a mapping: when it opens none of them it gets the first one's refusal, as it
/// would had its conditions held, so that a `204` never tells a sender more than a `401` would.
pub(super) fn reason_if_admitted(
    considered: &[(&Mapping, Unmet<'_>)],
    refusal: impl Fn(&Mapping) -> Result<(), HookError>,
) -> Result<String, HookError> {
    if let [(first, _), ..] = considered
        && considered.iter().all(|(m, _)| refusal(m).is_err())
    {
        refusal(first)?;
    }
    Ok(reason(considered))
}

/// `no mapping's conditions held: a (header x-github-event), b (payload /action)`.
fn reason(considered: &[(&Mapping, Unmet<'_>)]) -> String {
    let tried: Vec<String> = considered
        .iter()
        .map(|(mapping, unmet)| format!("{} ({unmet})", mapping.id))
        .collect();
    format!("no mapping's conditions held: {}", tried.join(", "))
}
