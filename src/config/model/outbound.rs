//! `outbound` and a mapping's `callback` as the file writes them: where runs' outcomes and
//! lifecycle events are sent, signed as Standard Webhooks specifies (docs/outbound.md).

use schemars::JsonSchema;
use serde::Deserialize;

use super::SecretValue;

/// `outbound`: callbacks' and lifecycle webhooks' destinations and retries.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OutboundConfig {
    /// The hosts a callback or an endpoint may be sent to: a name (`hooks.example.com`), a
    /// wildcard (`*.example.com`) or an IP address. A private, loopback or link-local address
    /// is refused unless that address itself is listed, whatever name resolves to it.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Lifecycle webhooks: endpoints subscribed to run events.
    #[serde(default)]
    pub endpoints: Vec<EndpointConfig>,
    /// How long a message is retried.
    pub retry: Option<OutboundRetryConfig>,
}

/// One entry of `outbound.endpoints`.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EndpointConfig {
    /// The endpoint's name in the outbox and the log.
    pub id: String,
    /// Where its events are POSTed (https, or http to a listed host).
    pub url: String,
    /// The signing secret, `whsec_<base64>`.
    pub secret: Option<SecretValue>,
    /// Several signing secrets (rotation): each message carries a signature by each.
    pub secrets: Option<Vec<SecretValue>>,
    /// The events sent: `run.started`, `run.finished`, `run.failed`, `run.held`,
    /// `delivery.failed`, `request.refused`, `relay.failed`.
    pub events: Vec<String>,
    /// Only events of runs of these mappings (by id); a `request.refused` only when the
    /// refusal is attributed to one of them (a refusal before any mapping matched has none).
    pub mappings: Option<Vec<String>>,
    /// Only events of runs of these agents. A refused request made no run: an endpoint with
    /// this filter gets no `request.refused`.
    pub agents: Option<Vec<String>>,
    /// At most this many `request.refused` messages written for this endpoint per minute (per
    /// node); beyond it refusals are counted, not written, and the next message written says how
    /// many were left out (`data.suppressed`). What keeps refused requests from making the
    /// store write per request.
    #[schemars(extend("default" = 60), range(min = 1))]
    pub refused_per_minute: Option<u32>,
}

/// `outbound.retry`.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OutboundRetryConfig {
    /// How long a message is retried after it was written, a duration like `24h`; past it, it
    /// is kept as failed.
    #[serde(rename = "for")]
    #[schemars(extend("default" = "24h"))]
    pub retry_for: Option<String>,
    /// The longest wait between two attempts, a duration like `10m`.
    #[schemars(extend("default" = "10m"))]
    pub max_delay: Option<String>,
}

/// A mapping's `callback`: where its runs' outcomes are POSTed.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CallbackConfig {
    /// A fixed URL, or a template rendered from the payload (`{{response_url}}`); its host must
    /// be in `outbound.allowHosts`.
    pub url: String,
    /// The signing secret, `whsec_<base64>`.
    pub secret: Option<SecretValue>,
    /// Several signing secrets (rotation): each message carries a signature by each.
    pub secrets: Option<Vec<SecretValue>>,
    /// `outcome` (hookgate's run outcome) or `slack` (`{"response_type", "text"}` as Slack's
    /// `response_url` takes it).
    #[schemars(extend("default" = "outcome", "enum" = ["outcome", "slack"]))]
    pub format: Option<String>,
}
