//! A [`NewRun`]'s serde form, the wire format of NATS messages: one flat snake-case object with
//! the keys in the order the version before `NewRun` contained the action wrote them, so that
//! those records still read and new ones are written the same.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::records::NewRun;
use crate::config::lanes::Priority;
use crate::hook::envelope::ContentSource;
use crate::hook::{AdmittedRun, AgentAction, Channel, SessionMode, Thinking, WakeMode};

/// What is stored of a run: neither the requested session key nor whether the key was chosen
/// nor `allow_unsafe_external_content` (those decide admission and the relay, and read back
/// unset); the channel as `last` when none was named. Written borrowed from a [`NewRun`], so that
/// publishing a run copies no string; read owned (serde reads a `Cow<str>` as owned).
#[derive(Serialize, Deserialize)]
pub(in crate::gateway) struct StoredRun<'a> {
    run_id: Cow<'a, str>,
    hook_name: Cow<'a, str>,
    agent_id: Option<Cow<'a, str>>,
    target_agent: Cow<'a, str>,
    session_key: Cow<'a, str>,
    message: Cow<'a, str>,
    prompt: Cow<'a, str>,
    deliver: bool,
    channel: Channel,
    to: Option<Cow<'a, str>>,
    model: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "Thinking::deserialize_lenient")]
    thinking: Option<Thinking>,
    /// `Some(0)`: no limit but the hard cap.
    timeout_seconds: Option<u64>,
    wake_mode: WakeMode,
    source: ContentSource,
    created_at: Cow<'a, str>,
    /// Absent from runs written before there were session modes: those were isolated.
    #[serde(default)]
    session_mode: SessionMode,
    /// Absent for `POST /hooks/agent` runs and runs written before mappings were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mapping_id: Option<Cow<'a, str>>,
    /// Absent for `normal` runs and runs written before there were lanes.
    #[serde(default, skip_serializing_if = "is_normal")]
    priority: Priority,
}

fn is_normal(priority: &Priority) -> bool {
    *priority == Priority::Normal
}

/// Writes the run as its borrowed [`StoredRun`].
impl Serialize for NewRun {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        StoredRun::from(self).serialize(serializer)
    }
}

/// Reads the run from a [`StoredRun`], taking its strings over.
impl<'de> Deserialize<'de> for NewRun {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        StoredRun::deserialize(deserializer).map(NewRun::from)
    }
}

impl<'a> From<&'a NewRun> for StoredRun<'a> {
    fn from(run: &'a NewRun) -> Self {
        let AdmittedRun {
            action,
            target_agent,
            session_key,
            source,
            mapping_id,
            ..
        } = &run.admitted;
        StoredRun {
            run_id: Cow::Borrowed(&run.run_id),
            hook_name: Cow::Borrowed(&action.name),
            agent_id: action.agent_id.as_deref().map(Cow::Borrowed),
            target_agent: Cow::Borrowed(target_agent),
            session_key: Cow::Borrowed(session_key),
            message: Cow::Borrowed(&action.message),
            prompt: Cow::Borrowed(&run.prompt),
            deliver: action.deliver,
            channel: run.channel(),
            to: action.to.as_deref().map(Cow::Borrowed),
            model: action.model.as_deref().map(Cow::Borrowed),
            thinking: action.thinking,
            timeout_seconds: action.timeout_seconds,
            wake_mode: action.wake_mode,
            source: *source,
            created_at: Cow::Borrowed(&run.created_at),
            session_mode: action.session_mode,
            mapping_id: mapping_id.as_deref().map(Cow::Borrowed),
            priority: run.priority,
        }
    }
}

impl From<StoredRun<'static>> for NewRun {
    fn from(run: StoredRun<'static>) -> Self {
        let action = AgentAction {
            message: run.message.into_owned(),
            name: run.hook_name.into_owned(),
            agent_id: run.agent_id.map(Cow::into_owned),
            session_key: None,
            wake_mode: run.wake_mode,
            deliver: run.deliver,
            channel: Some(run.channel),
            to: run.to.map(Cow::into_owned),
            model: run.model.map(Cow::into_owned),
            thinking: run.thinking,
            timeout_seconds: run.timeout_seconds,
            session_mode: run.session_mode,
        };
        let admitted = AdmittedRun {
            action,
            target_agent: run.target_agent.into_owned(),
            session_key: run.session_key.into_owned(),
            session_key_chosen: false,
            source: run.source,
            allow_unsafe_external_content: false,
            mapping_id: run.mapping_id.map(Cow::into_owned),
        };
        NewRun {
            priority: run.priority,
            ..NewRun::admitted(
                run.run_id.into_owned(),
                admitted,
                run.prompt.into_owned(),
                run.created_at.into_owned(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A run exactly as the version before `NewRun` contained the action wrote it.
    const WRITTEN_BEFORE: &str = concat!(
        r#"{"run_id":"r1","hook_name":"GitHub","agent_id":"ops","target_agent":"ops","#,
        r#""session_key":"hook:gh:1","message":"m","prompt":"p","deliver":false,"#,
        r#""channel":"last","to":null,"model":"a/b","thinking":"high","timeout_seconds":30,"#,
        r#""wake_mode":"next-heartbeat","source":"email","#,
        r#""created_at":"2026-01-01T00:00:00.000Z","session_mode":"persistent"}"#,
    );

    #[test]
    fn a_run_is_written_as_before() {
        let run: NewRun = serde_json::from_str(WRITTEN_BEFORE).unwrap();
        assert_eq!(run.action().name, "GitHub");
        assert_eq!(run.channel(), Channel::Last);
        assert_eq!(run.admitted.session_key, "hook:gh:1");
        assert_eq!(serde_json::to_string(&run).unwrap(), WRITTEN_BEFORE);
    }

    /// A run of a mapping's `high` lane, with no channel named, exactly as the version before the
    /// run's forms were derived from its types wrote it: the channel resolved to `last`, the
    /// mapping and the priority last.
    const WRITTEN_WITH_A_LANE: &str = concat!(
        r#"{"run_id":"r2","hook_name":"Hook","agent_id":null,"target_agent":"main","#,
        r#""session_key":"hook:x","message":"m","prompt":"p","deliver":true,"#,
        r#""channel":"last","to":"+1","model":null,"thinking":null,"timeout_seconds":null,"#,
        r#""wake_mode":"now","source":"webhook","created_at":"2026-01-01T00:00:00.000Z","#,
        r#""session_mode":"isolated","mapping_id":"github","priority":"high"}"#,
    );

    #[test]
    fn a_run_of_a_lane_is_written_as_before() {
        let mut run = crate::gateway::store::runs::tests::run("r2");
        let action = &mut run.admitted.action;
        (action.channel, action.to, action.timeout_seconds) = (None, Some("+1".into()), None);
        run.admitted.mapping_id = Some("github".into());
        run.priority = Priority::High;
        assert_eq!(serde_json::to_string(&run).unwrap(), WRITTEN_WITH_A_LANE);
        let read: NewRun = serde_json::from_str(WRITTEN_WITH_A_LANE).unwrap();
        assert_eq!(read.priority, Priority::High);
        assert_eq!(read.admitted, run.into_stored().admitted);
    }

    #[test]
    fn runs_written_before_session_modes_and_typed_levels_still_read() {
        let mut old: serde_json::Value = serde_json::from_str(WRITTEN_BEFORE).unwrap();
        let fields = old.as_object_mut().unwrap();
        fields.remove("session_mode");
        fields.insert("thinking".into(), json!("extra high"));
        let run: NewRun = serde_json::from_value(old).unwrap();
        assert_eq!(run.action().session_mode, SessionMode::Isolated);
        assert_eq!(run.action().thinking, Some(Thinking::Xhigh));
    }

    #[test]
    fn the_admitting_mapping_travels_with_the_run() {
        let mut run: NewRun = serde_json::from_str(WRITTEN_BEFORE).unwrap();
        assert_eq!(run.admitted.mapping_id, None);
        run.admitted.mapping_id = Some("github".into());
        let written = serde_json::to_string(&run).unwrap();
        assert!(written.ends_with(r#","mapping_id":"github"}"#), "{written}");
        let read: NewRun = serde_json::from_str(&written).unwrap();
        assert_eq!(read.admitted.mapping_id.as_deref(), Some("github"));
    }
}
