//! Configurations that are valid but lose replies (docs/configuration.md#where-replies-go): `check`
//! prints these warnings and `serve` logs them at start and after a reload, next to the notices of
//! OpenClaw keys. A warning names keys and channels, never a value of the file.

use super::channels::{ChannelsConfig, RouteConfig};
use super::model::MappingConfig;
use super::runtime::{ChannelEndpoint, GatewayMode, RuntimeSettings};
use super::{ConfigNotice, Settings};
use crate::hook::Channel;

/// The warnings of `settings` about replies that would be given up.
pub(super) fn delivery_notices(settings: &Settings) -> Vec<ConfigNotice> {
    let runtime = &settings.runtime;
    // Forward mode delivers nothing itself, and without a model no turn ever has a reply.
    if runtime.mode != GatewayMode::Embedded || !has_provider(runtime) {
        return Vec::new();
    }
    let channels = &runtime.channels;
    if channels.endpoints.is_empty() {
        // Then every reply goes to a channel that is not there: no route can help, and the
        // warnings below would only send the operator after one.
        return vec![ConfigNotice {
            key: "channels".into(),
            message: "no channel is configured: every reply of a run and a heartbeat is given up \
                      (configure one under channels, or set deliver: false)"
                .into(),
        }];
    }
    let mut notices = Vec::new();
    let configured = |channel: Channel| channels.endpoint(channel).is_some();
    let mut not_configured = |key: String, channel: Channel| {
        notices.push(ConfigNotice {
            key,
            message: format!(
                "names {}, which is not configured under channels: its replies are given up",
                channel.as_str()
            ),
        })
    };
    match &channels.default_route {
        Some(route) if route.channel != Channel::Last && !configured(route.channel) => {
            not_configured(key!(RouteConfig.channel), route.channel)
        }
        _ => {}
    }
    for (i, mapping) in settings
        .hooks
        .iter()
        .flat_map(|h| h.mappings.iter())
        .enumerate()
    {
        let named = mapping.channel;
        if let Some(channel) = named.filter(|c| *c != Channel::Last && !configured(*c)) {
            not_configured(key!(MappingConfig[i].channel), channel);
        }
    }
    // Without a route, `last` falls back to the first configured channel with no recipient,
    // which only an msteams incoming webhook can do without.
    let first_needs_recipient = !matches!(
        channels.endpoints.first(),
        Some(ChannelEndpoint::Msteams { .. })
    );
    if channels.default_route.is_none() && first_needs_recipient {
        notices.push(ConfigNotice {
            key: key!(ChannelsConfig.default_route),
            message: "not set: replies to channel \"last\" (the default of hook runs, and every \
                      heartbeat's) are given up until an owner route is set with the API \
                      (PUT /api/sessions/main/route)"
                .into(),
        });
    }
    notices
}

/// Whether any turn can reach a model: a named provider, or an agent's own.
fn has_provider(runtime: &RuntimeSettings) -> bool {
    !runtime.providers.is_empty()
        || runtime.fallback.provider.is_some()
        || runtime.agents.values().any(|a| a.provider.is_some())
}
