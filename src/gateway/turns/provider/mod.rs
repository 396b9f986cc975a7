//! Model providers: one agent turn as one HTTP request, in the provider's wire format. OpenAI's
//! chat completions (`POST <baseUrl>/chat/completions`: OpenAI, Ollama, vLLM, llama.cpp,
//! OpenRouter, LiteLLM) and Anthropic's Messages API (`POST <baseUrl>/v1/messages`). A failure
//! says whether another attempt, or another model, may do better ([`ChatError::is_transient`]).
//! An answer carries the tokens the provider says the turn used ([`Usage`]), when it says so.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::config::runtime::{Provider, WireFormat};
use crate::hook::Thinking;

/// Why a turn produced no reply. Its text follows the provider's name in a run's error
/// (`provider <name> answered 503: ...`), and never holds the request's URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// An answer other than a success, with the wait its `Retry-After` asked for (in seconds;
    /// an HTTP date is not read).
    #[error("answered {status}: {body}")]
    Status {
        status: u16,
        body: String,
        retry_after: Option<Duration>,
    },
    #[error("sent a malformed response: {0}")]
    Malformed(String),
    /// No answer: the cause in a few words (`connection refused`, `connection reset`, ...).
    #[error("unreachable: {0}")]
    Transport(String),
}

impl ChatError {
    /// Whether the same request may succeed later or elsewhere: a timeout, no answer, 408, 429
    /// or a 5xx. A refusal (another 4xx) or an answer that cannot be read is not.
    pub fn is_transient(&self) -> bool {
        match self {
            ChatError::Timeout(_) | ChatError::Transport(_) => true,
            ChatError::Status { status, .. } => matches!(status, 408 | 429 | 500..=599),
            ChatError::Malformed(_) => false,
        }
    }

    /// The wait the provider asked for before the next call, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ChatError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A request that got no answer, with its cause: the innermost error under reqwest's (an
    /// OS error by its kind, `connection refused`), which names no URL.
    fn transport(err: reqwest::Error) -> ChatError {
        if err.is_timeout() {
            return ChatError::Transport("timed out".into());
        }
        let err = err.without_url();
        let mut cause: &dyn std::error::Error = &err;
        while let Some(source) = cause.source() {
            cause = source;
        }
        let detail = match cause.downcast_ref::<std::io::Error>() {
            Some(io) if io.kind() != std::io::ErrorKind::Other => io.kind().to_string(),
            _ => cause.to_string(),
        };
        ChatError::Transport(detail)
    }
}

/// The wait an answer's `Retry-After` asks for, in whole seconds.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// What one turn asks for.
#[derive(Debug, Clone)]
pub struct ChatTurn<'a> {
    /// The model name as the provider knows it (without a `<provider>/` prefix).
    pub model: &'a str,
    /// Earlier exchanges of the conversation, oldest first: sent before `prompt`.
    pub history: &'a [Exchange],
    pub prompt: &'a str,
    pub thinking: Option<Thinking>,
    pub timeout: Duration,
}

/// One earlier exchange of a persistent session: what the agent was given and what it replied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub prompt: String,
    pub reply: String,
}

/// The conversation as both wire formats take it: each exchange as a user and an assistant
/// message, then the prompt.
fn messages(turn: &ChatTurn<'_>) -> Value {
    let mut messages: Vec<Value> = turn
        .history
        .iter()
        .flat_map(|exchange| {
            [
                json!({"role": "user", "content": exchange.prompt}),
                json!({"role": "assistant", "content": exchange.reply}),
            ]
        })
        .collect();
    messages.push(json!({"role": "user", "content": turn.prompt}));
    Value::Array(messages)
}

/// Error bodies are cut to this many characters before they reach the run record.
const MAX_ERROR_BODY: usize = 500;

/// The `anthropic-version` header the Messages API requires.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Output tokens of an Anthropic turn, besides its thinking budget.
const ANTHROPIC_MAX_TOKENS: u64 = 4096;

/// The tokens one turn used, as its provider reported them.
///
/// `input_tokens` is every token the model read: the chat-completions `usage.prompt_tokens`
/// (which counts cached tokens among them), or on the Messages API `usage.input_tokens` plus its
/// `cache_creation_input_tokens` and `cache_read_input_tokens` (which it counts apart).
/// `output_tokens` is `completion_tokens` or `output_tokens`, thinking included.
/// Each count is at most [`MAX_TURN_TOKENS`]: a provider reporting more is counted that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The most tokens one turn is counted for, in each direction: a hundred million, far above
/// any model's context window. A provider that reports more (a bug, or a hostile one) is
/// counted this, with a warning in the log, so that the sums of a window's runs (budgets'
/// `tokensPerDay`, `GET /api/spend`) stay far from `i64::MAX`, which SQLite's `SUM()` may not
/// pass: it would take 92 billion such turns.
pub const MAX_TURN_TOKENS: u64 = 100_000_000;

/// A provider's answer to one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub reply: String,
    /// `None` when the provider reported no usage (a local server may not).
    pub usage: Option<Usage>,
}

/// Sends `turn` to `provider`; returns the reply's text and the tokens it used.
pub async fn complete(
    http: &reqwest::Client,
    provider: &Provider,
    turn: &ChatTurn<'_>,
) -> Result<Answer, ChatError> {
    let request = match provider.wire {
        WireFormat::OpenAiCompletions => {
            let request = http
                .post(format!("{}/chat/completions", provider.base_url))
                .json(&openai_body(turn));
            match &provider.api_key {
                Some(key) => request.bearer_auth(key),
                None => request,
            }
        }
        WireFormat::AnthropicMessages => {
            let base = &provider.base_url;
            let url = match base.strip_suffix("/v1") {
                Some(_) => format!("{base}/messages"),
                None => format!("{base}/v1/messages"),
            };
            let request = http
                .post(url)
                .header("anthropic-version", ANTHROPIC_VERSION)
                .json(&anthropic_body(turn));
            match &provider.api_key {
                Some(key) => request.header("x-api-key", key),
                None => request,
            }
        }
    };
    let exchange = async {
        let response = request.send().await.map_err(ChatError::transport)?;
        let status = response.status();
        let asked = retry_after(response.headers());
        let text = response.text().await.map_err(ChatError::transport)?;
        if !status.is_success() {
            return Err(ChatError::Status {
                status: status.as_u16(),
                body: text.chars().take(MAX_ERROR_BODY).collect(),
                retry_after: asked,
            });
        }
        let value: Value =
            serde_json::from_str(&text).map_err(|e| ChatError::Malformed(e.to_string()))?;
        let (reply, usage) = match provider.wire {
            WireFormat::OpenAiCompletions => (openai_reply(&value)?, openai_usage(&value)),
            WireFormat::AnthropicMessages => (anthropic_reply(&value)?, anthropic_usage(&value)),
        };
        Ok(Answer { reply, usage })
    };
    tokio::time::timeout(turn.timeout, exchange)
        .await
        .map_err(|_| ChatError::Timeout(turn.timeout))?
}

/// A chat-completions request; thinking as `reasoning_effort`.
fn openai_body(turn: &ChatTurn<'_>) -> Value {
    let mut body = json!({
        "model": turn.model,
        "messages": messages(turn),
    });
    let effort = match turn.thinking {
        Some(Thinking::Minimal) => Some("minimal"),
        Some(Thinking::Low) => Some("low"),
        Some(Thinking::Medium) => Some("medium"),
        Some(Thinking::High | Thinking::Max) => Some("high"),
        Some(Thinking::Xhigh) => Some("xhigh"),
        // Off, adaptive or none: the model's own default.
        Some(Thinking::Off | Thinking::Adaptive) | None => None,
    };
    if let Some(effort) = effort {
        body["reasoning_effort"] = json!(effort);
    }
    body
}

/// The thinking budget, in tokens, of a level on the Messages API.
fn anthropic_budget(thinking: Thinking) -> Option<u64> {
    match thinking {
        Thinking::Off | Thinking::Adaptive => None,
        Thinking::Minimal => Some(1024),
        Thinking::Low => Some(4096),
        Thinking::Medium => Some(10_000),
        Thinking::High => Some(16_000),
        // With `max_tokens` 4096 above it, within the 32k output of every current model.
        Thinking::Xhigh => Some(24_000),
        Thinking::Max => Some(27_904),
    }
}

/// A Messages API request; thinking as `thinking` with a token budget (`max_tokens` above it),
/// or adaptive.
fn anthropic_body(turn: &ChatTurn<'_>) -> Value {
    let mut body = json!({
        "model": turn.model,
        "max_tokens": ANTHROPIC_MAX_TOKENS,
        "messages": messages(turn),
    });
    match turn.thinking {
        Some(Thinking::Adaptive) => body["thinking"] = json!({"type": "adaptive"}),
        Some(level) => {
            if let Some(budget) = anthropic_budget(level) {
                body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
                body["max_tokens"] = json!(budget + ANTHROPIC_MAX_TOKENS);
            }
        }
        None => {}
    }
    body
}

/// `choices[0].message.content` of a chat-completions response.
fn openai_reply(value: &Value) -> Result<String, ChatError> {
    value
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| ChatError::Malformed("no choices[0].message.content".into()))
}

/// The text blocks of a Messages API response, in order (thinking blocks left out).
fn anthropic_reply(value: &Value) -> Result<String, ChatError> {
    let blocks = value["content"]
        .as_array()
        .ok_or_else(|| ChatError::Malformed("no content".into()))?;
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|block| block["type"] == "text")
        .filter_map(|block| block["text"].as_str())
        .collect();
    if texts.is_empty() {
        return Err(ChatError::Malformed("no text block in content".into()));
    }
    Ok(texts.concat())
}

/// A count of `usage`, when it is a non-negative integer.
fn count(usage: &Value, name: &str) -> Option<u64> {
    usage.get(name).and_then(Value::as_u64)
}

/// `reported` tokens (of the usage field `name`), at most [`MAX_TURN_TOKENS`]; a count past it
/// is logged, with the field and the count (a number: nothing of the prompt or reply).
fn bounded(reported: u64, name: &str) -> u64 {
    if reported > MAX_TURN_TOKENS {
        tracing::warn!(
            field = name,
            reported,
            counted = MAX_TURN_TOKENS,
            "provider reported more tokens than a turn can use: counted as the bound"
        );
    }
    reported.min(MAX_TURN_TOKENS)
}

/// `usage.prompt_tokens` and `usage.completion_tokens` of a chat-completions response, each
/// [`bounded`]; `None` unless both are there (an answer without usage is not one of zero
/// tokens).
fn openai_usage(value: &Value) -> Option<Usage> {
    let usage = value.get("usage")?;
    let input = count(usage, "prompt_tokens")?;
    let output = count(usage, "completion_tokens")?;
    Some(Usage {
        input_tokens: bounded(input, "prompt_tokens"),
        output_tokens: bounded(output, "completion_tokens"),
    })
}

/// `usage.input_tokens` (with the cache's input tokens, counted apart there) and
/// `usage.output_tokens` of a Messages API response, each [`bounded`]; `None` unless the two
/// are there.
fn anthropic_usage(value: &Value) -> Option<Usage> {
    let usage = value.get("usage")?;
    let cached = ["cache_creation_input_tokens", "cache_read_input_tokens"]
        .iter()
        .filter_map(|name| count(usage, name))
        .fold(0u64, u64::saturating_add);
    let input = count(usage, "input_tokens")?.saturating_add(cached);
    let output = count(usage, "output_tokens")?;
    Some(Usage {
        input_tokens: bounded(input, "input_tokens"),
        output_tokens: bounded(output, "output_tokens"),
    })
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

/// The token a heartbeat reply starts or ends with when nothing needs attention.
pub const HEARTBEAT_OK: &str = "HEARTBEAT_OK";

/// Whether a reply is only an acknowledgement, never sent to a channel: empty, `NO_REPLY`, or
/// starting or ending with `HEARTBEAT_OK` with at most `ack_max_chars` characters besides
/// (`agents.defaults.heartbeat.ackMaxChars`), as the OpenClaw gateway decides it.
pub fn is_acknowledgement(reply: &str, ack_max_chars: usize) -> bool {
    let reply = reply.trim();
    if reply.is_empty() || reply == "NO_REPLY" {
        return true;
    }
    // The token as a word: `HEARTBEAT_OKAY` is not it.
    let word = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
    let rest = reply
        .strip_prefix(HEARTBEAT_OK)
        .filter(|rest| word(rest.chars().next()))
        .or_else(|| {
            reply
                .strip_suffix(HEARTBEAT_OK)
                .filter(|rest| word(rest.chars().next_back()))
        });
    rest.is_some_and(|rest| rest.trim().chars().count() <= ack_max_chars)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(thinking: Option<Thinking>) -> ChatTurn<'static> {
        ChatTurn {
            model: "m",
            history: &[],
            prompt: "p",
            thinking,
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn openai_reply_is_the_first_choice() {
        let value = json!({"choices": [{"message": {"role": "assistant", "content": "Hi"}}]});
        assert_eq!(openai_reply(&value).unwrap(), "Hi");
        assert!(matches!(
            openai_reply(&json!({})),
            Err(ChatError::Malformed(_))
        ));
    }

    #[test]
    fn anthropic_reply_joins_the_text_blocks_without_thinking() {
        let value = json!({"content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "Hi "},
            {"type": "text", "text": "there"},
        ]});
        assert_eq!(anthropic_reply(&value).unwrap(), "Hi there");
        let none = json!({"content": [{"type": "thinking", "thinking": "hmm"}]});
        assert!(matches!(
            anthropic_reply(&none),
            Err(ChatError::Malformed(_))
        ));
    }

    #[test]
    fn usage_is_read_from_each_wire_format() {
        let usage = |input_tokens, output_tokens| {
            Some(Usage {
                input_tokens,
                output_tokens,
            })
        };
        let openai = json!({"usage": {"prompt_tokens": 120, "completion_tokens": 30,
                                      "total_tokens": 150}});
        assert_eq!(openai_usage(&openai), usage(120, 30));
        // The Messages API counts cached input apart: all of it was read.
        let anthropic = json!({"usage": {"input_tokens": 10, "output_tokens": 7,
                                         "cache_creation_input_tokens": 100,
                                         "cache_read_input_tokens": 1000}});
        assert_eq!(anthropic_usage(&anthropic), usage(1110, 7));
        let plain = json!({"usage": {"input_tokens": 10, "output_tokens": 7}});
        assert_eq!(anthropic_usage(&plain), usage(10, 7));
    }

    #[test]
    fn a_turns_usage_is_counted_at_most_the_bound() {
        let absurd = 9_000_000_000_000_000_000u64;
        let openai = json!({"usage": {"prompt_tokens": absurd, "completion_tokens": u64::MAX}});
        let bound = Some(Usage {
            input_tokens: MAX_TURN_TOKENS,
            output_tokens: MAX_TURN_TOKENS,
        });
        assert_eq!(openai_usage(&openai), bound);
        // Parts each within the bound whose sum is not, and a sum past u64::MAX.
        let anthropic = json!({"usage": {"input_tokens": MAX_TURN_TOKENS,
                                         "cache_read_input_tokens": u64::MAX,
                                         "output_tokens": absurd}});
        assert_eq!(anthropic_usage(&anthropic), bound);
        let at_bound = json!({"usage": {"prompt_tokens": MAX_TURN_TOKENS, "completion_tokens": 1}});
        assert_eq!(
            openai_usage(&at_bound).unwrap().input_tokens,
            MAX_TURN_TOKENS
        );
    }

    #[test]
    fn missing_or_unreadable_usage_is_not_reported() {
        assert_eq!(openai_usage(&json!({})), None);
        assert_eq!(openai_usage(&json!({"usage": null})), None);
        assert_eq!(
            openai_usage(&json!({"usage": {"prompt_tokens": 5}})),
            None,
            "half a usage is not one"
        );
        assert_eq!(
            openai_usage(&json!({"usage": {"prompt_tokens": -1, "completion_tokens": 2}})),
            None
        );
        assert_eq!(
            anthropic_usage(&json!({"usage": {"output_tokens": "7", "input_tokens": 1}})),
            None
        );
        // Each format's own names only.
        assert_eq!(
            anthropic_usage(&json!({"usage": {"prompt_tokens": 1, "completion_tokens": 2}})),
            None
        );
    }

    #[test]
    fn thinking_maps_to_each_wire_formats_control() {
        assert_eq!(
            openai_body(&turn(Some(Thinking::Low)))["reasoning_effort"],
            "low"
        );
        assert_eq!(
            openai_body(&turn(Some(Thinking::Off))).get("reasoning_effort"),
            None
        );
        let body = anthropic_body(&turn(Some(Thinking::Medium)));
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 10_000})
        );
        assert_eq!(body["max_tokens"], 14_096);
        assert_eq!(anthropic_body(&turn(None)).get("thinking"), None);
        assert_eq!(
            anthropic_body(&turn(Some(Thinking::Adaptive)))["thinking"],
            json!({"type": "adaptive"})
        );
    }

    #[test]
    fn timeouts_throttling_and_outages_are_transient_refusals_are_not() {
        let status = |status| ChatError::Status {
            status,
            body: String::new(),
            retry_after: None,
        };
        assert!(status(429).is_transient() && status(503).is_transient());
        assert!(!status(400).is_transient() && !status(401).is_transient());
        assert!(ChatError::Timeout(Duration::ZERO).is_transient());
        assert!(!ChatError::Malformed(String::new()).is_transient());
    }

    #[test]
    fn summary_is_the_first_non_empty_line_cut_at_300() {
        assert_eq!(summary_of("\n\n  Build fixed.  \nDetails"), "Build fixed.");
        assert_eq!(summary_of(&"x".repeat(400)).len(), 300);
        assert_eq!(summary_of(""), "");
    }

    #[test]
    fn acknowledgements_start_or_end_with_the_token_and_say_little_else() {
        assert!(is_acknowledgement(" HEARTBEAT_OK\n", 300));
        assert!(is_acknowledgement("HEARTBEAT_OK.", 300));
        assert!(is_acknowledgement("All quiet. HEARTBEAT_OK", 300));
        assert!(is_acknowledgement("NO_REPLY", 300));
        assert!(!is_acknowledgement("HEARTBEAT_OK but also this", 10));
        assert!(!is_acknowledgement(
            &format!("HEARTBEAT_OK {}", "x".repeat(301)),
            300
        ));
        assert!(!is_acknowledgement("The deploy failed.", 300));
        assert!(!is_acknowledgement(
            "HEARTBEAT_OKAY, but the disk is full",
            300
        ));
        assert!(!is_acknowledgement("NOTHEARTBEAT_OK", 300));
    }
}
