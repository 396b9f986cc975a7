//! The model provider: one OpenAI-compatible `POST <baseUrl>/chat/completions` per agent turn
//! (OpenAI, Ollama, vLLM and llama.cpp's server all speak it).

use std::time::Duration;

use serde_json::{Value, json};

use crate::config::runtime::Provider;

/// Why a turn produced no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("provider answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("malformed provider response: {0}")]
    Malformed(String),
    #[error("provider unreachable: {0}")]
    Transport(String),
}

/// What one turn asks for.
#[derive(Debug, Clone)]
pub struct ChatTurn<'a> {
    pub model: &'a str,
    pub prompt: &'a str,
    /// `low`, `medium` or `high`, sent as `reasoning_effort`; other values are not sent.
    pub thinking: Option<&'a str>,
    pub timeout: Duration,
}

/// Error bodies are cut to this many characters before they reach the run record.
const MAX_ERROR_BODY: usize = 500;

/// Sends `turn` to `provider`; returns the first choice's message content.
pub async fn complete(
    http: &reqwest::Client,
    provider: &Provider,
    turn: &ChatTurn<'_>,
) -> Result<String, ChatError> {
    let mut body = json!({
        "model": turn.model,
        "messages": [{"role": "user", "content": turn.prompt}],
    });
    if let Some(effort @ ("low" | "medium" | "high")) = turn.thinking {
        body["reasoning_effort"] = json!(effort);
    }
    let mut request = http
        .post(format!("{}/chat/completions", provider.base_url))
        .json(&body);
    if let Some(key) = &provider.api_key {
        request = request.bearer_auth(key);
    }
    let exchange = async {
        let response = request
            .send()
            .await
            .map_err(|e| ChatError::Transport(e.without_url().to_string()))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| ChatError::Transport(e.without_url().to_string()))?;
        if !status.is_success() {
            return Err(ChatError::Status {
                status: status.as_u16(),
                body: text.chars().take(MAX_ERROR_BODY).collect(),
            });
        }
        reply_of(&text)
    };
    tokio::time::timeout(turn.timeout, exchange)
        .await
        .map_err(|_| ChatError::Timeout(turn.timeout))?
}

/// `choices[0].message.content` of a chat-completions response.
fn reply_of(text: &str) -> Result<String, ChatError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| ChatError::Malformed(e.to_string()))?;
    value
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| ChatError::Malformed("no choices[0].message.content".into()))
}

/// The first non-empty line of a reply, at most 300 characters.
pub fn summary_of(reply: &str) -> String {
    reply
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
}

/// Replies that are only an acknowledgement are never sent to a channel.
pub fn is_silent(reply: &str) -> bool {
    matches!(reply.trim(), "" | "HEARTBEAT_OK" | "NO_REPLY")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_is_the_first_choice() {
        let text = r#"{"choices":[{"message":{"role":"assistant","content":"Hi"}}]}"#;
        assert_eq!(reply_of(text).unwrap(), "Hi");
        assert!(matches!(reply_of("{}"), Err(ChatError::Malformed(_))));
        assert!(matches!(reply_of("not json"), Err(ChatError::Malformed(_))));
    }

    #[test]
    fn summary_is_the_first_non_empty_line_cut_at_300() {
        assert_eq!(summary_of("\n\n  Build fixed.  \nDetails"), "Build fixed.");
        assert_eq!(summary_of(&"x".repeat(400)).len(), 300);
        assert_eq!(summary_of(""), "");
    }

    #[test]
    fn acknowledgements_are_silent() {
        assert!(is_silent(" HEARTBEAT_OK\n"));
        assert!(is_silent("NO_REPLY"));
        assert!(!is_silent("HEARTBEAT_OK but also this"));
    }
}
