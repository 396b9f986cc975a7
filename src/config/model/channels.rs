//! `channels.*` as the file writes it: one struct per delivery adapter, hookgate's own
//! `defaultRoute` and `retry`, and the reader that keeps the adapters in the file's order.
//! `config::channels` builds them into the settings the server sends with.

use std::fmt;
use std::sync::LazyLock;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::defaults::{DEFAULT_ATTEMPTS, DEFAULT_BASE_DELAY_MS, MAX_BASE_DELAY_MS};
use super::secret::SecretValue;
use crate::hook::Channel;

/// `channels.telegram`, `channels.slack` and `channels.discord`: a bot's token and the API it
/// talks to (default: the service's own).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BotConfig<S = SecretValue, B = Option<String>> {
    /// The bot's token.
    pub bot_token: S,
    /// The API to talk to.
    #[schemars(extend("x-default" = "the service's own"))]
    pub api_base: B,
}

/// `channels.mattermost`: the server and a bot's or user's token.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MattermostConfig<S = SecretValue> {
    /// The Mattermost server.
    pub base_url: String,
    /// A bot's or user's token.
    pub token: S,
}

/// `channels.msteams`: an incoming webhook, which posts to one conversation.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MsteamsConfig<S = SecretValue> {
    /// The incoming webhook's URL.
    pub webhook_url: S,
}

/// `channels.signal`: a signal-cli REST API and the number it sends from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignalConfig {
    /// The signal-cli REST API.
    pub base_url: String,
    /// The number replies are sent from.
    pub number: String,
}

/// `channels.whatsapp`: the WhatsApp Cloud API (default base: Graph API v20.0).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WhatsappConfig<S = SecretValue, B = Option<String>> {
    /// The Cloud API's access token.
    pub access_token: S,
    /// The sending phone number's id.
    pub phone_number_id: String,
    /// The API to talk to.
    #[schemars(extend("x-default" = "Graph API v20.0"))]
    pub api_base: B,
}

/// `channels.imessage`: a BlueBubbles server and its password.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImessageConfig<S = SecretValue> {
    /// The BlueBubbles server.
    pub base_url: String,
    /// The server's password.
    pub password: S,
}

/// One delivery adapter: as written by default, as it sends once built ([`ChannelEndpoint`]).
///
/// Each adapter's struct is generic over its secrets (`S`) and, where the file may leave it out,
/// its API base (`B`): as written they are [`SecretValue`]s and an optional base; built, the
/// secrets are read and the service's default base filled in, so one type serves both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdapterConfig<S = SecretValue, B = Option<String>> {
    Telegram(BotConfig<S, B>),
    Slack(BotConfig<S, B>),
    Discord(BotConfig<S, B>),
    Mattermost(MattermostConfig<S>),
    Msteams(MsteamsConfig<S>),
    Signal(SignalConfig),
    Whatsapp(WhatsappConfig<S, B>),
    Imessage(ImessageConfig<S>),
}

/// One configured delivery channel: its adapter with the secrets read and the API base filled in.
pub type ChannelEndpoint = AdapterConfig<String, String>;

impl<S, B> AdapterConfig<S, B> {
    /// The channel this adapter sends to.
    pub fn channel(&self) -> Channel {
        match self {
            Self::Telegram(_) => Channel::Telegram,
            Self::Slack(_) => Channel::Slack,
            Self::Discord(_) => Channel::Discord,
            Self::Mattermost(_) => Channel::Mattermost,
            Self::Msteams(_) => Channel::Msteams,
            Self::Signal(_) => Channel::Signal,
            Self::Whatsapp(_) => Channel::Whatsapp,
            Self::Imessage(_) => Channel::Imessage,
        }
    }
}

impl AdapterConfig {
    /// The channels hookgate has an adapter for: every [`Channel`] but `last`.
    pub const CHANNELS: [Channel; 8] = [
        Channel::Telegram,
        Channel::Slack,
        Channel::Discord,
        Channel::Mattermost,
        Channel::Msteams,
        Channel::Signal,
        Channel::Whatsapp,
        Channel::Imessage,
    ];

    /// The schema of `channel`'s adapter as the file writes it; `true` (anything) for `last`,
    /// which the reader refuses.
    fn schema(channel: Channel, generator: &mut SchemaGenerator) -> Schema {
        match channel {
            Channel::Telegram | Channel::Slack | Channel::Discord => {
                generator.subschema_for::<BotConfig>()
            }
            Channel::Mattermost => generator.subschema_for::<MattermostConfig>(),
            Channel::Msteams => generator.subschema_for::<MsteamsConfig>(),
            Channel::Signal => generator.subschema_for::<SignalConfig>(),
            Channel::Whatsapp => generator.subschema_for::<WhatsappConfig>(),
            Channel::Imessage => generator.subschema_for::<ImessageConfig>(),
            Channel::Last => true.into(),
        }
    }

    /// The adapter of `channel`, read from the value of `map`'s current key.
    fn next_value<'de, A: MapAccess<'de>>(channel: Channel, map: &mut A) -> Result<Self, A::Error> {
        Ok(match channel {
            Channel::Telegram => Self::Telegram(map.next_value()?),
            Channel::Slack => Self::Slack(map.next_value()?),
            Channel::Discord => Self::Discord(map.next_value()?),
            Channel::Mattermost => Self::Mattermost(map.next_value()?),
            Channel::Msteams => Self::Msteams(map.next_value()?),
            Channel::Signal => Self::Signal(map.next_value()?),
            Channel::Whatsapp => Self::Whatsapp(map.next_value()?),
            Channel::Imessage => Self::Imessage(map.next_value()?),
            Channel::Last => return Err(unknown_key(channel.as_str())),
        })
    }
}

/// `channels.defaultRoute`: where replies to channel `last` go until the operator sets a route.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RouteConfig {
    /// A channel of `channels`, or `last`.
    pub channel: String,
    /// The recipient on `channel`.
    pub to: Option<String>,
}

/// `channels.retry`: how failed sends are tried again.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RetryConfig {
    /// How often a failed send is tried (docs/configuration.md#where-replies-go).
    #[schemars(extend("default" = DEFAULT_ATTEMPTS), range(min = 1))]
    pub attempts: Option<u32>,
    /// The most a first retry waits, doubled per attempt (full jitter); at most an hour.
    #[schemars(extend("default" = DEFAULT_BASE_DELAY_MS), range(max = MAX_BASE_DELAY_MS))]
    pub base_delay_ms: Option<u64>,
}

/// `channels`: the adapters in the order the file lists them, and hookgate's own settings.
#[derive(Debug, Clone, Default)]
pub struct ChannelsConfig {
    /// In file order: the first is where a reply goes when nothing else names a channel.
    pub adapters: Vec<AdapterConfig>,
    pub default_route: Option<RouteConfig>,
    pub retry: Option<RetryConfig>,
}

impl ChannelsConfig {
    /// The keys of `channels` that name no adapter.
    pub const SETTINGS: &[&str] = &[DEFAULT_ROUTE, RETRY];
}

const DEFAULT_ROUTE: &str = "defaultRoute";
const RETRY: &str = "retry";

/// The schema of `channels` as its reader reads it: each adapter by its channel's name, then
/// hookgate's own settings, nothing else.
impl JsonSchema for ChannelsConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ChannelsConfig".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut properties = serde_json::Map::new();
        for channel in AdapterConfig::CHANNELS {
            let adapter = AdapterConfig::schema(channel, generator);
            properties.insert(channel.as_str().into(), adapter.to_value());
        }
        let route = generator.subschema_for::<Option<RouteConfig>>();
        let mut route = route.to_value();
        route["description"] =
            "Where `channel: \"last\"` replies go until the operator sets a route.".into();
        properties.insert(DEFAULT_ROUTE.into(), route);
        let mut retry = generator.subschema_for::<Option<RetryConfig>>().to_value();
        retry["description"] = "How failed sends are tried again.".into();
        properties.insert(RETRY.into(), retry);
        json_schema!({
            "description": "Delivery adapters and their credentials, in the order replies fall back on them.",
            "type": "object",
            "properties": properties,
            "additionalProperties": false,
        })
    }
}

/// Every key `channels` reads: the adapters', then [`ChannelsConfig::SETTINGS`]. Built once, on
/// the first unknown key, because serde's refusal takes a `'static` list.
static KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let adapters = AdapterConfig::CHANNELS.map(Channel::as_str);
    adapters
        .into_iter()
        .chain(ChannelsConfig::SETTINGS.iter().copied())
        .collect()
});

/// The refusal of a key `channels` does not read: serde's for a struct that denies unknown
/// fields, listing the keys it reads, so the loader suggests the closest as for any section.
fn unknown_key<E: de::Error>(key: &str) -> E {
    E::unknown_field(key, &KEYS)
}

/// A key of `channels`.
enum ChannelsKey {
    Adapter(Channel),
    DefaultRoute,
    Retry,
}

impl<'de> Deserialize<'de> for ChannelsKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let key = String::deserialize(deserializer)?;
        match key.as_str() {
            DEFAULT_ROUTE => Ok(ChannelsKey::DefaultRoute),
            RETRY => Ok(ChannelsKey::Retry),
            name => AdapterConfig::CHANNELS
                .into_iter()
                .find(|channel| channel.as_str() == name)
                .map(ChannelsKey::Adapter)
                .ok_or_else(|| unknown_key(name)),
        }
    }
}

// By hand rather than derived: the adapters keep the file's order, which a struct's fields
// would not.
impl<'de> Deserialize<'de> for ChannelsConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ChannelsVisitor)
    }
}

struct ChannelsVisitor;

/// What a `channels` that is not an object is refused with.
fn not_an_object<E: de::Error>() -> E {
    E::custom("must be an object")
}

impl<'de> Visitor<'de> for ChannelsVisitor {
    type Value = ChannelsConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ChannelsConfig, A::Error> {
        let mut config = ChannelsConfig::default();
        while let Some(key) = map.next_key::<ChannelsKey>()? {
            match key {
                ChannelsKey::Adapter(channel) => config
                    .adapters
                    .push(AdapterConfig::next_value(channel, &mut map)?),
                ChannelsKey::DefaultRoute => config.default_route = Some(map.next_value()?),
                ChannelsKey::Retry => config.retry = Some(map.next_value()?),
            }
        }
        Ok(config)
    }

    // Any other JSON value: refused in words of its own rather than serde's `invalid type`.
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<ChannelsConfig, E> {
        Err(not_an_object())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<ChannelsConfig, E> {
        Err(not_an_object())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<ChannelsConfig, E> {
        Err(not_an_object())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<ChannelsConfig, E> {
        Err(not_an_object())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<ChannelsConfig, E> {
        Err(not_an_object())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<ChannelsConfig, A::Error> {
        Err(not_an_object())
    }
}
