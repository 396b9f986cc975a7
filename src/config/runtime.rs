//! The gateway runtime's settings: where agents' model calls go, how many run at once,
//! heartbeats, delivery channels, and forward mode.

use std::collections::BTreeMap;
use std::time::Duration;

use super::ConfigError;
use super::channels::channel_settings;
use super::model::{
    AgentDefaultsConfig, AgentEntryConfig, DEFAULT_ACK_MAX_CHARS, DEFAULT_MAX_CONCURRENT,
    DEFAULT_RUN_TIMEOUT_SECONDS, FileConfig, ForwardConfig, GatewayConfig, HeartbeatConfig,
    ModelConfig, ModelsConfig, ProviderConfig, RetentionConfig,
};
use super::secret::{ConfigFiles, secret};
use crate::hook::policy::normalize_agent_id;

pub use super::channels::{
    BotConfig, ChannelEndpoint, ChannelSettings, ImessageConfig, MattermostConfig, MsteamsConfig,
    RetryPolicy, Route, SignalConfig, WhatsappConfig,
};

/// What the runtime does with accepted hooks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayMode {
    /// Runs agents, heartbeats and deliveries here.
    Embedded,
    /// Relays every accepted wake and agent run to an upstream gateway.
    Forward(Upstream),
}

/// `gateway.forward`: the gateway forward mode relays to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// Base URL, without a trailing `/`.
    pub url: String,
    /// The upstream's hooks prefix, normalised like `hooks.path`.
    pub path: String,
    pub token: String,
    /// Whether a run's session key is relayed.
    pub relay_session_key: bool,
}

impl Upstream {
    /// The URL of the upstream's hook `name` (`wake` or `agent`).
    pub fn endpoint(&self, name: &str) -> String {
        format!("{}{}/{name}", self.url, self.path)
    }
}

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// `POST <baseUrl>/chat/completions`: OpenAI, Ollama, vLLM, llama.cpp, OpenRouter, LiteLLM.
    OpenAiCompletions,
    /// `POST <baseUrl>/v1/messages`: Anthropic's Messages API.
    AnthropicMessages,
}

/// A model endpoint with its credentials resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    pub base_url: String,
    pub api_key: Option<String>,
    pub wire: WireFormat,
    /// How a run's record, its errors and the log name this provider, made once at load: its
    /// name in `models.providers`, else its base URL's host and port (never the URL's userinfo,
    /// path or query, which may carry credentials).
    pub label: String,
}

impl Provider {
    /// [`Provider::label`] of the provider `name`d in `models.providers` (`None` for an
    /// agent's own) at `base_url`.
    fn label(name: Option<&str>, base_url: &str) -> String {
        if let Some(name) = name {
            return name.to_string();
        }
        match reqwest::Url::parse(base_url) {
            Ok(url) => match (url.host_str(), url.port_or_known_default()) {
                (Some(host), Some(port)) => format!("{host}:{port}"),
                (Some(host), None) => host.to_string(),
                _ => "the agent's provider".to_string(),
            },
            Err(_) => "the agent's provider".to_string(),
        }
    }
}

/// A model and the ones tried after it, in order, when it fails in a way that may pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelChain {
    pub primary: String,
    pub fallbacks: Vec<String>,
}

/// What one agent runs with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentRuntime {
    /// The endpoint of model ids that name no provider of `models.providers`.
    pub provider: Option<Provider>,
    pub model: Option<ModelChain>,
}

/// Everything the runtime needs.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    pub mode: GatewayMode,
    /// By normalised agent id; agents not listed use `fallback`.
    pub agents: BTreeMap<String, AgentRuntime>,
    pub fallback: AgentRuntime,
    pub max_concurrent: usize,
    pub run_timeout: Duration,
    /// `None`: no periodic heartbeat (`every: "0"`).
    pub heartbeat_every: Option<Duration>,
    /// `agents.defaults.heartbeat.ackMaxChars`.
    pub ack_max_chars: usize,
    /// `models.providers`, by name.
    pub providers: BTreeMap<String, Provider>,
    pub channels: ChannelSettings,
    pub retention: Retention,
}

/// `gateway.retention`: how long finished work is kept; `None` keeps it for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub events: Option<Duration>,
    pub runs: Option<Duration>,
    pub requests: Option<Duration>,
    /// `gateway.retention.requestsMaxBytes`: the request log's size bound, whatever its age;
    /// `None` bounds it by age alone.
    pub requests_max_bytes: Option<u64>,
}

pub use super::model::defaults::DEFAULT_REQUESTS_MAX_BYTES;
/// The smallest size bound accepted. The log may pass its bound by one batch before that batch
/// is pruned (at most 1024 records, and up to the 64 MiB of captures its queue holds), so a
/// bound much smaller would be overshot by more than itself.
pub const MIN_REQUESTS_MAX_BYTES: u64 = 1024 * 1024;

/// Events and runs are kept this long unless configured otherwise.
const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 86_400);
/// The request log is kept this long unless configured otherwise: it may hold whole bodies.
const DEFAULT_REQUEST_RETENTION: Duration = Duration::from_secs(7 * 86_400);

fn retention(file: &FileConfig, problems: &mut Vec<ConfigError>) -> Retention {
    let config = file.gateway.retention.clone().unwrap_or_default();
    let mut period = |value: Option<String>, key: &str, default: Duration| match value {
        None => Some(default),
        Some(text) => parse_every(&text).unwrap_or_else(|_| {
            problems.push(ConfigError::invalid(
                key,
                "must be a duration like 30d, 12h or 90m, or 0 to keep everything",
            ));
            Some(default)
        }),
    };
    Retention {
        events: period(
            config.events,
            &key!(RetentionConfig.events),
            DEFAULT_RETENTION,
        ),
        runs: period(config.runs, &key!(RetentionConfig.runs), DEFAULT_RETENTION),
        requests: period(
            config.requests,
            &key!(RetentionConfig.requests),
            DEFAULT_REQUEST_RETENTION,
        ),
        requests_max_bytes: match config.requests_max_bytes {
            None => Some(DEFAULT_REQUESTS_MAX_BYTES),
            Some(0) => None,
            Some(bytes) if bytes < MIN_REQUESTS_MAX_BYTES => {
                problems.push(ConfigError::invalid(
                    key!(RetentionConfig.requests_max_bytes),
                    format!("must be 0 (no bound) or at least {MIN_REQUESTS_MAX_BYTES}"),
                ));
                Some(DEFAULT_REQUESTS_MAX_BYTES)
            }
            Some(bytes) => Some(bytes),
        },
    }
}

impl RuntimeSettings {
    /// What agent `id` runs with.
    pub fn agent(&self, id: &str) -> &AgentRuntime {
        self.agents.get(id).unwrap_or(&self.fallback)
    }

    /// Where model `id` goes and the model name sent there: `<name>/<model>` goes to the named
    /// provider as `<model>`; any other id, whole, to the agent's own provider.
    pub fn route_model<'a>(
        &'a self,
        agent: &'a AgentRuntime,
        id: &'a str,
    ) -> Option<(&'a Provider, &'a str)> {
        if let Some((name, model)) = id.split_once('/')
            && let Some(provider) = self.providers.get(name)
        {
            return Some((provider, model));
        }
        agent.provider.as_ref().map(|provider| (provider, id))
    }
}

/// Builds the runtime settings, adding every problem found to `problems`.
pub fn runtime_settings(
    file: &FileConfig,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> RuntimeSettings {
    let defaults = &file.agents.defaults;
    let providers = file
        .models
        .providers
        .iter()
        .map(|(name, p)| {
            let key = format!("{}.{name}", key!(ModelsConfig.providers));
            (name.clone(), provider(p, &key, Some(name), files, problems))
        })
        .collect();
    let fallback = AgentRuntime {
        provider: defaults.provider.as_ref().map(|p| {
            let key = key!(AgentDefaultsConfig.provider);
            provider(p, &key, None, files, problems)
        }),
        model: defaults.model.as_ref().map(chain),
    };
    let agents = agents(file, &fallback, files, problems);
    let heartbeat = defaults.heartbeat.as_ref();
    let heartbeat_every = heartbeat_every(heartbeat.and_then(|h| h.every.as_deref()), problems);
    RuntimeSettings {
        mode: mode(file, files, problems),
        agents,
        fallback,
        max_concurrent: max_concurrent(defaults.max_concurrent, problems),
        // As a run's own `timeoutSeconds`: `0` is the hard cap of a day, and nothing is longer.
        run_timeout: Duration::from_secs(match defaults.timeout_seconds {
            None => DEFAULT_RUN_TIMEOUT_SECONDS,
            Some(0) => MAX_RUN_SECONDS,
            Some(t) => t.min(MAX_RUN_SECONDS),
        }),
        heartbeat_every,
        ack_max_chars: heartbeat
            .and_then(|h| h.ack_max_chars)
            .unwrap_or(DEFAULT_ACK_MAX_CHARS),
        providers,
        channels: channel_settings(file.channels.as_ref(), files, problems),
        retention: retention(file, problems),
    }
}

/// The provider at `key` (named `name` in `models.providers`), its API key read.
fn provider(
    config: &ProviderConfig,
    key: &str,
    name: Option<&str>,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Provider {
    let api_key = secret(
        config.api_key.clone(),
        &format!("{key}.apiKey"),
        files,
        problems,
    );
    let wire = match config.api.as_deref().map(str::trim) {
        None | Some("openai-completions") => WireFormat::OpenAiCompletions,
        Some("anthropic-messages") => WireFormat::AnthropicMessages,
        Some(_) => {
            problems.push(ConfigError::invalid(
                format!("{key}.api"),
                "must be openai-completions or anthropic-messages",
            ));
            WireFormat::OpenAiCompletions
        }
    };
    let base_url = config.base_url.trim_end_matches('/').to_string();
    Provider {
        label: Provider::label(name, &base_url),
        base_url,
        api_key,
        wire,
    }
}

/// `agents.list` by normalised id, each with its own provider and model or else `fallback`'s.
fn agents(
    file: &FileConfig,
    fallback: &AgentRuntime,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> BTreeMap<String, AgentRuntime> {
    let mut agents = BTreeMap::new();
    for (i, entry) in file.agents.list.iter().enumerate() {
        let key = key!(AgentEntryConfig[i].provider);
        let own = entry
            .provider
            .as_ref()
            .map(|p| provider(p, &key, None, files, problems));
        agents.insert(
            normalize_agent_id(&entry.id),
            AgentRuntime {
                provider: own.or_else(|| fallback.provider.clone()),
                model: entry
                    .model
                    .as_ref()
                    .map(chain)
                    .or_else(|| fallback.model.clone()),
            },
        );
    }
    agents
}

/// Agent runs at once: greater than 0.
fn max_concurrent(value: Option<u32>, problems: &mut Vec<ConfigError>) -> usize {
    match value {
        Some(0) => {
            problems.push(ConfigError::invalid(
                key!(AgentDefaultsConfig.max_concurrent),
                "must be greater than 0",
            ));
            1
        }
        Some(n) => n as usize,
        None => DEFAULT_MAX_CONCURRENT as usize,
    }
}

/// `agents.defaults.heartbeat.every` (default 30 minutes); `None` turns heartbeats off, and is
/// what a refused value leaves too.
fn heartbeat_every(every: Option<&str>, problems: &mut Vec<ConfigError>) -> Option<Duration> {
    every
        .map_or(Ok(Some(Duration::from_secs(30 * 60))), parse_every)
        .unwrap_or_else(|message| {
            problems.push(ConfigError::invalid(key!(HeartbeatConfig.every), message));
            None
        })
}

fn chain(config: &ModelConfig) -> ModelChain {
    match config {
        ModelConfig::Id(id) => ModelChain {
            primary: id.clone(),
            fallbacks: Vec::new(),
        },
        ModelConfig::Chain(chain) => ModelChain {
            primary: chain.primary.clone(),
            fallbacks: chain.fallbacks.clone(),
        },
    }
}

/// The longest an agent run may take, whatever it asks for: a day.
pub const MAX_RUN_SECONDS: u64 = 86_400;

/// The longest heartbeat interval accepted: a year.
const MAX_EVERY: Duration = Duration::from_secs(365 * 86_400);

/// `"30m"`, `"1h"`, `"45s"`, `"500ms"`, `"2h30m"`; `"0"` turns heartbeats off.
pub fn parse_every(text: &str) -> Result<Option<Duration>, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(None);
    }
    // The value is not repeated: it may be anything, a secret pasted into the wrong key too.
    let bad = || "must be a duration like 30m, 1h, 45s or 0".to_string();
    // humantime reads `30m`, `1h30m`, `1h 30m`, `250ms`, `2d` and longer unit names alike.
    let total = humantime::parse_duration(text)
        .ok()
        .filter(|total| *total <= MAX_EVERY)
        .ok_or_else(bad)?;
    Ok((!total.is_zero()).then_some(total))
}

fn mode(file: &FileConfig, files: ConfigFiles<'_>, problems: &mut Vec<ConfigError>) -> GatewayMode {
    match file.gateway.mode.as_deref() {
        None | Some("embedded") => GatewayMode::Embedded,
        Some("forward") => {
            let Some(forward) = &file.gateway.forward else {
                problems.push(ConfigError::invalid(
                    key!(GatewayConfig.forward),
                    "is required when gateway.mode is forward",
                ));
                return GatewayMode::Embedded;
            };
            let token = secret(
                Some(forward.token.clone()),
                &key!(ForwardConfig.token),
                files,
                problems,
            );
            let path = super::normalize_hooks_path(forward.path.as_deref()).unwrap_or_else(|| {
                problems.push(ConfigError::invalid(
                    key!(ForwardConfig.path),
                    "must name a prefix other than '/', like the upstream's hooks.path",
                ));
                String::new()
            });
            GatewayMode::Forward(Upstream {
                url: forward.url.trim_end_matches('/').to_string(),
                path,
                token: token.unwrap_or_default(),
                relay_session_key: forward.relay_session_key.unwrap_or(false),
            })
        }
        Some(_) => {
            problems.push(ConfigError::invalid(
                key!(GatewayConfig.mode),
                "must be embedded or forward",
            ));
            GatewayMode::Embedded
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_is_named_without_a_urls_credentials_path_or_query() {
        let secret = "https://user:pw@llm.example:8443/v1?key=sk-1";
        assert_eq!(Provider::label(None, secret), "llm.example:8443");
        assert_eq!(
            Provider::label(None, "https://api.example/v1"),
            "api.example:443"
        );
        assert_eq!(Provider::label(Some("openai"), secret), "openai");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_every("30m").unwrap(), Some(Duration::from_secs(1800)));
        assert_eq!(
            parse_every("1h30m").unwrap(),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(
            parse_every("250ms").unwrap(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(parse_every("0").unwrap(), None);
        assert_eq!(parse_every("0s").unwrap(), None);
        assert_eq!(
            parse_every("1h 30m").unwrap(),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(
            parse_every("7d").unwrap(),
            Some(Duration::from_secs(7 * 86_400))
        );
        assert!(parse_every("soon").is_err());
        assert!(parse_every("10").is_err(), "a unit is needed");
        assert!(parse_every("-5m").is_err());
        assert!(parse_every("400d").is_err(), "at most a year");
        assert!(parse_every("99999999999999999999h").is_err());
    }
}
