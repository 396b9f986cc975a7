//! From the file as written to the [`Settings`] the server runs on: secrets read, values
//! normalised, every startup refusal of docs/configuration.md checked. All problems are collected, not just
//! the first, so that `hookgate check` can list them together.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::confine;
use super::connections::ConnectionSettings;
use super::limits;
use super::model::{FileConfig, HooksConfig, SecretValue, SignatureConfig};
use super::runtime::{RuntimeSettings, runtime_settings};
use super::secret::secret;
use super::{ConfigError, ConfigNotice, seconds};
use crate::client::TrustedProxies;
use crate::hook::capture::CapturePolicy;
use crate::hook::credentials::CredentialHeaders;
use crate::hook::policy::{AllowedAgents, normalize_agent_id};
use crate::hook::signature::{DEFAULT_TOLERANCE, Encoding, Scheme, SignatureRule, decode_secret};
use crate::hook::{AgentDirectory, HookPolicy, ModelAllowlist, SessionKeyPolicy};
use crate::mapping::Mapping;
use crate::transform::{TransformLimits, TransformSet};

/// Default `hooks.path`.
pub const DEFAULT_HOOKS_PATH: &str = "/hooks";
/// Default `hooks.maxBodyBytes`: 256 KiB.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 256 * 1024;
/// Default time a client has to send its whole body.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Paths the server itself answers; the hook prefix may not shadow them.
const RESERVED_PATHS: &[&str] = &[
    "/api", "/livez", "/healthz", "/readyz", "/metrics", "/console",
];
/// The presets hookgate ships.
pub const KNOWN_PRESETS: &[&str] = &["gmail"];

/// The validated, normalised configuration. Immutable: a reload builds a new one.
#[derive(Debug)]
pub struct Settings {
    /// The directory of the configuration file; relative paths are resolved against it.
    pub config_dir: PathBuf,
    pub bind: String,
    pub port: u16,
    /// Guards the operator API; `None` leaves the API closed to everyone.
    pub gateway_token: Option<String>,
    /// Proxies whose forwarding header names the client, and which header that is.
    pub trusted_proxies: TrustedProxies,
    pub state_dir: PathBuf,
    pub group_commit: bool,
    /// The embedded SQLite store or a NATS JetStream cluster.
    pub store: super::store::StoreSettings,
    pub connections: ConnectionSettings,
    /// `/metrics` without the gateway token.
    pub metrics_public: bool,
    /// `None` when `hooks.enabled` is false: the prefix is then not served at all.
    pub hooks: Option<HookSettings>,
    pub agents: AgentDirectory,
    pub runtime: RuntimeSettings,
    /// OpenClaw keys of the file that hookgate took in its own form or left out, and what of
    /// it loses replies.
    pub notices: Vec<ConfigNotice>,
    /// The channels this configuration has logged as not configured, once each.
    pub missing_channels: super::MissingChannels,
}

impl Settings {
    /// Logs the notices, one warning each: at start and after a reload.
    pub fn log_notices(&self) {
        for notice in &self.notices {
            tracing::warn!(key = %notice.key, "{}", notice.message);
        }
    }

    /// What the transform engine is sized for at start: its call slots and the memory of its
    /// instance pool (`hooks.transformLimits` with the largest memory cap of any mapping).
    pub fn engine_limits(&self) -> TransformLimits {
        self.hooks
            .as_ref()
            .map_or_else(TransformLimits::default, HookSettings::engine_limits)
    }
}

/// The webhook endpoint's settings, present only when hooks are enabled.
#[derive(Debug)]
pub struct HookSettings {
    pub token: String,
    /// Normalised: a leading `/`, no trailing `/`, never `/` alone.
    pub path: String,
    pub max_body_bytes: u64,
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

    /// Every transform module the mappings name, once each, with the key that names it first.
    pub fn transform_modules(&self) -> Vec<(String, String)> {
        let mut seen = Vec::<(String, String)>::new();
        for (i, mapping) in self.mappings.iter().enumerate() {
            if let Some(spec) = &mapping.transform {
                if !seen.iter().any(|(m, _)| *m == spec.module) {
                    seen.push((
                        spec.module.clone(),
                        format!("hooks.mappings[{i}].transform.module"),
                    ));
                }
            }
        }
        seen
    }
}

impl Settings {
    /// Validates `file` (read from a file in `config_dir`) into settings, or every problem found.
    pub fn build(file: FileConfig, config_dir: &Path) -> Result<Settings, Vec<ConfigError>> {
        let mut problems = Vec::new();
        let gateway_token = secret(
            file.gateway.auth.as_ref().and_then(|a| a.token.clone()),
            "gateway.auth.token",
            config_dir,
            &mut problems,
        );
        let trusted_proxies = super::connections::trusted_proxies(&file.gateway, &mut problems);
        let connections = ConnectionSettings::build(&file.gateway, &mut problems);
        let agents = agent_directory(&file);
        let runtime = runtime_settings(&file, config_dir, &mut problems);
        let store = super::store::store_settings(&file, &mut problems);
        let hooks = hook_settings(
            file.hooks,
            &file.agents.defaults.models,
            &agents,
            gateway_token.as_deref(),
            config_dir,
            &mut problems,
        );
        let bind = file.gateway.bind.unwrap_or_else(|| "127.0.0.1".into());
        if bind.parse::<std::net::IpAddr>().is_err() {
            // What `serve` would fail on, said by `check` too.
            problems.push(ConfigError::invalid(
                "gateway.bind",
                "must be an IP address, or one of loopback, lan, auto, custom",
            ));
        }
        let state_dir = config_dir.join(file.gateway.state_dir.as_deref().unwrap_or("state"));
        if confine::is_within(&state_dir, &confine::transforms_root(config_dir)) {
            // The compile cache in the state directory holds native code that hookgate loads
            // unchecked; whoever may drop transforms must not be able to write there.
            problems.push(ConfigError::invalid(
                "gateway.stateDir",
                "must not be inside the transforms root",
            ));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Settings {
            config_dir: config_dir.to_path_buf(),
            bind,
            port: file.gateway.port.unwrap_or(8787),
            gateway_token,
            trusted_proxies,
            state_dir,
            group_commit: file.gateway.group_commit.unwrap_or(true),
            store,
            connections,
            metrics_public: file.gateway.metrics.as_ref().is_some_and(|m| m.public),
            hooks,
            agents,
            runtime,
            notices: Vec::new(),
            missing_channels: super::MissingChannels::default(),
        })
    }
}

fn agent_directory(file: &FileConfig) -> AgentDirectory {
    let list = &file.agents.list;
    let ids: Vec<String> = list.iter().map(|a| normalize_agent_id(&a.id)).collect();
    let default_id = list
        .iter()
        .position(|a| a.default)
        .or((!list.is_empty()).then_some(0))
        .map_or_else(|| "main".to_string(), |i| ids[i].clone());
    let mut known: BTreeSet<String> = ids.into_iter().collect();
    known.insert(default_id.clone());
    let allowed = match &file.hooks.allowed_agent_ids {
        None => AllowedAgents::Any,
        Some(ids) if ids.iter().any(|id| id.trim() == "*") => AllowedAgents::Any,
        Some(ids) => AllowedAgents::Only(
            ids.iter()
                .filter(|id| !id.trim().is_empty())
                .map(|id| normalize_agent_id(id))
                .collect(),
        ),
    };
    AgentDirectory::new(known, default_id, allowed)
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

fn hook_settings(
    hooks: HooksConfig,
    models: &std::collections::BTreeMap<String, super::model::ModelEntryConfig>,
    agents: &AgentDirectory,
    gateway_token: Option<&str>,
    config_dir: &Path,
    problems: &mut Vec<ConfigError>,
) -> Option<HookSettings> {
    let token = secret(hooks.token.clone(), "hooks.token", config_dir, problems);
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
    let path = normalize_hooks_path(hooks.path.as_deref());
    match path.as_deref() {
        None => problems.push(ConfigError::invalid("hooks.path", "must not be '/'")),
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
    let max_body_bytes = hooks.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES);
    if max_body_bytes == 0 {
        problems.push(ConfigError::invalid(
            "hooks.maxBodyBytes",
            "must be greater than 0",
        ));
    }
    let body_timeout = seconds(
        hooks.body_timeout_seconds,
        "hooks.bodyTimeoutSeconds",
        DEFAULT_BODY_TIMEOUT,
        problems,
    );
    let sessions = session_policy(&hooks, problems);
    for (i, preset) in hooks.presets.iter().enumerate() {
        if !KNOWN_PRESETS.contains(&preset.as_str()) {
            problems.push(ConfigError::invalid(
                format!("hooks.presets[{i}]"),
                format!("must be one of {}", KNOWN_PRESETS.join(", ")),
            ));
        } else if hooks.presets[..i].contains(preset) {
            problems.push(ConfigError::invalid(
                format!("hooks.presets[{i}]"),
                "names a preset listed before it",
            ));
        }
    }
    let transforms_dir = confine::transforms_dir(config_dir, hooks.transforms_dir.as_deref())
        .map_err(|e| problems.push(e))
        .ok();
    if let Some(dir) = &transforms_dir {
        // A missing directory fails each of its modules: said once, with how the path resolved.
        let named = hooks
            .transforms_dir
            .as_deref()
            .is_some_and(|d| !d.trim().is_empty());
        if named && hooks.mappings.iter().any(|m| m.transform.is_some()) {
            if let Err(e) = confine::transforms_dir_exists(config_dir, dir) {
                problems.push(e);
            }
        }
        for (i, mapping) in hooks.mappings.iter().enumerate() {
            if let Some(transform) = &mapping.transform {
                let key = format!("hooks.mappings[{i}].transform.module");
                if let Err(e) = confine::module_path(dir, &transform.module, &key) {
                    problems.push(e);
                }
            }
        }
    }
    let transform_limits =
        hooks
            .transform_limits
            .as_ref()
            .map_or_else(TransformLimits::default, |c| {
                limits::transform_limits(
                    c,
                    TransformLimits::default(),
                    "hooks.transformLimits",
                    problems,
                )
            });
    let capture = hooks
        .capture
        .as_ref()
        .map_or_else(CapturePolicy::default, |c| {
            super::capture::capture_policy(
                c,
                &CapturePolicy::default(),
                false,
                "hooks.capture",
                problems,
            )
        });
    let mut mapping_capture = HashMap::new();
    let mut mappings = Vec::new();
    let mut mapping_limits = HashMap::new();
    let mut ids = HashMap::new();
    for (i, config) in hooks.mappings.iter().enumerate() {
        match super::mapping::mapping(i, config) {
            Ok(mut mapping) => {
                // Ids name a mapping in logs, metrics, lockout keys and reused instances, so
                // two mappings may not share one.
                if let Some(j) = ids.insert(mapping.id.clone(), i) {
                    problems.push(ConfigError::invalid(
                        format!("hooks.mappings[{i}].id"),
                        format!("is already the id of hooks.mappings[{j}]"),
                    ));
                }
                if let Some(preset) = hooks.presets.iter().find(|p| **p == mapping.id) {
                    // A preset's mapping has its preset's name as its id: sharing it would
                    // give one mapping's capture and limits to the other.
                    problems.push(ConfigError::invalid(
                        format!("hooks.mappings[{i}].id"),
                        format!("is the id of the preset {preset} (hooks.presets); mapping ids are unique across mappings and presets"),
                    ));
                }
                let persistent = mapping.session_mode == crate::hook::SessionMode::Persistent;
                if persistent
                    && mapping.kind == crate::mapping::ActionKind::Agent
                    && mapping.session_key_template().is_none()
                    && sessions.default_key.is_none()
                    && mapping.transform.is_none()
                {
                    problems.push(ConfigError::invalid(
                        format!("hooks.mappings[{i}].sessionMode"),
                        "persistent hook mappings require sessionKey, hooks.defaultSessionKey, or a transform",
                    ));
                }
                if let (Some(_), Some(own)) = (&mapping.transform, &config.transform) {
                    let key = format!("hooks.mappings[{i}].transform");
                    if let Some(own) = limits::mapping_limits(own, transform_limits, &key, problems)
                    {
                        mapping_limits.insert(mapping.id.clone(), own);
                    }
                }
                if let Some(own) = &config.capture {
                    let key = format!("hooks.mappings[{i}].capture");
                    let own = super::capture::capture_policy(own, &capture, true, &key, problems);
                    mapping_capture.insert(mapping.id.clone(), own);
                }
                if let Some(signature) = &config.signature {
                    let key = format!("hooks.mappings[{i}].signature");
                    match mapping.path() {
                        None => problems
                            .push(ConfigError::invalid(&key, "needs the mapping's match.path")),
                        // Those names are the built-in endpoints, which a mapping never serves.
                        Some("wake" | "agent") => problems.push(ConfigError::invalid(
                            &key,
                            "cannot be used on the built-in wake and agent hooks",
                        )),
                        Some(_) => {}
                    }
                    mapping.signature = signature_rule(signature, &key, config_dir, problems);
                }
                mappings.push(mapping);
            }
            Err(message) => problems.push(ConfigError::invalid(
                format!("hooks.mappings[{i}]"),
                message,
            )),
        }
    }
    mappings.extend(
        hooks
            .presets
            .iter()
            .filter_map(|name| crate::mapping::preset(name)),
    );
    if hooks.enabled
        && sessions.prefixes.is_empty()
        && crate::mapping::reachable_templated_session_keys(&mappings)
            .next()
            .is_some()
    {
        // A key the payload chooses must at least be confined to known prefixes.
        problems.push(ConfigError::Refused(
            "hooks.allowedSessionKeyPrefixes is required when a hook mapping sessionKey uses templates, even if hooks.allowRequestSessionKey=true".into(),
        ));
    }
    let policy = HookPolicy {
        agents: agents.clone(),
        sessions,
        models: ModelAllowlist::new(
            models
                .iter()
                .map(|(id, entry)| (id.clone(), entry.alias.clone()))
                .collect(),
        ),
    };
    if !hooks.enabled {
        return None;
    }
    let credentials = CredentialHeaders::of(mappings.iter().filter_map(|m| m.signature.as_ref()));
    Some(HookSettings {
        token: token?,
        path: path?,
        max_body_bytes,
        body_timeout,
        policy,
        presets: hooks.presets,
        mappings,
        transforms_dir: transforms_dir?,
        transform_limits,
        mapping_limits,
        transforms: OnceLock::new(),
        capture,
        mapping_capture,
        credentials,
    })
}

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

/// A duration in seconds, greater than 0 and at most an hour.
/// A mapping's `signature` with its secrets read and decoded.
fn signature_rule(
    config: &SignatureConfig,
    key: &str,
    config_dir: &Path,
    problems: &mut Vec<ConfigError>,
) -> Option<SignatureRule> {
    let scheme = match config.scheme.trim() {
        "hmac-sha256" => {
            let Some(header) = config
                .header
                .as_deref()
                .map(str::trim)
                .filter(|h| !h.is_empty())
            else {
                problems.push(ConfigError::invalid(
                    format!("{key}.header"),
                    "is required for hmac-sha256",
                ));
                return None;
            };
            let encoding = match config.encoding.as_deref().unwrap_or("hex") {
                "hex" => Encoding::Hex,
                "base64" => Encoding::Base64,
                _ => {
                    problems.push(ConfigError::invalid(
                        format!("{key}.encoding"),
                        "must be hex or base64",
                    ));
                    return None;
                }
            };
            Scheme::HmacSha256 {
                header: header.to_ascii_lowercase(),
                encoding,
                prefix: config.prefix.clone().unwrap_or_default(),
            }
        }
        name => match Scheme::named(name) {
            Some(scheme) => scheme,
            None => {
                problems.push(ConfigError::invalid(
                    format!("{key}.scheme"),
                    format!("must be one of {}", Scheme::NAMES),
                ));
                return None;
            }
        },
    };
    let listed: Vec<(String, SecretValue)> = config
        .secret
        .iter()
        .map(|s| (format!("{key}.secret"), s.clone()))
        .chain(
            config
                .secrets
                .iter()
                .flatten()
                .enumerate()
                .map(|(j, s)| (format!("{key}.secrets[{j}]"), s.clone())),
        )
        .collect();
    if listed.is_empty() {
        problems.push(ConfigError::invalid(key, "needs secret or secrets"));
        return None;
    }
    let mut secrets = Vec::new();
    for (secret_key, value) in listed {
        let Some(text) = secret(Some(value), &secret_key, config_dir, problems) else {
            problems.push(ConfigError::invalid(&secret_key, "must not be blank"));
            continue;
        };
        match decode_secret(&scheme, text.trim()) {
            Some(bytes) => secrets.push(bytes),
            None => problems.push(ConfigError::invalid(
                &secret_key,
                "is malformed (standard-webhooks secrets are whsec_<base64>)",
            )),
        }
    }
    Some(SignatureRule {
        scheme,
        secrets,
        tolerance: match config.tolerance_seconds {
            None => DEFAULT_TOLERANCE,
            Some(seconds @ 1..=3600) => Duration::from_secs(seconds),
            Some(_) => {
                problems.push(ConfigError::invalid(
                    format!("{key}.toleranceSeconds"),
                    "must be from 1 to 3600",
                ));
                DEFAULT_TOLERANCE
            }
        },
        token_accepted: config.accept_token.unwrap_or(true),
    })
}
