//! iMessage through a BlueBubbles server: a message is `POST <baseUrl>/api/v1/message/text` with
//! the server's password in the query
//! (<https://docs.bluebubbles.app/server/developer-guides/rest-api-and-webhooks>). Its answer is
//! not read.

use serde::Serialize;

use crate::config::runtime::ImessageConfig;

/// The body of Send Text: `tempGuid` is fresh for each message, which the server uses to tell
/// one send from another.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SendText<'a> {
    chat_guid: &'a str,
    message: &'a str,
    temp_guid: &'a str,
}

/// `text` to the chat `chat_guid`.
pub(super) fn request(
    http: &reqwest::Client,
    config: &ImessageConfig<String>,
    chat_guid: &str,
    text: &str,
) -> reqwest::RequestBuilder {
    let mut guid = uuid::Uuid::encode_buffer();
    let temp_guid = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut guid);
    http.post(format!("{}/api/v1/message/text", config.base_url))
        .query(&[("password", &config.password)])
        .json(&SendText {
            chat_guid,
            message: text,
            temp_guid,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::outbound::chat::tests::built;

    #[test]
    fn the_body_is_the_documented_one() {
        let config = ImessageConfig {
            base_url: "http://mac.local:1234".into(),
            password: "pw".into(),
        };
        let send = || {
            built(request(
                &reqwest::Client::new(),
                &config,
                "iMessage;-;+15551234567",
                "Hello World!",
            ))
        };
        let (sent, again) = (send(), send());
        assert_eq!(
            sent.url,
            "http://mac.local:1234/api/v1/message/text?password=pw"
        );
        // Send Text's required `chatGuid`, `tempGuid` and `message` (BlueBubbles' REST API,
        // https://docs.bluebubbles.app/server/developer-guides/rest-api-and-webhooks).
        let mut body = sent.value();
        let temp_guid = body["tempGuid"].take();
        assert_eq!(
            body,
            serde_json::json!({"chatGuid": "iMessage;-;+15551234567", "message": "Hello World!",
                               "tempGuid": null})
        );
        let temp_guid = temp_guid.as_str().unwrap();
        assert!(uuid::Uuid::parse_str(temp_guid).is_ok(), "{temp_guid}");
        assert_ne!(
            again.value()["tempGuid"],
            temp_guid,
            "fresh for each message"
        );
    }
}
