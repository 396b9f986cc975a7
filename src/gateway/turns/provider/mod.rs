//! Model providers: one agent turn as one HTTP request, in the provider's wire format. OpenAI's
//! chat completions (`POST <baseUrl>/chat/completions`: OpenAI, Ollama, vLLM, llama.cpp,
//! OpenRouter, LiteLLM; `openai`) and Anthropic's Messages API (`POST <baseUrl>/v1/messages`;
//! `anthropic`), each request and answer a type of its own in its file. A failure
//! says whether another attempt, or another model, may do better ([`ChatError::is_transient`]).
//! An answer carries the tokens the provider says the turn used ([`Usage`]), when it says so.

pub use crate::gateway::store::turn_record::{Exchange, MAX_TURN_TOKENS, Usage};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::runtime::{Provider, WireFormat};
use crate::hook::Thinking;

mod anthropic;
mod openai;

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

/// Error bodies are cut to this many characters before they reach the run record.
const MAX_ERROR_BODY: usize = 500;

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
        WireFormat::OpenAiCompletions => openai::request(http, provider, turn),
        WireFormat::AnthropicMessages => anthropic::request(http, provider, turn),
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
        match provider.wire {
            WireFormat::OpenAiCompletions => openai::answer(&text),
            WireFormat::AnthropicMessages => anthropic::answer(&text),
        }
    };
    tokio::time::timeout(turn.timeout, exchange)
        .await
        .map_err(|_| ChatError::Timeout(turn.timeout))?
}

/// One message of the conversation, as both wire formats take it.
#[derive(Serialize)]
struct Message<'a> {
    role: Role,
    content: &'a str,
}

#[derive(Clone, Copy, Serialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Assistant,
}

/// A turn's conversation as both wire formats take it (`messages`): each exchange as a user and
/// an assistant message, then the prompt. Written straight from the turn, without a copy.
struct Conversation<'a> {
    history: &'a [Exchange],
    prompt: &'a str,
}

impl<'a> Conversation<'a> {
    fn of(turn: &ChatTurn<'a>) -> Conversation<'a> {
        Conversation {
            history: turn.history,
            prompt: turn.prompt,
        }
    }
}

impl Serialize for Conversation<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let history = self.history.iter().flat_map(|exchange| {
            [
                Message {
                    role: Role::User,
                    content: &exchange.prompt,
                },
                Message {
                    role: Role::Assistant,
                    content: &exchange.reply,
                },
            ]
        });
        let prompt = Message {
            role: Role::User,
            content: self.prompt,
        };
        serializer.collect_seq(history.chain([prompt]))
    }
}

/// An answer's body as `T`, or why it cannot be read.
fn parse<'de, T: Deserialize<'de>>(text: &'de str) -> Result<T, ChatError> {
    serde_json::from_str(text).map_err(|e| ChatError::Malformed(e.to_string()))
}

/// A field read when it has the documented type, and else taken as absent rather than making
/// the answer unreadable: a token count that is negative, fractional or a string counts for
/// nothing, and the reply still stands. For `#[serde(default, deserialize_with = "lenient")]`.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Lenient<T> {
        Read(T),
        Unread(serde::de::IgnoredAny),
    }
    Ok(match Lenient::deserialize(deserializer)? {
        Lenient::Read(value) => Some(value),
        Lenient::Unread(_) => None,
    })
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

    /// A turn of the prompt `p` to the model `m`, without history.
    pub(crate) fn turn(thinking: Option<Thinking>) -> ChatTurn<'static> {
        ChatTurn {
            model: "m",
            history: &[],
            prompt: "p",
            thinking,
            timeout: Duration::from_secs(1),
        }
    }

    /// `Some` usage of these counts.
    pub(crate) fn usage(input_tokens: u64, output_tokens: u64) -> Option<Usage> {
        Some(Usage {
            input_tokens,
            output_tokens,
        })
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
