//! Who a hook may address: which agents, which session keys, which models. Built once from the
//! configuration; applied to every agent request (direct or mapped) by [`HookPolicy::admit`].

use std::collections::BTreeSet;

use super::Rejected;
use super::action::{AdmittedRun, AgentAction, Channel, SessionMode};
use super::envelope::ContentSource;

/// The refusal of a recipient for msteams, whose incoming webhook addresses one conversation.
pub const MSTEAMS_TO: &str =
    "to cannot be used with channel msteams: its incoming webhook posts to one conversation";

/// Agent ids are at most this long after normalising.
const MAX_AGENT_ID_LEN: usize = 64;

/// Normalises an agent id: trimmed, lower-cased, each run of characters outside `[a-z0-9_-]`
/// replaced by one `-`, leading and trailing `-` removed, at most 64 characters; empty → `main`.
pub fn normalize_agent_id(raw: &str) -> String {
    let mut id = String::with_capacity(raw.len());
    for c in raw.trim().to_lowercase().chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
            id.push(c);
        } else if !id.ends_with('-') {
            id.push('-');
        }
    }
    let id = id.trim_matches('-');
    let id: String = id.chars().take(MAX_AGENT_ID_LEN).collect();
    let id = id.trim_end_matches('-');
    if id.is_empty() {
        "main".to_string()
    } else {
        id.to_string()
    }
}

/// Which agents a hook may name explicitly (`hooks.allowedAgentIds`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedAgents {
    /// Omitted, or contains `"*"`.
    Any,
    /// Exactly these normalised ids; empty refuses every explicit `agentId`.
    Only(BTreeSet<String>),
}

/// The agents this gateway knows, its default agent, and which of them hooks may name.
#[derive(Debug, Clone)]
pub struct AgentDirectory {
    known: BTreeSet<String>,
    default_id: String,
    allowed: AllowedAgents,
}

impl AgentDirectory {
    /// `known` and `default_id` are normalised ids; `default_id` need not be in `known`.
    pub fn new(known: BTreeSet<String>, default_id: String, allowed: AllowedAgents) -> Self {
        AgentDirectory {
            known,
            default_id,
            allowed,
        }
    }

    /// Every agent this gateway knows, the default first, then the others by id, each once.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        let default = self.default_id.as_str();
        std::iter::once(default).chain(
            self.known
                .iter()
                .map(String::as_str)
                .filter(move |id| *id != default),
        )
    }

    /// The agent that runs a request that named none.
    pub fn default_id(&self) -> &str {
        &self.default_id
    }

    /// Resolves an explicit agent id: itself when known, else the default agent; the result must be
    /// allowed. `None` (the request named no agent) is always allowed and stays `None`.
    pub fn resolve(&self, requested: Option<&str>) -> Result<Option<String>, Rejected> {
        let Some(requested) = requested else {
            return Ok(None);
        };
        let id = normalize_agent_id(requested);
        let resolved = if self.known.contains(&id) {
            id
        } else {
            self.default_id.clone()
        };
        match &self.allowed {
            AllowedAgents::Only(ids) if !ids.contains(&resolved) => Err(Rejected::new(
                "agentId is not allowed by hooks.allowedAgentIds",
            )),
            _ => Ok(Some(resolved)),
        }
    }
}

/// Where an explicit session key came from. Keys a client can choose (a request's, a mapping
/// template's rendering of the payload, a transform's) need `allowRequestSessionKey`; a mapping's
/// fixed key is the operator's and needs only the prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrigin {
    /// A request body's `sessionKey`.
    Request,
    /// A mapping's `sessionKey` without a template expression.
    MappingStatic,
    /// A mapping's `sessionKey` rendered from a template, or one a transform chose.
    MappingTemplated,
}

impl KeyOrigin {
    /// Whether the key is external input: chosen, directly or not, by whoever sent the request.
    pub fn is_external(self) -> bool {
        matches!(self, KeyOrigin::Request | KeyOrigin::MappingTemplated)
    }
}

/// The refusal of an external session key while `hooks.allowRequestSessionKey` is off (the
/// OpenClaw gateway's wording).
pub const EXTERNAL_KEY_DISABLED: &str = "sessionKey is disabled for externally supplied hook payload values; set hooks.allowRequestSessionKey=true to enable";

/// `hooks.defaultSessionKey`, `hooks.allowRequestSessionKey` and `hooks.allowedSessionKeyPrefixes`.
#[derive(Debug, Clone, Default)]
pub struct SessionKeyPolicy {
    pub default_key: Option<String>,
    pub allow_request_key: bool,
    /// Trimmed, lower-cased, non-blank; empty means no restriction.
    pub prefixes: Vec<String>,
}

/// A resolved session key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionKey {
    pub key: String,
    /// False when the key was generated for this run alone.
    pub chosen: bool,
}

impl SessionKeyPolicy {
    /// Whether `key` passes the prefix restriction (always, when there is none).
    pub fn permits(&self, key: &str) -> bool {
        let lower = key.to_lowercase();
        self.prefixes.is_empty() || self.prefixes.iter().any(|p| lower.starts_with(p.as_str()))
    }

    /// Resolves the session key of a run: the explicit key (checked), else `defaultSessionKey`, else
    /// `fresh()`. A key `agent:<x>:<rest>` is then rebound to the run's `agent` and checked again.
    pub fn resolve(
        &self,
        explicit: Option<&str>,
        origin: KeyOrigin,
        agent: Option<&str>,
        fresh: impl FnOnce() -> String,
    ) -> Result<SessionKey, Rejected> {
        let key = match explicit {
            Some(key) => {
                if origin.is_external() && !self.allow_request_key {
                    return Err(Rejected::new(EXTERNAL_KEY_DISABLED));
                }
                self.check_prefix(key)?;
                SessionKey {
                    key: key.to_string(),
                    chosen: true,
                }
            }
            None => match &self.default_key {
                Some(key) => SessionKey {
                    key: key.clone(),
                    chosen: true,
                },
                None => SessionKey {
                    key: fresh(),
                    chosen: false,
                },
            },
        };
        match agent.and_then(|agent| rebind(&key.key, agent)) {
            Some(rebound) => {
                self.check_prefix(&rebound)?;
                Ok(SessionKey {
                    key: rebound,
                    ..key
                })
            }
            None => Ok(key),
        }
    }

    fn check_prefix(&self, key: &str) -> Result<(), Rejected> {
        if self.permits(key) {
            Ok(())
        } else {
            Err(Rejected::new(format!(
                "sessionKey must start with one of: {}",
                self.prefixes.join(", ")
            )))
        }
    }
}

/// `agent:<x>:<rest>` → `agent:<agent>:<rest>`, lower-cased: the run's agent decides, whatever
/// agent the key names (as the OpenClaw gateway re-scopes it). `None` for keys of another shape,
/// which are kept as they are: no `agent:` prefix (in any case), an empty `<x>`, an empty
/// `<rest>` or one that starts with `:`.
fn rebind(key: &str, agent: &str) -> Option<String> {
    let rest = key
        .get(..6)
        .filter(|head| head.eq_ignore_ascii_case("agent:"))
        .map(|_| &key[6..])?;
    let (named, tail) = rest.split_once(':')?;
    if named.trim().is_empty() || tail.is_empty() || tail.starts_with(':') {
        return None;
    }
    Some(format!("agent:{agent}:{tail}").to_lowercase())
}

/// `agents.defaults.models`: the allowed model ids and their aliases. Empty allows any model.
#[derive(Debug, Clone, Default)]
pub struct ModelAllowlist {
    /// (model id, alias)
    entries: Vec<(String, Option<String>)>,
}

impl ModelAllowlist {
    pub fn new(entries: Vec<(String, Option<String>)>) -> Self {
        ModelAllowlist { entries }
    }

    /// Whether `id` is one of the listed model ids, exactly as [`ModelAllowlist::resolve`]
    /// gives them (an empty list lists none).
    pub fn lists(&self, id: &str) -> bool {
        self.entries.iter().any(|(listed, _)| listed == id)
    }

    /// The model id `requested` stands for: itself or the model it is an alias of (both compared
    /// case-insensitively). With an empty list every value is taken as is.
    pub fn resolve(&self, requested: &str) -> Result<String, Rejected> {
        if self.entries.is_empty() {
            return Ok(requested.to_string());
        }
        self.entries
            .iter()
            .find(|(id, alias)| {
                id.eq_ignore_ascii_case(requested)
                    || alias
                        .as_deref()
                        .is_some_and(|a| a.eq_ignore_ascii_case(requested))
            })
            .map(|(id, _)| id.clone())
            .ok_or_else(|| Rejected::new(format!("model not allowed: {requested}")))
    }
}

/// Every policy an agent request passes before it is queued.
#[derive(Debug, Clone)]
pub struct HookPolicy {
    pub agents: AgentDirectory,
    pub sessions: SessionKeyPolicy,
    pub models: ModelAllowlist,
}

impl HookPolicy {
    /// Applies, in the order of docs/http-contract.md, the model allowlist, the agent policy and the
    /// session-key policy. `fresh_key` makes the `hook:<uuid>` key when no other applies.
    pub fn admit(
        &self,
        mut action: AgentAction,
        origin: KeyOrigin,
        allow_unsafe_external_content: bool,
        fresh_key: impl FnOnce() -> String,
    ) -> Result<AdmittedRun, Rejected> {
        if action.channel == Some(Channel::Msteams) && action.to.is_some() {
            return Err(Rejected::new(MSTEAMS_TO));
        }
        let model = action
            .model
            .as_deref()
            .map(|m| self.models.resolve(m))
            .transpose()?;
        let agent_id = self.agents.resolve(action.agent_id.as_deref())?;
        let target = agent_id.as_deref().unwrap_or(self.agents.default_id());
        let persistent = action.session_mode == SessionMode::Persistent;
        let direct = origin == KeyOrigin::Request;
        if persistent && action.session_key.is_none() {
            // A mapping may continue the conversation of `defaultSessionKey`; a request must
            // name its own (the OpenClaw gateway's rules and words).
            if direct {
                return Err(Rejected::new(
                    "sessionKey is required when sessionMode is persistent",
                ));
            }
            if self.sessions.default_key.is_none() {
                return Err(Rejected::new(
                    "sessionKey or hooks.defaultSessionKey is required when mapped hook sessionMode is persistent",
                ));
            }
        }
        let session = self.sessions.resolve(
            action.session_key.as_deref(),
            origin,
            Some(target),
            fresh_key,
        )?;
        if persistent && direct && self.sessions.prefixes.is_empty() {
            // A conversation the request names must at least be confined to known prefixes.
            return Err(Rejected::new(
                "hooks.allowedSessionKeyPrefixes is required when direct hook sessionMode is persistent",
            ));
        }
        let source = if session.key.to_lowercase().starts_with("hook:gmail:") {
            ContentSource::Email
        } else {
            ContentSource::Webhook
        };
        let target_agent = target.to_string();
        action.model = model;
        action.agent_id = agent_id;
        Ok(AdmittedRun {
            target_agent,
            action,
            session_key: session.key,
            session_key_chosen: session.chosen,
            source,
            allow_unsafe_external_content,
            mapping_id: None,
            callback: None,
            request_id: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directory(allowed: AllowedAgents) -> AgentDirectory {
        let known = ["main", "ops"].map(String::from).into_iter().collect();
        AgentDirectory::new(known, "main".into(), allowed)
    }

    fn only(ids: &[&str]) -> AllowedAgents {
        AllowedAgents::Only(ids.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn agent_id_normalising() {
        assert_eq!(normalize_agent_id("  Ops Team!! "), "ops-team");
        assert_eq!(normalize_agent_id("a__b--c"), "a__b--c");
        assert_eq!(normalize_agent_id("***"), "main");
        assert_eq!(normalize_agent_id(""), "main");
        assert_eq!(normalize_agent_id(&"x".repeat(80)).len(), 64);
    }

    #[test]
    fn known_agent_resolves_to_itself_unknown_to_default() {
        let dir = directory(AllowedAgents::Any);
        assert_eq!(dir.resolve(Some("OPS")).unwrap().as_deref(), Some("ops"));
        assert_eq!(dir.resolve(Some("ghost")).unwrap().as_deref(), Some("main"));
        assert_eq!(dir.resolve(None).unwrap(), None);
    }

    #[test]
    fn allowlist_checks_the_resolved_agent() {
        let dir = directory(only(&["ops"]));
        assert!(dir.resolve(Some("ops")).is_ok());
        let err = dir.resolve(Some("ghost")).unwrap_err();
        assert_eq!(err.0, "agentId is not allowed by hooks.allowedAgentIds");
        assert_eq!(dir.resolve(None).unwrap(), None);
    }

    #[test]
    fn empty_allowlist_refuses_every_explicit_agent() {
        assert!(directory(only(&[])).resolve(Some("main")).is_err());
    }

    fn sessions(allow: bool, prefixes: &[&str], default: Option<&str>) -> SessionKeyPolicy {
        SessionKeyPolicy {
            default_key: default.map(String::from),
            allow_request_key: allow,
            prefixes: prefixes.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn request_key_needs_allow_request_session_key() {
        let err = sessions(false, &[], None)
            .resolve(Some("hook:x"), KeyOrigin::Request, None, || "f".into())
            .unwrap_err();
        assert_eq!(err.0, EXTERNAL_KEY_DISABLED);
        let templated = sessions(false, &[], None)
            .resolve(Some("hook:x"), KeyOrigin::MappingTemplated, None, || {
                "f".into()
            })
            .unwrap_err();
        assert_eq!(templated.0, EXTERNAL_KEY_DISABLED);
        let mapped = sessions(false, &[], None)
            .resolve(Some("hook:x"), KeyOrigin::MappingStatic, None, || {
                "f".into()
            })
            .unwrap();
        assert_eq!(mapped.key, "hook:x");
    }

    #[test]
    fn prefixes_are_checked_case_insensitively() {
        let policy = sessions(true, &["hook:", "cron:"], None);
        assert!(
            policy
                .resolve(Some("HOOK:a"), KeyOrigin::Request, None, String::new)
                .is_ok()
        );
        let err = policy
            .resolve(Some("other"), KeyOrigin::Request, None, String::new)
            .unwrap_err();
        assert_eq!(err.0, "sessionKey must start with one of: hook:, cron:");
    }

    #[test]
    fn default_key_then_fresh_key() {
        let with_default = sessions(false, &[], Some("hook:default"));
        let key = with_default.resolve(None, KeyOrigin::Request, None, || "fresh".into());
        assert_eq!(
            key.unwrap(),
            SessionKey {
                key: "hook:default".into(),
                chosen: true
            }
        );
        let key =
            sessions(false, &[], None).resolve(None, KeyOrigin::Request, None, || "fresh".into());
        assert_eq!(
            key.unwrap(),
            SessionKey {
                key: "fresh".into(),
                chosen: false
            }
        );
    }

    #[test]
    fn agent_scoped_key_is_rebound_and_rechecked() {
        let policy = sessions(true, &[], None);
        let key = policy
            .resolve(
                Some("agent:Other:Chat:1"),
                KeyOrigin::Request,
                Some("ops"),
                String::new,
            )
            .unwrap();
        assert_eq!(key.key, "agent:ops:chat:1");
        let strict = sessions(true, &["agent:other:"], None);
        let err = strict
            .resolve(
                Some("agent:other:x"),
                KeyOrigin::Request,
                Some("ops"),
                String::new,
            )
            .unwrap_err();
        assert_eq!(err.0, "sessionKey must start with one of: agent:other:");
    }

    #[test]
    fn model_alias_resolves_to_its_model() {
        let models = ModelAllowlist::new(vec![("openai/gpt-4.1-mini".into(), Some("mini".into()))]);
        assert_eq!(models.resolve("mini").unwrap(), "openai/gpt-4.1-mini");
        assert_eq!(
            models.resolve("openai/gpt-4.1-mini").unwrap(),
            "openai/gpt-4.1-mini"
        );
        assert_eq!(
            models.resolve("gpt-5").unwrap_err().0,
            "model not allowed: gpt-5"
        );
        assert_eq!(
            ModelAllowlist::default().resolve("any/thing").unwrap(),
            "any/thing"
        );
    }

    #[test]
    fn agent_keys_are_rescoped_to_the_run_s_agent_and_other_shapes_kept() {
        assert_eq!(
            rebind("agent:ops:Hook:X", "main").as_deref(),
            Some("agent:main:hook:x")
        );
        assert_eq!(
            rebind("AGENT:ghost:foo", "main").as_deref(),
            Some("agent:main:foo")
        );
        for kept in [
            "agent::x",
            "agent:main:",
            "agent:x",
            "agent:a::b",
            "hook:x",
            "agent",
        ] {
            assert_eq!(rebind(kept, "main"), None, "{kept}");
        }
    }
}
