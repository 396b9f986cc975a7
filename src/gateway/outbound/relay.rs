//! Forward mode's requests to the upstream gateway: the wake and agent bodies, carrying what the
//! request or mapping set rather than hookgate's defaults, and one relay attempt. An agent relay
//! asks the upstream to answer once its run ends (`waitForCompletion`), so that a relay in flight
//! is a run the upstream is still running: what a lane bounds (docs/hooks.md, "Forward mode").

use std::time::Duration;

use serde::ser::Error as _;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::chat::SendError;
use crate::config::runtime::Upstream;
use crate::hook::{AdmittedRun, AgentAction, WakeMode};

/// The service name in a relay's errors.
const UPSTREAM: &str = "upstream";

/// How long an agent relay waits for the upstream's run to end when the run sets no
/// `timeoutSeconds`: the upstream's own turn timeout bounds it first. A relay cut off here is
/// sent again with its idempotency key, which the upstream answers with the same run's outcome
/// while it remembers the key (docs/hooks.md, "Forward mode").
const RUN_WAIT: Duration = Duration::from_secs(15 * 60);
/// What a relay waits beyond a run's own `timeoutSeconds`: the upstream's admission (up to 15 s
/// behind a busy session) and its delivery.
const RUN_WAIT_MARGIN: Duration = Duration::from_secs(60);

/// What is relayed, as stored in the outbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Relayed {
    /// To `<prefix>/wake`.
    Wake { body: WakeBody },
    /// To `<prefix>/agent`, with the idempotency key that keeps a repeated relay from making a
    /// second upstream run: the run id (a client's repeat is answered here, by its claim).
    /// The body boxed: it is most of the item, and a wake's is small.
    #[serde(rename_all = "camelCase")]
    Agent {
        body: Box<AgentBody>,
        idempotency_key: String,
    },
}

/// The body of an upstream `/wake`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeBody {
    pub text: String,
    pub mode: WakeMode,
}

/// The body of an upstream `/agent`: the run's action in its serde form (the action's, whose
/// message is the one relayed), its name and the session key it may pass on. An option the
/// request or mapping did not set is left out, so that the upstream applies its own defaults and
/// policies (its `defaultSessionKey` among them), and the session mode is not relayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentBody {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    #[serde(flatten, serialize_with = "without_nulls")]
    pub action: AgentAction,
    /// Always on in what this version relays: the upstream answers once the run ended. Off in a
    /// row an older version stored (the upstream then answers at admission).
    #[serde(default)]
    pub wait_for_completion: bool,
}

/// Writes `action`'s serde form without its nulls, the options it does not set: the upstream
/// refuses a null where it reads a value (`"model":null` is its `400 model required`). Through a
/// map of the form, once per relay: its fields are then named by the action's type alone.
fn without_nulls<S: Serializer>(action: &AgentAction, serializer: S) -> Result<S::Ok, S::Error> {
    let Value::Object(fields) = serde_json::to_value(action).map_err(S::Error::custom)? else {
        return Err(S::Error::custom("an action is written as an object"));
    };
    serializer.collect_map(fields.iter().filter(|(_, value)| !value.is_null()))
}

impl AgentBody {
    /// The body for an admitted run, with the request's message (a closed batch's relay puts
    /// its prompt in `action.message`). Its session key goes along only when
    /// `relay_session_key` is on and the key was chosen (by the request, the mapping or
    /// `defaultSessionKey`), not generated here.
    pub fn of(run: &AdmittedRun, relay_session_key: bool) -> AgentBody {
        AgentBody {
            name: run.action.name.clone(),
            session_key: (relay_session_key && run.session_key_chosen)
                .then(|| run.session_key.clone()),
            action: run.action.clone(),
            wait_for_completion: true,
        }
    }

    /// How long a relay of this body waits for the upstream's answer.
    fn wait(&self) -> Duration {
        if !self.wait_for_completion {
            return super::chat::SEND_TIMEOUT;
        }
        self.action
            .timeout_seconds
            .map_or(RUN_WAIT, |s| Duration::from_secs(s) + RUN_WAIT_MARGIN)
    }
}

/// What the upstream answered a relay that landed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Landed {
    /// The upstream's run id, for an agent run.
    pub upstream_run_id: Option<String>,
    /// How the upstream's run ended (`completion.status`: `ok`, `error`, `skipped`), when it
    /// waited for it.
    pub completion: Option<String>,
    /// The upstream run's reply (`completion.reply`), which callbacks carry; OpenClaw never
    /// sends it (its `completion` says only whether there was one, `replyDisposition`),
    /// another hookgate does.
    pub reply: Option<String>,
    /// Why the upstream's run failed (`completion.error`), when it says (OpenClaw does not).
    pub error: Option<String>,
}

/// One attempt at relaying: what the upstream answered. An agent run's answer comes once the
/// upstream's run ended. An upstream answer other than success is a [`SendError::Status`] with
/// the upstream's own error text, so that a refusal (4xx other than 408/429) is permanent and
/// the rest are retried.
pub async fn relay(
    http: &reqwest::Client,
    upstream: &Upstream,
    relayed: &Relayed,
) -> Result<Landed, SendError> {
    let (request, wait) = match relayed {
        Relayed::Wake { body } => (
            http.post(upstream.endpoint("wake")).json(body),
            super::chat::SEND_TIMEOUT,
        ),
        Relayed::Agent {
            body,
            idempotency_key,
        } => (
            http.post(upstream.endpoint("agent"))
                .header("idempotency-key", idempotency_key)
                .json(body),
            body.wait(),
        ),
    };
    let response = request
        .bearer_auth(&upstream.token)
        .timeout(wait)
        .send()
        .await
        .map_err(|e| SendError::unreachable(UPSTREAM, e))?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if !status.is_success() {
        // The upstream's `{"ok":false,"error":...}` when it gave one, else what it sent.
        let said = body["error"].as_str().unwrap_or(&text);
        return Err(SendError::status(UPSTREAM, status.as_u16(), said));
    }
    Ok(Landed {
        upstream_run_id: body["runId"].as_str().map(String::from),
        completion: body["completion"]["status"].as_str().map(String::from),
        reply: body["completion"]["reply"].as_str().map(String::from),
        error: body["completion"]["error"].as_str().map(String::from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::outbound::outbox::OutboxItem;
    use crate::hook::AgentAction;
    use crate::hook::envelope::ContentSource;

    fn admitted() -> AdmittedRun {
        AdmittedRun {
            action: AgentAction {
                message: "m".into(),
                ..AgentAction::default()
            },
            target_agent: "main".into(),
            session_key: "hook:ingress".into(),
            session_key_chosen: true,
            source: ContentSource::Webhook,
            allow_unsafe_external_content: false,
            mapping_id: None,
            callback: None,
            request_id: None,
        }
    }

    #[test]
    fn the_body_carries_only_what_was_set() {
        let body = serde_json::to_value(AgentBody::of(&admitted(), false)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"message": "m", "name": "Hook", "wakeMode": "now", "deliver": true,
                               "waitForCompletion": true})
        );
    }

    /// The outbox's record of an agent relay with every field set, as the version before the
    /// body was made of the run's action wrote it; its `body` is what OpenClaw's `/hooks/agent`
    /// was sent (asking it to answer once the run ended).
    const RELAYED_BEFORE: &str = concat!(
        r#"{"body":{"message":"m","name":"GitHub","wakeMode":"next-heartbeat","#,
        r#""deliver":false,"channel":"telegram","to":"+1","agentId":"ops","#,
        r#""sessionKey":"hook:x","model":"a/b","thinking":"high","timeoutSeconds":30,"#,
        r#""waitForCompletion":true},"#,
        r#""idempotencyKey":"k"}"#,
    );

    /// The same record as this version writes it: the same keys and values, in the action's
    /// order.
    const RELAYED: &str = concat!(
        r#"{"body":{"name":"GitHub","sessionKey":"hook:x","message":"m","agentId":"ops","#,
        r#""wakeMode":"next-heartbeat","deliver":false,"channel":"telegram","to":"+1","#,
        r#""model":"a/b","thinking":"high","timeoutSeconds":30,"waitForCompletion":true},"#,
        r#""idempotencyKey":"k"}"#,
    );

    #[test]
    fn a_relay_is_recorded_and_sent_as_before() {
        let run = crate::gateway::store::runs::tests::full_run("r1").admitted;
        let relayed = OutboxItem::Relay(Relayed::Agent {
            body: Box::new(AgentBody::of(&run, true)),
            idempotency_key: "k".into(),
        });
        assert_eq!(relayed.encode(), ("forward-run", RELAYED.into()));
        let json = |text: &str| serde_json::from_str::<Value>(text).unwrap();
        assert_eq!(json(RELAYED), json(RELAYED_BEFORE));
        let read = OutboxItem::decode("forward-run", RELAYED_BEFORE).unwrap();
        assert_eq!(read.encode(), relayed.encode());
    }

    #[test]
    fn a_chosen_session_key_is_relayed_only_when_configured() {
        assert_eq!(
            AgentBody::of(&admitted(), true).session_key.as_deref(),
            Some("hook:ingress")
        );
        let mut generated = admitted();
        generated.session_key_chosen = false;
        assert_eq!(AgentBody::of(&generated, true).session_key, None);
    }
}
