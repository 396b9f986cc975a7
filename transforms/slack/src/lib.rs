//! Slack Events API: answers the `url_verification` handshake with its challenge, and turns
//! human messages into agent runs whose replies go back to the same Slack channel.
//!
//! Messages from bots and message subtypes (edits, joins, deletions) are skipped, so that the
//! agent's own replies never loop back into it.

use serde_json::{Value, json};

wit_bindgen::generate!({ path: "../../wit", world: "transform" });

use exports::hookgate::transform::handler::Guest;
use hookgate::transform::types::{Action, Agent, Outcome, Reply, Request};

/// What to do with one Slack request.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Answer the handshake with this challenge.
    Challenge(String),
    /// Run the agent on `message`, replying in `channel`.
    Message {
        message: String,
        channel: String,
    },
    Skip,
}

struct Slack;

impl Guest for Slack {
    fn transform(req: Request) -> Result<Outcome, String> {
        let payload: Value =
            serde_json::from_slice(&req.body).map_err(|e| format!("body is not JSON: {e}"))?;
        Ok(match describe(&payload) {
            Decision::Challenge(challenge) => Outcome::Respond(Reply {
                status: 200,
                content_type: Some("application/json".into()),
                body: json!({ "challenge": challenge }).to_string().into_bytes(),
            }),
            Decision::Message { message, channel } => Outcome::Run(Action::Agent(Agent {
                message,
                name: Some("Slack".into()),
                agent_id: None,
                session_key: None,
                wake_mode: None,
                deliver: Some(true),
                channel: Some("slack".into()),
                to: Some(channel),
                model: None,
                thinking: None,
                timeout_seconds: None,
            })),
            Decision::Skip => Outcome::Skip,
        })
    }
}

// Native builds (the crate's unit tests) leave the component's exports out: their symbol names
// (`hookgate:transform/handler@0.2.0#transform`) are not valid in a native linker's version script.
#[cfg(target_family = "wasm")]
export!(Slack);

/// Decides what a Slack request means. Pure, so it is tested natively.
pub fn describe(p: &Value) -> Decision {
    let str_at = |pointer: &str| p.pointer(pointer).and_then(Value::as_str);
    match str_at("/type") {
        Some("url_verification") => match str_at("/challenge") {
            Some(challenge) => Decision::Challenge(challenge.to_string()),
            None => Decision::Skip,
        },
        Some("event_callback") => {
            let event = &p["event"];
            let human = event.get("bot_id").is_none() && event.get("subtype").is_none();
            let kind = event["type"].as_str();
            match (
                kind,
                human,
                event["text"].as_str(),
                event["channel"].as_str(),
            ) {
                (Some("message" | "app_mention"), true, Some(text), Some(channel)) => {
                    let user = event["user"].as_str().unwrap_or("someone");
                    Decision::Message {
                        message: format!("Slack message from <@{user}> in <#{channel}>:\n{text}"),
                        channel: channel.to_string(),
                    }
                }
                _ => Decision::Skip,
            }
        }
        _ => Decision::Skip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_verification_answers_the_challenge() {
        let p = json!({"type": "url_verification", "challenge": "3eZbrw1aB"});
        assert_eq!(describe(&p), Decision::Challenge("3eZbrw1aB".into()));
    }

    #[test]
    fn human_message_becomes_an_agent_run_in_its_channel() {
        let p = json!({"type": "event_callback", "event": {"type": "message", "user": "U1", "channel": "C9", "text": "deploy?"}});
        assert_eq!(
            describe(&p),
            Decision::Message {
                message: "Slack message from <@U1> in <#C9>:\ndeploy?".into(),
                channel: "C9".into()
            }
        );
    }

    #[test]
    fn bot_messages_are_skipped() {
        let p = json!({"type": "event_callback", "event": {"type": "message", "bot_id": "B1", "channel": "C9", "text": "hi"}});
        assert_eq!(describe(&p), Decision::Skip);
    }

    #[test]
    fn message_subtypes_are_skipped() {
        let p = json!({"type": "event_callback", "event": {"type": "message", "subtype": "message_changed", "channel": "C9", "text": "x"}});
        assert_eq!(describe(&p), Decision::Skip);
    }

    #[test]
    fn other_types_are_skipped() {
        assert_eq!(
            describe(&json!({"type": "app_rate_limited"})),
            Decision::Skip
        );
    }
}
