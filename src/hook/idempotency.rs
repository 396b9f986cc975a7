//! Idempotency of agent requests: which key a request carries, and the fingerprint under which a
//! repeat is recognised (same key, same hook path, same resolved fields).

use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::action::{AdmittedRun, SessionMode, Thinking};

/// Keys longer than this are not used (the next candidate is tried instead).
pub const MAX_KEY_CHARS: usize = 256;

/// How long after its first delivery a repeat is recognised.
pub const WINDOW: Duration = Duration::from_secs(5 * 60);

/// The first usable key among `candidates`, in order: non-blank after trimming and at most
/// [`MAX_KEY_CHARS`] characters. Callers pass the header values in precedence order.
pub fn choose_key<'a>(candidates: impl IntoIterator<Item = Option<&'a str>>) -> Option<&'a str> {
    candidates
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|key| !key.is_empty() && key.chars().count() <= MAX_KEY_CHARS)
}

/// The body's `idempotencyKey` field, when it is a string.
pub fn body_key(payload: &Value) -> Option<&str> {
    payload.get("idempotencyKey").and_then(Value::as_str)
}

/// A digest of the key, the hook path and every resolved field of the run that the client chose.
///
/// A generated session key (`hook:<uuid>`) is left out: it differs on every request, and leaving it
/// in would make every repeat look new.
pub fn fingerprint(key: &str, hook_path: &str, run: &AdmittedRun) -> String {
    let session_key = run.session_key_chosen.then_some(run.session_key.as_str());
    let action = &run.action;
    let mut material = serde_json::json!([
        key,
        hook_path,
        action.message,
        action.name,
        action.agent_id,
        session_key,
        action.wake_mode.as_str(),
        action.deliver,
        run.channel_or_last().as_str(),
        action.to,
        action.model,
        action.thinking.map(Thinking::as_str),
        action.timeout_seconds,
        run.allow_unsafe_external_content,
    ]);
    // Appended only when set, so that the fingerprints of isolated runs stay what they were.
    if action.session_mode == SessionMode::Persistent
        && let Some(fields) = material.as_array_mut()
    {
        fields.push(serde_json::Value::from(action.session_mode.as_str()));
    }
    hex::encode(Sha256::digest(material.to_string().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::AgentAction;
    use crate::hook::envelope::ContentSource;

    fn run(message: &str, session_key: &str, chosen: bool) -> AdmittedRun {
        AdmittedRun {
            action: AgentAction {
                message: message.into(),
                ..AgentAction::default()
            },
            target_agent: "main".into(),
            session_key: session_key.into(),
            session_key_chosen: chosen,
            source: ContentSource::Webhook,
            allow_unsafe_external_content: false,
            mapping_id: None,
            callback: None,
            request_id: None,
        }
    }

    #[test]
    fn first_usable_candidate_wins() {
        let long = "k".repeat(MAX_KEY_CHARS + 1);
        let exact = "k".repeat(MAX_KEY_CHARS);
        assert_eq!(choose_key([None, Some("  "), Some(" a ")]), Some("a"));
        assert_eq!(choose_key([Some(long.as_str()), Some("b")]), Some("b"));
        assert_eq!(choose_key([Some(exact.as_str())]), Some(exact.as_str()));
        assert_eq!(choose_key([Some(long.as_str())]), None);
    }

    #[test]
    fn generated_session_keys_do_not_change_the_fingerprint() {
        let a = fingerprint("k", "/hooks/agent", &run("m", "hook:1", false));
        let b = fingerprint("k", "/hooks/agent", &run("m", "hook:2", false));
        assert_eq!(a, b);
    }

    #[test]
    fn fields_key_and_path_change_the_fingerprint() {
        let base = fingerprint("k", "/hooks/agent", &run("m", "hook:1", true));
        assert_ne!(
            base,
            fingerprint("k", "/hooks/agent", &run("other", "hook:1", true))
        );
        assert_ne!(
            base,
            fingerprint("k", "/hooks/agent", &run("m", "hook:2", true))
        );
        assert_ne!(
            base,
            fingerprint("k2", "/hooks/agent", &run("m", "hook:1", true))
        );
        assert_ne!(
            base,
            fingerprint("k", "/hooks/github", &run("m", "hook:1", true))
        );
    }
}
