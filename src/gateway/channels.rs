//! Delivery adapters: one HTTP request per message, to each chat service's own API.

use serde_json::{Value, json};

use crate::config::runtime::{ChannelEndpoint, ChannelSettings, Route};
use crate::hook::Channel;

/// A chat API that accepts the connection and never answers must not hold up the outbox.
pub const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Sends `text` to `to` through `endpoint`. The error says what the service answered, never the
/// credentials.
pub async fn send(
    http: &reqwest::Client,
    endpoint: &ChannelEndpoint,
    to: Option<&str>,
    text: &str,
) -> Result<(), String> {
    let recipient =
        || to.ok_or_else(|| format!("no recipient for {}", endpoint.channel().as_str()));
    let request = match endpoint {
        ChannelEndpoint::Telegram { api_base, bot_token } => http
            .post(format!("{api_base}/bot{bot_token}/sendMessage"))
            .json(&json!({"chat_id": recipient()?, "text": text})),
        ChannelEndpoint::Slack { api_base, bot_token } => http
            .post(format!("{api_base}/chat.postMessage"))
            .bearer_auth(bot_token)
            .json(&json!({"channel": recipient()?, "text": text})),
        ChannelEndpoint::Discord { api_base, bot_token } => http
            .post(format!("{api_base}/channels/{}/messages", recipient()?))
            .header("authorization", format!("Bot {bot_token}"))
            .json(&json!({"content": text})),
        ChannelEndpoint::Mattermost { base_url, token } => http
            .post(format!("{base_url}/api/v4/posts"))
            .bearer_auth(token)
            .json(&json!({"channel_id": recipient()?, "message": text})),
        ChannelEndpoint::Msteams { webhook_url } => http.post(webhook_url).json(&json!({"text": text})),
        ChannelEndpoint::Signal { base_url, number } => http
            .post(format!("{base_url}/v2/send"))
            .json(&json!({"message": text, "number": number, "recipients": [recipient()?]})),
        ChannelEndpoint::Whatsapp { api_base, access_token, phone_number_id } => http
            .post(format!("{api_base}/{phone_number_id}/messages"))
            .bearer_auth(access_token)
            .json(&json!({
                "messaging_product": "whatsapp", "to": recipient()?, "type": "text",
                "text": {"body": text},
            })),
        ChannelEndpoint::Imessage { base_url, password } => http
            .post(format!("{base_url}/api/v1/message/text"))
            .query(&[("password", password)])
            .json(&json!({"chatGuid": recipient()?, "message": text, "tempGuid": uuid::Uuid::new_v4().to_string()})),
    };
    let response = request.timeout(SEND_TIMEOUT).send().await.map_err(|e| {
        format!(
            "{} unreachable: {}",
            endpoint.channel().as_str(),
            e.without_url()
        )
    })?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(format!(
            "{} answered {status}: {}",
            endpoint.channel().as_str(),
            cut(&body)
        ));
    }
    // Slack answers 200 with {"ok":false,"error":...} for refusals.
    if matches!(endpoint, ChannelEndpoint::Slack { .. }) {
        let value: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if value["ok"] != Value::Bool(true) {
            return Err(format!(
                "slack refused: {}",
                value["error"].as_str().unwrap_or("unknown error")
            ));
        }
    }
    Ok(())
}

fn cut(body: &str) -> String {
    body.chars().take(300).collect()
}

/// Where a reply for `channel`/`to` goes: an explicit channel as given (its recipient from the
/// last route when that was the same channel); `last` → the main session's last route, else
/// `channels.defaultRoute`, else the first configured channel, else `whatsapp`.
pub fn resolve_route(
    channel: Channel,
    to: Option<String>,
    last: Option<Route>,
    settings: &ChannelSettings,
) -> Route {
    if channel != Channel::Last {
        let to = to.or_else(|| last.filter(|l| l.channel == channel).and_then(|l| l.to));
        return Route { channel, to };
    }
    let fallback = last
        .or_else(|| settings.default_route.clone())
        .or_else(|| {
            settings.endpoints.first().map(|e| Route {
                channel: e.channel(),
                to: None,
            })
        })
        .unwrap_or(Route {
            channel: Channel::Whatsapp,
            to: None,
        });
    Route {
        channel: fallback.channel,
        to: to.or(fallback.to),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::runtime::RetryPolicy;
    use std::time::Duration;

    fn settings(endpoints: Vec<ChannelEndpoint>, default_route: Option<Route>) -> ChannelSettings {
        ChannelSettings {
            endpoints,
            default_route,
            retry: RetryPolicy {
                attempts: 1,
                base_delay: Duration::ZERO,
            },
        }
    }

    fn route(channel: Channel, to: &str) -> Route {
        Route {
            channel,
            to: Some(to.into()),
        }
    }

    #[test]
    fn explicit_channel_is_kept() {
        let r = resolve_route(
            Channel::Slack,
            Some("C1".into()),
            None,
            &settings(vec![], None),
        );
        assert_eq!(r, route(Channel::Slack, "C1"));
    }

    #[test]
    fn explicit_channel_takes_the_recipient_of_the_last_route_on_that_channel() {
        let r = resolve_route(
            Channel::Slack,
            None,
            Some(route(Channel::Slack, "C9")),
            &settings(vec![], None),
        );
        assert_eq!(r, route(Channel::Slack, "C9"));
        let r = resolve_route(
            Channel::Slack,
            None,
            Some(route(Channel::Telegram, "42")),
            &settings(vec![], None),
        );
        assert_eq!(r.to, None);
    }

    #[test]
    fn last_prefers_the_last_route_then_the_default_then_the_first_channel_then_whatsapp() {
        let tg = ChannelEndpoint::Telegram {
            api_base: "x".into(),
            bot_token: "t".into(),
        };
        let default = Some(route(Channel::Discord, "d"));
        let last = Some(route(Channel::Signal, "+1"));
        assert_eq!(
            resolve_route(
                Channel::Last,
                None,
                last,
                &settings(vec![tg.clone()], default.clone())
            ),
            route(Channel::Signal, "+1")
        );
        assert_eq!(
            resolve_route(
                Channel::Last,
                None,
                None,
                &settings(vec![tg.clone()], default)
            ),
            route(Channel::Discord, "d")
        );
        assert_eq!(
            resolve_route(Channel::Last, None, None, &settings(vec![tg], None)).channel,
            Channel::Telegram
        );
        assert_eq!(
            resolve_route(Channel::Last, None, None, &settings(vec![], None)).channel,
            Channel::Whatsapp
        );
    }

    #[test]
    fn explicit_recipient_wins_over_the_route() {
        let r = resolve_route(
            Channel::Last,
            Some("me".into()),
            Some(route(Channel::Signal, "+1")),
            &settings(vec![], None),
        );
        assert_eq!(r, route(Channel::Signal, "me"));
    }
}
