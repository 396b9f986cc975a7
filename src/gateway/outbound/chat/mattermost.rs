//! Mattermost's API v4: a message is `POST <baseUrl>/api/v4/posts` with a bearer token
//! (<https://api.mattermost.com/#tag/posts/operation/CreatePost>). Its answer, the post created,
//! is not read.

use serde::Serialize;

use crate::config::runtime::MattermostConfig;

/// The body of Create a post: its two required fields.
#[derive(Serialize)]
struct CreatePost<'a> {
    channel_id: &'a str,
    message: &'a str,
}

/// `text` to the channel `channel_id`.
pub(super) fn request(
    http: &reqwest::Client,
    config: &MattermostConfig<String>,
    channel_id: &str,
    text: &str,
) -> reqwest::RequestBuilder {
    http.post(format!("{}/api/v4/posts", config.base_url))
        .bearer_auth(&config.token)
        .json(&CreatePost {
            channel_id,
            message: text,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::outbound::chat::tests::built;

    #[test]
    fn the_body_is_the_documented_one() {
        let config = MattermostConfig {
            base_url: "https://chat.example.com".into(),
            token: "tok".into(),
        };
        let sent = built(request(
            &reqwest::Client::new(),
            &config,
            "4xp9fdt77pncbef59f4k1qe83o",
            "Hello",
        ));
        assert_eq!(sent.url, "https://chat.example.com/api/v4/posts");
        assert_eq!(sent.authorization.as_deref(), Some("Bearer tok"));
        // Create a post's required `channel_id` and `message`
        // (https://api.mattermost.com/#tag/posts/operation/CreatePost).
        assert_eq!(
            sent.body,
            r#"{"channel_id":"4xp9fdt77pncbef59f4k1qe83o","message":"Hello"}"#
        );
    }
}
