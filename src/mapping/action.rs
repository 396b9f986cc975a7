//! A mapping's action for one request: rendered from its templates ([`super::Mapping::render`]),
//! laid over by its transform's outcome, then checked into the action that admission takes.

use crate::hook::policy::KeyOrigin;
use crate::hook::{AgentAction, Channel, Named, Rejected, WakeMode, WakeRequest};

use super::{ActionKind, Overrides};

/// What a notify action whose channel is missing, `last` or names none is refused with.
pub const NOTIFY_CHANNEL: &str =
    "hook mapping notify requires a configured channel other than last";

/// A mapping's action with every field rendered, before the checks of [`MappedAction::finish`].
/// Both the wake text and the agent fields are kept, so that a transform may change the kind; a
/// wake's mode, agent and session key are those of `agent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedAction {
    pub kind: ActionKind,
    /// Where `agent.session_key` came from: the mapping's fixed key, or one the payload chose.
    pub key_origin: KeyOrigin,
    pub text: String,
    /// The agent fields; `message` is trimmed (and refused when blank) by `finish`.
    pub agent: AgentAction,
    /// The prompt goes to the agent without the safety envelope.
    pub allow_unsafe_external_content: bool,
    /// A transform set a channel that names none: refused by `finish` after the message check
    /// (with the list of channels, never the text it set).
    pub channel_refused: bool,
    /// The mapping's `callback.url` rendered; `None` without one, or when it rendered blank.
    pub callback: Option<String>,
}

/// An action a transform returned (a `run` outcome); `None` fields keep the mapping's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransformAction {
    Wake {
        text: String,
        mode: Option<WakeMode>,
    },
    /// The agent fields a transform set: `message` always, optional texts trimmed and `None`
    /// when blank ([`super::non_blank`]); the fields of a `merge` only (kind, text, session
    /// mode...) are not used.
    Agent(Box<Overrides>),
}

/// A validated mapped action, ready for the policies of `/wake` or `/agent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishedAction {
    Wake(WakeRequest),
    Agent {
        action: AgentAction,
        key_origin: KeyOrigin,
        allow_unsafe_external_content: bool,
        /// Where the run's outcome is POSTed ([`MappedAction::callback`]).
        callback: Option<String>,
    },
    /// A notify mapping's message, for its channel with no model call.
    Notify(Notification),
}

/// A notification: a message rendered by a notify mapping, for a chat channel, sent with no
/// model call (docs/hooks.md#notify-only-hooks). Its channel is never `last`: a notify
/// mapping names its channel (checked at load).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Trimmed, never blank.
    pub message: String,
    pub channel: Channel,
    /// The recipient; `None` takes the channel's default (`channels.defaultRoute`).
    pub to: Option<String>,
}

impl MappedAction {
    /// Lays a transform's action over this one: the transform decides the kind, and each field it
    /// set replaces the mapping's.
    pub fn overlay(mut self, action: TransformAction) -> MappedAction {
        match action {
            TransformAction::Wake { text, mode } => {
                self.kind = ActionKind::Wake;
                self.text = text;
                self.agent.wake_mode = mode.unwrap_or(self.agent.wake_mode);
            }
            TransformAction::Agent(overrides) => {
                let mut overrides = *overrides;
                self.kind = ActionKind::Agent;
                if let Some(key) = overrides.session_key.take() {
                    // The transform chose it, from the payload as far as anyone knows.
                    self.agent.session_key = Some(key);
                    self.key_origin = KeyOrigin::MappingTemplated;
                }
                if let Some(agent_id) = overrides.agent_id.take() {
                    self.agent.agent_id = Some(agent_id);
                }
                self.set_agent_fields(overrides);
            }
        }
        self
    }

    /// Sets the agent fields that a `run` and a `merge` outcome set alike (not the agent id, the
    /// session key or mode, nor `allowUnsafeExternalContent`): each one given replaces the
    /// action's.
    pub(super) fn set_agent_fields(&mut self, overrides: Overrides) {
        let agent = &mut self.agent;
        if let Some(message) = overrides.message {
            agent.message = message;
        }
        if let Some(name) = overrides.name {
            agent.name = name;
        }
        agent.wake_mode = overrides.wake_mode.unwrap_or(agent.wake_mode);
        agent.deliver = overrides.deliver.unwrap_or(agent.deliver);
        match overrides.channel {
            Some(Named::Known(channel)) => agent.channel = Some(channel),
            Some(Named::Unknown(_)) => self.channel_refused = true,
            None => {}
        }
        agent.to = overrides.to.or(agent.to.take());
        agent.model = overrides.model.or(agent.model.take());
        if let Some(thinking) = overrides.thinking {
            agent.thinking = thinking.known();
        }
        // As a mapping's (and as OpenClaw takes a transform's), a timeout of 0 asks for no limit
        // but the hard cap; a request body's 0 asks for nothing.
        agent.timeout_seconds = overrides.timeout_seconds.or(agent.timeout_seconds);
    }

    /// Checks what a mapped action needs: a templated session key that rendered to something,
    /// wake text, agent message, a known channel.
    pub fn finish(self) -> Result<FinishedAction, Rejected> {
        let agent = self.agent;
        if self.key_origin == KeyOrigin::MappingTemplated && agent.session_key.is_none() {
            return Err(Rejected::new(
                "hook mapping sessionKey template rendered empty",
            ));
        }
        match self.kind {
            ActionKind::Wake => {
                let text = self.text.trim();
                if text.is_empty() {
                    return Err(Rejected::new("hook mapping requires text"));
                }
                // As `/wake` refuses a session key with `next-heartbeat`, in OpenClaw's words.
                if agent.session_key.is_some() && agent.wake_mode == WakeMode::NextHeartbeat {
                    return Err(Rejected::new(
                        "hook mapping sessionKey requires wakeMode=now",
                    ));
                }
                Ok(FinishedAction::Wake(WakeRequest {
                    text: text.to_string(),
                    mode: agent.wake_mode,
                    agent_id: agent.agent_id,
                    session_key: None,
                }))
            }
            ActionKind::Notify => {
                let message = agent.message.trim();
                if message.is_empty() {
                    return Err(Rejected::new("hook mapping requires message"));
                }
                // A transform's `last` (or a channel that names none): a notification has no
                // session whose route `last` could follow.
                let channel = agent.channel.filter(|c| *c != Channel::Last);
                let (true, Some(channel)) = (!self.channel_refused, channel) else {
                    return Err(Rejected::new(NOTIFY_CHANNEL));
                };
                Ok(FinishedAction::Notify(Notification {
                    message: message.to_string(),
                    channel,
                    to: agent.to.filter(|to| !to.trim().is_empty()),
                }))
            }
            ActionKind::Agent => {
                let message = agent.message.trim();
                if message.is_empty() {
                    return Err(Rejected::new("hook mapping requires message"));
                }
                if self.channel_refused {
                    return Err(Rejected::new(Channel::EXPECTED));
                }
                Ok(FinishedAction::Agent {
                    callback: self.callback,
                    key_origin: self.key_origin,
                    allow_unsafe_external_content: self.allow_unsafe_external_content,
                    action: AgentAction {
                        message: message.to_string(),
                        ..agent
                    },
                })
            }
        }
    }
}
