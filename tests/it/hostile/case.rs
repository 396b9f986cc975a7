//! What a case is: a request (through reqwest, or bytes on a bare socket) and the answer it must
//! get; the builders the tables are written with; and the check of an answer against a case.

use std::fmt;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use super::raw::{self, Pace, RawResponse};
use crate::harness::*;

/// One hostile request and what it must get.
pub struct Case {
    pub name: String,
    pub request: Request,
    pub want: Want,
    /// Repeated by the memory check: the cases that make the server hold the most bytes.
    pub heavy: bool,
}

/// A themed group of cases.
pub struct Theme {
    pub name: &'static str,
    pub cases: Vec<Case>,
}

pub fn case(name: impl Into<String>, request: Request, want: Want) -> Case {
    Case {
        name: name.into(),
        request,
        want,
        heavy: false,
    }
}

impl Case {
    pub fn heavy(mut self) -> Self {
        self.heavy = true;
        self
    }
}

#[derive(Clone)]
pub enum Request {
    /// An ordinary request, sent with reqwest. `path` is appended to the server's base URL.
    Http {
        method: Method,
        path: String,
        headers: Vec<(&'static str, Vec<u8>)>,
        body: Vec<u8>,
    },
    /// Bytes on a bare socket; the server must close the connection after its answer(s).
    Raw {
        bytes: Vec<u8>,
        pace: Pace,
        /// The answer is to a HEAD request: no body, whatever its length says.
        bodiless: bool,
    },
}

/// `POST path` with the hook token.
pub fn post(path: &str, body: impl Into<Vec<u8>>) -> Request {
    Request::Http {
        method: Method::POST,
        path: path.to_string(),
        headers: vec![("authorization", format!("Bearer {HOOK_TOKEN}").into())],
        body: body.into(),
    }
}

pub fn wake(body: Value) -> Request {
    post("/hooks/wake", body.to_string())
}

pub fn agent(body: Value) -> Request {
    post("/hooks/agent", body.to_string())
}

/// `GET path` without credentials.
pub fn get(path: &str) -> Request {
    Request::Http {
        method: Method::GET,
        path: path.to_string(),
        headers: Vec::new(),
        body: Vec::new(),
    }
}

/// `GET path` with the gateway token.
pub fn api(path: &str) -> Request {
    get(path).header("authorization", format!("Bearer {GATEWAY_TOKEN}"))
}

/// Bytes on a bare socket, sent at once.
pub fn raw(bytes: impl Into<Vec<u8>>) -> Request {
    Request::Raw {
        bytes: bytes.into(),
        pace: Pace::AtOnce,
        bodiless: false,
    }
}

impl Request {
    /// Adds a header (replacing one of that name: `authorization` replaces the token).
    pub fn header(mut self, name: &'static str, value: impl Into<Vec<u8>>) -> Self {
        let Request::Http { headers, .. } = &mut self else {
            panic!("the table is wrong: header() on raw bytes");
        };
        headers.retain(|(n, _)| *n != name);
        headers.push((name, value.into()));
        self
    }

    /// Sends no credentials.
    pub fn anonymous(mut self) -> Self {
        let Request::Http { headers, .. } = &mut self else {
            panic!("the table is wrong: anonymous() on raw bytes");
        };
        headers.retain(|(n, _)| *n != "authorization");
        self
    }

    pub fn method(mut self, new: Method) -> Self {
        let Request::Http { method, .. } = &mut self else {
            panic!("the table is wrong: method() on raw bytes");
        };
        *method = new;
        self
    }

    pub fn paced(mut self, new: Pace) -> Self {
        let Request::Raw { pace, .. } = &mut self else {
            panic!("the table is wrong: paced() on an ordinary request");
        };
        *pace = new;
        self
    }

    pub fn bodiless(mut self) -> Self {
        let Request::Raw { bodiless, .. } = &mut self else {
            panic!("the table is wrong: bodiless() on an ordinary request");
        };
        *bodiless = true;
        self
    }
}

/// `METHOD target HTTP/1.1` with Host, the hook token, Content-Length and `Connection: close`,
/// then the `extra` header lines (each ending in CRLF), then the body.
pub fn wire(
    method: &str,
    target: impl AsRef<[u8]>,
    extra: impl AsRef<[u8]>,
    body: &[u8],
) -> Vec<u8> {
    let token = format!("authorization: Bearer {HOOK_TOKEN}\r\n");
    build(method, target.as_ref(), &token, extra.as_ref(), body, true)
}

/// Like [`wire`], without `Connection: close`: the connection stays open for more requests.
pub fn open_wire(
    method: &str,
    target: impl AsRef<[u8]>,
    extra: impl AsRef<[u8]>,
    body: &[u8],
) -> Vec<u8> {
    let token = format!("authorization: Bearer {HOOK_TOKEN}\r\n");
    build(method, target.as_ref(), &token, extra.as_ref(), body, false)
}

/// Like [`wire`], without the hook token.
pub fn anonymous_wire(
    method: &str,
    target: impl AsRef<[u8]>,
    extra: impl AsRef<[u8]>,
    body: &[u8],
) -> Vec<u8> {
    build(method, target.as_ref(), "", extra.as_ref(), body, true)
}

fn build(
    method: &str,
    target: &[u8],
    token: &str,
    extra: &[u8],
    body: &[u8],
    close: bool,
) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(method.as_bytes());
    bytes.push(b' ');
    bytes.extend_from_slice(target);
    bytes.extend_from_slice(b" HTTP/1.1\r\nhost: hookgate.test\r\n");
    bytes.extend_from_slice(token.as_bytes());
    bytes.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    if close {
        bytes.extend_from_slice(b"connection: close\r\n");
    }
    bytes.extend_from_slice(extra);
    bytes.extend_from_slice(b"\r\n");
    bytes.extend_from_slice(body);
    bytes
}

/// A `POST` of `body` to `target` on the wire.
pub fn wire_post(target: impl AsRef<[u8]>, body: &[u8]) -> Vec<u8> {
    wire("POST", target, "", body)
}

/// The answer a case must get.
#[derive(Clone)]
pub enum Want {
    /// 200 `{"ok":true,"mode":<mode>}`.
    Woke(&'static str),
    /// 200 `{"ok":true,"runId":<uuid>}`.
    Queued,
    /// This status and `{"ok":false,"error":<message>}`.
    Error(u16, String),
    /// This status and exactly this JSON body.
    Json(u16, Value),
    /// This status and exactly this text body.
    Text(u16, &'static str),
    /// 405 `Method Not Allowed` with `Allow: POST` (docs/http-contract.md).
    NotPost,
    /// This status and no body, from the server's routes: 204, a HEAD's answer, axum's 405.
    NoBody(u16),
    /// This status and no body from hyper itself, refusing what it cannot parse before any
    /// route sees it (so without the security headers of docs/http-contract.md; an empty body has nothing
    /// to sniff).
    Refused(u16),
    /// This status; the body is not this table's business.
    Status(u16),
    /// These answers in order on one connection, then the server closes it.
    Sequence(Vec<Want>),
    /// The server closes the connection without answering.
    Closed,
}

pub const NOW: Want = Want::Woke("now");

pub fn error(status: u16, message: impl Into<String>) -> Want {
    Want::Error(status, message.into())
}

/// docs/http-contract.md: invalid JSON is a 400 carrying the parser's message.
pub fn unparsable(body: &[u8]) -> Want {
    match serde_json::from_slice::<Value>(body) {
        Ok(_) => panic!("the table is wrong: {} is valid JSON", raw::preview(body)),
        Err(e) => error(400, e.to_string()),
    }
}

pub const UNAUTHORIZED: Want = Want::Text(401, "Unauthorized");
pub const NOT_FOUND: Want = Want::Text(404, "Not Found");

/// The exact text of docs/http-contract.md.
pub const QUERY_TOKEN: Want = Want::Text(
    400,
    "Hook token must be provided via Authorization: Bearer <token> or X-Service-Token header (query parameters are not allowed).",
);

pub fn alive() -> Want {
    Want::Json(200, json!({"ok": true}))
}

impl Want {
    /// Every status this answer has, for the "no 5xx" audit of the table.
    pub fn statuses(&self) -> Vec<u16> {
        match self {
            Want::Woke(_) | Want::Queued => vec![200],
            Want::Error(s, _) | Want::Json(s, _) | Want::Text(s, _) => vec![*s],
            Want::NoBody(s) | Want::Refused(s) | Want::Status(s) => vec![*s],
            Want::NotPost => vec![405],
            Want::Sequence(wants) => wants.iter().flat_map(Want::statuses).collect(),
            Want::Closed => Vec::new(),
        }
    }

    fn matches(&self, got: &Got) -> bool {
        if let Want::Refused(status) = self {
            return got.status == *status && got.body.is_empty();
        }
        // docs/http-contract.md: every response carries these; all JSON is `application/json`.
        let hardened = got.header("x-content-type-options") == Some("nosniff")
            && got.header("referrer-policy") == Some("no-referrer");
        let body_json = || {
            got.header("content-type")
                .is_some_and(|t| t.starts_with("application/json"))
                .then(|| serde_json::from_slice::<Value>(&got.body).ok())
                .flatten()
        };
        hardened && self.matches_body(got, body_json)
    }

    fn matches_body(&self, got: &Got, body_json: impl Fn() -> Option<Value>) -> bool {
        match self {
            // The table repeats texts: a repeat is coalesced into the pending event.
            Want::Woke(mode) => {
                got.status == 200
                    && [json!("queued"), json!("coalesced")].iter().any(|outcome| {
                        body_json()
                            == Some(json!({"ok": true, "mode": mode, "eventOutcome": outcome}))
                    })
            }
            Want::Queued => {
                got.status == 200
                    && body_json().is_some_and(|v| {
                        v.as_object().is_some_and(|o| o.len() == 2)
                            && v["ok"] == true
                            && v["runId"]
                                .as_str()
                                .is_some_and(|id| uuid::Uuid::parse_str(id).is_ok())
                    })
            }
            Want::Error(status, message) => {
                got.status == *status && body_json() == Some(json!({"ok": false, "error": message}))
            }
            Want::Json(status, value) => {
                got.status == *status && body_json().as_ref() == Some(value)
            }
            Want::Text(status, text) => got.status == *status && got.body == text.as_bytes(),
            Want::NotPost => {
                got.status == 405
                    && got.body == b"Method Not Allowed"
                    && got.header("allow") == Some("POST")
            }
            Want::NoBody(status) => got.status == *status && got.body.is_empty(),
            Want::Status(status) => got.status == *status,
            Want::Refused(_) | Want::Sequence(_) | Want::Closed => false,
        }
    }
}

impl fmt::Display for Want {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Want::Woke(mode) => write!(
                f,
                r#"200 {{"ok":true,"mode":"{mode}","eventOutcome":"queued"|"coalesced"}}"#
            ),
            Want::Queued => write!(f, r#"200 {{"ok":true,"runId":<uuid>}}"#),
            Want::Error(status, message) => {
                write!(f, "{status} {}", json!({"ok": false, "error": message}))
            }
            Want::Json(status, value) => write!(f, "{status} {value}"),
            Want::Text(status, text) => write!(f, "{status} {text:?}"),
            Want::NotPost => write!(f, r#"405 "Method Not Allowed" with Allow: POST"#),
            Want::NoBody(status) => write!(f, "{status} without a body"),
            Want::Refused(status) => write!(f, "{status} without a body, from hyper"),
            Want::Status(status) => write!(f, "{status}"),
            Want::Sequence(wants) => {
                let all: Vec<String> = wants.iter().map(ToString::to_string).collect();
                write!(f, "[{}] then the end of the connection", all.join(", "))
            }
            Want::Closed => write!(f, "the connection closed without an answer"),
        }
    }
}

/// One answer, whichever client read it.
pub struct Got {
    pub status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl From<RawResponse> for Got {
    fn from(r: RawResponse) -> Self {
        Got {
            status: r.status,
            headers: r.headers,
            body: r.body,
        }
    }
}

impl fmt::Display for Got {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<String> = self
            .headers
            .iter()
            .filter(|(n, _)| n != "date")
            .map(|(n, v)| format!("{n}: {v}"))
            .collect();
        write!(
            f,
            "{} {} ({})",
            self.status,
            raw::preview(&self.body),
            headers.join("; ")
        )
    }
}

/// Sends `request` to the server at `base`; `Err` when no complete answer came within `bound`.
pub async fn send(base: &str, request: &Request, bound: Duration) -> Result<Vec<Got>, String> {
    match request {
        Request::Http {
            method,
            path,
            headers,
            body,
        } => {
            let mut builder = client()
                .request(method.clone(), format!("{base}{path}"))
                .timeout(bound)
                .body(body.clone());
            for (name, value) in headers {
                let value = reqwest::header::HeaderValue::from_bytes(value)
                    .map_err(|e| format!("the table is wrong: header {name}: {e}"))?;
                builder = builder.header(*name, value);
            }
            let response = builder.send().await.map_err(|e| format!("{e:?}"))?;
            let status = response.status().as_u16();
            let headers = response
                .headers()
                .iter()
                .map(|(n, v)| {
                    let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                    (n.as_str().to_string(), value)
                })
                .collect();
            let body = response.bytes().await.map_err(|e| format!("{e:?}"))?;
            Ok(vec![Got {
                status,
                headers,
                body: body.to_vec(),
            }])
        }
        Request::Raw {
            bytes,
            pace,
            bodiless,
        } => {
            let addr = base.trim_start_matches("http://");
            let responses = raw::exchange(addr, bytes.clone(), *pace, *bodiless, bound).await?;
            Ok(responses.into_iter().map(Got::from).collect())
        }
    }
}

/// `Ok` when `got` is what `want` asks for; else what was wrong.
pub fn check(want: &Want, got: &[Got]) -> Result<(), String> {
    let ok = match want {
        Want::Closed => got.is_empty(),
        Want::Sequence(wants) => {
            wants.len() == got.len() && wants.iter().zip(got).all(|(w, g)| w.matches(g))
        }
        single => got.len() == 1 && single.matches(&got[0]),
    };
    if ok {
        return Ok(());
    }
    let got = match got {
        [] => "the connection closed without an answer".to_string(),
        [one] => one.to_string(),
        many => {
            let all: Vec<String> = many.iter().map(ToString::to_string).collect();
            format!("{} answers: [{}]", many.len(), all.join(", "))
        }
    };
    Err(format!("expected {want}, got {got}"))
}
