//! What of a request the request log keeps besides its outcome: its headers and body, when the
//! mapping or `hooks.capture` asks for them (docs/operations.md#the-request-log). Credentials
//! never reach the store: the hook token's carriers, cookies and every scheme's signature and
//! secret headers are always removed ([`CredentialHeaders`]), the configured header names and
//! JSON pointers are replaced by [`REDACTED`] before anything is written. A body over the size
//! cap, or one that pointers must redact but that is not JSON, is not kept at all (a cut JSON
//! document could not be redacted, nor replayed).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::credentials::CredentialHeaders;
use super::form::{self, BodyFormat};

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

/// A request's headers, query and body as the request log keeps them. Its serde form (the body
/// in base64) is how a cluster's nodes hand captures to each other (docs/cluster.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Captured {
    /// Names lower-case, credentials removed, redacted values replaced.
    pub headers: Vec<(String, String)>,
    /// The query string as received, a `token` parameter's value replaced.
    pub query: Option<String>,
    /// `None` when the body was not kept; `note` says why.
    #[serde(with = "base64_body")]
    pub body: Option<Vec<u8>>,
    pub note: Option<String>,
}

/// A captured body as base64 text: a body is any bytes, and JSON has no bytes of its own.
mod base64_body {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        body: &Option<Vec<u8>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match body {
            Some(bytes) => serializer.serialize_str(&STANDARD.encode(bytes)),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        let text = Option::<String>::deserialize(deserializer)?;
        text.map(|text| STANDARD.decode(text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// What a capture is made from: the request as received and the policy that applies. Taking it
/// costs a copy of the header bytes; [`CaptureJob::capture`], which may parse and re-encode the
/// whole body, is left to whoever can afford it (the request log's writer, not the request).
#[derive(Debug, Clone)]
pub struct CaptureJob {
    policy: CapturePolicy,
    headers: Vec<(String, Vec<u8>)>,
    query: Option<String>,
    body: Bytes,
}

impl CaptureJob {
    /// Bytes this job holds: what it costs to keep it queued.
    pub fn size(&self) -> usize {
        self.body.len()
            + self
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>()
    }

    /// Applies the policy: credentials out, redactions in, the size cap.
    pub fn capture(self) -> Captured {
        let policy = &self.policy;
        let format = self
            .headers
            .iter()
            .find(|(name, _)| name == "content-type")
            .map_or(BodyFormat::Json, |(_, value)| {
                BodyFormat::of(Some(value), &self.body)
            });
        let mut header_bytes = 0;
        let headers = self
            .headers
            .into_iter()
            .map(|(name, value)| {
                let value = if policy.redact_headers.contains(&name) {
                    REDACTED.to_string()
                } else {
                    String::from_utf8_lossy(&value).into_owned()
                };
                (name, value)
            })
            .take_while(|(name, value)| {
                header_bytes += name.len() + value.len();
                header_bytes <= policy.max_bytes
            })
            .collect();
        let query = self.query.map(|query| redact_token(&query));
        let (body, note) = policy.body(&self.body, format);
        Captured {
            headers,
            query,
            body,
            note,
        }
    }
}

impl CapturePolicy {
    /// The material of a capture of this request, without the headers that `credentials` keeps
    /// out of the log.
    pub fn job<'a>(
        &self,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        credentials: &CredentialHeaders,
        query: Option<&str>,
        body: Bytes,
    ) -> CaptureJob {
        let headers = headers
            .into_iter()
            .filter(|(name, _)| !credentials.is_kept_out(name))
            .map(|(name, value)| (name.to_string(), value.to_vec()))
            .collect();
        CaptureJob {
            policy: self.clone(),
            headers,
            query: query.map(String::from),
            body,
        }
    }

    /// This policy and `other` together, for a request either may govern: captured when either
    /// captures, every redaction of both, the smaller size cap.
    pub fn union(&self, other: &CapturePolicy) -> CapturePolicy {
        let mut joined = self.clone();
        joined.enabled |= other.enabled;
        joined.max_bytes = joined.max_bytes.min(other.max_bytes);
        for pointer in &other.redact_pointers {
            if !joined.redact_pointers.contains(pointer) {
                joined.redact_pointers.push(pointer.clone());
            }
        }
        for header in &other.redact_headers {
            if !joined.redact_headers.contains(header) {
                joined.redact_headers.push(header.clone());
            }
        }
        joined
    }

    fn body(&self, body: &[u8], format: BodyFormat) -> (Option<Vec<u8>>, Option<String>) {
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
        if format == BodyFormat::Form {
            return match redact_form(body, &self.redact_pointers) {
                Some(form) => (Some(form), None),
                None => {
                    let note = "body not kept: a form field is not UTF-8, so its redactions cannot be applied";
                    (None, Some(note.to_string()))
                }
            };
        }
        let Ok(mut document) = serde_json::from_slice::<Value>(body) else {
            let note = "body not kept: it is not JSON, so its redactions cannot be applied";
            return (None, Some(note.to_string()));
        };
        for pointer in &self.redact_pointers {
            if let Some(value) = document.pointer_mut(pointer) {
                *value = Value::from(REDACTED);
            }
        }
        // Always the parsed document, never the bytes received: a key given twice is parsed
        // as its last value, so the bytes could hold a first one that no pointer reached.
        (Some(document.to_string().into_bytes()), None)
    }
}

/// A form body with the fields `pointers` name replaced by [`REDACTED`]: a pointer's first
/// segment names a field (`/password`, `/card/number` alike name the field it starts with), and
/// every value of a field given more than once is replaced. Encoded again as a form, which
/// reads as the payload the request had, redactions aside; `None` when a field is not UTF-8
/// once decoded (such a body was refused, and is not kept).
fn redact_form(body: &[u8], pointers: &[String]) -> Option<Vec<u8>> {
    let fields: Vec<String> = pointers
        .iter()
        .filter_map(|pointer| pointer.strip_prefix('/'))
        .map(|rest| rest.split('/').next().unwrap_or(rest))
        .map(|segment| segment.replace("~1", "/").replace("~0", "~"))
        .collect();
    let mut encoded = form_urlencoded::Serializer::new(String::new());
    for (name, value) in form::pairs(body) {
        let name = form::decode(name).ok()?;
        let value = match fields.contains(&name) {
            true => REDACTED.to_string(),
            false => form::decode(value).ok()?,
        };
        encoded.append_pair(&name, &value);
    }
    Some(encoded.finish().into_bytes())
}

/// `query` with the value of every `token` parameter replaced (a token in the query string is
/// refused, but the refused request is still recorded).
fn redact_token(query: &str) -> String {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .map(|(name, value)| {
            let value = if name == "token" {
                REDACTED.to_string()
            } else {
                value.into_owned()
            };
            (name.into_owned(), value)
        })
        .collect();
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
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

    fn capture(policy: &CapturePolicy, body: &[u8]) -> Captured {
        policy
            .job(
                [],
                &CredentialHeaders::default(),
                None,
                Bytes::copy_from_slice(body),
            )
            .capture()
    }

    #[test]
    fn credentials_and_configured_headers_never_reach_the_record() {
        let headers = [
            ("authorization", b"Bearer secret".as_slice()),
            ("cookie", b"s=1"),
            ("x-gitlab-token", b"shared"),
            ("x-hub-signature-256", b"sha256=00"),
            ("x-api-key", b"k"),
            ("x-github-event", b"push"),
        ];
        let job = policy().job(
            headers,
            &CredentialHeaders::default(),
            Some("a=1&token=t"),
            Bytes::new(),
        );
        let captured = job.capture();
        assert_eq!(
            captured.headers,
            [
                ("x-api-key".to_string(), REDACTED.to_string()),
                ("x-github-event".to_string(), "push".to_string()),
            ]
        );
        assert_eq!(captured.query.as_deref(), Some("a=1&token=%5Bredacted%5D"));
    }

    #[test]
    fn pointers_are_redacted_even_behind_a_repeated_key() {
        let captured = capture(&policy(), br#"{"card":{"number":"4242"},"a":1}"#);
        assert_eq!(
            captured.body.as_deref(),
            Some(br#"{"card":{"number":"[redacted]"},"a":1}"#.as_slice())
        );
        // serde_json keeps the last of a repeated key: the first must not survive in the bytes.
        let twice = capture(&policy(), br#"{"card":{"number":"4242"},"card":1}"#);
        let kept = String::from_utf8(twice.body.unwrap()).unwrap();
        assert!(!kept.contains("4242"), "{kept}");
        let plain = CapturePolicy {
            redact_pointers: vec![],
            ..policy()
        };
        let spaced = br#"{ "a" : 1 }"#;
        assert_eq!(
            capture(&plain, spaced).body.as_deref(),
            Some(spaced.as_slice())
        );
    }

    #[test]
    fn bodies_over_the_cap_or_unredactable_are_not_kept() {
        let captured = capture(&policy(), &[b' '; 65]);
        assert_eq!(captured.body, None);
        assert!(captured.note.unwrap().contains("65 bytes"));
        let captured = capture(&policy(), b"not json");
        assert_eq!(captured.body, None);
        assert!(captured.note.unwrap().contains("not JSON"));
    }

    #[test]
    fn a_union_keeps_every_redaction_and_the_smaller_cap() {
        let other = CapturePolicy {
            enabled: false,
            max_bytes: 10,
            redact_pointers: vec!["/b".into()],
            redact_headers: vec!["x-api-key".into(), "x-other".into()],
        };
        let joined = policy().union(&other);
        assert!(joined.enabled);
        assert_eq!(joined.max_bytes, 10);
        assert_eq!(joined.redact_pointers, ["/card/number", "/absent", "/b"]);
        assert_eq!(joined.redact_headers, ["x-api-key", "x-other"]);
    }
}
