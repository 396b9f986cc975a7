//! The request log through the operator API (docs/operations.md#the-request-log): listing with
//! filters and a cursor, one request with what was captured of it, and replay.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use super::AppState;
use super::api_error::{ApiError, ApiPath, ApiQuery};
use super::hooks;
use super::request_query::RequestsQuery;
use crate::gateway::requests::{RequestRecord, capture_json};
use crate::hook::credentials::CredentialHeaders;

/// `GET /api/requests?hook=&mapping=&requestId=&status=4xx&outcome=&header=&body=&error=&since=&until=&before=&limit=`:
/// recorded requests, newest first, and `next`, the `before` of the next page (null on the
/// last). With `body`, a page costs a JSON parse of each captured body it scans.
pub async fn requests(
    State(app): State<AppState>,
    ApiQuery(query): ApiQuery<RequestsQuery>,
) -> Result<Response, ApiError> {
    let filter = query.filter()?;
    let full = filter.limit as usize;
    let page = app.request_log.page(filter).await?;
    let next = (page.len() == full)
        .then(|| page.last().map(|r| r.id.clone()))
        .flatten();
    Ok(Json(RequestsPage {
        requests: page,
        next,
    })
    .into_response())
}

/// The answer of `GET /api/requests`: a page, and the cursor of the next one.
#[derive(Serialize)]
struct RequestsPage {
    requests: Vec<RequestRecord>,
    next: Option<String>,
}

/// `GET /api/requests/<id>`: one request, with its captured headers and body (`capture`, null
/// when nothing was kept), the ids of the requests that replayed it, and why it cannot be
/// replayed (`replayRefusal`, null when it can).
pub async fn request(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let (record, replays) = find(&app, &id).await?;
    let view = RequestView {
        capture: record.capture.as_ref().map(capture_json),
        replays,
        replay_refusal: replay_refusal(&record),
        record,
    };
    Ok(Json(view).into_response())
}

/// One request as `GET /api/requests/<id>` shows it: the record's fields, then what was
/// captured of it, its replays and why it cannot be replayed.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RequestView {
    #[serde(flatten)]
    record: RequestRecord,
    capture: Option<Value>,
    replays: Vec<String>,
    replay_refusal: Option<String>,
}

/// `POST /api/requests/<id>/replay`: sends a captured request through its hook again, as the
/// mappings and transforms are now, and answers with the new record's id and what the hook
/// answered. 404 for an unknown request; 409 when it was refused for its authentication, its
/// body was not kept, its path is no longer under `hooks.path`, or the mapping whose signature
/// admitted it is gone.
pub async fn replay(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let (original, _) = find(&app, &id).await?;
    Ok(Json(replay_record(&app, &original).await?).into_response())
}

/// Replays `original`, a record as [`find`] returns it, the way `POST
/// /api/requests/<id>/replay` does: refused as that endpoint refuses, else the new record
/// (committed) and what the hook answered it. Reads the whole answer into memory.
pub(super) async fn replay_record(
    app: &AppState,
    original: &RequestRecord,
) -> Result<Replayed, ApiError> {
    if let Some(refusal) = replay_refusal(original) {
        return Err(ApiError::Conflict(refusal));
    }
    let body = original
        .capture
        .as_ref()
        .and_then(|c| c.body.clone())
        .unwrap_or_default();
    let headers = original
        .capture
        .as_ref()
        .map(|capture| header_map(&capture.headers))
        .unwrap_or_default();
    let query = original.capture.as_ref().and_then(|c| c.query.as_deref());
    let (response, new_id) =
        hooks::replay(app, original, headers, query, Bytes::from(body)).await?;
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let answer = serde_json::from_slice::<Value>(&bytes)
        .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&bytes).into_owned()));
    Ok(Replayed {
        ok: true,
        request_id: new_id,
        replay_of: original.id.clone(),
        status,
        answer,
    })
}

/// The answer of `POST /api/requests/<id>/replay`: the replay's record and what the hook
/// answered it (its JSON, or its body as text).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Replayed {
    ok: bool,
    pub request_id: String,
    replay_of: String,
    pub status: u16,
    answer: Value,
}

/// Record `id` with the replays of it, and with every header that carries a credential under
/// the configuration in force taken out of its capture: one kept by an older version, which
/// stripped fewer, is neither shown nor replayed (docs/operations.md#the-request-log).
pub(super) async fn find(
    app: &AppState,
    id: &str,
) -> Result<(RequestRecord, Vec<String>), ApiError> {
    let (mut record, replays) = app
        .request_log
        .find(id)
        .await?
        .ok_or(ApiError::NotFound("request"))?;
    let settings = app.config.current();
    let fixed = CredentialHeaders::default();
    let credentials = settings.hooks.as_ref().map_or(&fixed, |h| &h.credentials);
    if let Some(capture) = &mut record.capture {
        capture
            .headers
            .retain(|(name, _)| !credentials.is_kept_out(name));
    }
    Ok((record, replays))
}

/// Why `record` cannot be replayed, as far as the log tells; `None` when it can (the mappings
/// in force may still refuse it).
pub(super) fn replay_refusal(record: &RequestRecord) -> Option<String> {
    if let Err(refused) = hooks::replayable(record) {
        return Some(refused.to_string());
    }
    let captured = record.capture.as_ref().is_some_and(|c| c.body.is_some());
    (!captured).then(|| "the request's body was not captured, so it cannot be replayed".into())
}

/// Captured header pairs as a header map, without the length of a body that redaction may have
/// changed.
pub(super) fn header_map(pairs: &[(String, String)]) -> HeaderMap {
    pairs
        .iter()
        .filter(|(name, _)| name != header::CONTENT_LENGTH.as_str())
        .filter_map(|(name, value)| {
            Some((
                HeaderName::from_bytes(name.as_bytes()).ok()?,
                HeaderValue::from_str(value).ok()?,
            ))
        })
        .collect()
}
