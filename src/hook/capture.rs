//! What of a request the request log keeps besides its outcome: its headers and body, when the
//! mapping or `hooks.capture` asks for them (docs/operations.md#the-request-log). Credentials
//! never reach the store: the hook token's carriers and cookies are always removed, the
//! configured header names and JSON pointers are replaced by [`REDACTED`] before anything is
//! written. A body over the size cap, or one that pointers must redact but that is not JSON, is
//! not kept at all (a cut JSON document could not be redacted, nor replayed).

use serde_json::Value;

/// Headers that carry credentials: never kept, never shown to a transform.
pub const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "x-service-token",
    "x-openclaw-token",
    "cookie",
    "proxy-authorization",
];

/// What a redacted header value or JSON value is replaced by.
pub const REDACTED: &str = "[redacted]";

/// Default `hooks.capture.maxBytes`: 64 KiB.
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024;

/// Whether and how a request's headers and body are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturePolicy {
    pub enabled: bool,
    /// Bodies longer than this are not kept.
    pub max_bytes: usize,
    /// JSON pointers (RFC 6901) whose values are replaced before storage.
    pub redact_pointers: Vec<String>,
    /// Header names (lower-case) whose values are replaced before storage.
    pub redact_headers: Vec<String>,
}

impl Default for CapturePolicy {
    fn default() -> Self {
        CapturePolicy {
            enabled: false,
            max_bytes: DEFAULT_MAX_BYTES,
            redact_pointers: Vec::new(),
            redact_headers: Vec::new(),
        }
    }
}

/// A request's headers and body as the request log keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Names lower-case, credentials removed, redacted values replaced.
    pub headers: Vec<(String, String)>,
    /// `None` when the body was not kept; `note` says why.
    pub body: Option<Vec<u8>>,
    pub note: Option<String>,
}

impl CapturePolicy {
    /// Captures `headers` and `body`; `credential` is the header the mapping's signature scheme
    /// carries a shared secret in (GitLab's token), removed like the others.
    pub fn capture<'a>(
        &self,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        credential: Option<&str>,
        body: &[u8],
    ) -> Captured {
        let headers = headers
            .into_iter()
            .filter(|(name, _)| !CREDENTIAL_HEADERS.contains(name) && Some(*name) != credential)
            .map(|(name, value)| {
                let value = if self.redact_headers.iter().any(|h| h == name) {
                    REDACTED.to_string()
                } else {
                    String::from_utf8_lossy(value).into_owned()
                };
                (name.to_string(), value)
            })
            .collect();
        let (body, note) = self.body(body);
        Captured {
            headers,
            body,
            note,
        }
    }

    fn body(&self, body: &[u8]) -> (Option<Vec<u8>>, Option<String>) {
        if body.len() > self.max_bytes {
            let note = format!(
                "body not kept: {} bytes is over the capture limit of {} bytes",
                body.len(),
                self.max_bytes
            );
            return (None, Some(note));
        }
        if self.redact_pointers.is_empty() {
            return (Some(body.to_vec()), None);
        }
        let Ok(mut document) = serde_json::from_slice::<Value>(body) else {
            let note = "body not kept: it is not JSON, so its redactions cannot be applied";
            return (None, Some(note.to_string()));
        };
        let mut redacted = 0;
        for pointer in &self.redact_pointers {
            if let Some(value) = document.pointer_mut(pointer) {
                *value = Value::from(REDACTED);
                redacted += 1;
            }
        }
        if redacted == 0 {
            // Kept byte for byte: re-encoding would change what a replay sends for nothing.
            return (Some(body.to_vec()), None);
        }
        (Some(document.to_string().into_bytes()), None)
    }
}

/// Whether `pointer` is a JSON pointer (empty, or starting with `/`).
pub fn is_json_pointer(pointer: &str) -> bool {
    pointer.is_empty() || pointer.starts_with('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> CapturePolicy {
        CapturePolicy {
            enabled: true,
            max_bytes: 64,
            redact_pointers: vec!["/card/number".into(), "/absent".into()],
            redact_headers: vec!["x-api-key".into()],
        }
    }

    #[test]
    fn credentials_and_configured_headers_never_reach_the_record() {
        let headers = [
            ("authorization", b"Bearer secret".as_slice()),
            ("cookie", b"s=1"),
            ("x-gitlab-token", b"shared"),
            ("x-api-key", b"k"),
            ("x-github-event", b"push"),
        ];
        let captured = policy().capture(headers, Some("x-gitlab-token"), b"{}");
        assert_eq!(
            captured.headers,
            [
                ("x-api-key".to_string(), REDACTED.to_string()),
                ("x-github-event".to_string(), "push".to_string()),
            ]
        );
    }

    #[test]
    fn pointers_are_redacted_and_untouched_bodies_kept_byte_for_byte() {
        let captured = policy().capture([], None, br#"{"card":{"number":"4242"},"a":1}"#);
        assert_eq!(
            captured.body.as_deref(),
            Some(br#"{"card":{"number":"[redacted]"},"a":1}"#.as_slice())
        );
        let spaced = br#"{ "a" : 1 }"#;
        assert_eq!(
            policy().capture([], None, spaced).body.as_deref(),
            Some(spaced.as_slice())
        );
    }

    #[test]
    fn bodies_over_the_cap_or_unredactable_are_not_kept() {
        let big = vec![b' '; 65];
        let captured = policy().capture([], None, &big);
        assert_eq!(captured.body, None);
        assert!(captured.note.unwrap().contains("65 bytes"));
        let captured = policy().capture([], None, b"not json");
        assert_eq!(captured.body, None);
        assert!(captured.note.unwrap().contains("not JSON"));
        let plain = CapturePolicy {
            redact_pointers: vec![],
            ..policy()
        };
        assert_eq!(
            plain.capture([], None, b"not json").body.as_deref(),
            Some(b"not json".as_slice())
        );
    }
}
