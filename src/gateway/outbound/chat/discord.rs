//! Discord's API: a message is `POST <apiBase>/channels/<channel id>/messages` with
//! `Authorization: Bot <token>` (<https://discord.com/developers/docs/resources/message#create-message>).
//! Its answer, the message created, is not read.

use serde::Serialize;

use crate::config::runtime::BotConfig;

/// The body of Create Message.
#[derive(Serialize)]
struct CreateMessage<'a> {
    content: &'a str,
}

/// `text` to the channel `channel_id`.
pub(super) fn request(
    http: &reqwest::Client,
    bot: &BotConfig<String, String>,
    channel_id: &str,
    text: &str,
) -> reqwest::RequestBuilder {
    http.post(format!("{}/channels/{channel_id}/messages", bot.api_base))
        .header("authorization", format!("Bot {}", bot.bot_token))
        .json(&CreateMessage { content: text })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::outbound::chat::tests::built;

    #[test]
    fn the_body_is_the_documented_one() {
        let bot = BotConfig {
            api_base: "https://discord.com/api/v10".into(),
            bot_token: "t0k".into(),
        };
        let sent = built(request(
            &reqwest::Client::new(),
            &bot,
            "1034567890123456789",
            "Hello, World!",
        ));
        assert_eq!(
            sent.url,
            "https://discord.com/api/v10/channels/1034567890123456789/messages"
        );
        assert_eq!(sent.authorization.as_deref(), Some("Bot t0k"));
        // The example of https://discord.com/developers/docs/resources/message#create-message
        // without its `tts` and `embeds`, which are optional.
        assert_eq!(sent.body, r#"{"content":"Hello, World!"}"#);
    }
}
