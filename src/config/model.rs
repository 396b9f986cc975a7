//! The configuration file as written: serde types that mirror the JSON5 document key for key.
//!
//! Nothing here is validated beyond its shape; `config::settings` turns these into the normalised
//! [`Settings`](super::Settings) the server runs on. Every struct refuses unknown keys so that a typo
//! is reported with its path instead of being silently ignored.

use std::collections::BTreeMap;

use serde::Deserialize;

pub use super::batch::BatchConfig;
pub use super::budget::BudgetConfig;
pub use super::channels::ChannelsConfig;
pub use super::secret::{SecretFile, SecretValue};

/// The whole configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileConfig {
    #[serde(default)]
    pub gateway: GatewayConfig,
    #[serde(default)]
    pub hooks: HooksConfig,
    #[serde(default)]
    pub agents: AgentsConfig,
    /// Named model providers.
    #[serde(default)]
    pub models: ModelsConfig,
    /// Delivery adapters, with where and how replies are sent.
    #[serde(default)]
    pub channels: Option<ChannelsConfig>,
}

/// `gateway.*`: where the server listens and what guards the operator API.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewayConfig {
    pub bind: Option<String>,
    pub port: Option<u16>,
    pub auth: Option<GatewayAuthConfig>,
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    pub state_dir: Option<String>,
    /// Group commit of concurrent submissions (default true); off only to measure its worth.
    pub group_commit: Option<bool>,
    /// Connections served at once (default 1024).
    pub max_connections: Option<u32>,
    /// Seconds a client has to send a request's headers (default 10).
    pub header_timeout_seconds: Option<f64>,
    /// Connections one client may hold (default half of `max_connections`).
    pub max_connections_per_client: Option<u32>,
    /// Seconds a response may wait for the client to read it (default 10).
    pub write_timeout_seconds: Option<f64>,
    /// Bytes per second a body must arrive at, after 2 s (default 1024; 0 turns it off).
    pub min_receive_bytes_per_second: Option<u64>,
    /// Seconds a stop waits for requests in flight and current sends (default 10).
    pub shutdown_timeout_seconds: Option<f64>,
    /// The header trusted proxies name the client in: `x-forwarded-for` (default) or
    /// `forwarded` (RFC 7239).
    pub forwarded_header: Option<String>,
    pub metrics: Option<MetricsConfig>,
    /// `embedded` (default): run agents here; `forward`: relay to an upstream gateway.
    pub mode: Option<String>,
    pub forward: Option<ForwardConfig>,
    /// Where accepted hooks are kept: the embedded SQLite file (default) or NATS JetStream.
    pub store: Option<StoreConfig>,
    /// How long finished work is kept in the store.
    pub retention: Option<RetentionConfig>,
}

/// `gateway.retention`: durations like `30d`; `0` keeps everything.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RetentionConfig {
    /// Main-session events (default `30d`).
    pub events: Option<String>,
    /// Finished runs with their prompts, replies and failed sends (default `30d`).
    pub runs: Option<String>,
    /// The request log (default `7d`).
    pub requests: Option<String>,
    /// The request log's size bound in bytes, oldest records pruned first (default 1 GiB; 0:
    /// bounded by age alone).
    pub requests_max_bytes: Option<u64>,
}

/// `gateway.store`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StoreConfig {
    /// `embedded` or `nats`.
    pub kind: String,
    /// `nats://host:port`, several separated by commas (nats only).
    pub url: Option<String>,
    /// The JetStream stream (nats only; default `HOOKGATE`).
    pub stream: Option<String>,
    /// The prefix of the key-value buckets (nats only; default `hookgate`).
    pub bucket: Option<String>,
    /// Stream and bucket replicas (nats only; default 1, 3 on a three-node cluster).
    pub replicas: Option<u8>,
}

/// `gateway.metrics`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricsConfig {
    /// Serve `/metrics` without the gateway token (default false).
    #[serde(default)]
    pub public: bool,
}

/// `gateway.forward`: the upstream gateway that forward mode relays to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ForwardConfig {
    /// Base URL of the upstream gateway.
    pub url: String,
    /// The upstream's `hooks.path` (default `/hooks`): wakes go to `<url><path>/wake`, agent runs
    /// to `<url><path>/agent`.
    pub path: Option<String>,
    /// The upstream's hook token.
    pub token: SecretValue,
    /// Relay a run's session key (default false: the upstream applies its own
    /// `defaultSessionKey`, and refuses request keys unless its `allowRequestSessionKey` is on).
    pub relay_session_key: Option<bool>,
}

/// `gateway.auth.*`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewayAuthConfig {
    pub token: Option<SecretValue>,
}

/// `hooks.*`: the webhook endpoint.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HooksConfig {
    #[serde(default)]
    pub enabled: bool,
    pub token: Option<SecretValue>,
    pub path: Option<String>,
    pub max_body_bytes: Option<u64>,
    /// Seconds a client may take to send its body (default 30).
    pub body_timeout_seconds: Option<f64>,
    pub allowed_agent_ids: Option<Vec<String>>,
    pub default_session_key: Option<String>,
    #[serde(default)]
    pub allow_request_session_key: bool,
    pub allowed_session_key_prefixes: Option<Vec<String>>,
    #[serde(default)]
    pub presets: Vec<String>,
    #[serde(default)]
    pub mappings: Vec<MappingConfig>,
    pub transforms_dir: Option<String>,
    pub transform_limits: Option<TransformLimitsConfig>,
    /// What the request log keeps of each request's headers and body.
    pub capture: Option<CaptureConfig>,
}

/// `hooks.capture`, or a mapping's `capture` (whose unset fields take `hooks.capture`'s, and
/// whose `enabled` defaults to true).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CaptureConfig {
    pub enabled: Option<bool>,
    /// Bodies longer than this are not kept (default 65536).
    pub max_bytes: Option<u64>,
    /// JSON pointers whose values are replaced by `[redacted]` before storage.
    pub redact: Option<Vec<String>>,
    /// Header names whose values are replaced by `[redacted]` before storage.
    pub redact_headers: Option<Vec<String>>,
}

/// `hooks.transformLimits`, or a mapping's `transform.limits`: bounds on transform calls.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TransformLimitsConfig {
    pub timeout_ms: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub output_bytes: Option<u64>,
    pub log_bytes: Option<u64>,
    pub max_concurrent: Option<u32>,
}

/// One entry of `hooks.mappings`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MappingConfig {
    pub id: Option<String>,
    #[serde(rename = "match")]
    pub match_rule: Option<MatchConfig>,
    pub action: Option<String>,
    pub wake_mode: Option<String>,
    pub name: Option<String>,
    pub agent_id: Option<String>,
    pub session_key: Option<String>,
    pub message_template: Option<String>,
    pub text_template: Option<String>,
    pub deliver: Option<bool>,
    pub channel: Option<String>,
    pub to: Option<String>,
    pub model: Option<String>,
    pub thinking: Option<String>,
    pub timeout_seconds: Option<f64>,
    #[serde(default)]
    pub allow_unsafe_external_content: bool,
    pub transform: Option<TransformConfig>,
    /// Accepts the provider's signature in place of the hook token.
    pub signature: Option<SignatureConfig>,
    /// A top-level payload key holding a list: one action per element (the gmail preset's
    /// `messages`).
    pub for_each: Option<String>,
    /// `isolated` (default) or `persistent`: the runs continue their session key's conversation.
    pub session_mode: Option<String>,
    /// What the request log keeps of this mapping's requests, over `hooks.capture`.
    pub capture: Option<CaptureConfig>,
    /// The mapping's lane: its runs at once, waiting, and their priority.
    pub runs: Option<super::lanes::RunsConfig>,
    /// Runs an hour and tokens a day this mapping's runs may take (agent mappings only).
    pub budget: Option<BudgetConfig>,
    /// Gathers an agent mapping's requests into one run per window.
    pub batch: Option<BatchConfig>,
}

/// `signature` of a mapping.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignatureConfig {
    /// `github`, `stripe`, `slack`, `standard-webhooks`, `shopify`, `gitlab` or `hmac-sha256`.
    pub scheme: String,
    pub secret: Option<SecretValue>,
    /// Several secrets, all accepted (rotation).
    pub secrets: Option<Vec<SecretValue>>,
    /// `hmac-sha256`: the header carrying the signature.
    pub header: Option<String>,
    /// `hmac-sha256`: `hex` (default) or `base64`.
    pub encoding: Option<String>,
    /// `hmac-sha256`: text before the signature, e.g. `sha256=`.
    pub prefix: Option<String>,
    /// Timestamped schemes: how far from now a signature may be (default 300).
    pub tolerance_seconds: Option<u64>,
    /// Whether the hook token opens this mapping too (default true); false leaves the
    /// signature as its only way in.
    pub accept_token: Option<bool>,
}
/// `match` of a mapping: which requests it applies to.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MatchConfig {
    pub path: Option<String>,
    pub source: Option<String>,
    /// Header name → a value or a list of values; every header must carry one of its values.
    pub headers: Option<super::conditions::HeadersConfig>,
    /// JSON pointer → a value, a list of values, or `{ exists: true | false }`; every one must
    /// hold.
    pub payload: Option<super::conditions::PayloadConfig>,
}

/// `transform` of a mapping.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TransformConfig {
    pub module: String,
    pub config: Option<serde_json::Value>,
    /// Which entry point of the component to run (contract 0.2; a JavaScript module's named
    /// export).
    pub export: Option<String>,
    /// This mapping's bounds, over `hooks.transformLimits` (all but `maxConcurrent`).
    pub limits: Option<TransformLimitsConfig>,
    /// Calls one instance serves before it is replaced (default 1: a fresh one every call).
    pub reuse: Option<u32>,
}

/// `agents.*`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentsConfig {
    #[serde(default)]
    pub defaults: AgentDefaultsConfig,
    #[serde(default)]
    pub list: Vec<AgentEntryConfig>,
}

/// `agents.defaults.*`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentDefaultsConfig {
    /// The model allowlist: model id → options. Empty means any model is accepted.
    #[serde(default)]
    pub models: BTreeMap<String, ModelEntryConfig>,
    pub heartbeat: Option<HeartbeatConfig>,
    /// The provider of model ids that name none of `models.providers`.
    pub provider: Option<ProviderConfig>,
    /// The model of runs that name none: an id, or `{ primary, fallbacks }`.
    pub model: Option<ModelConfig>,
    /// Agent runs at once (default 4).
    pub max_concurrent: Option<u32>,
    /// Default bound on a run, in seconds (default 600).
    pub timeout_seconds: Option<u64>,
}

/// `model`: one id, or a primary with fallbacks tried in order when it fails for a while.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ModelConfig {
    Id(String),
    Chain(ModelChainConfig),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModelChainConfig {
    pub primary: String,
    #[serde(default)]
    pub fallbacks: Vec<String>,
}

/// A model endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProviderConfig {
    /// `openai-completions`: up to, not including, `/chat/completions` (`https://api.openai.com/v1`);
    /// `anthropic-messages`: up to `/v1/messages` (`https://api.anthropic.com`).
    pub base_url: String,
    pub api_key: Option<SecretValue>,
    /// The wire format: `openai-completions` (default) or `anthropic-messages`.
    pub api: Option<String>,
    /// The provider's model catalogue, as OpenClaw lists it; accepted, not needed here.
    pub models: Option<serde_json::Value>,
}

/// `models.*`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModelsConfig {
    /// Providers by name: a model id `<name>/<model>` is sent to `<name>` as `<model>`.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// OpenClaw's `merge`/`replace` of its built-in catalogue; accepted, nothing to merge here.
    pub mode: Option<String>,
}

/// One model of the allowlist.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModelEntryConfig {
    pub alias: Option<String>,
}

/// `agents.defaults.heartbeat`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeartbeatConfig {
    pub every: Option<String>,
    /// The most characters a reply may have besides `HEARTBEAT_OK` and still be an
    /// acknowledgement (default 300).
    pub ack_max_chars: Option<usize>,
}

/// One entry of `agents.list`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentEntryConfig {
    pub id: String,
    #[serde(default)]
    pub default: bool,
    pub name: Option<String>,
    pub model: Option<ModelConfig>,
    pub provider: Option<ProviderConfig>,
    /// Runs an hour and tokens a day this agent's runs may take, whatever started them.
    pub budget: Option<BudgetConfig>,
}
