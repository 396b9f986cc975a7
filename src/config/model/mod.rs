//! The configuration file as written: serde types that mirror the JSON5 document key for key.
//!
//! Nothing here is validated beyond its shape; `config::settings` turns these into the normalised
//! [`Settings`](super::Settings) the server runs on. Every struct refuses unknown keys so that a typo
//! is reported with its path instead of being silently ignored.
//!
//! It stands below what is built from it: nothing in `model/` imports the rest of `config`,
//! whose modules import these types and the [`defaults`] the schema names.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

mod batch;
mod budget;
pub mod channels;
mod conditions;
pub mod defaults;
mod edge;
mod lanes;
mod mcp;
mod outbound;
mod secret;

pub use batch::BatchConfig;
pub use budget::BudgetConfig;
pub use channels::ChannelsConfig;
pub use conditions::{
    ExistsConfig, HeaderValuesConfig, HeadersConfig, PayloadConfig, PayloadTestConfig,
};
use defaults::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_BUCKET, DEFAULT_CAPTURE_BYTES, DEFAULT_HOOKS_PATH,
    DEFAULT_MAX_BODY_BYTES, DEFAULT_REPLICAS, DEFAULT_REQUESTS_MAX_BYTES, DEFAULT_STREAM,
    KNOWN_PRESETS, MAX_CAPTURE_BYTES,
};
pub use edge::{
    DEFAULT_EDGE_MAX_PENDING, DEFAULT_EDGE_MAX_PENDING_BYTES, DEFAULT_EDGE_MAX_PENDING_PER_ROUTE,
    EdgeConfig, EdgeLinkConfig, EdgeServeConfig,
};
pub use lanes::RunsConfig;
pub use mcp::{
    McpBudgetCapConfig, McpConfig, McpLaneCapConfig, McpSubscriptionsConfig, McpTokenConfig,
};
pub use outbound::{CallbackConfig, EndpointConfig, OutboundConfig, OutboundRetryConfig};
pub use secret::{SecretFile, SecretValue};

/// What a key that says nothing of reload is: taken on the next request, run, send or
/// connection. Said on a key under a restart-only one that a reload does apply.
pub const LIVE: &str = "live";
/// What a key's `x-reload` says when a change needs a restart (docs/configuration.md#reload).
pub const RESTART: &str = "restart";
/// A key a NATS store's consumers are set up from at start.
pub const RESTART_ON_NATS: &str = "restart on a NATS store";
/// A bound the transform engine's instance pool is sized for at start.
pub const RESTART_IF_LARGER: &str = "restart when larger than at start";

/// The most seconds of a `*TimeoutSeconds` key of `gateway` and `hooks`.
pub const MAX_SECONDS: f64 = 3600.0;
pub const DEFAULT_BIND: &str = "127.0.0.1";
pub const DEFAULT_PORT: u16 = 8787;
pub const DEFAULT_STATE_DIR: &str = "state";
pub const DEFAULT_MAX_CONNECTIONS: u32 = 1024;
pub const DEFAULT_MIN_RECEIVE_RATE: u64 = 1024;
/// The default of `gateway.headerTimeoutSeconds`, `writeTimeoutSeconds` and
/// `shutdownTimeoutSeconds`.
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_CONCURRENT: u32 = 4;
pub const DEFAULT_RUN_TIMEOUT_SECONDS: u64 = 600;
pub const DEFAULT_ACK_MAX_CHARS: usize = 300;
const TRANSFORM: crate::transform::TransformLimits = crate::transform::TransformLimits::DEFAULT;

/// The whole configuration file.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileConfig {
    /// Where the server listens and what guards the operator API.
    #[serde(default)]
    pub gateway: GatewayConfig,
    /// The webhook endpoints.
    #[serde(default)]
    pub hooks: HooksConfig,
    /// The agents hooks run.
    #[serde(default)]
    pub agents: AgentsConfig,
    /// Named model providers.
    #[serde(default)]
    pub models: ModelsConfig,
    /// Delivery adapters, with where and how replies are sent.
    #[serde(default)]
    pub channels: Option<ChannelsConfig>,
    /// The MCP endpoint's credentials (docs/mcp.md).
    #[serde(default)]
    pub mcp: McpConfig,
    /// The edge and the private node it serves (docs/edge.md).
    #[serde(default)]
    pub edge: EdgeConfig,
    /// Callbacks and lifecycle webhooks: where results go (docs/outbound.md).
    #[serde(default)]
    pub outbound: OutboundConfig,
}

/// `gateway.*`: where the server listens and what guards the operator API.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewayConfig {
    /// The address to listen on (`serve --listen` overrides).
    #[schemars(extend("default" = DEFAULT_BIND, "x-reload" = RESTART))]
    pub bind: Option<String>,
    /// The port to listen on (`serve --listen` overrides).
    #[schemars(extend("default" = DEFAULT_PORT, "x-reload" = RESTART))]
    pub port: Option<u16>,
    /// What guards the operator API.
    pub auth: Option<GatewayAuthConfig>,
    /// IPs and CIDR ranges whose forwarding header is believed (docs/configuration.md#connections).
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// The directory of `hookgate.db`, relative to the config dir.
    #[schemars(extend("default" = DEFAULT_STATE_DIR, "x-reload" = RESTART))]
    pub state_dir: Option<String>,
    /// One transaction for every waiting write; `false` only to measure its worth.
    #[schemars(extend("default" = true, "x-reload" = RESTART))]
    pub group_commit: Option<bool>,
    /// Connections served at once; when all are held, a new one takes the slot of the
    /// connection idle longest, or waits. A lower limit applies as connections end or give way.
    #[schemars(extend("default" = DEFAULT_MAX_CONNECTIONS), range(min = 1))]
    pub max_connections: Option<u32>,
    /// Time to send a request's headers; also how long a keep-alive connection may sit idle.
    #[schemars(extend("default" = DEFAULT_CONNECTION_TIMEOUT.as_secs(), "exclusiveMinimum" = 0), range(max = MAX_SECONDS))]
    pub header_timeout_seconds: Option<f64>,
    /// Connections one client (an address, an IPv6 /64) may hold; more get 503 at once.
    /// Trusted proxies are exempt.
    #[schemars(extend("x-default" = "half of `maxConnections`"), range(min = 1))]
    pub max_connections_per_client: Option<u32>,
    /// How long an answer may wait for the client to read it before the connection is closed.
    #[schemars(extend("default" = DEFAULT_CONNECTION_TIMEOUT.as_secs(), "exclusiveMinimum" = 0), range(max = MAX_SECONDS))]
    pub write_timeout_seconds: Option<f64>,
    /// A body must arrive at least this fast after its first 2 s, else 408; `0` turns the rate
    /// off (the body timeout still applies).
    #[schemars(extend("default" = DEFAULT_MIN_RECEIVE_RATE))]
    pub min_receive_bytes_per_second: Option<u64>,
    /// On SIGTERM, time for requests in flight and the outbox's current sends together; what
    /// is still open then is closed, and the store committed.
    #[schemars(extend("default" = DEFAULT_CONNECTION_TIMEOUT.as_secs(), "exclusiveMinimum" = 0), range(max = MAX_SECONDS))]
    pub shutdown_timeout_seconds: Option<f64>,
    /// The header trusted proxies name the client in: `x-forwarded-for` or `forwarded`
    /// (RFC 7239).
    #[schemars(extend("default" = "x-forwarded-for", "enum" = ["x-forwarded-for", "forwarded"]))]
    pub forwarded_header: Option<String>,
    /// What `/metrics` asks of its callers.
    pub metrics: Option<MetricsConfig>,
    /// `embedded`: run agents here; `forward`: relay everything to `gateway.forward`.
    #[schemars(extend("default" = "embedded", "enum" = ["embedded", "forward"], "x-reload" = RESTART))]
    pub mode: Option<String>,
    /// The upstream gateway of forward mode.
    pub forward: Option<ForwardConfig>,
    /// Where accepted hooks are kept: the embedded SQLite file, or NATS JetStream shared by
    /// several nodes.
    #[schemars(extend("default" = {"kind": "embedded"}, "x-reload" = RESTART))]
    pub store: Option<StoreConfig>,
    /// How long finished work is kept in the store (docs/configuration.md#retention).
    pub retention: Option<RetentionConfig>,
    /// How senders reach this node (`https://hooks.example.com`, behind a proxy, a tunnel or
    /// the edge): every hook URL hookgate prints starts with it (docs/subscriptions.md).
    pub public_url: Option<String>,
    /// The key that seals the signing secrets of subscriptions at rest (docs/subscriptions.md):
    /// any text of at least 32 characters, kept apart from the state directory. Without it no
    /// subscription can be created.
    pub secrets_key: Option<SecretValue>,
}

/// `gateway.retention`: durations like `30d`; `0` keeps everything.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RetentionConfig {
    /// How long main-session events a heartbeat has taken are kept; `0` keeps them all.
    #[schemars(extend("default" = "30d"))]
    pub events: Option<String>,
    /// How long finished runs, with their prompts, replies and failed sends, are kept; `0`
    /// keeps them all.
    #[schemars(extend("default" = "30d"))]
    pub runs: Option<String>,
    /// How long the request log is kept; `0` keeps it all.
    #[schemars(extend("default" = "7d"))]
    pub requests: Option<String>,
    /// The request log's size bound: past it the oldest records go first, whatever their age;
    /// `0` bounds it by age alone, otherwise at least 1 MiB.
    #[schemars(extend("default" = DEFAULT_REQUESTS_MAX_BYTES))]
    pub requests_max_bytes: Option<u64>,
}

/// `gateway.store`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StoreConfig {
    /// `embedded` or `nats`.
    #[schemars(extend("enum" = ["embedded", "nats"]))]
    pub kind: String,
    /// `nats://host:port`, several separated by commas (nats only).
    pub url: Option<String>,
    /// The JetStream stream (nats only).
    #[schemars(extend("default" = DEFAULT_STREAM))]
    pub stream: Option<String>,
    /// The prefix of the key-value buckets (nats only).
    #[schemars(extend("default" = DEFAULT_BUCKET))]
    pub bucket: Option<String>,
    /// Stream and bucket replicas (nats only; 3 on a three-node cluster).
    #[schemars(extend("default" = DEFAULT_REPLICAS), range(min = 1, max = 5))]
    pub replicas: Option<u8>,
}

/// `gateway.metrics`.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricsConfig {
    /// Serve `/metrics` without the gateway token.
    #[serde(default)]
    pub public: bool,
}

/// `gateway.forward`: the upstream gateway that forward mode relays to.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ForwardConfig {
    /// Base URL of the upstream gateway.
    pub url: String,
    /// The upstream's `hooks.path`: wakes go to `<url><path>/wake`, agent runs to
    /// `<url><path>/agent`.
    #[schemars(extend("default" = DEFAULT_HOOKS_PATH))]
    pub path: Option<String>,
    /// The upstream's hook token.
    pub token: SecretValue,
    /// Relay a run's session key; `false`: the upstream applies its own `defaultSessionKey`
    /// (and refuses request keys unless its `allowRequestSessionKey` is on).
    #[schemars(extend("default" = false))]
    pub relay_session_key: Option<bool>,
}

/// `gateway.auth.*`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewayAuthConfig {
    /// The bearer token of the operator API.
    #[schemars(extend("x-default" = "none (API closed)"))]
    pub token: Option<SecretValue>,
}

/// `hooks.*`: the webhook endpoint.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HooksConfig {
    /// Serve the hook endpoints.
    #[serde(default)]
    pub enabled: bool,
    /// The hook token; must differ from the gateway token.
    #[schemars(extend("x-default" = "required when enabled"))]
    pub token: Option<SecretValue>,
    /// The prefix of the hook endpoints.
    #[schemars(extend("default" = DEFAULT_HOOKS_PATH))]
    pub path: Option<String>,
    /// Larger bodies get 413; a request's templates render to at most four times it, 1 MiB
    /// at least.
    #[schemars(extend("default" = DEFAULT_MAX_BODY_BYTES), range(min = 1))]
    pub max_body_bytes: Option<u64>,
    /// Time a client may take to send its body; slower bodies get 408.
    #[schemars(
        extend("default" = DEFAULT_BODY_TIMEOUT.as_secs(), "exclusiveMinimum" = 0),
        range(max = MAX_SECONDS)
    )]
    pub body_timeout_seconds: Option<f64>,
    /// Explicit `agentId` allowlist; `[]` denies all, `"*"` allows all.
    #[schemars(extend("x-default" = "any"))]
    pub allowed_agent_ids: Option<Vec<String>>,
    /// The session of runs without an explicit key.
    #[schemars(extend("x-default" = "`hook:<uuid>` per run"))]
    pub default_session_key: Option<String>,
    /// May payloads choose session keys: `/agent`'s and `/wake`'s `sessionKey`, a mapping
    /// `sessionKey` with a template expression, a transform's.
    #[serde(default)]
    pub allow_request_session_key: bool,
    /// Explicit session keys must start with one of these.
    #[schemars(extend("x-default" = "no restriction"))]
    pub allowed_session_key_prefixes: Option<Vec<String>>,
    /// Built-in mappings; `"gmail"` is the only one.
    #[serde(default)]
    #[schemars(extend("items" = {"enum": KNOWN_PRESETS}))]
    pub presets: Vec<String>,
    /// Mapped hooks, tried in order (docs/hooks.md#mapped-hooks).
    #[serde(default)]
    pub mappings: Vec<MappingConfig>,
    /// Where transform modules live: a directory inside the transforms root
    /// (`<config dir>/hooks/transforms`), a relative path resolving against the root.
    #[schemars(extend("x-default" = "the transforms root"))]
    pub transforms_dir: Option<String>,
    /// Bounds of every transform call (docs/transforms.md).
    pub transform_limits: Option<TransformLimitsConfig>,
    /// What the request log keeps of each request's headers and body.
    pub capture: Option<CaptureConfig>,
}

/// `hooks.capture`, or a mapping's `capture` (whose unset fields take `hooks.capture`'s, and
/// whose `enabled` defaults to true).
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CaptureConfig {
    /// Keep headers and bodies (a mapping's `capture` is on unless it says `false`).
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,
    /// Bodies longer than this are not kept.
    #[schemars(extend("default" = DEFAULT_CAPTURE_BYTES), range(min = 1, max = MAX_CAPTURE_BYTES))]
    pub max_bytes: Option<u64>,
    /// JSON pointers whose values are replaced by `[redacted]` before storage.
    pub redact: Option<Vec<String>>,
    /// Header names whose values are replaced by `[redacted]` before storage.
    pub redact_headers: Option<Vec<String>>,
}

/// `hooks.transformLimits`, or a mapping's `transform.limits`: bounds on transform calls.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TransformLimitsConfig {
    /// Time of one call, charged for the call's own time, not its wait for a slot.
    #[schemars(extend("default" = TRANSFORM.timeout.as_millis() as u64), range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// Memory of one call; one larger than the largest in force needs a restart.
    #[schemars(extend("default" = TRANSFORM.memory_bytes, "x-reload" = RESTART_IF_LARGER), range(min = 1))]
    pub memory_bytes: Option<u64>,
    /// Bytes of a call's output.
    #[schemars(extend("default" = TRANSFORM.output_bytes), range(min = 1))]
    pub output_bytes: Option<u64>,
    /// Bytes of a call's log.
    #[schemars(extend("default" = TRANSFORM.log_bytes), range(min = 1))]
    pub log_bytes: Option<u64>,
    /// Transform calls at once; one mapping holds at most half (rounded up). Refused in a
    /// mapping's `transform.limits`.
    #[schemars(extend("default" = TRANSFORM.max_concurrent, "x-reload" = RESTART), range(min = 1))]
    pub max_concurrent: Option<u32>,
}

/// One entry of `hooks.mappings`.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MappingConfig {
    /// The mapping's name in the request log and the console.
    pub id: Option<String>,
    /// Which requests the mapping applies to.
    #[serde(rename = "match")]
    pub match_rule: Option<MatchConfig>,
    /// `wake`, `agent`, or `notify`: the message sent to `channel` with no model call
    /// (docs/hooks.md#notify-only-hooks).
    #[schemars(extend("default" = "agent", "enum" = ["wake", "agent", "notify"]))]
    pub action: Option<String>,
    /// `now` or `next-heartbeat`: when the wake or the run's summary is taken up.
    #[schemars(extend("default" = "now", "enum" = ["now", "next-heartbeat"]))]
    pub wake_mode: Option<String>,
    /// The name the run's prompt gives its sender.
    pub name: Option<String>,
    /// The agent of the runs.
    #[schemars(extend("x-default" = "the default agent"))]
    pub agent_id: Option<String>,
    /// The runs' session key, a template (docs/configuration.md#mapped-hooks).
    pub session_key: Option<String>,
    /// The run's prompt, a template.
    pub message_template: Option<String>,
    /// The wake's text, a template.
    pub text_template: Option<String>,
    /// Deliver the run's reply.
    #[schemars(extend("default" = true))]
    pub deliver: Option<bool>,
    /// Where the reply goes: a channel of `channels`, or `last`.
    #[schemars(extend("default" = "last"))]
    pub channel: Option<String>,
    /// The recipient on `channel`.
    pub to: Option<String>,
    /// The model of the runs, or an alias of `agents.defaults.models`.
    pub model: Option<String>,
    /// The thinking level of the runs (docs/configuration.md#models-and-providers).
    pub thinking: Option<String>,
    /// The bound of each run; `0` is the 24 h cap.
    #[schemars(extend("x-default" = "`agents.defaults.timeoutSeconds`"), range(min = 0))]
    pub timeout_seconds: Option<f64>,
    /// Leave the payload's text out of the untrusted-content envelope in the prompt.
    #[serde(default)]
    pub allow_unsafe_external_content: bool,
    /// The transform that shapes the request (docs/transforms.md).
    pub transform: Option<TransformConfig>,
    /// Accepts the provider's signature in place of the hook token.
    pub signature: Option<SignatureConfig>,
    /// Accepts a website form posted from these origins in place of the hook token
    /// (docs/hooks.md#website-forms).
    pub form: Option<FormConfig>,
    /// A top-level payload key holding a list: one action per element (the gmail preset's
    /// `messages`).
    pub for_each: Option<String>,
    /// `isolated` (default) or `persistent`: the runs continue their session key's conversation.
    pub session_mode: Option<String>,
    /// What the request log keeps of this mapping's requests, over `hooks.capture`.
    pub capture: Option<CaptureConfig>,
    /// The mapping's lane: its runs at once, waiting, and their priority.
    pub runs: Option<RunsConfig>,
    /// Runs an hour and tokens a day this mapping's runs may take (agent mappings only).
    pub budget: Option<BudgetConfig>,
    /// Gathers an agent mapping's requests into one run per window.
    pub batch: Option<BatchConfig>,
    /// Where the outcome of each of its runs is POSTed, signed (docs/outbound.md).
    pub callback: Option<CallbackConfig>,
}

/// `form` of a mapping: the sites whose pages may post a form to it without the hook token.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FormConfig {
    /// Origins, `https://host` or `https://host:port` (no path), whose forms are accepted: a
    /// request's `Origin` header must be one of them and its body a form.
    pub origins: Vec<String>,
}

/// `signature` of a mapping.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignatureConfig {
    /// `github`, `stripe`, `slack`, `standard-webhooks`, `shopify`, `gitlab` or `hmac-sha256`.
    pub scheme: String,
    /// The signing secret.
    pub secret: Option<SecretValue>,
    /// Several secrets, all accepted (rotation).
    pub secrets: Option<Vec<SecretValue>>,
    /// `hmac-sha256`: the header carrying the signature.
    pub header: Option<String>,
    /// `hmac-sha256`: `hex` or `base64`.
    #[schemars(extend("default" = "hex", "enum" = ["hex", "base64"]))]
    pub encoding: Option<String>,
    /// `hmac-sha256`: text before the signature, e.g. `sha256=`.
    pub prefix: Option<String>,
    /// Timestamped schemes: how far from now, in seconds, a signature may be.
    #[schemars(extend("default" = crate::hook::signature::DEFAULT_TOLERANCE.as_secs()))]
    pub tolerance_seconds: Option<u64>,
    /// Whether the hook token opens this mapping too; `false` leaves the signature as its
    /// only way in.
    #[schemars(extend("default" = true))]
    pub accept_token: Option<bool>,
}
/// `match` of a mapping: which requests it applies to.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MatchConfig {
    /// The hook name: the request's path after `hooks.path`.
    pub path: Option<String>,
    /// The payload's `source`.
    pub source: Option<String>,
    /// Header name → a value or a list of values; every header must carry one of its values.
    pub headers: Option<HeadersConfig>,
    /// JSON pointer → a value, a list of values, or `{ exists: true | false }`; every one must
    /// hold.
    pub payload: Option<PayloadConfig>,
}

/// `transform` of a mapping.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TransformConfig {
    /// The module, relative to `hooks.transformsDir`: a component (`.wasm`) or a JavaScript
    /// or TypeScript module.
    pub module: String,
    /// JSON handed to the transform as it is written.
    pub config: Option<serde_json::Value>,
    /// Which entry point of the component to run (contract 0.2; a JavaScript module's named
    /// export).
    pub export: Option<String>,
    /// This mapping's bounds, over `hooks.transformLimits` (all but `maxConcurrent`).
    pub limits: Option<TransformLimitsConfig>,
    /// Calls one instance serves before it is replaced (1: a fresh one every call).
    #[schemars(extend("default" = TRANSFORM.reuse), range(min = 1))]
    pub reuse: Option<u32>,
}

/// `agents.*`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentsConfig {
    /// What every agent has unless its entry says otherwise.
    #[serde(default)]
    pub defaults: AgentDefaultsConfig,
    /// Known agents; the first with `default: true` (else the first) is the default.
    #[serde(default)]
    #[schemars(extend("x-default" = "`[{ id: \"main\" }]`"))]
    pub list: Vec<AgentEntryConfig>,
}

/// `agents.defaults.*`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentDefaultsConfig {
    /// The model allowlist with aliases: `{ "openai/gpt-4.1-mini": { alias: "mini" } }`.
    #[serde(default)]
    #[schemars(extend("x-default" = "any model"))]
    pub models: BTreeMap<String, ModelEntryConfig>,
    /// Heartbeats: turns of the default agent over the main session's pending events.
    pub heartbeat: Option<HeartbeatConfig>,
    /// The provider of model ids that name none of `models.providers`.
    pub provider: Option<ProviderConfig>,
    /// The model of runs that name none: an id, or `{ primary, fallbacks }`.
    pub model: Option<ModelConfig>,
    /// Runs at once; a lower limit applies as runs finish.
    #[schemars(
        extend("default" = DEFAULT_MAX_CONCURRENT, "x-reload" = RESTART_ON_NATS),
        range(min = 1)
    )]
    pub max_concurrent: Option<u32>,
    /// The bound of a run without its own `timeoutSeconds`, its whole model chain and retries
    /// included; `0` is the 24 h cap.
    #[schemars(extend("default" = DEFAULT_RUN_TIMEOUT_SECONDS, "x-reload" = RESTART_ON_NATS))]
    pub timeout_seconds: Option<u64>,
}

/// `model`: one id, or a primary with fallbacks tried in order when it fails for a while.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ModelConfig {
    Id(String),
    Chain(ModelChainConfig),
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModelChainConfig {
    /// The model asked first.
    pub primary: String,
    /// The models the turn is handed to, in order, when one fails in a way that may pass.
    #[serde(default)]
    pub fallbacks: Vec<String>,
}

/// A model endpoint.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProviderConfig {
    /// `openai-completions`: up to, not including, `/chat/completions` (`https://api.openai.com/v1`);
    /// `anthropic-messages`: up to `/v1/messages` (`https://api.anthropic.com`).
    pub base_url: String,
    /// The provider's API key.
    pub api_key: Option<SecretValue>,
    /// The wire format.
    #[schemars(extend(
        "default" = "openai-completions",
        "enum" = ["openai-completions", "anthropic-messages"]
    ))]
    pub api: Option<String>,
    /// The provider's model catalogue, as OpenClaw lists it; accepted, not needed here.
    pub models: Option<serde_json::Value>,
}

/// `models.*`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModelsConfig {
    /// Providers by name: a model id `<name>/<model>` is sent to `<name>` as `<model>`.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// OpenClaw's `merge`/`replace` of its built-in catalogue; accepted, nothing to merge here.
    pub mode: Option<String>,
}

/// One model of the allowlist.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModelEntryConfig {
    /// Another name a request may give the model by.
    pub alias: Option<String>,
}

/// `agents.defaults.heartbeat`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeartbeatConfig {
    /// The period of heartbeats; `0` turns periodic heartbeats off; a new period counts from
    /// the change.
    #[schemars(extend("default" = "30m"))]
    pub every: Option<String>,
    /// A reply starting or ending with `HEARTBEAT_OK` with at most this many other characters
    /// is an acknowledgement, never delivered.
    #[schemars(extend("default" = DEFAULT_ACK_MAX_CHARS))]
    pub ack_max_chars: Option<usize>,
}

/// One entry of `agents.list`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentEntryConfig {
    /// The agent's id, as `agentId` names it.
    pub id: String,
    /// The default agent.
    #[serde(default)]
    pub default: bool,
    /// The agent's display name.
    pub name: Option<String>,
    /// The agent's model: an id, or `{ primary, fallbacks }`.
    #[schemars(extend("x-default" = "`agents.defaults.model`"))]
    pub model: Option<ModelConfig>,
    /// The agent's provider.
    #[schemars(extend("x-default" = "`agents.defaults.provider`"))]
    pub provider: Option<ProviderConfig>,
    /// Runs an hour and tokens a day this agent's runs may take, whatever started them.
    pub budget: Option<BudgetConfig>,
}
