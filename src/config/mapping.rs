//! A mapping as the file states it (`hooks.mappings[i]`), turned into a [`Mapping`]: its action,
//! match rule, templates and transform. What the mapping then does with a request is
//! `crate::mapping`'s; the limits and signature of its transform are settled in `settings`.

use serde_json::Value;

use super::model::MappingConfig;
use crate::hook::payload::timeout_seconds;
use crate::hook::{Channel, SessionMode, Thinking, WakeMode};
use crate::mapping::{ActionKind, Conditions, Mapping, ThinkingField, TransformSpec};

/// Builds the mapping at position `index` (0-based) of `hooks.mappings` from its entry in the file.
pub fn mapping(index: usize, config: &MappingConfig) -> Result<Mapping, String> {
    let kind = match config.action.as_deref().map(str::trim) {
        None | Some("agent") => ActionKind::Agent,
        Some("wake") => ActionKind::Wake,
        Some("notify") => ActionKind::Notify,
        // The value is not repeated: a configuration message never echoes one.
        Some(_) => return Err("action must be wake, agent or notify".into()),
    };
    let channel = config
        .channel
        .as_deref()
        .map(|channel| Channel::parse(channel).ok_or_else(|| Channel::EXPECTED.to_string()))
        .transpose()?;
    let thinking = thinking(config.thinking.as_deref())?;
    let trimmed = |s: &Option<String>| {
        s.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
    };
    let for_each = match config.for_each.as_deref().map(str::trim) {
        None => None,
        Some(key) if !key.is_empty() && !key.contains(['.', '[', ']']) => Some(key.to_string()),
        Some(_) => return Err("forEach must be a top-level payload key".into()),
    };
    let session_mode = match config.session_mode.as_deref() {
        None => SessionMode::Isolated,
        Some(mode) => SessionMode::parse(mode)
            .ok_or_else(|| "sessionMode must be isolated or persistent".to_string())?,
    };
    let strip_slashes = |s: &str| s.trim().trim_matches('/').to_string();
    let rule = config.match_rule.clone().unwrap_or_default();
    Ok(Mapping {
        id: trimmed(&config.id).unwrap_or_else(|| format!("mapping-{}", index + 1)),
        match_path: rule.path.as_deref().map(strip_slashes),
        match_source: rule.source.clone(),
        // Built with their keys by `conditions`, which reports each problem where it is.
        conditions: Conditions::default(),
        kind,
        wake_mode: config
            .wake_mode
            .as_deref()
            .and_then(WakeMode::from_wire)
            .unwrap_or(WakeMode::Now),
        name: config.name.clone(),
        agent_id: trimmed(&config.agent_id),
        session_key: config.session_key.clone(),
        message_template: config.message_template.clone(),
        text_template: config.text_template.clone(),
        deliver: config.deliver,
        channel,
        to: config.to.clone(),
        model: config.model.clone(),
        thinking,
        timeout_seconds: config
            .timeout_seconds
            .and_then(|t| timeout_seconds(Some(&Value::from(t)))),
        allow_unsafe_external_content: config.allow_unsafe_external_content,
        transform: config.transform.as_ref().map(|t| TransformSpec {
            module: t.module.trim().to_string(),
            config: t.config.as_ref().map(Value::to_string),
            export: t
                .export
                .as_deref()
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(String::from),
        }),
        is_email: false,
        signature: None,
        // Built with its key-named checks by `form::form_rule`.
        form: None,
        for_each,
        session_mode,
        // Built with its key-named checks by `batch::batch_rule`.
        batch: None,
        callback: config.callback.as_ref().map(|c| c.url.trim().to_string()),
    })
}

/// A `thinking` written out (no template) is read now, and refused now when it names no level; a
/// blank one is no level. A template is read once per request, after rendering.
fn thinking(text: Option<&str>) -> Result<Option<ThinkingField>, String> {
    let Some(text) = text else {
        return Ok(None);
    };
    if text.contains("{{") {
        return Ok(Some(ThinkingField::Template(text.to_string())));
    }
    if text.trim().is_empty() {
        return Ok(None);
    }
    let level = Thinking::parse(text).ok_or_else(|| Thinking::EXPECTED.to_string())?;
    Ok(Some(ThinkingField::Fixed(level)))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::mapping as mapping_of;
    use super::*;
    use crate::hook::{Named, WakeRequest};
    use crate::mapping::conditions::{PayloadCondition, PayloadTest};
    use crate::mapping::template::TemplateContext;
    use crate::mapping::*;

    fn mapping(index: usize, config: Value) -> Mapping {
        let config: MappingConfig = serde_json::from_value(config).unwrap();
        mapping_of(index, &config).unwrap()
    }

    fn budget() -> RenderBudget {
        RenderBudget::for_request(RenderLimit::FLOOR)
    }

    fn ctx<'a>(name: &'a str, payload: &'a Value) -> TemplateContext<'a> {
        TemplateContext {
            name,
            now: "2026-01-01T00:00:00.000Z",
            headers: &[],
            query: &[],
            payload,
        }
    }

    #[test]
    fn default_id_and_kind() {
        let m = mapping(2, json!({}));
        assert_eq!(m.id, "mapping-3");
        assert_eq!(m.kind, ActionKind::Agent);
    }

    #[test]
    fn unknown_action_is_refused() {
        let config: MappingConfig = serde_json::from_value(json!({"action": "poke"})).unwrap();
        assert!(mapping_of(0, &config).is_err());
    }

    #[test]
    fn match_path_strips_slashes() {
        let m = mapping(0, json!({"match": {"path": "/github/"}}));
        assert!(m.matches("github", &json!({})));
        assert!(!m.matches("gitlab", &json!({})));
    }

    #[test]
    fn match_source_reads_the_payload_string_field() {
        let m = mapping(0, json!({"match": {"source": "ci"}}));
        assert!(m.matches("anything", &json!({"source": "ci"})));
        assert!(!m.matches("anything", &json!({"source": "cd"})));
        assert!(!m.matches("anything", &json!({"source": 1})));
        assert!(!m.matches("anything", &json!({})));
    }

    #[test]
    fn both_rules_must_hold() {
        let m = mapping(0, json!({"match": {"path": "ingest", "source": "ci"}}));
        assert!(m.matches("ingest", &json!({"source": "ci"})));
        assert!(!m.matches("other", &json!({"source": "ci"})));
    }

    #[test]
    fn no_rules_match_every_name() {
        assert!(mapping(0, json!({})).matches("x", &json!([])));
    }

    /// Requests with no headers.
    struct NoHeaders;

    impl HeaderValues for NoHeaders {
        fn has_any(&self, _: &axum::http::HeaderName, _: &[String]) -> bool {
            false
        }
    }

    fn found<'a>(list: &'a [Mapping], name: &str, payload: Value) -> Selection<'a> {
        find(list, name, &NoHeaders, &payload)
    }

    #[test]
    fn first_match_wins() {
        let list = vec![
            mapping(0, json!({"id": "a", "match": {"path": "x"}})),
            mapping(1, json!({"id": "b"})),
        ];
        assert!(matches!(found(&list, "x", json!({})), Selection::Matched(m) if m.id == "a"));
        assert!(matches!(found(&list, "y", json!({})), Selection::Matched(m) if m.id == "b"));
    }

    #[test]
    fn a_mapping_whose_conditions_fail_lets_later_ones_try() {
        let mut list = vec![
            mapping(0, json!({"id": "a", "match": {"path": "x"}})),
            mapping(1, json!({"id": "b", "match": {"path": "x"}})),
        ];
        let opened = |pointer: &str| {
            let test = PayloadTest::AnyOf(vec![json!("opened")]);
            Conditions::new(vec![], vec![PayloadCondition::new(pointer, test).unwrap()])
        };
        list[0].conditions = opened("/action");
        list[1].conditions = opened("/state");
        let selected = |payload| match found(&list, "x", payload) {
            Selection::Matched(m) => m.id.clone(),
            Selection::Filtered(tried) => tried
                .iter()
                .map(|(m, unmet)| format!("{}: {unmet}", m.id))
                .collect::<Vec<_>>()
                .join(", "),
            Selection::Unmatched => "none".into(),
        };
        assert_eq!(
            selected(json!({"action": "opened", "state": "opened"})),
            "a"
        );
        assert_eq!(
            selected(json!({"action": "closed", "state": "opened"})),
            "b"
        );
        assert_eq!(selected(json!({})), "a: payload /action, b: payload /state");
        assert!(matches!(found(&list, "y", json!({})), Selection::Unmatched));
        assert!(
            !list[1].is_shadowed_by(&list[0]),
            "conditions shadow nothing"
        );
    }

    #[test]
    fn optional_fields_render_and_trim() {
        let m = mapping(
            0,
            json!({"name": " {{repo}} ", "sessionKey": "hook:{{id}}", "to": " ", "model": "{{missing}}"}),
        );
        let payload = json!({"repo": "hookgate", "id": 7});
        let action = m.render(&ctx("gh", &payload), &mut budget()).unwrap();
        assert_eq!(action.agent.name, "hookgate");
        assert_eq!(action.agent.session_key.as_deref(), Some("hook:7"));
        assert_eq!(action.agent.to, None);
        assert_eq!(action.agent.model, None);
    }

    #[test]
    fn wake_requires_text() {
        let m = mapping(0, json!({"action": "wake", "textTemplate": "{{nothing}}"}));
        let err = m
            .render(&ctx("x", &json!({})), &mut budget())
            .unwrap()
            .finish()
            .unwrap_err();
        assert_eq!(err.0, "hook mapping requires text");
    }

    #[test]
    fn agent_requires_message() {
        let m = mapping(0, json!({"messageTemplate": "  "}));
        let err = m
            .render(&ctx("x", &json!({})), &mut budget())
            .unwrap()
            .finish()
            .unwrap_err();
        assert_eq!(err.0, "hook mapping requires message");
    }

    #[test]
    fn gmail_preset_renders_exactly() {
        let gmail = preset("gmail").unwrap();
        let payload = json!({"messages": [{"id": "m1", "from": "a@b", "subject": "Hi", "snippet": "s", "body": "b"}]});
        let action = gmail
            .render(&ctx("gmail", &payload), &mut budget())
            .unwrap();
        assert_eq!(
            action.agent.message,
            "New email from a@b\nSubject: Hi\ns\nb"
        );
        assert_eq!(action.agent.session_key.as_deref(), Some("hook:gmail:m1"));
        assert_eq!(action.agent.name, "Gmail");
        assert_eq!(action.agent.wake_mode, WakeMode::Now);
        assert!(gmail.is_email);
        assert!(gmail.matches("gmail", &payload));
    }

    #[test]
    fn transform_wake_turns_an_agent_mapping_into_a_wake() {
        let m = mapping(
            0,
            json!({"messageTemplate": "m", "wakeMode": "next-heartbeat"}),
        );
        let action = m
            .render(&ctx("x", &json!({})), &mut budget())
            .unwrap()
            .overlay(TransformAction::Wake {
                text: "t".into(),
                mode: None,
            });
        let finished = action.finish().unwrap();
        assert_eq!(
            finished,
            FinishedAction::Wake(WakeRequest {
                text: "t".into(),
                mode: WakeMode::NextHeartbeat,
                agent_id: None,
                session_key: None,
            })
        );
    }

    #[test]
    fn transform_agent_fields_left_unset_take_the_mapping_values() {
        let m = mapping(
            0,
            json!({"action": "wake", "name": "CI", "channel": "slack", "to": "C1", "deliver": false}),
        );
        let agent = Overrides {
            message: Some("hello".into()),
            to: Some("C2".into()),
            ..Default::default()
        };
        let finished = m
            .render(&ctx("x", &json!({})), &mut budget())
            .unwrap()
            .overlay(TransformAction::Agent(Box::new(agent)))
            .finish()
            .unwrap();
        let FinishedAction::Agent {
            action: request, ..
        } = finished
        else {
            panic!("expected agent")
        };
        assert_eq!(request.message, "hello");
        assert_eq!(request.name, "CI");
        assert_eq!(request.channel, Some(Channel::Slack));
        assert_eq!(request.to.as_deref(), Some("C2"));
        assert!(!request.deliver);
    }

    #[test]
    fn transform_channel_must_be_known_and_is_checked_after_the_message() {
        let refusal = |message: &str| {
            let agent = Overrides {
                message: Some(message.into()),
                channel: Some(Named::Unknown("fax".into())),
                ..Default::default()
            };
            mapping(0, json!({}))
                .render(&ctx("x", &json!({})), &mut budget())
                .unwrap()
                .overlay(TransformAction::Agent(Box::new(agent)))
                .finish()
                .unwrap_err()
                .0
        };
        assert_eq!(refusal("m"), Channel::EXPECTED);
        assert_eq!(refusal(" "), "hook mapping requires message");
    }

    #[test]
    fn a_templated_thinking_is_read_after_rendering() {
        let m = mapping(0, json!({"messageTemplate": "m", "thinking": "{{level}}"}));
        let level = |payload: Value| {
            m.render(&ctx("x", &payload), &mut budget())
                .unwrap()
                .agent
                .thinking
        };
        assert_eq!(level(json!({"level": "Extra High"})), Some(Thinking::Xhigh));
        assert_eq!(level(json!({"level": "big"})), None);
        assert_eq!(level(json!({})), None);
    }

    #[test]
    fn a_static_thinking_level_is_checked_at_load_and_a_template_at_request() {
        let config = |thinking: &str| -> MappingConfig {
            serde_json::from_value(json!({"thinking": thinking})).unwrap()
        };
        assert_eq!(
            mapping_of(0, &config("big")).unwrap_err(),
            Thinking::EXPECTED
        );
        assert!(mapping_of(0, &config("High")).is_ok());
        assert!(mapping_of(0, &config("{{payload.level}}")).is_ok());
    }
}
