//! OpenClaw's `channels`: what sends replies kept (with OpenClaw's names of some tokens taken
//! in hookgate's), what reads chats left out, channels hookgate has no adapter for noticed.

use serde_json::{Map, Value};

use super::{ConfigNotice, KEYS, ignored};
use crate::config::channels::{AdapterConfig, ChannelsConfig};
use crate::config::suggest::closest;
use crate::hook::Channel;

/// Adopts `channels` (see the module's documentation).
pub(super) fn adopt(channels: &mut Map<String, Value>, notices: &mut Vec<ConfigNotice>) {
    let names: Vec<String> = channels.keys().cloned().collect();
    for name in names {
        let key = format!("channels.{name}");
        if ChannelsConfig::SETTINGS.contains(&name.as_str()) || KEYS.iter().any(|(k, _)| *k == key)
        {
            continue;
        }
        let adapter = AdapterConfig::CHANNELS
            .into_iter()
            .find(|channel| channel.as_str() == name);
        let Some(adapter) = adapter else {
            // An OpenClaw channel id hookgate cannot send to (a typo of one it can is left for
            // the reader to refuse).
            if OPENCLAW_ONLY_CHANNELS.contains(&name.as_str()) {
                channels.shift_remove(&name);
                notices.push(ignored(&key, "hookgate cannot send replies there"));
            }
            continue;
        };
        let own = AdapterConfig::keys(adapter);
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let Some(Value::Object(channel)) = channels.get_mut(&name) else {
            continue;
        };
        let enabled = channel.shift_remove("enabled");
        // OpenClaw names some tokens differently.
        let rename = match adapter {
            Channel::Discord => Some(("token", "botToken")),
            Channel::Mattermost => Some(("botToken", "token")),
            _ => None,
        };
        if let Some((theirs, ours)) = rename
            && !channel.contains_key(ours)
            && let Some(token) = channel.shift_remove(theirs)
        {
            channel.insert(ours.into(), token);
        }
        // The rest of an OpenClaw channel (policies for reading chats, accounts, webhooks for
        // incoming messages) has no use here; a near miss of one of hookgate's own keys is kept,
        // for the reader to refuse.
        let others: Vec<String> = channel
            .keys()
            .filter(|k| !own.contains(&k.as_str()) && closest(k, &own).is_none())
            .cloned()
            .collect();
        for other in others {
            channel.shift_remove(&other);
            notices.push(ignored(
                &format!("{key}.{other}"),
                "hookgate only sends replies on this channel; it reads no messages",
            ));
        }
        if enabled == Some(Value::Bool(false)) {
            channels.shift_remove(&name);
            notices.push(ConfigNotice {
                key: format!("{key}.enabled"),
                message: "false: no replies are sent on this channel".into(),
            });
        }
    }
}

/// OpenClaw's bundled channels that hookgate has no adapter for.
const OPENCLAW_ONLY_CHANNELS: &[&str] = &[
    "a2a",
    "buzz",
    "clickclack",
    "feishu",
    "googlechat",
    "irc",
    "line",
    "matrix",
    "nextcloud-talk",
    "nostr",
    "sms",
    "synology-chat",
    "twitch",
    "zalo",
];

#[cfg(test)]
mod tests {
    use crate::config::openclaw::tests::adopted;
    use serde_json::json;

    #[test]
    fn channels_keep_what_sends_and_drop_what_reads() {
        let (value, notices, _) = adopted(json!({"channels": {
            "discord": {"enabled": true, "token": "t", "dmPolicy": "pairing", "allowFrom": ["1"]},
            "telegram": {"botTokn": "near miss", "guilds": {}},
            "mattermost": {"baseUrl": "https://m", "botToken": "b"},
            "slack": {"enabled": false, "botToken": "x"},
            "matrix": {"accessToken": "m"},
            "telegrm": {"botToken": "typo"},
        }}));
        assert_eq!(
            value["channels"],
            json!({
                "discord": {"botToken": "t"},
                "mattermost": {"baseUrl": "https://m", "token": "b"},
                "telegram": {"botTokn": "near miss"},
                "telegrm": {"botToken": "typo"},
            })
        );
        assert!(notices.contains(
            &"channels.slack.enabled: false: no replies are sent on this channel".to_string()
        ));
        assert!(
            notices
                .iter()
                .any(|n| n.starts_with("channels.matrix: ignored"))
        );
        assert!(
            notices
                .iter()
                .any(|n| n.starts_with("channels.discord.dmPolicy: ignored"))
        );
    }
}
