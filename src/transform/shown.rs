//! A transform's outcome as `hookgate transform run` prints it: the transform's own words, as it
//! returned them (names not made canonical, texts not trimmed), so that its author sees what
//! the transform did rather than what hookgate made of it.

use std::borrow::Cow;

use serde::Serialize;

use super::bindings::types;
use super::call::{Returned, content_type_of};
use crate::hook::WakeMode;

impl Returned {
    /// The outcome as JSON, in the transform's own words: names as it spelled them, texts
    /// untrimmed, unset agent fields `null`, unset overrides left out.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(Shown::from(&self.0)).expect("a view of strings serialises")
    }
}

/// The printed outcome: `{"outcome": ...}` and what it carries.
#[derive(Serialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub(super) enum Shown<'a> {
    Run {
        action: ShownAction<'a>,
    },
    Keep,
    Skip,
    Respond {
        status: u16,
        #[serde(rename = "contentType")]
        content_type: Cow<'a, str>,
        body: Cow<'a, str>,
    },
    Merge {
        overrides: ShownOverrides<'a>,
    },
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(super) enum ShownAction<'a> {
    Wake {
        text: &'a str,
        mode: Option<WakeMode>,
    },
    Agent(ShownAgent<'a>),
}

/// Every field of an agent action, unset ones as `null`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ShownAgent<'a> {
    message: &'a str,
    name: Option<&'a str>,
    agent_id: Option<&'a str>,
    session_key: Option<&'a str>,
    wake_mode: Option<WakeMode>,
    deliver: Option<bool>,
    channel: Option<&'a str>,
    to: Option<&'a str>,
    model: Option<&'a str>,
    thinking: Option<&'a str>,
    timeout_seconds: Option<u32>,
}

/// The fields an override sets; an unset one is left out.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ShownOverrides<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<WakeMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wake_mode: Option<WakeMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_key_source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_mode: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deliver: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    allow_unsafe_external_content: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_seconds: Option<u32>,
}

impl<'a> From<&'a types::Outcome> for Shown<'a> {
    fn from(outcome: &'a types::Outcome) -> Self {
        match outcome {
            types::Outcome::Keep => Shown::Keep,
            types::Outcome::Skip => Shown::Skip,
            types::Outcome::Respond(reply) => Shown::Respond {
                status: reply.status,
                content_type: content_type_of(reply),
                body: String::from_utf8_lossy(&reply.body),
            },
            types::Outcome::Run(types::Action::Wake(wake)) => Shown::Run {
                action: ShownAction::Wake {
                    text: &wake.text,
                    mode: wake.mode.map(super::call::wake_mode),
                },
            },
            types::Outcome::Run(types::Action::Agent(a)) => Shown::Run {
                action: ShownAction::Agent(ShownAgent {
                    message: &a.message,
                    name: a.name.as_deref(),
                    agent_id: a.agent_id.as_deref(),
                    session_key: a.session_key.as_deref(),
                    wake_mode: a.wake_mode.map(super::call::wake_mode),
                    deliver: a.deliver,
                    channel: a.channel.as_deref(),
                    to: a.to.as_deref(),
                    model: a.model.as_deref(),
                    thinking: a.thinking.as_deref(),
                    timeout_seconds: a.timeout_seconds,
                }),
            },
            types::Outcome::Merge(o) => Shown::Merge {
                overrides: overrides(o),
            },
        }
    }
}

fn overrides(o: &types::Overrides) -> ShownOverrides<'_> {
    let fixed = o.session_key_source == Some(types::KeySource::Fixed);
    ShownOverrides {
        kind: o.kind.map(|kind| match kind {
            types::ActionKind::Wake => "wake",
            types::ActionKind::Agent => "agent",
        }),
        text: o.text.as_deref(),
        mode: o.mode.map(super::call::wake_mode),
        message: o.message.as_deref(),
        wake_mode: o.wake_mode.map(super::call::wake_mode),
        name: o.name.as_deref(),
        agent_id: o.agent_id.as_deref(),
        session_key: o.session_key.as_deref(),
        session_key_source: o
            .session_key
            .as_ref()
            .map(|_| if fixed { "static" } else { "templated" }),
        session_mode: o.session_mode.as_deref(),
        deliver: o.deliver,
        allow_unsafe_external_content: o.allow_unsafe_external_content,
        channel: o.channel.as_deref(),
        to: o.to.as_deref(),
        model: o.model.as_deref(),
        thinking: o.thinking.as_deref(),
        timeout_seconds: o.timeout_seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_list_what_they_set_as_the_transform_wrote_it() {
        let outcome = types::Outcome::Merge(types::Overrides {
            kind: Some(types::ActionKind::Agent),
            text: None,
            mode: None,
            message: None,
            wake_mode: Some(types::WakeMode::Now),
            name: None,
            agent_id: None,
            session_key: Some("k".into()),
            session_key_source: None,
            session_mode: Some("Fresh".into()),
            deliver: None,
            allow_unsafe_external_content: None,
            channel: Some("Telegram".into()),
            to: Some(" ".into()),
            model: None,
            thinking: Some("x-high".into()),
            timeout_seconds: Some(30),
        });
        let json = serde_json::to_string(&Shown::from(&outcome)).unwrap();
        assert_eq!(
            json,
            concat!(
                r#"{"outcome":"merge","overrides":{"kind":"agent","wakeMode":"now","#,
                r#""sessionKey":"k","sessionKeySource":"templated","sessionMode":"Fresh","#,
                r#""channel":"Telegram","to":" ","thinking":"x-high","timeoutSeconds":30}}"#,
            )
        );
    }
}
