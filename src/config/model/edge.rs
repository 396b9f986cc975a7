//! `edge` as the file writes it: `edge.serve` makes this node an edge that stores hooks for a
//! private node to pull; `edge.link` makes it a private node that pulls from one
//! (docs/edge.md).

use schemars::JsonSchema;
use serde::Deserialize;

use super::{LIVE, RESTART, SecretValue};

/// The most requests an edge keeps waiting for its private node, unless `edge.serve.maxPending`
/// says otherwise.
pub const DEFAULT_EDGE_MAX_PENDING: u64 = 100_000;
/// The most requests of one route an edge keeps waiting, unless
/// `edge.serve.maxPendingPerRoute` says otherwise.
pub const DEFAULT_EDGE_MAX_PENDING_PER_ROUTE: u64 = 20_000;
/// The most bytes of bodies and headers an edge keeps waiting, unless
/// `edge.serve.maxPendingBytes` says otherwise.
pub const DEFAULT_EDGE_MAX_PENDING_BYTES: u64 = 1 << 30;

/// `edge.*`: one of the two roles of docs/edge.md, or neither.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EdgeConfig {
    /// This node is an edge: every hook request is stored durably before its answer, for the
    /// private node to pull; nothing runs here.
    #[schemars(extend("x-reload" = RESTART))]
    pub serve: Option<EdgeServeConfig>,
    /// This node is a private node: it pulls what an edge stored and runs each request through
    /// its own pipeline.
    #[schemars(extend("x-reload" = RESTART))]
    pub link: Option<EdgeLinkConfig>,
}

/// `edge.serve`: what an edge accepts and keeps.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EdgeServeConfig {
    /// The private node's credential (`Authorization: Bearer`) for `/edge/pull` and
    /// `/edge/ack`; it submits no hook. Required. A reload applies it to the next pull.
    #[schemars(extend("x-reload" = LIVE))]
    pub pull_token: Option<SecretValue>,
    /// Hook names stored without the hook token, for senders that sign instead (GitHub,
    /// Stripe): the private node verifies their signature. Any other name needs the token. A
    /// reload applies it to the next request.
    #[serde(default)]
    #[schemars(extend("x-reload" = LIVE))]
    pub routes: Vec<String>,
    /// The most requests kept waiting for the private node; past it, 503.
    #[schemars(extend("default" = DEFAULT_EDGE_MAX_PENDING), range(min = 1))]
    pub max_pending: Option<u64>,
    /// The most requests of one hook name kept waiting; past it, that name gets 503.
    #[schemars(extend("default" = DEFAULT_EDGE_MAX_PENDING_PER_ROUTE), range(min = 1))]
    pub max_pending_per_route: Option<u64>,
    /// The most bytes (bodies and headers) kept waiting; past it, 503.
    #[schemars(extend("default" = DEFAULT_EDGE_MAX_PENDING_BYTES), range(min = 1))]
    pub max_pending_bytes: Option<u64>,
}

/// `edge.link`: the edge a private node pulls from.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EdgeLinkConfig {
    /// The edge's base URL, `https://` (or `http://` to a loopback address). Required.
    pub url: Option<String>,
    /// The edge's `edge.serve.pullToken`. Required.
    pub pull_token: Option<SecretValue>,
}
