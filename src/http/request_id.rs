//! Every response's `X-Request-Id`: the one the client (or a proxy before us) sent, when it has
//! a safe shape, else a fresh UUIDv7. It names the request in the access log and, for a hook
//! request, in the request log.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use uuid::Uuid;

/// The header that carries it, both ways.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest incoming id kept.
const MAX_LEN: usize = 128;

/// A request's id, in the request's extensions from the first layer on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId {
    value: String,
    /// Whether the client chose it (and so another request may carry the same).
    incoming: bool,
}

impl RequestId {
    /// The incoming `X-Request-Id` when it is 1 to 128 characters of letters, digits and
    /// `.`, `_`, `:`, `-` (nothing a log or a terminal could misread), else a new UUIDv7.
    pub fn of(headers: &HeaderMap) -> RequestId {
        let incoming = headers
            .get(&X_REQUEST_ID)
            .and_then(|value| value.to_str().ok())
            .filter(|value| is_safe(value));
        match incoming {
            Some(value) => RequestId {
                value: value.to_string(),
                incoming: true,
            },
            None => RequestId::new(),
        }
    }

    /// The id another node gave the request (an edge's, for the request its private node
    /// runs): the record keeps it as its `requestId` and takes a fresh id of its own.
    pub fn linked(value: &str) -> RequestId {
        RequestId {
            value: value.to_string(),
            incoming: true,
        }
    }

    /// A fresh id.
    pub fn new() -> RequestId {
        RequestId {
            value: Uuid::now_v7().to_string(),
            incoming: false,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.value
    }

    /// Whether the id is ours, hence unique: a record may take it as its own id.
    pub fn is_unique(&self) -> bool {
        !self.incoming
    }

    pub fn header_value(&self) -> HeaderValue {
        // Both shapes are visible ASCII, which a header value always takes.
        HeaderValue::from_str(&self.value).unwrap_or_else(|_| HeaderValue::from_static("-"))
    }
}

impl Default for RequestId {
    fn default() -> Self {
        RequestId::new()
    }
}

fn is_safe(value: &str) -> bool {
    (1..=MAX_LEN).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incoming(value: &str) -> RequestId {
        let mut headers = HeaderMap::new();
        headers.insert(X_REQUEST_ID, HeaderValue::from_str(value).unwrap());
        RequestId::of(&headers)
    }

    #[test]
    fn a_safe_incoming_id_is_kept_and_anything_else_replaced() {
        let kept = incoming("req-42.a_b:c");
        assert_eq!(kept.as_str(), "req-42.a_b:c");
        assert!(!kept.is_unique());
        for unsafe_id in ["a b", "<script>", "a\"b", "%0d%0a", &"x".repeat(129)] {
            let replaced = incoming(unsafe_id);
            assert_ne!(replaced.as_str(), unsafe_id);
            assert!(replaced.is_unique());
            assert_eq!(replaced.as_str().len(), 36, "a UUID");
        }
    }
}
