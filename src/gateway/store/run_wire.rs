//! A [`NewRun`] on NATS, the wire format of the facts that carry a run. This version writes form
//! 2: `{"v":2,"name":…,"sessionMode":…,…}`, the run's own serde form (`NewRun`'s derived one)
//! with the two fields of the action that form leaves to each form of a run. It reads form 2 and
//! form 1, the flat snake-case object earlier versions wrote. Form 1 is frozen: a field added to
//! the run is not added to it, and a form-1 run reads that field as its default. A node of an
//! earlier version cannot read form 2 (docs/cluster.md, "Upgrading a cluster").

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::records::NewRun;
use crate::config::lanes::Priority;
use crate::hook::envelope::ContentSource;
use crate::hook::{AdmittedRun, AgentAction, Channel, SessionMode, Thinking, WakeMode};

/// The version of the form this version writes; reading refuses another.
#[derive(Debug, Clone, Copy)]
struct Form2;

impl Serialize for Form2 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u8(2)
    }
}

impl<'de> Deserialize<'de> for Form2 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match u64::deserialize(deserializer)? {
            2 => Ok(Form2),
            v => Err(D::Error::custom(format_args!("run form {v} is not known"))),
        }
    }
}

/// Form 2 as written, borrowed from the run: writing one copies no string.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WrittenForm2<'a> {
    v: Form2,
    name: &'a str,
    session_mode: SessionMode,
    #[serde(flatten, serialize_with = "NewRun::serialize_derived")]
    run: &'a NewRun,
}

/// Form 2 as read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReadForm2 {
    #[serde(rename = "v")]
    _form: Form2,
    name: String,
    #[serde(default)]
    session_mode: SessionMode,
    #[serde(flatten, deserialize_with = "NewRun::deserialize")]
    run: NewRun,
}

/// Either form, told apart by their keys (form 1 has no `v`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    Form2(ReadForm2),
    Form1(Form1),
}

/// Writes the run in form 2.
impl Serialize for NewRun {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let action = self.action();
        WrittenForm2 {
            v: Form2,
            name: &action.name,
            session_mode: action.session_mode,
            run: self,
        }
        .serialize(serializer)
    }
}

/// Reads a run of either form, its channel resolved (`last` when none was named), as form 1
/// and the store's row give it.
impl<'de> Deserialize<'de> for NewRun {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match Written::deserialize(deserializer)? {
            Written::Form2(read) => {
                let mut run = read.run;
                let channel = run.channel();
                let action = &mut run.admitted.action;
                (action.name, action.session_mode) = (read.name, read.session_mode);
                action.channel = Some(channel);
                run
            }
            Written::Form1(run) => NewRun::from(run),
        })
    }
}

/// Form 1: one flat snake-case object with the keys in the order the version before `NewRun`
/// contained the action wrote them; neither the requested session key nor whether the key was
/// chosen nor `allow_unsafe_external_content`; the channel as `last` when none was named.
#[derive(Deserialize)]
struct Form1 {
    run_id: String,
    hook_name: String,
    agent_id: Option<String>,
    target_agent: String,
    session_key: String,
    message: String,
    prompt: String,
    deliver: bool,
    channel: Channel,
    to: Option<String>,
    model: Option<String>,
    #[serde(default, deserialize_with = "Thinking::deserialize_lenient")]
    thinking: Option<Thinking>,
    timeout_seconds: Option<u64>,
    wake_mode: WakeMode,
    source: ContentSource,
    created_at: String,
    /// Absent from runs written before there were session modes: those were isolated.
    #[serde(default)]
    session_mode: SessionMode,
    /// Absent for `POST /hooks/agent` runs and runs written before mappings were recorded.
    #[serde(default)]
    mapping_id: Option<String>,
    /// Absent for `normal` runs and runs written before there were lanes.
    #[serde(default)]
    priority: Priority,
}

impl From<Form1> for NewRun {
    fn from(run: Form1) -> Self {
        let action = AgentAction {
            message: run.message,
            name: run.hook_name,
            agent_id: run.agent_id,
            session_key: None,
            wake_mode: run.wake_mode,
            deliver: run.deliver,
            channel: Some(run.channel),
            to: run.to,
            model: run.model,
            thinking: run.thinking,
            timeout_seconds: run.timeout_seconds,
            session_mode: run.session_mode,
        };
        let admitted = AdmittedRun {
            action,
            target_agent: run.target_agent,
            session_key: run.session_key,
            session_key_chosen: false,
            source: run.source,
            allow_unsafe_external_content: false,
            mapping_id: run.mapping_id,
            callback: None,
            request_id: None,
        };
        NewRun {
            priority: run.priority,
            ..NewRun::admitted(run.run_id, admitted, run.prompt, run.created_at)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A run in form 1, exactly as the version before `NewRun` contained the action wrote it.
    const WRITTEN_BEFORE: &str = concat!(
        r#"{"run_id":"r1","hook_name":"GitHub","agent_id":"ops","target_agent":"ops","#,
        r#""session_key":"hook:gh:1","message":"m","prompt":"p","deliver":false,"#,
        r#""channel":"last","to":null,"model":"a/b","thinking":"high","timeout_seconds":30,"#,
        r#""wake_mode":"next-heartbeat","source":"email","#,
        r#""created_at":"2026-01-01T00:00:00.000Z","session_mode":"persistent"}"#,
    );

    /// A run of a mapping's `high` lane, with no channel named, in form 1 exactly as the
    /// version before form 2 wrote it: the channel resolved to `last`, the mapping and the
    /// priority last.
    const WRITTEN_WITH_A_LANE: &str = concat!(
        r#"{"run_id":"r2","hook_name":"Hook","agent_id":null,"target_agent":"main","#,
        r#""session_key":"hook:x","message":"m","prompt":"p","deliver":true,"#,
        r#""channel":"last","to":"+1","model":null,"thinking":null,"timeout_seconds":null,"#,
        r#""wake_mode":"now","source":"webhook","created_at":"2026-01-01T00:00:00.000Z","#,
        r#""session_mode":"isolated","mapping_id":"github","priority":"high"}"#,
    );

    /// The run with every field set, in form 2.
    const WRITTEN_IN_FORM_2: &str = concat!(
        r#"{"v":2,"name":"GitHub","sessionMode":"persistent","runId":"r1","message":"m","#,
        r#""agentId":"ops","wakeMode":"next-heartbeat","deliver":false,"channel":"telegram","#,
        r#""to":"+1","model":"a/b","thinking":"high","timeoutSeconds":30,"targetAgent":"ops","#,
        r#""sessionKey":"hook:x","source":"email","mappingId":"github","prompt":"p","#,
        r#""createdAt":"2026-01-01T00:00:00.000Z","priority":"low"}"#,
    );

    /// The run `WRITTEN_BEFORE` holds.
    fn written_before() -> NewRun {
        let mut run = crate::gateway::store::runs::tests::full_run("r1");
        let action = &mut run.admitted.action;
        (action.channel, action.to) = (Some(Channel::Last), None);
        run.admitted.session_key = "hook:gh:1".into();
        (run.admitted.mapping_id, run.priority) = (None, Priority::Normal);
        run
    }

    fn assert_same(read: NewRun, written: NewRun) {
        let written = written.into_stored();
        assert_eq!(read.admitted, written.admitted);
        assert_eq!(
            (read.run_id, read.prompt, read.created_at, read.priority),
            (
                written.run_id,
                written.prompt,
                written.created_at,
                written.priority
            )
        );
    }

    #[test]
    fn a_run_is_written_in_form_2_and_reads_back() {
        let run = crate::gateway::store::runs::tests::full_run("r1");
        assert_eq!(serde_json::to_string(&run).unwrap(), WRITTEN_IN_FORM_2);
        let read: NewRun = serde_json::from_str(WRITTEN_IN_FORM_2).unwrap();
        assert_same(read, run);
    }

    #[test]
    fn a_run_written_in_form_1_still_reads() {
        let read: NewRun = serde_json::from_str(WRITTEN_BEFORE).unwrap();
        assert_same(read, written_before());
        let mut lane = crate::gateway::store::runs::tests::run("r2");
        let action = &mut lane.admitted.action;
        (action.channel, action.to, action.timeout_seconds) = (None, Some("+1".into()), None);
        lane.admitted.mapping_id = Some("github".into());
        lane.priority = Priority::High;
        let read: NewRun = serde_json::from_str(WRITTEN_WITH_A_LANE).unwrap();
        assert_same(read, lane);
    }

    #[test]
    fn a_run_without_a_channel_reads_back_with_last() {
        let mut run = crate::gateway::store::runs::tests::run("r2");
        run.admitted.action.channel = None;
        let written = serde_json::to_string(&run).unwrap();
        assert!(written.contains(r#""channel":null"#), "{written}");
        let read: NewRun = serde_json::from_str(&written).unwrap();
        assert_eq!(read.action().channel, Some(Channel::Last));
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
    fn a_form_this_version_does_not_know_is_refused() {
        let mut newer: serde_json::Value = serde_json::from_str(WRITTEN_IN_FORM_2).unwrap();
        newer["v"] = json!(3);
        assert!(serde_json::from_value::<NewRun>(newer).is_err());
    }
}
