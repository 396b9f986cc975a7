//! What a hook asks for, as plain data: a wake (a system event for the main session) or an agent
//! run, before and after policy.

use serde::{Deserialize, Serialize};

use super::envelope::ContentSource;

/// When the agent should look at what a hook delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WakeMode {
    /// Trigger a heartbeat at once.
    Now,
    /// Wait for the next periodic heartbeat.
    NextHeartbeat,
}

impl WakeMode {
    /// `next-heartbeat` for exactly that JSON string; anything else (absent, other text, other
    /// types) is `now`.
    pub fn from_json(value: Option<&serde_json::Value>) -> Self {
        match value.and_then(|v| v.as_str()) {
            Some("next-heartbeat") => WakeMode::NextHeartbeat,
            _ => WakeMode::Now,
        }
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WakeMode::Now => "now",
            WakeMode::NextHeartbeat => "next-heartbeat",
        }
    }
}

/// A messaging surface an agent's reply may be delivered to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Last,
    Whatsapp,
    Telegram,
    Discord,
    Slack,
    Mattermost,
    Signal,
    Imessage,
    Msteams,
}

impl Channel {
    /// The message of the rejection for a value that names no channel.
    pub const EXPECTED: &'static str =
        "channel must be last|whatsapp|telegram|discord|slack|mattermost|signal|imessage|msteams";

    /// Parses a channel name, case-insensitively; `imsg` is an alias of `imessage`.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "last" => Channel::Last,
            "whatsapp" => Channel::Whatsapp,
            "telegram" => Channel::Telegram,
            "discord" => Channel::Discord,
            "slack" => Channel::Slack,
            "mattermost" => Channel::Mattermost,
            "signal" => Channel::Signal,
            "imessage" | "imsg" => Channel::Imessage,
            "msteams" => Channel::Msteams,
            _ => return None,
        })
    }

    /// The canonical, lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Last => "last",
            Channel::Whatsapp => "whatsapp",
            Channel::Telegram => "telegram",
            Channel::Discord => "discord",
            Channel::Slack => "slack",
            Channel::Mattermost => "mattermost",
            Channel::Signal => "signal",
            Channel::Imessage => "imessage",
            Channel::Msteams => "msteams",
        }
    }
}

/// How hard the model thinks, as OpenClaw names the levels. Each provider's wire format maps
/// them to its own control (see the gateway's provider module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Thinking {
    Off,
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
    Max,
    /// The provider decides the budget.
    Adaptive,
}

impl Thinking {
    /// The message of the rejection for a value that names no level.
    pub const EXPECTED: &'static str =
        "thinking must be off|minimal|low|medium|high|xhigh|max|adaptive";

    /// Parses a level, case-insensitively, with OpenClaw's aliases (`x-high`, `extra high`,
    /// ... for `xhigh`; `highest` for `high`).
    pub fn parse(name: &str) -> Option<Thinking> {
        let name = name.trim().to_ascii_lowercase();
        Some(match name.as_str() {
            "off" => Thinking::Off,
            "minimal" => Thinking::Minimal,
            "low" => Thinking::Low,
            "medium" => Thinking::Medium,
            "high" | "highest" => Thinking::High,
            "xhigh" | "x-high" | "x_high" | "extra-high" | "extra high" | "extra_high" => {
                Thinking::Xhigh
            }
            "max" => Thinking::Max,
            "adaptive" => Thinking::Adaptive,
            _ => return None,
        })
    }

    /// Reads a level leniently, for serde's `deserialize_with`: any spelling [`Thinking::parse`]
    /// knows, and `None` for one it does not. Records written before levels were typed (a NATS
    /// stream, an outbox row) carry free text, and must still load.
    pub fn deserialize_lenient<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Thinking>, D::Error> {
        let text: Option<String> = Option::deserialize(deserializer)?;
        Ok(text.as_deref().and_then(Thinking::parse))
    }

    /// The canonical, lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Thinking::Off => "off",
            Thinking::Minimal => "minimal",
            Thinking::Low => "low",
            Thinking::Medium => "medium",
            Thinking::High => "high",
            Thinking::Xhigh => "xhigh",
            Thinking::Max => "max",
            Thinking::Adaptive => "adaptive",
        }
    }
}

/// A validated wake: the text of the system event and when to act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeRequest {
    pub text: String,
    pub mode: WakeMode,
    /// The agent whose main session gets the event; the default agent when absent.
    pub agent_id: Option<String>,
    /// A session key the request named, checked by the session-key policy; it selects no session
    /// of its own (hookgate keeps one main session per agent).
    pub session_key: Option<String>,
}

/// A validated agent request, before agent, model and session-key policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRequest {
    pub message: String,
    /// Human-readable hook name, `Hook` when not given.
    pub name: String,
    pub agent_id: Option<String>,
    pub session_key: Option<String>,
    pub wake_mode: WakeMode,
    pub deliver: bool,
    /// As the request or mapping named it; absent means `last`. Kept apart so that forward mode
    /// relays only what was asked for.
    pub channel: Option<Channel>,
    pub to: Option<String>,
    pub model: Option<String>,
    pub thinking: Option<Thinking>,
    /// `Some(0)`: no limit but the hard cap.
    pub timeout_seconds: Option<u64>,
    pub session_mode: SessionMode,
    /// Answer once the run has ended (within its time limit), with its outcome.
    pub wait_for_completion: bool,
}

/// Whether a run starts a fresh conversation or continues its session key's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionMode {
    #[default]
    Isolated,
    /// The run's turn carries the earlier exchanges of its agent and session key.
    Persistent,
}

impl SessionMode {
    /// The mode a wire spelling names.
    pub fn parse(text: &str) -> Option<SessionMode> {
        match text {
            "isolated" => Some(SessionMode::Isolated),
            "persistent" => Some(SessionMode::Persistent),
            _ => None,
        }
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionMode::Isolated => "isolated",
            SessionMode::Persistent => "persistent",
        }
    }
}

/// An agent request that passed every policy: what gets queued as a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittedRun {
    pub message: String,
    pub name: String,
    /// The resolved target agent when the request named one; `None` when it named none.
    pub agent_id: Option<String>,
    /// The agent that will run it: `agent_id` or the default agent.
    pub target_agent: String,
    /// The resolved session key.
    pub session_key: String,
    /// Whether `session_key` was chosen by the request, the mapping or `defaultSessionKey`, as
    /// opposed to freshly generated; only a chosen key takes part in idempotency.
    pub session_key_chosen: bool,
    pub wake_mode: WakeMode,
    pub deliver: bool,
    /// As requested; absent means `last` (see [`AdmittedRun::channel_or_last`]).
    pub channel: Option<Channel>,
    pub to: Option<String>,
    /// The resolved model id (aliases resolved).
    pub model: Option<String>,
    pub thinking: Option<Thinking>,
    pub timeout_seconds: Option<u64>,
    pub source: ContentSource,
    pub allow_unsafe_external_content: bool,
    pub session_mode: SessionMode,
}

impl AdmittedRun {
    /// The channel the reply goes to: as requested, else `last`.
    pub fn channel_or_last(&self) -> Channel {
        self.channel.unwrap_or(Channel::Last)
    }
}

impl ContentSource {
    /// `webhook` or `email`, as run records spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentSource::Webhook => "webhook",
            ContentSource::Email => "email",
        }
    }
}
