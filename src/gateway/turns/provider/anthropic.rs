//! Anthropic's Messages API (`POST <baseUrl>/v1/messages`): the request a turn sends, and the
//! parts of the answer read (its text blocks, its stop reason, the usage with the cache's).
//! Reference: <https://docs.anthropic.com/en/api/messages>.

use serde::{Deserialize, Serialize};

use super::{Answer, ChatError, ChatTurn, Conversation, Usage, bounded, lenient, parse};
use crate::config::runtime::Provider;
use crate::hook::Thinking;

/// The `anthropic-version` header the Messages API requires.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Output tokens of a turn, besides its thinking budget.
const MAX_TOKENS: u64 = 4096;

/// The body of a Messages API request; thinking as `thinking` with a token budget (`max_tokens`
/// above it), or adaptive.
#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    max_tokens: u64,
    messages: Conversation<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<ThinkingControl>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum ThinkingControl {
    Enabled { budget_tokens: u64 },
    Adaptive,
}

/// The thinking budget, in tokens, of a level.
fn budget(thinking: Thinking) -> Option<u64> {
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

impl<'a> Request<'a> {
    fn of(turn: &ChatTurn<'a>) -> Request<'a> {
        let thinking = match turn.thinking {
            Some(Thinking::Adaptive) => Some(ThinkingControl::Adaptive),
            Some(level) => {
                budget(level).map(|budget_tokens| ThinkingControl::Enabled { budget_tokens })
            }
            None => None,
        };
        let max_tokens = match thinking {
            Some(ThinkingControl::Enabled { budget_tokens }) => budget_tokens + MAX_TOKENS,
            _ => MAX_TOKENS,
        };
        Request {
            model: turn.model,
            max_tokens,
            messages: Conversation::of(turn),
            thinking,
        }
    }
}

/// `turn` as a request to `provider` (`<baseUrl>/messages` when the base URL already ends in
/// `/v1`), with its API key as `x-api-key`.
pub(super) fn request(
    http: &reqwest::Client,
    provider: &Provider,
    turn: &ChatTurn<'_>,
) -> reqwest::RequestBuilder {
    let base = &provider.base_url;
    let url = match base.strip_suffix("/v1") {
        Some(_) => format!("{base}/messages"),
        None => format!("{base}/v1/messages"),
    };
    let request = http
        .post(url)
        .header("anthropic-version", ANTHROPIC_VERSION)
        .json(&Request::of(turn));
    match &provider.api_key {
        Some(key) => request.header("x-api-key", key),
        None => request,
    }
}

/// A Messages API answer, as far as it is read.
#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    content: Option<Vec<Block>>,
    /// `end_turn`, `max_tokens`, ...: named when there is no text.
    #[serde(default, deserialize_with = "lenient")]
    stop_reason: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    usage: Option<WireUsage>,
}

/// A content block: its text when it is a text block (thinking and tool blocks are not read).
#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type", default, deserialize_with = "lenient")]
    kind: Option<BlockKind>,
    #[serde(default, deserialize_with = "lenient")]
    text: Option<String>,
}

#[derive(Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum BlockKind {
    Text,
    #[serde(other)]
    Other,
}

/// `usage`: the Messages API counts the cache's input tokens apart from `input_tokens`.
#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "lenient")]
    input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    output_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Every token read (`input_tokens` and the cache's) and `output_tokens`, each [`bounded`];
    /// `None` unless the two are there.
    fn usage(&self) -> Option<Usage> {
        let cached = [
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        ]
        .into_iter()
        .flatten()
        .fold(0u64, u64::saturating_add);
        let input = self.input_tokens?.saturating_add(cached);
        Some(Usage {
            input_tokens: bounded(input, "input_tokens"),
            output_tokens: bounded(self.output_tokens?, "output_tokens"),
        })
    }
}

/// The answer in `text`: its text blocks joined in order, and the usage, if reported.
pub(super) fn answer(text: &str) -> Result<Answer, ChatError> {
    let response: Response = parse(text)?;
    let usage = response.usage.as_ref().and_then(WireUsage::usage);
    let blocks = response
        .content
        .ok_or_else(|| ChatError::Malformed("no content".into()))?;
    let mut texts = blocks
        .into_iter()
        .filter(|block| block.kind == Some(BlockKind::Text))
        .filter_map(|block| block.text)
        .peekable();
    // No text block at all; an empty one is a reply (of nothing to say).
    if texts.peek().is_none() {
        return Err(ChatError::Malformed(match response.stop_reason {
            Some(reason) => format!("no text block in content (stop_reason {reason})"),
            None => "no text block in content".into(),
        }));
    }
    let reply = texts.collect();
    Ok(Answer { reply, usage })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::gateway::turns::provider::MAX_TURN_TOKENS;
    use crate::gateway::turns::provider::tests::{turn, usage};

    fn body(turn: &ChatTurn<'_>) -> String {
        serde_json::to_string(&Request::of(turn)).unwrap()
    }

    #[test]
    fn the_request_is_the_documented_body() {
        // The request example of https://docs.anthropic.com/en/api/messages, but for
        // `max_tokens`: ours is 4096.
        let documented: Value = serde_json::from_str(
            r#"{
                "model": "claude-sonnet-4-20250514",
                "max_tokens": 1024,
                "messages": [{"role": "user", "content": "Hello, world"}]
            }"#,
        )
        .unwrap();
        let turn = ChatTurn {
            model: "claude-sonnet-4-20250514",
            prompt: "Hello, world",
            ..turn(None)
        };
        let mut ours: Value = serde_json::from_str(&body(&turn)).unwrap();
        assert_eq!(ours["max_tokens"], MAX_TOKENS);
        ours["max_tokens"] = json!(1024);
        assert_eq!(ours, documented);
    }

    #[test]
    fn thinking_is_the_documented_control_with_max_tokens_above_its_budget() {
        // The request example of
        // https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking, but for
        // `max_tokens`: ours is the budget and 4096 above it.
        let documented: Value = serde_json::from_str(
            r#"{
                "model": "claude-sonnet-4-20250514",
                "max_tokens": 16000,
                "thinking": {"type": "enabled", "budget_tokens": 10000},
                "messages": [{"role": "user", "content": "Are there an infinite number of prime numbers such that n mod 4 == 3?"}]
            }"#,
        )
        .unwrap();
        let turn = ChatTurn {
            model: "claude-sonnet-4-20250514",
            prompt: "Are there an infinite number of prime numbers such that n mod 4 == 3?",
            ..turn(Some(Thinking::Medium))
        };
        let mut ours: Value = serde_json::from_str(&body(&turn)).unwrap();
        assert_eq!(ours["max_tokens"], 14_096);
        ours["max_tokens"] = json!(16000);
        assert_eq!(ours, documented);
    }

    #[test]
    fn the_body_is_the_bytes_sent_before_it_was_typed() {
        assert_eq!(
            body(&turn(Some(Thinking::Medium))),
            r#"{"model":"m","max_tokens":14096,"messages":[{"role":"user","content":"p"}],"thinking":{"type":"enabled","budget_tokens":10000}}"#
        );
        assert_eq!(
            body(&turn(Some(Thinking::Adaptive))),
            r#"{"model":"m","max_tokens":4096,"messages":[{"role":"user","content":"p"}],"thinking":{"type":"adaptive"}}"#
        );
        assert_eq!(body(&turn(Some(Thinking::Off))), body(&turn(None)));
        assert_eq!(
            body(&turn(None)),
            r#"{"model":"m","max_tokens":4096,"messages":[{"role":"user","content":"p"}]}"#
        );
    }

    #[test]
    fn the_documented_answer_is_read() {
        // The response example of https://docs.anthropic.com/en/api/messages.
        let documented = r#"{
            "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "Hi! My name is Claude."}],
            "model": "claude-sonnet-4-20250514",
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {"input_tokens": 2095, "output_tokens": 503}
        }"#;
        assert_eq!(
            answer(documented).unwrap(),
            Answer {
                reply: "Hi! My name is Claude.".into(),
                usage: usage(2095, 503),
            }
        );
    }

    #[test]
    fn the_text_blocks_are_joined_without_thinking() {
        // The response of https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking,
        // with a second text block.
        let documented = r#"{
            "content": [
                {
                    "type": "thinking",
                    "thinking": "Let me analyze this step by step...",
                    "signature": "WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve/op91XWHOEBLLqIOMfFG/UvLEczmEsUjavL...."
                },
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
                {"type": "text", "text": "Based on my analysis... "},
                {"type": "text", "text": "Yes."}
            ]
        }"#;
        let answer = answer(documented).unwrap();
        assert_eq!(answer.reply, "Based on my analysis... Yes.");
        assert_eq!(answer.usage, None);
    }

    #[test]
    fn no_text_is_malformed_and_names_the_stop_reason() {
        let cut = json!({"content": [{"type": "thinking", "thinking": "hmm"}],
                         "stop_reason": "max_tokens"});
        assert_eq!(
            answer(&cut.to_string()),
            Err(ChatError::Malformed(
                "no text block in content (stop_reason max_tokens)".into()
            ))
        );
        assert_eq!(
            answer(r#"{"content": []}"#),
            Err(ChatError::Malformed("no text block in content".into()))
        );
        for none in [json!({}), json!({"content": null})] {
            assert_eq!(
                answer(&none.to_string()),
                Err(ChatError::Malformed("no content".into()))
            );
        }
        let empty = json!({"content": [{"type": "text", "text": ""}]});
        assert_eq!(answer(&empty.to_string()).unwrap().reply, "");
    }

    /// The answer to `usage`, with a reply.
    fn usage_of(usage: Value) -> Option<Usage> {
        let text = json!({"content": [{"type": "text", "text": "Hi"}], "usage": usage});
        let answer = answer(&text.to_string()).unwrap();
        assert_eq!(answer.reply, "Hi", "a usage never costs the reply");
        answer.usage
    }

    #[test]
    fn the_caches_input_is_counted_as_read() {
        // The usage of https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching: the
        // cache's input tokens are counted apart from `input_tokens`; all of them were read.
        let documented = json!({"input_tokens": 21, "cache_creation_input_tokens": 188086,
                                "cache_read_input_tokens": 0, "output_tokens": 393});
        assert_eq!(usage_of(documented), usage(188_107, 393));
        assert_eq!(
            usage_of(json!({"input_tokens": 10, "output_tokens": 7})),
            usage(10, 7)
        );
    }

    #[test]
    fn usage_is_counted_at_most_the_bound() {
        // Parts each within the bound whose sum is not, and a sum past u64::MAX.
        let parts = json!({"input_tokens": MAX_TURN_TOKENS, "cache_read_input_tokens": u64::MAX,
                           "output_tokens": 9_000_000_000_000_000_000u64});
        assert_eq!(usage_of(parts), usage(MAX_TURN_TOKENS, MAX_TURN_TOKENS));
    }

    #[test]
    fn missing_or_unreadable_usage_is_not_reported() {
        assert_eq!(usage_of(Value::Null), None);
        assert_eq!(
            usage_of(json!({"output_tokens": "7", "input_tokens": 1})),
            None
        );
        // The chat-completions names are not this format's.
        assert_eq!(
            usage_of(json!({"prompt_tokens": 1, "completion_tokens": 2})),
            None
        );
        // An unreadable cache count is none.
        assert_eq!(
            usage_of(json!({"input_tokens": 1, "output_tokens": 2,
                            "cache_read_input_tokens": -5})),
            usage(1, 2)
        );
    }
}
