//! OpenAI's chat completions (`POST <baseUrl>/chat/completions`, spoken as well by Ollama, vLLM,
//! llama.cpp, OpenRouter and LiteLLM): the request a turn sends, and the parts of the answer read
//! (the first choice's text, its finish reason, the usage).
//! Reference: <https://platform.openai.com/docs/api-reference/chat/create>.

use serde::{Deserialize, Serialize};

use super::{Answer, ChatError, ChatTurn, Conversation, Usage, bounded, lenient, parse};
use crate::config::runtime::Provider;
use crate::hook::Thinking;

/// The body of a chat-completions request; thinking as `reasoning_effort`.
#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    messages: Conversation<'a>,
    /// Left out for the model's own default.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<Effort>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Effort {
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
}

impl<'a> Request<'a> {
    fn of(turn: &ChatTurn<'a>) -> Request<'a> {
        let reasoning_effort = match turn.thinking {
            Some(Thinking::Minimal) => Some(Effort::Minimal),
            Some(Thinking::Low) => Some(Effort::Low),
            Some(Thinking::Medium) => Some(Effort::Medium),
            Some(Thinking::High | Thinking::Max) => Some(Effort::High),
            Some(Thinking::Xhigh) => Some(Effort::Xhigh),
            // Off, adaptive or none: the model's own default.
            Some(Thinking::Off | Thinking::Adaptive) | None => None,
        };
        Request {
            model: turn.model,
            messages: Conversation::of(turn),
            reasoning_effort,
        }
    }
}

/// `turn` as a request to `provider`, with its API key as a bearer token.
pub(super) fn request(
    http: &reqwest::Client,
    provider: &Provider,
    turn: &ChatTurn<'_>,
) -> reqwest::RequestBuilder {
    let request = http
        .post(format!("{}/chat/completions", provider.base_url))
        .json(&Request::of(turn));
    match &provider.api_key {
        Some(key) => request.bearer_auth(key),
        None => request,
    }
}

/// A chat-completions answer, as far as it is read.
#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default, deserialize_with = "lenient")]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<AssistantMessage>,
    /// `stop`, `length`, `content_filter`, ...: named when there is no text.
    #[serde(default, deserialize_with = "lenient")]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct AssistantMessage {
    /// `null` when the model answered otherwise (a refusal, a tool call).
    #[serde(default)]
    content: Option<String>,
}

/// `usage`: `prompt_tokens` counts the cached tokens among them.
#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "lenient")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    completion_tokens: Option<u64>,
}

impl WireUsage {
    /// Each count [`bounded`]; `None` unless both are there (an answer without usage is not one
    /// of zero tokens).
    fn usage(&self) -> Option<Usage> {
        Some(Usage {
            input_tokens: bounded(self.prompt_tokens?, "prompt_tokens"),
            output_tokens: bounded(self.completion_tokens?, "completion_tokens"),
        })
    }
}

/// The answer in `text`: `choices[0].message.content` and the usage, if reported.
pub(super) fn answer(text: &str) -> Result<Answer, ChatError> {
    let response: Response = parse(text)?;
    let usage = response.usage.as_ref().and_then(WireUsage::usage);
    let (content, finish_reason) = match response.choices.into_iter().next() {
        Some(first) => (first.message.and_then(|m| m.content), first.finish_reason),
        None => (None, None),
    };
    match content {
        Some(reply) => Ok(Answer { reply, usage }),
        None => Err(ChatError::Malformed(match finish_reason {
            Some(reason) => format!("no choices[0].message.content (finish_reason {reason})"),
            None => "no choices[0].message.content".into(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;
    use crate::gateway::turns::provider::tests::{turn, usage};
    use crate::gateway::turns::provider::{Exchange, MAX_TURN_TOKENS};

    fn body(turn: &ChatTurn<'_>) -> String {
        serde_json::to_string(&Request::of(turn)).unwrap()
    }

    #[test]
    fn the_request_is_the_documented_body() {
        // The example of https://platform.openai.com/docs/guides/reasoning (its prompt
        // shortened), after an exchange as the reference's `messages` take one
        // (https://platform.openai.com/docs/api-reference/chat/create): a `user` and an
        // `assistant` message, each with its `role` and `content`.
        let documented: Value = serde_json::from_str(
            r#"{
                "model": "o4-mini",
                "reasoning_effort": "medium",
                "messages": [
                    {"role": "user", "content": "Hello!"},
                    {"role": "assistant", "content": "Hello! How can I assist you today?"},
                    {"role": "user", "content": "Write a bash script that prints the date."}
                ]
            }"#,
        )
        .unwrap();
        let history = [Exchange {
            prompt: "Hello!".into(),
            reply: "Hello! How can I assist you today?".into(),
        }];
        let turn = ChatTurn {
            model: "o4-mini",
            history: &history,
            prompt: "Write a bash script that prints the date.",
            thinking: Some(Thinking::Medium),
            timeout: Duration::from_secs(1),
        };
        let ours: Value = serde_json::from_str(&body(&turn)).unwrap();
        assert_eq!(ours, documented);
    }

    #[test]
    fn the_body_is_the_bytes_sent_before_it_was_typed() {
        assert_eq!(
            body(&turn(Some(Thinking::Max))),
            r#"{"model":"m","messages":[{"role":"user","content":"p"}],"reasoning_effort":"high"}"#
        );
        assert_eq!(
            body(&turn(Some(Thinking::Off))),
            r#"{"model":"m","messages":[{"role":"user","content":"p"}]}"#
        );
        assert_eq!(
            body(&turn(Some(Thinking::Adaptive))),
            body(&turn(None)),
            "adaptive is the model's default"
        );
    }

    #[test]
    fn the_documented_answer_is_read() {
        // The response example of https://platform.openai.com/docs/api-reference/chat/create.
        let documented = r#"{
            "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
            "object": "chat.completion",
            "created": 1741569952,
            "model": "gpt-4.1-2025-04-14",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "Hello! How can I assist you today?",
                        "refusal": null,
                        "annotations": []
                    },
                    "logprobs": null,
                    "finish_reason": "stop"
                }
            ],
            "usage": {
                "prompt_tokens": 19,
                "completion_tokens": 10,
                "total_tokens": 29,
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {
                    "reasoning_tokens": 0,
                    "audio_tokens": 0,
                    "accepted_prediction_tokens": 0,
                    "rejected_prediction_tokens": 0
                }
            },
            "service_tier": "default"
        }"#;
        assert_eq!(
            answer(documented).unwrap(),
            Answer {
                reply: "Hello! How can I assist you today?".into(),
                usage: usage(19, 10),
            }
        );
    }

    #[test]
    fn no_text_is_malformed_and_names_the_finish_reason() {
        let refused = json!({"choices": [{"index": 0, "finish_reason": "content_filter",
            "message": {"role": "assistant", "content": null, "refusal": "I can't help"}}]});
        assert_eq!(
            answer(&refused.to_string()),
            Err(ChatError::Malformed(
                "no choices[0].message.content (finish_reason content_filter)".into()
            ))
        );
        for none in [json!({}), json!({"choices": []}), json!({"choices": [{}]})] {
            assert_eq!(
                answer(&none.to_string()),
                Err(ChatError::Malformed("no choices[0].message.content".into())),
                "{none}"
            );
        }
        assert!(matches!(answer("{not json"), Err(ChatError::Malformed(_))));
    }

    /// The answer to `usage`, with a reply.
    fn usage_of(usage: Value) -> Option<Usage> {
        let text = json!({"choices": [{"message": {"content": "Hi"}}], "usage": usage});
        let answer = answer(&text.to_string()).unwrap();
        assert_eq!(answer.reply, "Hi", "a usage never costs the reply");
        answer.usage
    }

    #[test]
    fn usage_is_counted_at_most_the_bound() {
        let absurd = 9_000_000_000_000_000_000u64;
        assert_eq!(
            usage_of(json!({"prompt_tokens": absurd, "completion_tokens": u64::MAX})),
            usage(MAX_TURN_TOKENS, MAX_TURN_TOKENS)
        );
        assert_eq!(
            usage_of(json!({"prompt_tokens": MAX_TURN_TOKENS, "completion_tokens": 1})),
            usage(MAX_TURN_TOKENS, 1)
        );
    }

    #[test]
    fn missing_or_unreadable_usage_is_not_reported() {
        assert_eq!(usage_of(Value::Null), None);
        assert_eq!(usage_of(json!("lots")), None);
        assert_eq!(
            usage_of(json!({"prompt_tokens": 5})),
            None,
            "half a usage is not one"
        );
        for unreadable in [json!(-1), json!(2.5), json!("7"), json!({"n": 1})] {
            assert_eq!(
                usage_of(json!({"prompt_tokens": unreadable, "completion_tokens": 2})),
                None,
                "{unreadable}"
            );
        }
        // The Messages API's names are not this format's.
        assert_eq!(
            usage_of(json!({"input_tokens": 1, "output_tokens": 2})),
            None
        );
    }
}
