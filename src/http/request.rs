//! A hook request as the pipeline's steps see it: what the dispatcher learnt of it before routing
//! ([`HookContext`]), and once authenticated with its body read ([`HookRequest`]).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::Uri;
use axum::http::request::Parts;
use bytes::Bytes;
use serde_json::Value;

use super::reply::HookError;
use crate::config::{HookSettings, Settings};
use crate::hook::signature::AdmittingSignature;
use crate::mapping::Mapping;

/// What the dispatcher learnt of a hook request before routing it, as a request extension: the
/// configuration generation it is served under (read once, so that no step of one request sees
/// another generation), the URI as the client sent it (the router sees only `/` and the hook's
/// name) and that name. Each step that takes it clones it: an atomic increment.
#[derive(Clone)]
pub(super) struct HookContext(Arc<ContextParts>);

/// The parts of [`HookContext`].
pub(super) struct ContextParts {
    pub settings: Arc<Settings>,
    /// The request's URI, prefix and query included, as received (or as recorded, for a replay).
    pub uri: Uri,
    /// What follows the prefix, as [`super::hooks`] reads it: not percent-decoded, possibly empty.
    pub name: String,
    /// Who sent the request, and an operator's replay's admission.
    pub origin: Origin,
}

/// Who a hook request came from: it decides whether a refusal is told to the endpoints
/// subscribed to `request.refused` (docs/outbound.md#refused-requests), which only a sender's
/// own request is. [`super::hooks::dispatch`] takes it from the request's extensions, where only
/// our own callers put it (a request from the network has none: [`Origin::Sender`]).
#[derive(Clone)]
pub(super) enum Origin {
    /// A sender on the network, answered with this refusal.
    Sender,
    /// An operator's replay, which carries its original's admission.
    Replay(Replay),
    /// A request pulled from an edge: its sender was answered by the edge.
    EdgePull,
    /// An operator's `POST /api/hooks/{name}/test`.
    Test,
}

impl Origin {
    /// The replay this request is, when it is one.
    pub fn replay(&self) -> Option<&Replay> {
        match self {
            Origin::Replay(replay) => Some(replay),
            _ => None,
        }
    }
}

impl std::ops::Deref for HookContext {
    type Target = ContextParts;

    fn deref(&self) -> &ContextParts {
        &self.0
    }
}

/// An operator's replay of a recorded request: the operator's authority stands in for the
/// credential, and a request that a signature admitted may run only that signature's mapping.
#[derive(Clone)]
pub(super) struct Replay {
    /// The id of the record replayed.
    pub of: String,
    /// The signature that admitted the original, its mapping configured in the replay's
    /// generation.
    pub signed: Option<AdmittingSignature>,
}

impl HookContext {
    pub fn new(parts: ContextParts) -> Self {
        HookContext(Arc::new(parts))
    }

    /// The hook settings of the request's generation; 404 when hooks are off (the dispatcher
    /// routes no request then, so this is only a guard).
    pub fn hooks(&self) -> Result<&HookSettings, HookError> {
        self.settings.hooks.as_ref().ok_or(HookError::NotFound)
    }

    /// The mapping `id` of the request's generation.
    pub fn mapping(&self, id: &str) -> Result<&Mapping, HookError> {
        mapping_by_id(self.hooks()?, id).ok_or_else(|| {
            HookError::internal(format!("mapping {id} is not in the request's generation"))
        })
    }
}

/// The mapping `id` of `hooks`; ids are unique across mappings and presets.
pub(super) fn mapping_by_id<'a>(hooks: &'a HookSettings, id: &str) -> Option<&'a Mapping> {
    hooks.mappings.iter().find(|m| m.id == id)
}

impl<S: Send + Sync> FromRequestParts<S> for HookContext {
    type Rejection = HookError;

    /// The context the dispatcher (or a replay) put in the request; its absence is our bug.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, HookError> {
        extension(parts, "a hook request without its context")
    }
}

/// The `T` a layer put in the request's extensions; its absence, which `missing` says, is our bug.
pub(super) fn extension<T: Clone + Send + Sync + 'static>(
    parts: &Parts,
    missing: &'static str,
) -> Result<T, HookError> {
    parts
        .extensions
        .get::<T>()
        .cloned()
        .ok_or_else(|| HookError::internal(missing))
}

/// One authenticated hook request with its body read.
pub(super) struct HookRequest<'a> {
    pub name: &'a str,
    pub parts: &'a Parts,
    pub body: &'a Bytes,
    pub payload: &'a Value,
    /// Set when a signature, not the token, admitted the request: it may run that signature's
    /// mapping and nothing else. An operator's replay of such a request carries the same
    /// restriction (and no replay key: it makes a run of its own).
    pub signed: Option<&'a AdmittingSignature>,
}
