//! A subscription as it is asked for ([`Spec`]), kept ([`Subscription`], its secrets sealed) and
//! shown ([`View`], no secret at all).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::SubscriptionError;

/// The sender a subscription verifies: its signature scheme, where its event type is, and how
/// its secret looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Github,
    Stripe,
    Slack,
    Gitlab,
    /// Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
    Standard,
}

/// The names [`Provider::named`] takes, for messages.
pub const PROVIDERS: &str = "github, stripe, slack, gitlab, standard";

impl Provider {
    /// The provider called `name`.
    pub fn named(name: &str) -> Option<Provider> {
        Some(match name {
            "github" => Provider::Github,
            "stripe" => Provider::Stripe,
            "slack" => Provider::Slack,
            "gitlab" => Provider::Gitlab,
            "standard" => Provider::Standard,
            _ => return None,
        })
    }

    /// The signature scheme of its mapping (`signature.scheme`).
    pub fn scheme(self) -> &'static str {
        match self {
            Provider::Github => "github",
            Provider::Stripe => "stripe",
            Provider::Slack => "slack",
            Provider::Gitlab => "gitlab",
            Provider::Standard => "standard-webhooks",
        }
    }

    /// The condition that admits only `events`: the event-type header, or the payload's type.
    fn event_condition(self, events: &[String]) -> (&'static str, Value) {
        let events = Value::from(events.to_vec());
        match self {
            Provider::Github => ("headers", json!({ "x-github-event": events })),
            Provider::Gitlab => ("headers", json!({ "x-gitlab-event": events })),
            Provider::Slack => ("payload", json!({ "/event/type": events })),
            Provider::Stripe | Provider::Standard => ("payload", json!({ "/type": events })),
        }
    }

    /// A new signing secret in the form the provider's senders take: 32 random bytes, as
    /// `whsec_<base64>` for Standard Webhooks and Stripe, as hex otherwise.
    pub fn generate_secret(self) -> String {
        use base64::Engine as _;
        let bytes: [u8; 32] = rand::random();
        match self {
            Provider::Standard | Provider::Stripe => format!(
                "whsec_{}",
                base64::engine::general_purpose::STANDARD.encode(bytes)
            ),
            _ => hex::encode(bytes),
        }
    }
}

/// What `create` is asked for: the shorthand of `hookgate hooks create`, and any other key of a
/// file mapping in `mapping` (conditions, batch, runs, budget, capture, ...).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Spec {
    /// The subscription's name, which is also its hook name (the URL's last segment): 1 to 64
    /// of a-z, 0-9, `-` and `_`, starting with a letter or digit.
    pub name: String,
    /// Who sends and signs its deliveries: `github`, `stripe`, `slack`, `gitlab` or `standard`
    /// (Standard Webhooks).
    #[schemars(extend("enum" = ["github", "stripe", "slack", "gitlab", "standard"]))]
    pub provider: String,
    /// Event types admitted (GitHub's `X-GitHub-Event` such as `issues`, Stripe's `type` such
    /// as `invoice.paid`, ...); none: every event.
    #[serde(default)]
    pub events: Vec<String>,
    /// The agent's message, a template over the payload (`{{issue.title}}`): the
    /// mapping's `messageTemplate`.
    pub template: Option<String>,
    /// The agent that runs it (`agentId`); the default agent when absent.
    pub agent: Option<String>,
    /// The chat channel the reply goes to (`channel`, with `deliver: true`).
    pub deliver: Option<String>,
    /// The recipient on that channel (`to`).
    pub to: Option<String>,
    /// A transform module the operator installed (`transform.module`).
    pub transform: Option<String>,
    /// The provider's own secret, for a provider that makes its own (Stripe, Slack); a new one
    /// is generated when absent.
    pub secret: Option<String>,
    /// More keys of a file mapping, as `hooks.mappings[]` takes them (docs/configuration.md):
    /// `action` (`agent`, `wake`, `notify`), `match` conditions, `budget`, `runs`, `batch`,
    /// `capture`, ...
    #[serde(default)]
    pub mapping: Map<String, Value>,
}

/// The keys of a mapping a subscription sets itself, which `mapping` may not give.
const OWN_KEYS: &[&str] = &["id", "signature"];

impl Spec {
    /// The subscription's mapping in the file form, without its secret; or why not.
    pub fn mapping(&self, provider: Provider) -> Result<Map<String, Value>, SubscriptionError> {
        if let Some(key) = OWN_KEYS.iter().find(|k| self.mapping.contains_key(**k)) {
            return Err(SubscriptionError::Invalid(format!(
                "mapping.{key} is set by the subscription itself"
            )));
        }
        let mut mapping = self.mapping.clone();
        mapping.insert("id".into(), self.name.clone().into());
        let mut rule = match mapping.remove("match") {
            Some(Value::Object(rule)) => rule,
            None => Map::new(),
            Some(_) => {
                return Err(SubscriptionError::Invalid(
                    "mapping.match must be an object".into(),
                ));
            }
        };
        if rule
            .get("path")
            .is_some_and(|p| p.as_str() != Some(&self.name))
        {
            return Err(SubscriptionError::Invalid(
                "mapping.match.path is the subscription's name".into(),
            ));
        }
        rule.insert("path".into(), self.name.clone().into());
        if !self.events.is_empty() {
            let (section, condition) = provider.event_condition(&self.events);
            let merged = rule.entry(section).or_insert_with(|| json!({}));
            if let (Some(merged), Value::Object(condition)) = (merged.as_object_mut(), condition) {
                merged.extend(condition);
            }
        }
        mapping.insert("match".into(), Value::Object(rule));
        mapping.entry("action").or_insert_with(|| "agent".into());
        let shorthand = [
            ("messageTemplate", self.template.clone()),
            ("agentId", self.agent.clone()),
            ("channel", self.deliver.clone()),
            ("to", self.to.clone()),
        ];
        for (key, value) in shorthand {
            if let Some(value) = value {
                mapping.insert(key.into(), value.into());
            }
        }
        if self.deliver.is_some() {
            mapping.insert("deliver".into(), true.into());
        }
        if let Some(module) = &self.transform {
            mapping.insert("transform".into(), json!({ "module": module }));
        }
        mapping.insert(
            "signature".into(),
            json!({ "scheme": provider.scheme(), "acceptToken": false }),
        );
        Ok(mapping)
    }
}

/// Whether `name` may name a subscription: 1 to 64 of `a-z 0-9 - _`, a letter or digit first
/// (it is a path segment and a mapping id).
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// A subscription as the store keeps it: its secrets sealed with `gateway.secretsKey`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    pub name: String,
    pub provider: Provider,
    /// The event types it admits, as asked (also in its mapping's conditions).
    #[serde(default)]
    pub events: Vec<String>,
    /// Its mapping in the file form, without the secret.
    pub mapping: Map<String, Value>,
    /// The signing secret, sealed.
    pub secret: String,
    /// The secret a rotation retired, sealed, and until when it still verifies.
    pub previous: Option<Retired>,
    pub paused: bool,
    /// The credential that made it, as the audit names it (`gateway-token`, `cli-local`,
    /// `mcp:<name>` for an agent); unset on a subscription made before it was kept.
    #[serde(default)]
    pub created_by: Option<String>,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub updated_at: String,
}

impl Subscription {
    /// Whether an agent made it (through an MCP credential).
    pub fn agent_made(&self) -> bool {
        self.created_by.as_deref().is_some_and(super::is_agent)
    }
}

/// A rotated-out secret, sealed, and its window.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retired {
    pub secret: String,
    pub until_unix: i64,
}

/// A subscription as every answer shows it: never its secret.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    pub name: String,
    pub provider: Provider,
    /// Where senders post: `gateway.publicUrl` (else the address the API was reached at),
    /// `hooks.path`, the name.
    pub url: String,
    pub events: Vec<String>,
    pub paused: bool,
    /// Until when the previous secret still verifies (RFC 3339), while a rotation's window
    /// is open.
    pub previous_secret_valid_until: Option<String>,
    /// The credential that made it: `mcp:<name>` for an agent (docs/mcp.md).
    pub created_by: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Its mapping, as a file mapping would be written (no secret).
    pub mapping: Map<String, Value>,
}

impl Subscription {
    /// How it is shown, posted to at `url`.
    pub fn view(&self, url: String, now_unix: i64) -> View {
        View {
            name: self.name.clone(),
            provider: self.provider,
            url,
            events: self.events.clone(),
            paused: self.paused,
            previous_secret_valid_until: self
                .previous
                .as_ref()
                .filter(|p| p.until_unix > now_unix)
                .map(|p| rfc3339(p.until_unix)),
            created_by: self.created_by.clone(),
            created_at: self.created_at.clone(),
            updated_at: self.updated_at.clone(),
            mapping: self.mapping.clone(),
        }
    }
}

/// Unix seconds as RFC 3339, UTC.
pub fn rfc3339(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0).map_or_else(
        || unix.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )
}
