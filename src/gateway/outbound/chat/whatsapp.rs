//! WhatsApp's Cloud API: a text message is `POST <apiBase>/<phone number id>/messages` with the
//! access token as a bearer
//! (<https://developers.facebook.com/docs/whatsapp/cloud-api/messages/text-messages>). Its
//! answer, the message's id, is not read.

use serde::Serialize;

use crate::config::runtime::WhatsappConfig;

/// The body of a text message.
#[derive(Serialize)]
struct TextMessage<'a> {
    messaging_product: MessagingProduct,
    to: &'a str,
    #[serde(rename = "type")]
    kind: MessageKind,
    text: Text<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum MessagingProduct {
    Whatsapp,
}

#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum MessageKind {
    Text,
}

#[derive(Serialize)]
struct Text<'a> {
    body: &'a str,
}

/// `text` to the WhatsApp user `to`.
pub(super) fn request(
    http: &reqwest::Client,
    config: &WhatsappConfig<String, String>,
    to: &str,
    text: &str,
) -> reqwest::RequestBuilder {
    http.post(format!(
        "{}/{}/messages",
        config.api_base, config.phone_number_id
    ))
    .bearer_auth(&config.access_token)
    .json(&TextMessage {
        messaging_product: MessagingProduct::Whatsapp,
        to,
        kind: MessageKind::Text,
        text: Text { body: text },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::outbound::chat::tests::built;

    #[test]
    fn the_body_is_the_documented_one() {
        let config = WhatsappConfig {
            api_base: "https://graph.facebook.com/v21.0".into(),
            access_token: "EAAA".into(),
            phone_number_id: "106540352242922".into(),
        };
        let text = "As requested, here's the link to our latest product: https://www.meta.com/quest/quest-3/";
        let sent = built(request(
            &reqwest::Client::new(),
            &config,
            "+16505551234",
            text,
        ));
        assert_eq!(
            sent.url,
            "https://graph.facebook.com/v21.0/106540352242922/messages"
        );
        assert_eq!(sent.authorization.as_deref(), Some("Bearer EAAA"));
        // The request of https://developers.facebook.com/docs/whatsapp/cloud-api/messages/text-messages
        // with its example values, without the optional `recipient_type` (`individual`, the
        // default) and `preview_url` (false by default).
        let documented = serde_json::json!({
            "messaging_product": "whatsapp",
            "to": "+16505551234",
            "type": "text",
            "text": {"body": text}
        });
        assert_eq!(sent.value(), documented);
        assert_eq!(
            sent.body,
            format!(
                r#"{{"messaging_product":"whatsapp","to":"+16505551234","type":"text","text":{{"body":"{text}"}}}}"#
            )
        );
    }
}
