//! The one partial form of an action, [`Overrides`], and the two ways a transform's outcome lays
//! it over its mapping's action: a `merge` outcome of contract 0.2, merged the way the OpenClaw
//! gateway merges what a JavaScript transform returns (docs/transforms.md#partial-overrides), and
//! a `run` outcome, which replaces the kind and the fields it sets ([`MappedAction::overlay`]).

use crate::hook::policy::KeyOrigin;
use crate::hook::{AgentAction, Channel, Named, Rejected, SessionMode, Thinking, WakeMode};

use super::{ActionKind, MappedAction};

/// The fields a transform changes in its mapping's action, typed as the transform's outcome was
/// read (`crate::transform`'s conversion); `None` keeps the mapping's value. Names that name
/// nothing are kept as [`Named::Unknown`], refused (channel, session mode) or read as no value
/// (thinking) where the hook contract orders it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// The kind asked for; another kind than the mapping's starts from an empty action.
    pub kind: Option<ActionKind>,
    /// A wake's text and mode.
    pub text: Option<String>,
    pub mode: Option<WakeMode>,
    /// An agent run's prompt and wake mode.
    pub message: Option<String>,
    pub wake_mode: Option<WakeMode>,
    pub name: Option<String>,
    pub agent_id: Option<String>,
    /// A blank key stands for none (the default or a generated key).
    pub session_key: Option<String>,
    /// The transform vouches that `session_key` is its own, not taken from the request.
    pub session_key_fixed: bool,
    /// Refused here when it names no mode.
    pub session_mode: Option<Named<SessionMode>>,
    pub deliver: Option<bool>,
    pub allow_unsafe_external_content: Option<bool>,
    /// Refused by [`MappedAction::finish`] when it names no channel.
    pub channel: Option<Named<Channel>>,
    pub to: Option<String>,
    pub model: Option<String>,
    /// A level that names none sets no level (the default), as a request's does.
    pub thinking: Option<Named<Thinking>>,
    pub timeout_seconds: Option<u64>,
}

/// `value` trimmed, `None` when blank: how a `run` outcome's optional texts are read.
pub fn non_blank(value: Option<String>) -> Option<String> {
    value
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

impl MappedAction {
    /// This action with `overrides` merged in. Set fields replace the mapping's, unset ones keep
    /// them, and a change of kind keeps nothing (an agent run made from a wake mapping has only
    /// what the transform gave it), as in the OpenClaw gateway. Values are used as given: not
    /// rendered, not trimmed (the checks of [`MappedAction::finish`] follow).
    pub fn merge(self, mut overrides: Overrides) -> Result<MappedAction, Rejected> {
        let kind = overrides.kind.unwrap_or(self.kind);
        let mut action = if kind == self.kind {
            self
        } else {
            // The operator's callback holds whatever the transform made of the request.
            MappedAction {
                callback: self.callback,
                ..MappedAction::empty(kind)
            }
        };
        if let Some(agent_id) = overrides.agent_id.take() {
            action.agent.agent_id = Some(agent_id);
        }
        if let Some(key) = overrides.session_key.take() {
            let key = key.trim();
            (action.agent.session_key, action.key_origin) = if key.is_empty() {
                (None, KeyOrigin::MappingStatic)
            } else if overrides.session_key_fixed {
                (Some(key.to_string()), KeyOrigin::MappingStatic)
            } else {
                (Some(key.to_string()), KeyOrigin::MappingTemplated)
            };
        }
        match kind {
            ActionKind::Wake => {
                if let Some(text) = overrides.text {
                    action.text = text;
                }
                action.agent.wake_mode = overrides.mode.unwrap_or(action.agent.wake_mode);
            }
            ActionKind::Agent => {
                if let Some(mode) = overrides.session_mode.take() {
                    action.agent.session_mode = mode.known().ok_or_else(|| {
                        Rejected::new("hook mapping sessionMode must be isolated or persistent")
                    })?;
                }
                action.allow_unsafe_external_content = overrides
                    .allow_unsafe_external_content
                    .unwrap_or(action.allow_unsafe_external_content);
                action.set_agent_fields(overrides);
            }
            // A notification has a message and a route: the agent fields mean nothing to it.
            ActionKind::Notify => {
                let agent = &mut action.agent;
                agent.message = overrides
                    .message
                    .unwrap_or(std::mem::take(&mut agent.message));
                match overrides.channel {
                    Some(Named::Known(channel)) => agent.channel = Some(channel),
                    Some(Named::Unknown(_)) => action.channel_refused = true,
                    None => {}
                }
                agent.to = overrides.to.or(agent.to.take());
            }
        }
        Ok(action)
    }

    /// An action of `kind` with every field unset: what a transform that changes the kind
    /// builds on.
    fn empty(kind: ActionKind) -> MappedAction {
        MappedAction {
            kind,
            key_origin: KeyOrigin::MappingStatic,
            text: String::new(),
            agent: AgentAction::default(),
            allow_unsafe_external_content: false,
            channel_refused: false,
            callback: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent_action() -> MappedAction {
        MappedAction {
            kind: ActionKind::Agent,
            key_origin: KeyOrigin::MappingStatic,
            text: String::new(),
            agent: AgentAction {
                message: "from the template".into(),
                name: "Deploys".into(),
                agent_id: Some("ops".into()),
                session_key: Some("hook:deploys".into()),
                wake_mode: WakeMode::NextHeartbeat,
                deliver: true,
                channel: Some(Channel::Telegram),
                to: Some("{{dest}} rendered".into()),
                model: Some("base/model".into()),
                thinking: None,
                timeout_seconds: Some(30),
                session_mode: SessionMode::Isolated,
            },
            allow_unsafe_external_content: false,
            channel_refused: false,
            callback: None,
        }
    }

    #[test]
    fn a_partial_override_changes_only_its_fields() {
        let merged = agent_action()
            .merge(Overrides {
                to: Some("+1555".into()),
                deliver: Some(false),
                model: Some("x/y".into()),
                ..Overrides::default()
            })
            .unwrap();
        assert_eq!(merged.agent.to.as_deref(), Some("+1555"));
        assert!(!merged.agent.deliver);
        assert_eq!(merged.agent.model.as_deref(), Some("x/y"));
        let mut unchanged = agent_action();
        unchanged.agent = AgentAction {
            to: merged.agent.to.clone(),
            deliver: false,
            model: merged.agent.model.clone(),
            ..unchanged.agent
        };
        assert_eq!(merged, unchanged);
    }

    #[test]
    fn another_kind_keeps_nothing_of_the_mapping() {
        let wake = agent_action()
            .merge(Overrides {
                kind: Some(ActionKind::Wake),
                ..Overrides::default()
            })
            .unwrap();
        assert_eq!(wake.kind, ActionKind::Wake);
        assert_eq!(wake.text, "", "blank, so finish() refuses it");
        assert_eq!(wake.agent.wake_mode, WakeMode::Now);
        assert_eq!(
            (&wake.agent.agent_id, &wake.agent.session_key),
            (&None, &None)
        );
        assert!(wake.finish().is_err());
    }

    #[test]
    fn session_keys_from_a_transform_are_external_unless_fixed() {
        let key = |key: &str, fixed| {
            let merged = agent_action()
                .merge(Overrides {
                    session_key: Some(key.into()),
                    session_key_fixed: fixed,
                    ..Overrides::default()
                })
                .unwrap();
            (merged.agent.session_key, merged.key_origin)
        };
        assert_eq!(
            key("hook:t3", false),
            (Some("hook:t3".into()), KeyOrigin::MappingTemplated)
        );
        assert_eq!(
            key("hook:t3", true),
            (Some("hook:t3".into()), KeyOrigin::MappingStatic)
        );
        assert_eq!(key("  ", false), (None, KeyOrigin::MappingStatic));
    }

    #[test]
    fn an_unknown_session_mode_is_the_clients_400() {
        let refused = agent_action()
            .merge(Overrides {
                session_mode: Some(Named::Unknown("weird".into())),
                ..Overrides::default()
            })
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "hook mapping sessionMode must be isolated or persistent"
        );
    }
}
