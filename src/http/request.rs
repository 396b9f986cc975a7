//! One authenticated hook request with its body read, as the mapped and direct paths take it.

use axum::http::request::Parts;
use bytes::Bytes;
use serde_json::Value;

use crate::mapping::Mapping;

/// One authenticated hook request with its body read.
pub(super) struct HookRequest<'a> {
    pub name: &'a str,
    pub parts: &'a Parts,
    pub body: &'a Bytes,
    pub payload: &'a Value,
    /// Set when a signature, not the token, admitted the request.
    pub signed: Option<Signed<'a>>,
}

/// A request authenticated by a mapping's signature: it may run that mapping and nothing else.
/// An operator's replay of such a request carries the same restriction.
#[derive(Clone, Copy)]
pub(super) struct Signed<'a> {
    pub mapping: &'a Mapping,
    /// The replay key; doubles as the idempotency key of the run it makes. `None` for an
    /// operator's replay, which makes a run of its own.
    pub key: Option<&'a str>,
}
