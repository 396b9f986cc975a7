//! Any JSON into a wake or an agent action, driven by `transform.config`:
//!
//! ```json
//! { "action": "wake" | "agent", "field": "/alert/summary", "prefix": "Alert: ",
//!   "name": "Monitoring", "channel": "telegram", "to": "12345", "deliver": true, "mode": "now" }
//! ```
//!
//! `field` is a JSON pointer into the body (default: the whole body, as compact JSON); strings
//! are used as they are, other values as JSON. Every key is optional; `action` defaults to `agent`.

use serde_json::Value;

wit_bindgen::generate!({ path: "../../wit", world: "transform" });

use exports::hookgate::transform::handler::Guest;
use hookgate::transform::types::{Action, Agent, Outcome, Request, Wake, WakeMode};

struct Passthrough;

impl Guest for Passthrough {
    fn transform(req: Request) -> Result<Outcome, String> {
        let config: Value = match req.config.as_deref() {
            Some(text) => serde_json::from_str(text).map_err(|e| format!("config: {e}"))?,
            None => Value::Null,
        };
        let body: Value =
            serde_json::from_slice(&req.body).map_err(|e| format!("body is not JSON: {e}"))?;
        let text = extract(&config, &body)?;
        let get = |key: &str| config.get(key).and_then(Value::as_str).map(String::from);
        let mode = get("mode").map(|m| match m.as_str() {
            "next-heartbeat" => WakeMode::NextHeartbeat,
            _ => WakeMode::Now,
        });
        Ok(Outcome::Run(match get("action").as_deref() {
            Some("wake") => Action::Wake(Wake { text, mode }),
            _ => Action::Agent(Agent {
                message: text,
                name: get("name"),
                agent_id: get("agentId"),
                session_key: get("sessionKey"),
                wake_mode: mode,
                deliver: config.get("deliver").and_then(Value::as_bool),
                channel: get("channel"),
                to: get("to"),
                model: get("model"),
                thinking: get("thinking"),
                timeout_seconds: None,
            }),
        }))
    }
}

// Native builds (the crate's unit tests) leave the component's exports out: their symbol names
// (`hookgate:transform/handler@0.2.0#transform`) are not valid in a native linker's version script.
#[cfg(target_family = "wasm")]
export!(Passthrough);

/// The text of the action: `prefix` + the value at `field`. Pure, so it is tested natively.
pub fn extract(config: &Value, body: &Value) -> Result<String, String> {
    let value = match config.get("field").and_then(Value::as_str) {
        Some(pointer) => body
            .pointer(pointer)
            .ok_or_else(|| format!("the body has nothing at {pointer}"))?,
        None => body,
    };
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let prefix = config.get("prefix").and_then(Value::as_str).unwrap_or("");
    Ok(format!("{prefix}{text}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_body_by_default() {
        assert_eq!(
            extract(&Value::Null, &json!({"a": 1})).unwrap(),
            r#"{"a":1}"#
        );
    }

    #[test]
    fn field_and_prefix() {
        let config = json!({"field": "/alert/summary", "prefix": "Alert: "});
        let body = json!({"alert": {"summary": "disk full"}});
        assert_eq!(extract(&config, &body).unwrap(), "Alert: disk full");
    }

    #[test]
    fn missing_field_is_an_error() {
        assert!(extract(&json!({"field": "/nope"}), &json!({})).is_err());
    }
}
