//! `hooks.*` into the [`HookSettings`] of the webhook endpoint: each derived value (token, path,
//! limits, presets, transforms directory, capture, mappings, session keys, models) built by a
//! function of its own, every problem added to one list.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::budget::Budgets;
use super::conditions::conditions;
use super::lanes::Lane;
pub use super::model::defaults::{DEFAULT_BODY_TIMEOUT, DEFAULT_HOOKS_PATH, KNOWN_PRESETS};
use super::model::{
    AgentEntryConfig, HooksConfig, MappingConfig, ModelEntryConfig, SignatureConfig,
    TransformConfig,
};
use super::secret::{ConfigFiles, secret};
use super::signature::signature_rule;
use super::{ConfigError, capture, confine, limits, seconds};
use crate::hook::capture::CapturePolicy;
use crate::hook::credentials::CredentialHeaders;
use crate::hook::signature::SignatureRule;
use crate::hook::token::TokenDigest;
use crate::hook::{AgentDirectory, HookPolicy, ModelAllowlist, SessionKeyPolicy, SessionMode};
use crate::mapping::{ActionKind, Mapping, RenderLimit, javascript_component};
use crate::transform::{TransformLimits, TransformSet};

/// Paths the server itself answers; the hook prefix may not shadow them.
const RESERVED_PATHS: &[&str] = &[
    "/api", "/mcp", "/livez", "/healthz", "/readyz", "/metrics", "/console",
];

/// The webhook endpoint's settings, present only when hooks are enabled.
#[derive(Debug)]
pub struct HookSettings {
    pub token: TokenDigest,
    /// Normalised: a leading `/`, no trailing `/`, never `/` alone.
    pub path: String,
    pub max_body_bytes: u64,
    /// What one request's templates render to at most, from `max_body_bytes`.
    pub render_limit: RenderLimit,
    pub body_timeout: Duration,
    pub policy: HookPolicy,
    pub presets: Vec<String>,
    /// `hooks.mappings` in order, then each preset's mappings.
    pub mappings: Vec<Mapping>,
    /// The effective transforms directory, inside `<config dir>/hooks/transforms`.
    pub transforms_dir: PathBuf,
    pub transform_limits: TransformLimits,
    /// The bounds of mappings that set their own `transform.limits` or `reuse`, by mapping id.
    pub mapping_limits: HashMap<String, TransformLimits>,
    /// The loaded transforms of this configuration, set once when it is admitted.
    pub transforms: OnceLock<Arc<TransformSet>>,
    /// `hooks.capture`.
    pub capture: CapturePolicy,
    /// The capture of mappings that set their own, by mapping id.
    pub mapping_capture: HashMap<String, CapturePolicy>,
    /// The headers that carry a credential under these mappings' signature schemes.
    pub credentials: CredentialHeaders,
    /// The lanes of mappings that set `runs`, by mapping id.
    pub lanes: HashMap<String, Lane>,
    /// The budgets of mappings (by id) and of agents (`agents.list[i].budget`).
    pub budgets: Budgets,
}

impl HookSettings {
    /// The bounds of `mapping`'s transform calls: its own `transform.limits`, else
    /// `hooks.transformLimits`.
    pub fn limits_for<'a>(&'a self, mapping: &'a Mapping) -> &'a TransformLimits {
        self.mapping_limits
            .get(&mapping.id)
            .unwrap_or(&self.transform_limits)
    }

    /// What the request log keeps of a request that mapping `mapping_id` served; of one that
    /// no mapping served yet (refused before one matched), what every mapping of its hook name
    /// would keep together, so that no mapping's redaction is skipped.
    pub fn capture_for(&self, mapping_id: Option<&str>, hook: Option<&str>) -> CapturePolicy {
        if let Some(id) = mapping_id {
            return self
                .mapping_capture
                .get(id)
                .unwrap_or(&self.capture)
                .clone();
        }
        self.mappings
            .iter()
            .filter(|m| m.path().is_none() || m.path() == hook)
            .filter_map(|m| self.mapping_capture.get(&m.id))
            .fold(self.capture.clone(), |joined, own| joined.union(own))
    }

    /// The lane of mapping `mapping_id`, when it set `runs`.
    pub fn lane_for(&self, mapping_id: &str) -> Option<&Lane> {
        self.lanes.get(mapping_id)
    }

    /// Whether any request may be captured: only then are its headers kept until it ends.
    pub fn captures_any(&self) -> bool {
        self.capture.enabled || self.mapping_capture.values().any(|c| c.enabled)
    }

    /// `hooks.transformLimits` with the largest memory cap any mapping has: what the engine's
    /// instance pool must be sized for.
    pub fn engine_limits(&self) -> TransformLimits {
        let largest = self
            .mapping_limits
            .values()
            .map(|limits| limits.memory_bytes)
            .fold(self.transform_limits.memory_bytes, usize::max);
        TransformLimits {
            memory_bytes: largest,
            ..self.transform_limits
        }
    }

    /// The widest bounds this configuration grants a transform call: each bound the largest of
    /// `hooks.transformLimits` and every mapping's own.
    pub fn grantable_limits(&self) -> TransformLimits {
        self.mapping_limits
            .values()
            .fold(self.transform_limits, |widest, own| widest.widest(*own))
    }

    /// Holds every transform call's bounds within `ceiling` (a candidate configuration's,
    /// within what the configuration in force grants, [`HookSettings::grantable_limits`]); a
    /// mapping naming a JavaScript module, within `ceiling` raised to what such a module gets
    /// at least ([`TransformLimits::for_javascript`]), as the configuration in force would
    /// grant it.
    pub fn hold_limits_within(&mut self, ceiling: &TransformLimits) {
        self.transform_limits = self.transform_limits.within(ceiling);
        let javascript = ceiling.for_javascript();
        for (id, limits) in &mut self.mapping_limits {
            let names_javascript = self.mappings.iter().any(|m| {
                m.id == *id
                    && m.transform
                        .as_ref()
                        .is_some_and(|t| javascript_component(&t.module).is_some())
            });
            let held = if names_javascript {
                &javascript
            } else {
                ceiling
            };
            *limits = limits.within(held);
        }
    }

    /// Every transform module the mappings name, once each, with the key that names it first.
    pub fn transform_modules(&self) -> Vec<(String, String)> {
        let mut seen = Vec::<(String, String)>::new();
        for (i, mapping) in self.mappings.iter().enumerate() {
            if let Some(spec) = &mapping.transform
                && !seen.iter().any(|(m, _)| *m == spec.module)
            {
                seen.push((spec.module.clone(), key!(TransformConfig[i].module)));
            }
        }
        seen
    }
}

/// Builds `hooks.*`, adding every problem found to `problems`, disabled hooks included (their
/// keys are checked all the same); `None` when `hooks.enabled` is false or a value the
/// endpoint cannot do without is missing (the problem is then in `problems`).
pub(super) fn hook_settings(
    hooks: HooksConfig,
    models: &BTreeMap<String, ModelEntryConfig>,
    agents: &AgentDirectory,
    agent_list: &[AgentEntryConfig],
    gateway_token: Option<&str>,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Option<HookSettings> {
    let token = token(&hooks, gateway_token, files, problems);
    let path = path(hooks.path.as_deref(), problems);
    let max_body_bytes = limits::max_body_bytes(hooks.max_body_bytes, problems);
    let body_timeout = seconds(
        hooks.body_timeout_seconds,
        &key!(HooksConfig.body_timeout_seconds),
        DEFAULT_BODY_TIMEOUT,
        problems,
    );
    let sessions = session_policy(&hooks, problems);
    check_presets(&hooks.presets, problems);
    let transforms_dir = transforms_dir(&hooks, files.dir, problems);
    let transform_limits = transform_limits(&hooks, problems);
    let capture = capture(&hooks, problems);
    let defaults = MappingDefaults {
        sessions: &sessions,
        limits: transform_limits,
        capture: &capture,
        files,
    };
    let mut built = mappings(&hooks, &defaults, problems);
    for (i, agent) in agent_list.iter().enumerate() {
        if let Some(budget) = &agent.budget {
            built.budgets.add_agent(i, &agent.id, budget, problems);
        }
    }
    check_session_prefixes(hooks.enabled, &sessions, &built.mappings, problems);
    let policy = HookPolicy {
        agents: agents.clone(),
        sessions,
        models: model_allowlist(models),
    };
    if !hooks.enabled {
        return None;
    }
    let credentials =
        CredentialHeaders::of(built.mappings.iter().filter_map(|m| m.signature.as_ref()));
    Some(HookSettings {
        token: TokenDigest::of(&token?),
        path: path?,
        max_body_bytes,
        render_limit: RenderLimit::for_body_limit(max_body_bytes),
        body_timeout,
        policy,
        presets: hooks.presets,
        mappings: built.mappings,
        transforms_dir: transforms_dir?,
        transform_limits,
        mapping_limits: built.limits,
        transforms: OnceLock::new(),
        capture,
        mapping_capture: built.capture,
        credentials,
        lanes: built.lanes,
        budgets: built.budgets,
    })
}

/// Trims and strips trailing `/`s, adds a leading `/`; blank becomes `/hooks`. `None` for `/`.
pub fn normalize_hooks_path(raw: Option<&str>) -> Option<String> {
    let trimmed = raw.map(str::trim).unwrap_or("");
    if trimmed.is_empty() {
        return Some(DEFAULT_HOOKS_PATH.to_string());
    }
    let with_slash = if trimmed.starts_with('/') {
        trimmed.to_string()
    } else {
        format!("/{trimmed}")
    };
    let path = with_slash.trim_end_matches('/');
    (!path.is_empty()).then(|| path.to_string())
}

/// `hooks.token`: required when hooks are enabled, and never the gateway's own token.
fn token(
    hooks: &HooksConfig,
    gateway_token: Option<&str>,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Option<String> {
    let token = secret(
        hooks.token.clone(),
        &key!(HooksConfig.token),
        files,
        problems,
    );
    if hooks.enabled && token.is_none() {
        problems.push(ConfigError::Refused(
            "hooks.enabled requires hooks.token".into(),
        ));
    }
    if token.is_some() && token.as_deref() == gateway_token {
        problems.push(ConfigError::Refused(
            "hooks.token must not match gateway auth token".into(),
        ));
    }
    token
}

/// `hooks.path`, normalised; neither `/` nor a prefix of the server's own paths.
fn path(raw: Option<&str>, problems: &mut Vec<ConfigError>) -> Option<String> {
    let path = normalize_hooks_path(raw);
    match path.as_deref() {
        None => problems.push(ConfigError::invalid(
            key!(HooksConfig.path),
            "must not be '/'",
        )),
        Some(path)
            if RESERVED_PATHS
                .iter()
                .any(|r| path == *r || path.starts_with(&format!("{r}/"))) =>
        {
            problems.push(ConfigError::invalid(
                "hooks.path",
                format!(
                    "must not overlap the server's own paths ({})",
                    RESERVED_PATHS.join(", ")
                ),
            ))
        }
        Some(_) => {}
    }
    path
}

/// `hooks.presets`: each one hookgate ships, each once.
fn check_presets(presets: &[String], problems: &mut Vec<ConfigError>) {
    for (i, preset) in presets.iter().enumerate() {
        if !KNOWN_PRESETS.contains(&preset.as_str()) {
            problems.push(ConfigError::invalid(
                format!("{}[{i}]", key!(HooksConfig.presets)),
                format!("must be one of {}", KNOWN_PRESETS.join(", ")),
            ));
        } else if presets[..i].contains(preset) {
            problems.push(ConfigError::invalid(
                format!("{}[{i}]", key!(HooksConfig.presets)),
                "names a preset listed before it",
            ));
        }
    }
}

/// `hooks.transformsDir`, confined to the transforms root, with every mapping's module path
/// checked against it.
fn transforms_dir(
    hooks: &HooksConfig,
    config_dir: &Path,
    problems: &mut Vec<ConfigError>,
) -> Option<PathBuf> {
    let dir = confine::transforms_dir(config_dir, hooks.transforms_dir.as_deref())
        .map_err(|e| problems.push(e))
        .ok()?;
    // A missing directory fails each of its modules: said once, with how the path resolved.
    let named = hooks
        .transforms_dir
        .as_deref()
        .is_some_and(|d| !d.trim().is_empty());
    if named
        && hooks.mappings.iter().any(|m| m.transform.is_some())
        && let Err(e) = confine::transforms_dir_exists(config_dir, &dir)
    {
        problems.push(e);
    }
    for (i, mapping) in hooks.mappings.iter().enumerate() {
        if let Some(transform) = &mapping.transform {
            let key = key!(TransformConfig[i].module);
            if let Err(e) = confine::module_path(&dir, &transform.module, &key) {
                problems.push(e);
            }
        }
    }
    Some(dir)
}

/// `hooks.transformLimits` over the defaults.
fn transform_limits(hooks: &HooksConfig, problems: &mut Vec<ConfigError>) -> TransformLimits {
    hooks
        .transform_limits
        .as_ref()
        .map_or_else(TransformLimits::default, |c| {
            limits::transform_limits(
                c,
                TransformLimits::default(),
                &key!(HooksConfig.transform_limits),
                problems,
            )
        })
}

/// `hooks.capture` over the defaults.
fn capture(hooks: &HooksConfig, problems: &mut Vec<ConfigError>) -> CapturePolicy {
    hooks
        .capture
        .as_ref()
        .map_or_else(CapturePolicy::default, |c| {
            capture::capture_policy(
                c,
                &CapturePolicy::default(),
                false,
                &key!(HooksConfig.capture),
                problems,
            )
        })
}

/// `hooks.*` values a mapping's own settings are checked against or fall back to.
struct MappingDefaults<'a> {
    sessions: &'a SessionKeyPolicy,
    limits: TransformLimits,
    capture: &'a CapturePolicy,
    files: ConfigFiles<'a>,
}

/// `hooks.mappings` and the presets' mappings, with the bounds and capture of those that set
/// their own, by mapping id.
#[derive(Default)]
struct BuiltMappings {
    mappings: Vec<Mapping>,
    limits: HashMap<String, TransformLimits>,
    capture: HashMap<String, CapturePolicy>,
    lanes: HashMap<String, Lane>,
    budgets: Budgets,
}

/// Builds `hooks.mappings` in order, then appends each preset's mappings.
fn mappings(
    hooks: &HooksConfig,
    defaults: &MappingDefaults,
    problems: &mut Vec<ConfigError>,
) -> BuiltMappings {
    let mut built = BuiltMappings::default();
    let mut ids = HashMap::new();
    for (i, config) in hooks.mappings.iter().enumerate() {
        let mut mapping = match super::mapping::mapping(i, config) {
            Ok(mapping) => mapping,
            Err(message) => {
                problems.push(ConfigError::invalid(key!(MappingConfig[i]), message));
                continue;
            }
        };
        let rule = config.match_rule.as_ref();
        let (headers, payload) = (
            rule.and_then(|r| r.headers.as_ref()),
            rule.and_then(|r| r.payload.as_ref()),
        );
        mapping.conditions = conditions(i, headers, payload, problems);
        check_id(i, &mapping, &mut ids, &hooks.presets, problems);
        if mapping.kind == ActionKind::Notify {
            super::notify::check_keys(i, config, problems);
        }
        check_session_mode(i, &mapping, defaults.sessions, problems);
        if let (Some(_), Some(own)) = (&mapping.transform, &config.transform) {
            let key = key!(MappingConfig[i].transform);
            if let Some(own) = limits::mapping_limits(own, defaults.limits, &key, problems) {
                built.limits.insert(mapping.id.clone(), own);
            }
        }
        if let Some(own) = &config.capture {
            let key = key!(MappingConfig[i].capture);
            let own = capture::capture_policy(own, defaults.capture, true, &key, problems);
            built.capture.insert(mapping.id.clone(), own);
        }
        if let Some(lane) = config
            .runs
            .as_ref()
            .and_then(|runs| super::lanes::lane(i, &mapping, runs, problems))
        {
            built.lanes.insert(mapping.id.clone(), lane);
        }
        if let Some(own) = &config.budget {
            built.budgets.add_mapping(i, &mapping, own, problems);
        }
        if let Some(signature) = &config.signature {
            mapping.signature = mapping_signature(i, &mapping, signature, defaults, problems);
        }
        if let Some(form) = &config.form {
            mapping.form = super::form::form_rule(i, &mapping, config, form, problems);
        }
        if let Some(batch) = &config.batch {
            mapping.batch = super::batch::batch_rule(i, &mapping, batch, problems);
        }
        built.mappings.push(mapping);
    }
    built.mappings.extend(
        hooks
            .presets
            .iter()
            .filter_map(|name| crate::mapping::preset(name)),
    );
    built
}

/// Ids name a mapping in logs, metrics, lockout keys and reused instances, so two mappings may
/// not share one, nor a mapping and a preset (whose mapping has the preset's name as its id:
/// sharing it would give one mapping's capture and limits to the other).
fn check_id(
    i: usize,
    mapping: &Mapping,
    ids: &mut HashMap<String, usize>,
    presets: &[String],
    problems: &mut Vec<ConfigError>,
) {
    if let Some(j) = ids.insert(mapping.id.clone(), i) {
        problems.push(ConfigError::invalid(
            key!(MappingConfig[i].id),
            format!("is already the id of hooks.mappings[{j}]"),
        ));
    }
    if let Some(preset) = presets.iter().find(|p| **p == mapping.id) {
        problems.push(ConfigError::invalid(
            key!(MappingConfig[i].id),
            format!("is the id of the preset {preset} (hooks.presets); mapping ids are unique across mappings and presets"),
        ));
    }
}

/// A persistent agent mapping needs a session key from somewhere.
fn check_session_mode(
    i: usize,
    mapping: &Mapping,
    sessions: &SessionKeyPolicy,
    problems: &mut Vec<ConfigError>,
) {
    if mapping.session_mode == SessionMode::Persistent
        && mapping.kind == ActionKind::Agent
        && mapping.session_key_template().is_none()
        && sessions.default_key.is_none()
        && mapping.transform.is_none()
    {
        problems.push(ConfigError::invalid(
            key!(MappingConfig[i].session_mode),
            "persistent hook mappings require sessionKey, hooks.defaultSessionKey, or a transform",
        ));
    }
}

/// Mapping `i`'s `signature`: only on a mapping of its own hook name.
fn mapping_signature(
    i: usize,
    mapping: &Mapping,
    signature: &SignatureConfig,
    defaults: &MappingDefaults,
    problems: &mut Vec<ConfigError>,
) -> Option<SignatureRule> {
    let key = key!(MappingConfig[i].signature);
    match mapping.path() {
        None => problems.push(ConfigError::invalid(&key, "needs the mapping's match.path")),
        // Those names are the built-in endpoints, which a mapping never serves.
        Some("wake" | "agent") => problems.push(ConfigError::invalid(
            &key,
            "cannot be used on the built-in wake and agent hooks",
        )),
        Some(_) => {}
    }
    signature_rule(signature, &key, defaults.files, problems)
}

/// A key the payload chooses must at least be confined to known prefixes.
fn check_session_prefixes(
    enabled: bool,
    sessions: &SessionKeyPolicy,
    mappings: &[Mapping],
    problems: &mut Vec<ConfigError>,
) {
    if enabled
        && sessions.prefixes.is_empty()
        && crate::mapping::reachable_templated_session_keys(mappings)
            .next()
            .is_some()
    {
        problems.push(ConfigError::Refused(
            "hooks.allowedSessionKeyPrefixes is required when a hook mapping sessionKey uses templates, even if hooks.allowRequestSessionKey=true".into(),
        ));
    }
}

/// `agents.defaults.models`: the model allowlist with its aliases.
fn model_allowlist(models: &BTreeMap<String, ModelEntryConfig>) -> ModelAllowlist {
    ModelAllowlist::new(
        models
            .iter()
            .map(|(id, entry)| (id.clone(), entry.alias.clone()))
            .collect(),
    )
}

/// `hooks.defaultSessionKey`, `allowRequestSessionKey` and `allowedSessionKeyPrefixes`, the
/// default key permitted by the prefixes.
fn session_policy(hooks: &HooksConfig, problems: &mut Vec<ConfigError>) -> SessionKeyPolicy {
    let prefixes: Vec<String> = hooks
        .allowed_session_key_prefixes
        .iter()
        .flatten()
        .map(|p| p.trim().to_lowercase())
        .filter(|p| !p.is_empty())
        .collect();
    let default_key = hooks
        .default_session_key
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(String::from);
    let policy = SessionKeyPolicy {
        default_key,
        allow_request_key: hooks.allow_request_session_key,
        prefixes,
    };
    if !policy.prefixes.is_empty() {
        match &policy.default_key {
            Some(key) if !policy.permits(key) => problems.push(ConfigError::Refused(
                "hooks.defaultSessionKey must match hooks.allowedSessionKeyPrefixes".into(),
            )),
            None if !policy.permits("hook:example") => problems.push(ConfigError::Refused(
                "hooks.allowedSessionKeyPrefixes must include 'hook:' when hooks.defaultSessionKey is unset"
                    .into(),
            )),
            _ => {}
        }
    }
    policy
}
