//! Reading a hook body: bounded in size and in time, then parsed as JSON (docs/http-contract.md, step 6).

use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderMap;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use serde_json::Value;

use super::reply::HookError;
use crate::config::ConnectionSettings;
use crate::hook::form::{self, BodyFormat};

/// How much of an oversized body is still read (and discarded) before answering 413. Closing a
/// socket with unread data makes the kernel send a reset, which can destroy the 413 before the
/// client reads it; reading on lets the client finish sending and see the answer. A client that
/// sends more than this, or for longer than `DRAIN_TIME`, may see a reset instead.
const DRAIN_LIMIT: u64 = 8 * 1024 * 1024;
/// How long that draining may take.
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// Reads the whole body, refusing more than `limit` bytes, more than `timeout` of waiting, or a
/// body that arrives slower than `connections`' minimum receive rate (each byte has a deadline,
/// so a client that stalls is cut off at the first byte it owes, not at the body timeout).
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    timeout: Duration,
    connections: &ConnectionSettings,
) -> Result<Bytes, HookError> {
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        // A client that waits for `100 Continue` has sent nothing yet: answer at once.
        let waits = headers
            .get(axum::http::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if !waits {
            drain(body).await;
        }
        return Err(HookError::PayloadTooLarge);
    }
    match tokio::time::timeout(timeout, collect(body, limit, connections)).await {
        Err(_) => Err(HookError::BodyTimeout),
        Ok(Err(Overflow::TooLarge(rest))) => {
            drain(rest).await;
            Err(HookError::PayloadTooLarge)
        }
        Ok(Err(Overflow::TooSlow)) => Err(HookError::BodyTimeout),
        Ok(Err(Overflow::Broken)) => {
            Err(HookError::Invalid("request body could not be read".into()))
        }
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

enum Overflow {
    TooLarge(Body),
    TooSlow,
    Broken,
}

async fn collect(
    mut body: Body,
    limit: u64,
    connections: &ConnectionSettings,
) -> Result<Bytes, Overflow> {
    let start = tokio::time::Instant::now();
    let mut buffer = BytesMut::new();
    loop {
        let next = body.frame();
        let frame = match connections.receive_deadline(buffer.len() as u64 + 1) {
            Some(due) => tokio::time::timeout_at(start + due, next)
                .await
                .map_err(|_| Overflow::TooSlow)?,
            None => next.await,
        };
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|_| Overflow::Broken)?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() as u64 + data.len() as u64 > limit {
                return Err(Overflow::TooLarge(body));
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(buffer.freeze())
}

/// Reads and discards the rest of a body, within [`DRAIN_LIMIT`] and [`DRAIN_TIME`].
async fn drain(mut body: Body) {
    let discard = async {
        let mut seen = 0u64;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                seen += data.len() as u64;
                if seen > DRAIN_LIMIT {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, discard).await;
}

/// Parses a mapped hook's body by its `Content-Type` ([`BodyFormat`]): a website form as an
/// object of strings (docs/hooks.md#website-forms; 400 when it is not UTF-8 once decoded), a
/// multipart body refused with 415, anything else as [`parse_json`]. Only the mapped path reads
/// the header: `/wake` and `/agent` parse JSON whatever the type, at their cost of before.
pub fn parse_mapped(headers: &HeaderMap, bytes: &[u8]) -> Result<Value, HookError> {
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes());
    match BodyFormat::of(content_type, bytes) {
        BodyFormat::Json => parse_json(bytes),
        BodyFormat::Form => form::parse(bytes).map_err(|m| HookError::Invalid(m.into())),
        BodyFormat::Multipart => Err(HookError::UnsupportedMediaType),
    }
}

/// Parses a body as JSON: a leading UTF-8 byte-order mark is skipped, empty or blank is `{}`, a
/// value that is neither an object nor an array counts as `{}`, invalid JSON is a 400 with the
/// parser's message.
pub fn parse_json(bytes: &[u8]) -> Result<Value, HookError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Default::default()));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(HookError::Json)?;
    Ok(match value {
        Value::Object(_) | Value::Array(_) => value,
        _ => Value::Object(Default::default()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_byte_order_mark_is_skipped() {
        assert_eq!(
            parse_json(b"\xEF\xBB\xBF{\"a\":1}").unwrap(),
            json!({"a": 1})
        );
        assert_eq!(parse_json(b"\xEF\xBB\xBF").unwrap(), json!({}));
    }

    #[test]
    fn blank_body_is_an_empty_object() {
        assert_eq!(parse_json(b"").unwrap(), json!({}));
        assert_eq!(parse_json(b" \n\t ").unwrap(), json!({}));
    }

    #[test]
    fn scalars_count_as_an_empty_object() {
        assert_eq!(parse_json(b"42").unwrap(), json!({}));
        assert_eq!(parse_json(b"\"x\"").unwrap(), json!({}));
        assert_eq!(parse_json(b"[1]").unwrap(), json!([1]));
    }

    #[test]
    fn invalid_json_carries_the_parser_message() {
        let err = parse_json(b"{nope").unwrap_err();
        assert!(matches!(err, HookError::Json(_)), "{err:?}");
        let message = err.client_message();
        assert!(message.contains("line 1"), "{message}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = "[".repeat(100_000);
        assert!(parse_json(deep.as_bytes()).is_err());
    }
}
