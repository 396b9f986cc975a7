//! Telegram's Bot API: a message is `POST <apiBase>/bot<token>/sendMessage`
//! (<https://core.telegram.org/bots/api#sendmessage>). Its answer is not read: a refusal comes
//! with a status other than success, whose body (`{"ok":false,"description":...}`) the record
//! keeps as it came.

use serde::Serialize;

use crate::config::runtime::BotConfig;

/// The body of `sendMessage`: its two required parameters.
#[derive(Serialize)]
struct SendMessage<'a> {
    chat_id: &'a str,
    text: &'a str,
}

/// `text` to the chat `chat_id`, the bot's token in the path.
pub(super) fn request(
    http: &reqwest::Client,
    bot: &BotConfig<String, String>,
    chat_id: &str,
    text: &str,
) -> reqwest::RequestBuilder {
    http.post(format!("{}/bot{}/sendMessage", bot.api_base, bot.bot_token))
        .json(&SendMessage { chat_id, text })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::outbound::chat::tests::built;

    #[test]
    fn the_body_is_sendmessages_documented_parameters() {
        let bot = BotConfig {
            api_base: "https://api.telegram.org".into(),
            bot_token: "123:ABC".into(),
        };
        let sent = built(request(
            &reqwest::Client::new(),
            &bot,
            "-1001234567890",
            "Hello",
        ));
        assert_eq!(sent.url, "https://api.telegram.org/bot123:ABC/sendMessage");
        // `chat_id` (an Integer or a String: "Unique identifier for the target chat or username
        // of the target channel") and `text`, as the parameter table of
        // https://core.telegram.org/bots/api#sendmessage names them.
        assert_eq!(sent.body, r#"{"chat_id":"-1001234567890","text":"Hello"}"#);
    }
}
