//! What a hook asks for, as plain data: a wake (a system event for the main session) or an agent
//! run, before and after policy.

use serde::{Deserialize, Serialize};

use super::envelope::ContentSource;
use super::wire::wire_names;

/// When the agent should look at what a hook delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeMode {
    /// Trigger a heartbeat at once.
    Now,
    /// Wait for the next periodic heartbeat.
    NextHeartbeat,
}

wire_names!(WakeMode {
    Now => "now",
    NextHeartbeat => "next-heartbeat",
});

impl WakeMode {
    /// `next-heartbeat` for exactly that JSON string; anything else (absent, other text, other
    /// types) is `now`.
    pub fn from_json(value: Option<&serde_json::Value>) -> Self {
        value
            .and_then(|v| v.as_str())
            .and_then(WakeMode::from_wire)
            .unwrap_or(WakeMode::Now)
    }
}

/// A messaging surface an agent's reply may be delivered to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

wire_names!(Channel, expected = "channel must be " {
    Last => "last",
    Whatsapp => "whatsapp",
    Telegram => "telegram",
    Discord => "discord",
    Slack => "slack",
    Mattermost => "mattermost",
    Signal => "signal",
    Imessage => "imessage",
    Msteams => "msteams",
});

impl Channel {
    /// Parses a channel name, case-insensitively; `imsg` is an alias of `imessage`.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "imsg" => Some(Channel::Imessage),
            name => Channel::from_wire(name),
        }
    }
}

/// How hard the model thinks, as OpenClaw names the levels. Each provider's wire format maps
/// them to its own control (see the gateway's provider module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

wire_names!(Thinking, expected = "thinking must be " {
    Off => "off",
    Minimal => "minimal",
    Low => "low",
    Medium => "medium",
    High => "high",
    Xhigh => "xhigh",
    Max => "max",
    Adaptive => "adaptive",
});

impl Thinking {
    /// Parses a level, case-insensitively, with OpenClaw's aliases (`x-high`, `extra high`,
    /// ... for `xhigh`; `highest` for `high`).
    pub fn parse(name: &str) -> Option<Thinking> {
        match name.trim().to_ascii_lowercase().as_str() {
            "highest" => Some(Thinking::High),
            "x-high" | "x_high" | "extra-high" | "extra high" | "extra_high" => {
                Some(Thinking::Xhigh)
            }
            name => Thinking::from_wire(name),
        }
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
}

/// A name as an edge read it (a transform's outcome), kept when it names nothing so that the
/// check that refuses it runs where the hook contract orders it, not where it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named<T> {
    Known(T),
    /// The text as given, which names no variant.
    Unknown(String),
}

impl<T: Copy> Named<T> {
    /// `text` read with `parse`.
    pub fn read(text: String, parse: impl FnOnce(&str) -> Option<T>) -> Named<T> {
        match parse(&text) {
            Some(value) => Named::Known(value),
            None => Named::Unknown(text),
        }
    }

    /// The value, when the text named one.
    pub fn known(&self) -> Option<T> {
        match self {
            Named::Known(value) => Some(*value),
            Named::Unknown(_) => None,
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

/// The name of an agent run whose request or mapping gave none.
pub const DEFAULT_NAME: &str = "Hook";

/// An agent run's fields, typed once: what a request body (`payload`), a mapping's rendered
/// templates and a transform's outcome (`crate::mapping`) make of a request, and what admission
/// resolves and the stored run, a relay and the fingerprint read.
///
/// Its serde form is the one every form of a run shares (the run on NATS, the operator API's
/// view, the body relayed upstream): camel case, an option the run does not set as null (the
/// relay leaves those out), a field added here shows in each. Three fields are each form's own
/// and skipped here: the name (the API calls it `hookName`), the requested session key (a run
/// shows its resolved key, a relay the key it may pass on) and the session mode (not relayed).
/// Read with the hook contract's defaults for what is absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentAction {
    pub message: String,
    /// Human-readable hook name, `Hook` when not given.
    #[serde(skip)]
    pub name: String,
    /// As named; in an [`AdmittedRun`], the resolved agent id (`None` when none was named).
    pub agent_id: Option<String>,
    /// As named; the key an admitted run gets is [`AdmittedRun::session_key`].
    #[serde(skip)]
    pub session_key: Option<String>,
    pub wake_mode: WakeMode,
    pub deliver: bool,
    /// As the request or mapping named it; absent means `last`. Kept apart so that forward mode
    /// relays only what was asked for; a stored run reads back `last` as `Some(Last)`.
    pub channel: Option<Channel>,
    pub to: Option<String>,
    /// As named; in an [`AdmittedRun`], the resolved model id (aliases resolved).
    pub model: Option<String>,
    #[serde(deserialize_with = "Thinking::deserialize_lenient")]
    pub thinking: Option<Thinking>,
    /// `Some(0)`: no limit but the hard cap.
    pub timeout_seconds: Option<u64>,
    #[serde(skip)]
    pub session_mode: SessionMode,
}

impl Default for AgentAction {
    /// An action with nothing set: the hook contract's defaults and an empty message.
    fn default() -> Self {
        AgentAction {
            message: String::new(),
            name: DEFAULT_NAME.to_string(),
            agent_id: None,
            session_key: None,
            wake_mode: WakeMode::Now,
            deliver: true,
            channel: None,
            to: None,
            model: None,
            thinking: None,
            timeout_seconds: None,
            session_mode: SessionMode::Isolated,
        }
    }
}

/// A validated `POST /agent` body, before agent, model and session-key policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRequest {
    pub action: AgentAction,
    /// Answer once the run has ended (within its time limit), with its outcome.
    pub wait_for_completion: bool,
}

/// Whether a run starts a fresh conversation or continues its session key's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SessionMode {
    #[default]
    Isolated,
    /// The run's turn carries the earlier exchanges of its agent and session key.
    Persistent,
}

wire_names!(SessionMode {
    Isolated => "isolated",
    Persistent => "persistent",
});

impl SessionMode {
    /// The mode a wire spelling names, exactly (no case folding).
    pub fn parse(text: &str) -> Option<SessionMode> {
        SessionMode::from_wire(text)
    }
}

/// An agent action that passed every policy: what gets queued as a run. A stored run keeps
/// neither whether the key was chosen nor `allow_unsafe_external_content` (both read back false):
/// they decide admission (idempotency, the prompt) and the relay, not the run. Its serde form is
/// flat: the action's fields beside its own, in camel case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmittedRun {
    /// The action, its agent id and model resolved.
    #[serde(flatten)]
    pub action: AgentAction,
    /// The agent that will run it: the action's agent id or the default agent.
    pub target_agent: String,
    /// The resolved session key.
    pub session_key: String,
    /// Whether `session_key` was chosen by the request, the mapping or `defaultSessionKey`, as
    /// opposed to freshly generated; only a chosen key takes part in idempotency.
    #[serde(skip)]
    pub session_key_chosen: bool,
    pub source: ContentSource,
    #[serde(skip)]
    pub allow_unsafe_external_content: bool,
    /// The id of the mapping that admitted the run (`hooks.mappings[].id`); `None` for
    /// `POST {prefix}/agent`. What the mapping's batch, lane and budget apply to.
    pub mapping_id: Option<String>,
    /// Where the run's outcome is POSTed when it ends: its mapping's `callback.url` rendered
    /// (docs/outbound.md). Kept in the outbox from admission, not in the stored run: so in none
    /// of the run's forms (a rendered URL such as Slack's `response_url` is a capability, not
    /// for the API's view, and OpenClaw takes no such key in a relay).
    #[serde(skip)]
    pub callback: Option<String>,
    /// The id of the request that admitted the run (its answer's `X-Request-Id`), which its
    /// callback carries; like `callback`, in none of the run's stored forms.
    #[serde(skip)]
    pub request_id: Option<String>,
}

impl AdmittedRun {
    /// The channel the reply goes to: as requested, else `last`.
    pub fn channel_or_last(&self) -> Channel {
        self.action.channel.unwrap_or(Channel::Last)
    }
}
