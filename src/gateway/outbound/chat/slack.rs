//! Slack's Web API: a message is `POST <apiBase>/chat.postMessage` with the bot token as a
//! bearer (<https://api.slack.com/methods/chat.postMessage>). Slack answers a refusal with a
//! success status and `{"ok":false,"error":...}`: the answer is read.

use serde::{Deserialize, Serialize};

use crate::config::runtime::BotConfig;

/// The body of `chat.postMessage`.
#[derive(Serialize)]
struct PostMessage<'a> {
    channel: &'a str,
    text: &'a str,
}

/// `text` to the conversation `channel`.
pub(super) fn request(
    http: &reqwest::Client,
    bot: &BotConfig<String, String>,
    channel: &str,
    text: &str,
) -> reqwest::RequestBuilder {
    http.post(format!("{}/chat.postMessage", bot.api_base))
        .bearer_auth(&bot.bot_token)
        .json(&PostMessage { channel, text })
}

/// A Web API answer, as far as it is read.
#[derive(Deserialize, Default)]
struct Answer {
    #[serde(default)]
    ok: bool,
    #[serde(default)]
    error: Option<String>,
}

/// Why Slack refused the message its successful answer `body` answers, if it did: its `error`,
/// or `unknown error` when the answer does not say `"ok": true` and no error either.
pub(super) fn refusal(body: &str) -> Option<String> {
    let answer: Answer = serde_json::from_str(body).unwrap_or_default();
    match answer {
        Answer { ok: true, .. } => None,
        Answer { error, .. } => Some(error.unwrap_or_else(|| "unknown error".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::outbound::chat::tests::built;

    #[test]
    fn the_body_is_the_documented_one() {
        let bot = BotConfig {
            api_base: "https://slack.com/api".into(),
            bot_token: "xoxb-1".into(),
        };
        let sent = built(request(
            &reqwest::Client::new(),
            &bot,
            "C123ABC456",
            "Hello world :tada:",
        ));
        assert_eq!(sent.url, "https://slack.com/api/chat.postMessage");
        assert_eq!(sent.authorization.as_deref(), Some("Bearer xoxb-1"));
        // The JSON example of https://api.slack.com/methods/chat.postMessage.
        let documented = r#"{"channel": "C123ABC456", "text": "Hello world :tada:"}"#;
        assert_eq!(
            sent.value(),
            serde_json::from_str::<serde_json::Value>(documented).unwrap()
        );
        assert_eq!(
            sent.body,
            r#"{"channel":"C123ABC456","text":"Hello world :tada:"}"#
        );
    }

    #[test]
    fn the_documented_answers_are_read() {
        // The answers of https://api.slack.com/methods/chat.postMessage: a success and an error.
        let sent = r#"{
            "ok": true,
            "channel": "C123ABC456",
            "ts": "1503435956.000247",
            "message": {
                "text": "Here's a message for you",
                "username": "ecto1",
                "bot_id": "B123ABC456",
                "attachments": [{"text": "This is an attachment", "id": 1, "fallback": "This is an attachment's fallback"}],
                "type": "message",
                "subtype": "bot_message",
                "ts": "1503435956.000247"
            }
        }"#;
        assert_eq!(refusal(sent), None);
        let refused = r#"{"ok": false, "error": "too_many_attachments"}"#;
        assert_eq!(refusal(refused).as_deref(), Some("too_many_attachments"));
    }

    #[test]
    fn an_answer_that_does_not_say_ok_is_a_refusal() {
        for body in [
            "",
            "not json",
            "{}",
            r#"{"ok": "true"}"#,
            r#"{"ok": false}"#,
        ] {
            assert_eq!(refusal(body).as_deref(), Some("unknown error"), "{body}");
        }
    }
}
