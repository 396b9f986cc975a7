//! Microsoft Teams' incoming webhooks: a message is `POST <webhookUrl>`, to the one conversation
//! the webhook posts to
//! (<https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/add-incoming-webhook>).
//! Its answer is not read.

use serde::Serialize;

use crate::config::runtime::MsteamsConfig;

/// The body of an incoming webhook's message.
#[derive(Serialize)]
struct WebhookMessage<'a> {
    text: &'a str,
}

/// `text` to the webhook's conversation.
pub(super) fn request(
    http: &reqwest::Client,
    config: &MsteamsConfig<String>,
    text: &str,
) -> reqwest::RequestBuilder {
    http.post(&config.webhook_url)
        .json(&WebhookMessage { text })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::outbound::chat::tests::built;

    #[test]
    fn the_body_is_the_documented_one() {
        let config = MsteamsConfig {
            webhook_url: "https://example.webhook.office.com/webhookb2/x".into(),
        };
        let sent = built(request(&reqwest::Client::new(), &config, "Hello World"));
        assert_eq!(sent.url, "https://example.webhook.office.com/webhookb2/x");
        // The example of
        // https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/add-incoming-webhook
        // (`{"text": "Hello World"}`, there in single quotes for a shell).
        assert_eq!(sent.body, r#"{"text":"Hello World"}"#);
    }
}
