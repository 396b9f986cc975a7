//! Signal through signal-cli-rest-api: a message is `POST <baseUrl>/v2/send` from the configured
//! number (<https://bbernhard.github.io/signal-cli-rest-api/>). Its answer is not read.

use serde::Serialize;

use crate::config::runtime::SignalConfig;

/// The body of `/v2/send`, to one recipient.
#[derive(Serialize)]
struct Send<'a> {
    message: &'a str,
    number: &'a str,
    recipients: [&'a str; 1],
}

/// `text` to `recipient` (a number or a group id).
pub(super) fn request(
    http: &reqwest::Client,
    config: &SignalConfig,
    recipient: &str,
    text: &str,
) -> reqwest::RequestBuilder {
    http.post(format!("{}/v2/send", config.base_url))
        .json(&Send {
            message: text,
            number: &config.number,
            recipients: [recipient],
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::outbound::chat::tests::built;

    #[test]
    fn the_body_is_the_documented_one() {
        let config = SignalConfig {
            base_url: "http://127.0.0.1:8080".into(),
            number: "+431212131491291".into(),
        };
        let sent = built(request(
            &reqwest::Client::new(),
            &config,
            "+4354546464654",
            "Hello World!",
        ));
        assert_eq!(sent.url, "http://127.0.0.1:8080/v2/send");
        // The example of signal-cli-rest-api's doc/EXAMPLES.md ("Send a message to multiple
        // recipients"), to one of them.
        let documented = r#"{"message": "Hello World!", "number": "+431212131491291", "recipients": ["+4354546464654"]}"#;
        assert_eq!(
            sent.value(),
            serde_json::from_str::<serde_json::Value>(documented).unwrap()
        );
        assert_eq!(
            sent.body,
            r#"{"message":"Hello World!","number":"+431212131491291","recipients":["+4354546464654"]}"#
        );
    }
}
