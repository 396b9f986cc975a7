//! Admission: what an accepted hook request becomes before the runtime takes it. An agent
//! request goes through every policy (agent, session key, model), gets its idempotency claim and
//! its safety envelope, and comes out as the run record to store; a wake becomes its main-session
//! event. No HTTP and no I/O here: the HTTP layer extracts, this decides, the runtime stores.

use uuid::Uuid;

use crate::config::HookSettings;
use crate::gateway::runtime_clock::{now_ms, now_rfc3339};
use crate::gateway::{EventKind, IdempotencyClaim, NewEvent, NewRun};
use crate::hook::envelope::{ContentSource, wrap_prompt};
use crate::hook::policy::KeyOrigin;
use crate::hook::{AdmittedRun, AgentAction, Rejected, WakeRequest, idempotency};
use crate::mapping::Mapping;

/// Where an agent request came from, which decides the session-key rule, whether the envelope
/// applies and the content source.
#[derive(Clone, Copy)]
pub enum AgentOrigin<'a> {
    /// `POST {prefix}/agent`.
    Direct,
    /// A mapping's agent action, with where its session key came from.
    Mapped {
        mapping: &'a Mapping,
        key_origin: KeyOrigin,
        /// The mapping's `allowUnsafeExternalContent`, or its transform's override.
        allow_unsafe: bool,
    },
}

/// An admitted agent request, ready for [`crate::gateway::Runtime::submit_run`].
pub struct AgentAdmission {
    pub run: NewRun,
    pub admitted: AdmittedRun,
    /// Recognises a repeat of the same request within the idempotency window.
    pub claim: Option<IdempotencyClaim>,
    /// The key the client (or a signed delivery's id) gave, for relays upstream.
    pub idempotency_key: Option<String>,
}

/// Admits an agent request. `keys` are the idempotency key candidates in order of precedence
/// (headers, body, signed delivery id); `path` is the request path, part of the fingerprint.
pub fn admit_agent(
    hooks: &HookSettings,
    agent: AgentAction,
    origin: AgentOrigin<'_>,
    keys: [Option<&str>; 5],
    path: &str,
) -> Result<AgentAdmission, Rejected> {
    let (key_origin, allow_unsafe) = match origin {
        AgentOrigin::Direct => (KeyOrigin::Request, false),
        AgentOrigin::Mapped {
            key_origin,
            allow_unsafe,
            ..
        } => (key_origin, allow_unsafe),
    };
    let mut admitted = hooks.policy.admit(agent, key_origin, allow_unsafe, || {
        format!("hook:{}", Uuid::now_v7())
    })?;
    if matches!(origin, AgentOrigin::Mapped { mapping, .. } if mapping.is_email) {
        admitted.source = ContentSource::Email;
    }
    let key = idempotency::choose_key(keys);
    let claim = key.map(|key| IdempotencyClaim {
        fingerprint: idempotency::fingerprint(key, path, &admitted),
        now_ms: now_ms(),
        window: idempotency::WINDOW,
    });
    // Time-ordered ids (UUIDv7, 74 random bits): each insert lands at the end of the runs'
    // indexes instead of on a random page, which cost a page write per run under load.
    let run_id = Uuid::now_v7().to_string();
    let received = now_rfc3339();
    let prompt = if admitted.allow_unsafe_external_content {
        admitted.action.message.clone()
    } else {
        wrap_prompt(
            &admitted.action.name,
            &run_id,
            &received,
            admitted.source,
            &admitted.action.message,
        )
    };
    Ok(AgentAdmission {
        run: NewRun::admitted(run_id, &admitted, prompt, received),
        admitted,
        claim,
        idempotency_key: key.map(String::from),
    })
}

/// A wake admitted: its durable, untrusted system event for the main session of its agent (the
/// default one unless it named another, under the agent policy of `/agent`). A session key it
/// names passes the session-key policy of a request's key, re-scoped to that agent, but selects
/// no session of its own: hookgate keeps one main session per agent.
pub fn admit_wake(
    hooks: &HookSettings,
    wake: &WakeRequest,
    source: String,
) -> Result<NewEvent, Rejected> {
    let policy = &hooks.policy;
    let agent = policy
        .agents
        .resolve(wake.agent_id.as_deref())?
        .unwrap_or_else(|| policy.agents.default_id().to_string());
    if let Some(key) = wake.session_key.as_deref() {
        policy
            .sessions
            .resolve(Some(key), KeyOrigin::Request, Some(&agent), String::new)?;
    }
    Ok(NewEvent {
        agent,
        kind: EventKind::System,
        text: wake.text.clone(),
        trusted: false,
        source,
        at: now_rfc3339(),
    })
}
