//! The checks of a notify mapping (docs/hooks.md#notify-only-hooks): it sends its message to a
//! chat channel with no model call, so it needs a channel it can reach and a recipient, and the
//! keys that only shape an agent's turn are refused, each named, rather than silently ignored.

use super::ConfigError;
use super::model::MappingConfig;
use super::runtime::{ChannelEndpoint, ChannelSettings};
use super::schema::key_of;
use crate::hook::Channel;

/// What a key that only shapes an agent's turn is refused with on a notify mapping.
const AGENT_ONLY: &str = "does not apply to a notify mapping: it sends its message with no \
                          agent or model (remove it, or use action agent)";

/// Adds to `problems` each key of notify mapping `i` that only an agent run uses, and a missing
/// message. `runs`, `batch` and `budget` are refused where they are built, as on a wake mapping.
pub(super) fn check_keys(i: usize, config: &MappingConfig, problems: &mut Vec<ConfigError>) {
    let set = [
        ("agent_id", config.agent_id.is_some()),
        ("name", config.name.is_some()),
        ("session_key", config.session_key.is_some()),
        ("session_mode", config.session_mode.is_some()),
        ("wake_mode", config.wake_mode.is_some()),
        ("text_template", config.text_template.is_some()),
        ("deliver", config.deliver.is_some()),
        ("model", config.model.is_some()),
        ("thinking", config.thinking.is_some()),
        ("timeout_seconds", config.timeout_seconds.is_some()),
        (
            "allow_unsafe_external_content",
            config.allow_unsafe_external_content,
        ),
        // A callback tells a run's outcome; a notification's is its delivery, on its record.
        ("callback", config.callback.is_some()),
    ];
    for (field, _) in set.iter().filter(|(_, set)| *set) {
        problems.push(ConfigError::invalid(
            key_of::<MappingConfig>(Some(i), field),
            AGENT_ONLY,
        ));
    }
    if config.message_template.is_none() && config.transform.is_none() {
        problems.push(ConfigError::invalid(
            key_of::<MappingConfig>(Some(i), "message_template"),
            "is required on a notify mapping (or a transform that sets the message)",
        ));
    }
}

/// Adds to `problems` each notify mapping of `mappings` whose message could reach no one: its
/// `channel` missing, `last` (a notification has no session whose route it could follow) or
/// not configured under `channels`, or no recipient, neither its `to` nor the channel's in
/// `channels.defaultRoute` (an msteams webhook needs none).
pub(super) fn check_routes(
    mappings: &[MappingConfig],
    channels: &ChannelSettings,
    problems: &mut Vec<ConfigError>,
) {
    let notify = mappings
        .iter()
        .enumerate()
        .filter(|(_, m)| m.action.as_deref().map(str::trim) == Some("notify"));
    for (i, config) in notify {
        let key = |field| key_of::<MappingConfig>(Some(i), field);
        // A channel that names none is refused where the mapping is built.
        let Some(named) = config.channel.as_deref().map(Channel::parse) else {
            problems.push(ConfigError::invalid(
                key("channel"),
                "is required on a notify mapping: the channel its message goes to",
            ));
            continue;
        };
        let Some(channel) = named else { continue };
        if channel == Channel::Last {
            problems.push(ConfigError::invalid(
                key("channel"),
                "cannot be last on a notify mapping: name the channel its message goes to",
            ));
            continue;
        }
        let Some(endpoint) = channels.endpoint(channel) else {
            problems.push(ConfigError::invalid(
                key("channel"),
                format!(
                    "names {}, which is not configured under channels: a notify mapping's \
                     channel must be",
                    channel.as_str()
                ),
            ));
            continue;
        };
        let default_to = channels
            .default_route
            .as_ref()
            .filter(|route| route.channel == channel)
            .and_then(|route| route.to.as_ref());
        let needs_none = matches!(endpoint, ChannelEndpoint::Msteams { .. });
        if config.to.is_none() && default_to.is_none() && !needs_none {
            problems.push(ConfigError::invalid(
                key("to"),
                format!(
                    "is required on a notify mapping to {}, unless channels.defaultRoute names \
                     that channel with a recipient",
                    channel.as_str()
                ),
            ));
        }
    }
}
