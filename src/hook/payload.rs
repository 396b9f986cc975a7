//! Normalising the JSON bodies of `/wake` and `/agent` into [`WakeRequest`] and [`AgentRequest`],
//! with the field rules and error texts of docs/http-contract.md, checked in their stated order.

use serde_json::Value;

use super::Rejected;
use super::action::{
    AgentAction, AgentRequest, Channel, SessionMode, Thinking, WakeMode, WakeRequest,
};

/// The fields a body's rules read, each a slot filled by [`read`]: a struct of `Option<&Value>`
/// whose `slot` maps a field's name to its place.
trait Fields<'a>: Default {
    /// Where the value of the field `name` goes; `None` for a field the rules do not read.
    fn slot(&mut self, name: &str) -> Option<&mut Option<&'a Value>>;
}

/// The fields `F` reads from a body, in one pass over its object; all absent for a body that is
/// not an object (an array, say). A field looked up by name hashes the name (SipHash, for
/// serde_json's ordered map), which for an agent's dozen names cost several times this pass.
fn read<'a, F: Fields<'a>>(payload: &'a Value) -> F {
    let mut fields = F::default();
    for (name, value) in payload.as_object().into_iter().flatten() {
        if let Some(slot) = fields.slot(name) {
            *slot = Some(value);
        }
    }
    fields
}

#[derive(Default)]
struct WakeFields<'a> {
    text: Option<&'a Value>,
    mode: Option<&'a Value>,
    agent_id: Option<&'a Value>,
    session_key: Option<&'a Value>,
}

impl<'a> Fields<'a> for WakeFields<'a> {
    fn slot(&mut self, name: &str) -> Option<&mut Option<&'a Value>> {
        Some(match name {
            "text" => &mut self.text,
            "mode" => &mut self.mode,
            "agentId" => &mut self.agent_id,
            "sessionKey" => &mut self.session_key,
            _ => return None,
        })
    }
}

#[derive(Default)]
struct AgentFields<'a> {
    wait_for_completion: Option<&'a Value>,
    message: Option<&'a Value>,
    name: Option<&'a Value>,
    agent_id: Option<&'a Value>,
    session_key: Option<&'a Value>,
    wake_mode: Option<&'a Value>,
    session_mode: Option<&'a Value>,
    channel: Option<&'a Value>,
    model: Option<&'a Value>,
    deliver: Option<&'a Value>,
    to: Option<&'a Value>,
    thinking: Option<&'a Value>,
    timeout_seconds: Option<&'a Value>,
}

impl<'a> Fields<'a> for AgentFields<'a> {
    fn slot(&mut self, name: &str) -> Option<&mut Option<&'a Value>> {
        Some(match name {
            "waitForCompletion" => &mut self.wait_for_completion,
            "message" => &mut self.message,
            "name" => &mut self.name,
            "agentId" => &mut self.agent_id,
            "sessionKey" => &mut self.session_key,
            "wakeMode" => &mut self.wake_mode,
            "sessionMode" => &mut self.session_mode,
            "channel" => &mut self.channel,
            "model" => &mut self.model,
            "deliver" => &mut self.deliver,
            "to" => &mut self.to,
            "thinking" => &mut self.thinking,
            "timeoutSeconds" => &mut self.timeout_seconds,
            _ => return None,
        })
    }
}

/// A string field, trimmed; `None` when absent, not a string or blank.
fn non_blank(value: Option<&Value>) -> Option<&str> {
    value
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// `POST /wake`: `text` is required (trimmed, non-blank); `mode` defaults to `now`.
pub fn wake_request(payload: &Value) -> Result<WakeRequest, Rejected> {
    let fields: WakeFields = read(payload);
    let text = non_blank(fields.text).ok_or_else(|| Rejected::new("text required"))?;
    let mode = WakeMode::from_json(fields.mode);
    let agent_id = present_non_blank(fields.agent_id, "agentId")?;
    let session_key = present_non_blank(fields.session_key, "sessionKey")?;
    if session_key.is_some() && mode == WakeMode::NextHeartbeat {
        return Err(Rejected::new("sessionKey requires mode=now"));
    }
    Ok(WakeRequest {
        text: text.to_string(),
        mode,
        agent_id,
        session_key,
    })
}

/// A field that may be absent but, when present, must be a non-blank string (trimmed): else
/// `<key> must be a non-empty string`, as the OpenClaw gateway words it.
fn present_non_blank(value: Option<&Value>, key: &str) -> Result<Option<String>, Rejected> {
    match value {
        None => Ok(None),
        Some(_) => non_blank(value)
            .map(|value| Some(value.to_string()))
            .ok_or_else(|| Rejected::new(format!("{key} must be a non-empty string"))),
    }
}

/// `POST /agent`: every field rule of docs/http-contract.md up to, not including, the policies.
pub fn agent_request(payload: &Value) -> Result<AgentRequest, Rejected> {
    let fields: AgentFields = read(payload);
    let wait_for_completion = match fields.wait_for_completion {
        None => false,
        Some(Value::Bool(wait)) => *wait,
        Some(_) => return Err(Rejected::new("waitForCompletion must be boolean")),
    };
    let message = non_blank(fields.message).ok_or_else(|| Rejected::new("message required"))?;
    let owned = |value| non_blank(value).map(str::to_string);
    let agent_id = present_non_blank(fields.agent_id, "agentId")?;
    let session_mode = match fields.session_mode {
        None => SessionMode::Isolated,
        Some(mode) => mode
            .as_str()
            .and_then(SessionMode::parse)
            .ok_or_else(|| Rejected::new("sessionMode must be isolated or persistent"))?,
    };
    let action = AgentAction {
        message: message.to_string(),
        name: owned(fields.name).unwrap_or_else(|| super::DEFAULT_NAME.to_string()),
        agent_id,
        session_key: owned(fields.session_key),
        wake_mode: WakeMode::from_json(fields.wake_mode),
        session_mode,
        channel: channel(fields.channel)?,
        model: model(fields.model)?,
        deliver: !matches!(fields.deliver, Some(Value::Bool(false))),
        to: owned(fields.to),
        thinking: thinking(owned(fields.thinking)),
        // As the OpenClaw gateway reads a request's own: 0 asks for nothing, so the default
        // applies (a mapping's 0 is the cap, docs/configuration.md#models-and-providers).
        timeout_seconds: timeout_seconds(fields.timeout_seconds).filter(|&t| t > 0),
    };
    Ok(AgentRequest {
        action,
        wait_for_completion,
    })
}

/// Absent stays absent (admission makes it `last`); present, it must be a string naming a channel
/// (`null` included in "present").
pub fn channel(value: Option<&Value>) -> Result<Option<Channel>, Rejected> {
    value
        .map(|v| {
            v.as_str()
                .and_then(Channel::parse)
                .ok_or_else(|| Rejected::new(Channel::EXPECTED))
        })
        .transpose()
}

/// Absent stays absent; present (`null` included), it must be a non-blank string.
fn model(value: Option<&Value>) -> Result<Option<String>, Rejected> {
    value
        .map(|_| {
            non_blank(value)
                .map(str::to_string)
                .ok_or_else(|| Rejected::new("model required"))
        })
        .transpose()
}

/// A finite number greater than zero, floored; anything else is absent.
pub fn timeout_seconds(value: Option<&Value>) -> Option<u64> {
    let seconds = value?.as_f64()?;
    if seconds == 0.0 {
        return Some(0);
    }
    // At least a second: 0.5 must not floor to "no time at all". `as` saturates, so 1e300
    // becomes u64::MAX rather than wrapping.
    (seconds.is_finite() && seconds > 0.0).then(|| (seconds.floor() as u64).max(1))
}

/// The level a `thinking` names; one that names none is no level, so that the run uses the
/// default, as the OpenClaw gateway runs it (docs/configuration.md#models-and-providers).
pub fn thinking(value: Option<String>) -> Option<Thinking> {
    value.as_deref().and_then(Thinking::parse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn agent(v: Value) -> Result<AgentAction, Rejected> {
        agent_request(&v).map(|request| request.action)
    }

    #[test]
    fn wake_text_required_and_trimmed() {
        assert_eq!(wake_request(&json!({})).unwrap_err().0, "text required");
        assert_eq!(
            wake_request(&json!({"text": "  "})).unwrap_err().0,
            "text required"
        );
        assert_eq!(
            wake_request(&json!({"text": 5})).unwrap_err().0,
            "text required"
        );
        assert_eq!(
            wake_request(&json!({"text": " Ping "})).unwrap().text,
            "Ping"
        );
    }

    #[test]
    fn wake_mode_is_next_heartbeat_only_for_that_exact_string() {
        let mode = |m: Value| wake_request(&json!({"text": "x", "mode": m})).unwrap().mode;
        assert_eq!(mode(json!("next-heartbeat")), WakeMode::NextHeartbeat);
        assert_eq!(mode(json!("Next-Heartbeat")), WakeMode::Now);
        assert_eq!(mode(json!(1)), WakeMode::Now);
    }

    #[test]
    fn array_body_has_no_fields() {
        assert_eq!(
            wake_request(&json!([{"text": "x"}])).unwrap_err().0,
            "text required"
        );
    }

    #[test]
    fn agent_message_checked_first() {
        let err = agent(json!({"channel": "nope", "model": ""})).unwrap_err();
        assert_eq!(err.0, "message required");
    }

    #[test]
    fn agent_defaults() {
        let req = agent(json!({"message": " hi "})).unwrap();
        assert_eq!(req.message, "hi");
        assert_eq!(req.name, "Hook");
        assert_eq!(req.channel, None);
        assert!(req.deliver);
        assert_eq!(req.wake_mode, WakeMode::Now);
        assert_eq!((req.agent_id, req.session_key, req.to), (None, None, None));
    }

    #[test]
    fn blank_optional_strings_are_absent_but_a_blank_agent_id_is_refused() {
        let req = agent(json!({"message": "m", "name": " ", "to": 3})).unwrap();
        assert_eq!(req.name, "Hook");
        assert_eq!(req.agent_id, None);
        assert_eq!(req.to, None);
        // As the OpenClaw gateway: an agentId given must be a non-empty string.
        let err = agent(json!({"message": "m", "agentId": ""})).unwrap_err();
        assert_eq!(err.0, "agentId must be a non-empty string");
    }

    #[test]
    fn channel_null_is_rejected() {
        let err = agent(json!({"message": "m", "channel": null})).unwrap_err();
        assert_eq!(err.0, Channel::EXPECTED);
    }

    #[test]
    fn channel_is_case_insensitive_with_imsg_alias() {
        let ch = |c: &str| {
            agent(json!({"message": "m", "channel": c}))
                .unwrap()
                .channel
        };
        assert_eq!(ch("Telegram"), Some(Channel::Telegram));
        assert_eq!(ch("IMSG"), Some(Channel::Imessage));
    }

    #[test]
    fn channel_checked_before_model() {
        let err = agent(json!({"message": "m", "channel": "fax", "model": ""})).unwrap_err();
        assert_eq!(err.0, Channel::EXPECTED);
    }

    #[test]
    fn present_model_must_be_non_blank() {
        for bad in [json!(""), json!(null), json!(7)] {
            let err = agent(json!({"message": "m", "model": bad})).unwrap_err();
            assert_eq!(err.0, "model required");
        }
    }

    #[test]
    fn deliver_is_false_only_for_json_false() {
        let d = |v: Value| {
            agent(json!({"message": "m", "deliver": v}))
                .unwrap()
                .deliver
        };
        assert!(!d(json!(false)));
        assert!(d(json!("false")));
        assert!(d(json!(0)));
    }

    #[test]
    fn a_request_timeout_of_zero_is_the_default() {
        let t = |v: Value| agent(json!({"message": "m", "timeoutSeconds": v})).unwrap();
        assert_eq!(t(json!(0)).timeout_seconds, None);
        assert_eq!(t(json!(0.5)).timeout_seconds, Some(1));
        assert_eq!(t(json!(30)).timeout_seconds, Some(30));
    }

    #[test]
    fn timeout_is_floored_to_at_least_a_second_and_zero_means_the_cap() {
        assert_eq!(timeout_seconds(Some(&json!(12.9))), Some(12));
        assert_eq!(timeout_seconds(Some(&json!(0.5))), Some(1));
        assert_eq!(timeout_seconds(Some(&json!(0))), Some(0));
        assert_eq!(timeout_seconds(Some(&json!(-3))), None);
        assert_eq!(timeout_seconds(Some(&json!("10"))), None);
        assert_eq!(timeout_seconds(Some(&json!(1e300))), Some(u64::MAX));
    }

    #[test]
    fn thinking_that_names_no_level_is_the_default() {
        let t = |v: Value| agent(json!({"message": "m", "thinking": v}));
        assert_eq!(t(json!("High")).unwrap().thinking, Some(Thinking::High));
        assert_eq!(
            t(json!("extra high")).unwrap().thinking,
            Some(Thinking::Xhigh)
        );
        assert_eq!(t(json!(" ")).unwrap().thinking, None);
        assert_eq!(t(json!("big")).unwrap().thinking, None);
    }
}
