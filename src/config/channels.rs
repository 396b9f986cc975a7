//! `channels.*` built into the [`ChannelSettings`] once per load: each adapter as the file
//! writes it (`config::model::channels`) with its secrets read and its API base filled in,
//! hookgate's own `defaultRoute` and `retry`.
//!
//! An adapter's key in `channels` is its [`Channel`]'s name ([`Channel::as_str`]); the keys it
//! reads are its struct's fields, as its schema lists them ([`AdapterConfig::keys`]) for the
//! OpenClaw import, and a test holds each list to what serde reads.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::model::FileConfig;
pub use super::model::channels::{
    AdapterConfig, BotConfig, ChannelEndpoint, ChannelsConfig, ImessageConfig, MattermostConfig,
    MsteamsConfig, RetryConfig, RouteConfig, SignalConfig, WhatsappConfig,
};
use super::model::defaults::{DEFAULT_ATTEMPTS, DEFAULT_BASE_DELAY_MS, MAX_BASE_DELAY_MS};
use super::secret::{ConfigFiles, SecretValue, secret};
use crate::hook::Channel;

impl AdapterConfig {
    /// The keys `channel`'s adapter reads, from its struct's schema; none for `last`, which
    /// has no adapter.
    pub fn keys(channel: Channel) -> Vec<String> {
        super::schema::keys_at(&["channels", channel.as_str()])
    }
}

/// Where a reply goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub channel: Channel,
    pub to: Option<String>,
}

/// How failed sends are retried from the outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// Delay before the second attempt; doubled for each later one.
    pub base_delay: Duration,
}

impl Default for RetryPolicy {
    /// Five attempts, a second apart at first.
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            base_delay: Duration::from_secs(1),
        }
    }
}

impl From<&RetryConfig> for RetryPolicy {
    /// At least one attempt; at most an hour before the second.
    fn from(config: &RetryConfig) -> Self {
        RetryPolicy {
            attempts: config.attempts.unwrap_or(DEFAULT_ATTEMPTS).max(1),
            // At most an hour between the first attempts; doubling is capped too.
            base_delay: Duration::from_millis(
                config
                    .base_delay_ms
                    .unwrap_or(DEFAULT_BASE_DELAY_MS)
                    .min(MAX_BASE_DELAY_MS),
            ),
        }
    }
}

/// `channels.*`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelSettings {
    /// In configuration order: "the first configured channel" is the first of these.
    pub endpoints: Vec<ChannelEndpoint>,
    pub default_route: Option<Route>,
    pub retry: RetryPolicy,
}

impl ChannelSettings {
    /// The endpoint configured for `channel`, if any.
    pub fn endpoint(&self, channel: Channel) -> Option<&ChannelEndpoint> {
        self.endpoints.iter().find(|e| e.channel() == channel)
    }
}

/// Builds `channels` (none configured when absent): secrets read, defaults filled in, the
/// default route checked; every problem is added to `problems`.
pub(super) fn channel_settings(
    config: Option<&ChannelsConfig>,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> ChannelSettings {
    let Some(config) = config else {
        return ChannelSettings::default();
    };
    ChannelSettings {
        endpoints: config
            .adapters
            .iter()
            .map(|adapter| endpoint(adapter, files, problems))
            .collect(),
        default_route: config
            .default_route
            .as_ref()
            .and_then(|route| default_route(route, problems)),
        retry: config
            .retry
            .as_ref()
            .map_or_else(RetryPolicy::default, RetryPolicy::from),
    }
}

/// `adapter` with its secrets read (a problem leaves a secret empty) and its default base URL.
fn endpoint(
    adapter: &AdapterConfig,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> ChannelEndpoint {
    let name = adapter.channel().as_str();
    let mut secret_of = |value: &SecretValue, field: &str| {
        let key = format!("{}.{name}.{field}", key!(FileConfig.channels));
        secret(Some(value.clone()), &key, files, problems).unwrap_or_default()
    };
    let api_base =
        |base: &Option<String>, default: &str| base.clone().unwrap_or_else(|| default.to_string());
    let mut bot = |c: &BotConfig, default_base: &str| BotConfig {
        bot_token: secret_of(&c.bot_token, "botToken"),
        api_base: api_base(&c.api_base, default_base),
    };
    match adapter {
        AdapterConfig::Telegram(c) => ChannelEndpoint::Telegram(bot(c, "https://api.telegram.org")),
        AdapterConfig::Slack(c) => ChannelEndpoint::Slack(bot(c, "https://slack.com/api")),
        AdapterConfig::Discord(c) => {
            ChannelEndpoint::Discord(bot(c, "https://discord.com/api/v10"))
        }
        AdapterConfig::Mattermost(c) => ChannelEndpoint::Mattermost(MattermostConfig {
            base_url: c.base_url.clone(),
            token: secret_of(&c.token, "token"),
        }),
        AdapterConfig::Msteams(c) => ChannelEndpoint::Msteams(MsteamsConfig {
            webhook_url: secret_of(&c.webhook_url, "webhookUrl"),
        }),
        AdapterConfig::Signal(c) => ChannelEndpoint::Signal(c.clone()),
        AdapterConfig::Whatsapp(c) => ChannelEndpoint::Whatsapp(WhatsappConfig {
            api_base: api_base(&c.api_base, "https://graph.facebook.com/v20.0"),
            access_token: secret_of(&c.access_token, "accessToken"),
            phone_number_id: c.phone_number_id.clone(),
        }),
        AdapterConfig::Imessage(c) => ChannelEndpoint::Imessage(ImessageConfig {
            base_url: c.base_url.clone(),
            password: secret_of(&c.password, "password"),
        }),
    }
}

/// `channels.defaultRoute`: a known channel, and no recipient for msteams.
fn default_route(route: &RouteConfig, problems: &mut Vec<ConfigError>) -> Option<Route> {
    match Channel::parse(&route.channel) {
        Some(Channel::Msteams) if route.to.is_some() => {
            problems.push(ConfigError::invalid(
                key!(RouteConfig.to),
                "cannot be used with channel msteams: its incoming webhook posts to one conversation",
            ));
            None
        }
        Some(channel) => Some(Route {
            channel,
            to: route.to.clone(),
        }),
        None => {
            problems.push(ConfigError::invalid(
                key!(RouteConfig.channel),
                Channel::EXPECTED,
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn channels(value: serde_json::Value) -> Result<ChannelsConfig, String> {
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    #[test]
    fn each_adapters_keys_are_the_keys_serde_reads() {
        for channel in AdapterConfig::CHANNELS {
            let err = channels(json!({channel.as_str(): {"notAKey": 0}})).unwrap_err();
            let (_, expected) = err.split_once("expected ").expect(&err);
            let mut read: Vec<String> = expected
                .split('`')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect();
            let mut listed = AdapterConfig::keys(channel);
            read.sort_unstable();
            listed.sort_unstable();
            assert_eq!(read, listed, "{}", channel.as_str());
        }
    }

    #[test]
    fn adapters_keep_the_files_order_and_settings_are_read() {
        let config = channels(json!({
            "slack": {"botToken": "s"},
            "retry": {"attempts": 2},
            "telegram": {"botToken": "t"},
            "defaultRoute": {"channel": "telegram", "to": "42"},
        }))
        .unwrap();
        assert!(matches!(
            config.adapters.as_slice(),
            [AdapterConfig::Slack(_), AdapterConfig::Telegram(_)]
        ));
        assert_eq!(config.retry.unwrap().attempts, Some(2));
        assert_eq!(config.default_route.unwrap().to.as_deref(), Some("42"));
    }

    #[test]
    fn unknown_keys_and_other_shapes_are_refused_in_todays_words() {
        for key in ["last", "Telegram", "imsg", "matrix"] {
            let err = channels(json!({key: {}})).unwrap_err();
            assert_eq!(
                err,
                format!(
                    "unknown field `{key}`, expected one of `telegram`, `slack`, `discord`, \
                     `mattermost`, `msteams`, `signal`, `whatsapp`, `imessage`, \
                     `defaultRoute`, `retry`"
                )
            );
        }
        assert_eq!(channels(json!("x")).unwrap_err(), "must be an object");
        assert_eq!(channels(json!([])).unwrap_err(), "must be an object");
    }
}
