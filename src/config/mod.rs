//! Configuration: the JSON5 file, `${ENV}` and `{ "file": ... }` secrets, validation into
//! [`Settings`], and live reload that swaps a whole new `Settings` in at once.

/// The key of a section type's field, as the file spells it (`gateway.maxConnections`), for a
/// check's message: `key!(GatewayConfig.max_connections)`, `key!(MappingConfig[i].session_mode)`
/// for the element `i` of the list the section is in, `key!(StoreConfig)` for the section. The
/// compiler checks that the field exists; its place and spelling come from the types' schema
/// ([`schema::key_of`]), so no check writes a key's path by hand.
macro_rules! key {
    ($section:ident $([$index:expr])? . $field:ident) => {{
        let _ = |section: &$section| {
            let _ = &section.$field;
        };
        $crate::config::schema::key_of::<$section>(None $(.or(Some($index)))?, stringify!($field))
    }};
    ($section:ident $([$index:expr])?) => {
        $crate::config::schema::key_of::<$section>(None $(.or(Some($index)))?, "")
    };
}

mod batch;
pub mod budget;
mod capture;
mod channels;
mod conditions;
mod confine;
mod connections;
mod delivery_warnings;
pub mod edge;
mod form;
mod hooks;
pub mod lanes;
mod limits;
mod load;
mod mapping;
pub mod mcp;
pub mod mcp_caps;
pub mod model;
mod notify;
mod openclaw;
pub mod outbound;
mod reload;
mod run_settings;
pub mod runtime;
pub mod schema;
pub mod sealing;
mod secret;
mod settings;
mod signature;
pub mod store;
mod subscribing;
mod suggest;
mod transforms;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

pub use confine::{module_path, transforms_root};
pub use connections::{ConnectionSettings, RECEIVE_GRACE};
pub use edge::{EdgeLink, EdgeRole, EdgeServe};
pub use hooks::{HookSettings, normalize_hooks_path};
pub use load::{
    Digest, Document, EnvLookup, file_digest, parse_document, parse_document_with, read_document,
};
pub use openclaw::ConfigNotice;
pub use reload::watch;
use secret::ConfigFiles;
pub use settings::{MissingChannels, Settings};
pub use subscribing::SubscribedMapping;
pub use transforms::{candidate_transforms, load_transforms};

/// A problem with the configuration. Every message names the key it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("invalid JSON5: {0}")]
    Syntax(String),
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    /// A refusal whose fixed wording (docs/configuration.md) already names its keys.
    #[error("{0}")]
    Refused(String),
}

impl ConfigError {
    pub(crate) fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Reads, parses and validates the configuration file at `path`.
pub fn load(path: &Path) -> Result<Settings, Vec<ConfigError>> {
    load_with_digest(path).map(|(settings, _)| settings)
}

fn load_with_digest(path: &Path) -> Result<(Settings, Digest), Vec<ConfigError>> {
    load_merged(path, &[])
}

/// The file at `path` with the mappings of `subscribed` after its own: built together, by the
/// same code, so a subscription is checked exactly as a mapping of the file is.
fn load_merged(
    path: &Path,
    subscribed: &[SubscribedMapping],
) -> Result<(Settings, Digest), Vec<ConfigError>> {
    let (mut document, digest) = read_document(path)?;
    let config_dir = config_dir(path);
    let from_file = subscribing::append(&mut document.config.hooks.mappings, subscribed)?;
    let mut settings = settings_of(document, ConfigFiles::operator(&config_dir))
        .map_err(|problems| subscribing::name_subscriptions(problems, from_file, subscribed))?;
    subscribing::retire(&mut settings, subscribed);
    Ok((settings, digest))
}

/// Parses and validates a candidate configuration's `text` as [`load`] does a file's, as if
/// it were in `config_dir`: checked as `hookgate check` checks a file and never put in force.
/// Its `${NAME}` references read its own `env.vars` only ([`EnvLookup::Sealed`]), and its
/// secret files are read inside `config_dir` only, every refusal in the same words
/// (`secret::CANDIDATE_UNREADABLE`). Its transforms are not loaded (see
/// [`candidate_transforms`]).
pub fn load_candidate(text: &str, config_dir: &Path) -> Result<Settings, Vec<ConfigError>> {
    let document = parse_document_with(text, EnvLookup::Sealed)?;
    settings_of(document, ConfigFiles::candidate(config_dir))
}

/// The settings `document` describes, or every problem of it.
fn settings_of(document: Document, files: ConfigFiles<'_>) -> Result<Settings, Vec<ConfigError>> {
    let mut problems = document.problems;
    match Settings::build_from(document.config, files) {
        Ok(mut settings) if problems.is_empty() => {
            settings.notices = document.notices;
            let warnings = delivery_warnings::delivery_notices(&settings);
            settings.notices.extend(warnings);
            settings.notices.extend(budget::budget_notices(&settings));
            settings
                .notices
                .extend(subscribing::public_url_notice(&settings));
            Ok(settings)
        }
        Ok(_) => Err(problems),
        Err(more) => {
            problems.extend(more);
            Err(problems)
        }
    }
}

/// The directory relative paths in the file are resolved against.
pub fn config_dir(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf())
}

/// The configuration in force, replaced whole on reload.
///
/// Readers take one [`Arc<Settings>`] per request with [`LiveConfig::current`] (a lock-free atomic
/// load), so a request never sees half of an old and half of a new configuration.
#[derive(Clone)]
pub struct LiveConfig {
    path: Arc<PathBuf>,
    current: Arc<ArcSwap<Settings>>,
    status: Arc<Mutex<ReloadStatus>>,
    admission: Admission,
    /// The mappings of subscriptions in force, built with the file's on every reload. Held
    /// while settings are built and swapped, so two changes never interleave.
    subscribed: Arc<Mutex<Vec<SubscribedMapping>>>,
}

/// A last check a new configuration must pass before it is taken, with effects of its own: the
/// transform host loads the modules it names here, so a configuration whose transforms do not
/// load is refused like any other invalid one.
pub type Admission = Arc<dyn Fn(&Settings) -> Result<(), Vec<ConfigError>> + Send + Sync>;

impl std::fmt::Debug for LiveConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveConfig")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// What became of the configuration file's changes, for operators.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadStatus {
    /// 1 for the configuration loaded at start, plus one per accepted reload.
    pub generation: u64,
    /// The digest of the file version last looked at, accepted or not.
    #[serde(skip)]
    pub digest: Option<Digest>,
    /// The problems of the last refused change, cleared by the next accepted one.
    pub last_error: Option<Vec<String>>,
}

impl LiveConfig {
    /// Loads the configuration file at `path` and admits it, or returns every problem found.
    pub fn open(path: PathBuf, admission: Admission) -> Result<Self, Vec<ConfigError>> {
        let (settings, digest) = load_with_digest(&path)?;
        admission(&settings)?;
        settings.log_notices();
        Ok(LiveConfig {
            admission,
            subscribed: Arc::default(),
            path: Arc::new(path),
            current: Arc::new(ArcSwap::from_pointee(settings)),
            status: Arc::new(Mutex::new(ReloadStatus {
                generation: 1,
                digest: Some(digest),
                last_error: None,
            })),
        })
    }

    /// The generation in force and the last refusal.
    pub fn status(&self) -> ReloadStatus {
        self.lock_status().clone()
    }

    fn lock_status(&self) -> std::sync::MutexGuard<'_, ReloadStatus> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The settings in force now.
    pub fn current(&self) -> Arc<Settings> {
        self.current.load_full()
    }

    /// The file the settings come from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Loads the file again; valid settings replace the current ones, invalid ones (and ones
    /// that change a key only a restart applies) are returned and the current ones kept.
    pub fn reload(&self) -> Result<(), Vec<ConfigError>> {
        let subscribed = self.lock_subscribed();
        self.rebuild(&subscribed, true)
    }

    fn lock_subscribed(&self) -> std::sync::MutexGuard<'_, Vec<SubscribedMapping>> {
        self.subscribed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `subscribed` in force with the file: the whole set of mappings is built again and
    /// swapped in at once, or, when any of it is refused, nothing changes and every problem is
    /// returned (a subscription's named as `subscription NAME`).
    pub fn set_subscribed(
        &self,
        subscribed: Vec<SubscribedMapping>,
    ) -> Result<(), Vec<ConfigError>> {
        let mut held = self.lock_subscribed();
        self.rebuild(&subscribed, false)?;
        *held = subscribed;
        Ok(())
    }

    /// Whether `subscribed` would be taken with the file as it is, without putting anything in
    /// force (its transforms are loaded, as admission does).
    pub fn check_subscribed(
        &self,
        subscribed: &[SubscribedMapping],
    ) -> Result<(), Vec<ConfigError>> {
        let (settings, _) = load_merged(&self.path, subscribed)?;
        (self.admission)(&settings)
    }

    /// The file read again with `subscribed`, admitted and swapped in. Only a reload of the
    /// file (`file_reload`) counts as a new generation, or records its refusal.
    fn rebuild(
        &self,
        subscribed: &[SubscribedMapping],
        file_reload: bool,
    ) -> Result<(), Vec<ConfigError>> {
        // Restart-only keys are checked before admission, which loads the transforms the new
        // settings name and so must only run for settings that will be taken.
        let loaded = load_merged(&self.path, subscribed).and_then(|(settings, digest)| {
            let needs_restart = restart_only_changes(&self.current(), &settings);
            if !needs_restart.is_empty() {
                return Err(needs_restart);
            }
            (self.admission)(&settings).map(|()| (settings, digest))
        });
        let (settings, digest) = match loaded {
            Ok(loaded) => loaded,
            Err(problems) if file_reload => {
                let mut status = self.lock_status();
                status.digest = file_digest(&self.path);
                status.last_error = Some(problems.iter().map(ToString::to_string).collect());
                return Err(problems);
            }
            Err(problems) => return Err(problems),
        };
        let mut status = self.lock_status();
        // A subscription's change that happens to take a new version of the file takes it as
        // a reload would.
        let new_file = file_reload || status.digest != Some(digest);
        if new_file {
            settings.log_notices();
            status.generation += 1;
            status.last_error = None;
        }
        status.digest = Some(digest);
        self.current.store(Arc::new(settings));
        Ok(())
    }
}

/// The keys whose change a running server cannot take: each is named, and the reload refused
/// whole, so that a configuration never half-applies. Which keys they are is said on their
/// fields ([`schema::restart_only`]); every other key takes effect on reload.
fn restart_only_changes(old: &Settings, new: &Settings) -> Vec<ConfigError> {
    let mut problems: Vec<ConfigError> = schema::restart_only()
        .filter(|key| key.reload != schema::RESTART_IF_LARGER && changed(&key.path, old, new))
        .map(|key| ConfigError::invalid(key.path.as_str(), format!("changed; {RESTART}")))
        .collect();
    let (old_pool, new_pool) = (old.engine_limits(), new.engine_limits());
    if new_pool.memory_bytes > old_pool.memory_bytes {
        problems.push(memory_growth(old_pool.memory_bytes, new));
    }
    problems
}

/// Whether the restart-only key at `path` differs between `old` and `new` in a way the running
/// server cannot take. A key with no comparison here fails the test that walks them all.
fn changed(path: &str, old: &Settings, new: &Settings) -> bool {
    let nats = matches!(old.store, store::StoreSettings::Nats(_));
    match path {
        "gateway.stateDir" => old.state_dir != new.state_dir,
        "gateway.store" => old.store != new.store,
        "gateway.bind" => old.bind != new.bind,
        "gateway.port" => old.port != new.port,
        "gateway.groupCommit" => old.group_commit != new.group_commit,
        "gateway.mode" => {
            std::mem::discriminant(&old.runtime.mode) != std::mem::discriminant(&new.runtime.mode)
        }
        // On a NATS store the consumers' pull slots and ack wait are set from these at start.
        "agents.defaults.maxConcurrent" => {
            nats && old.runtime.max_concurrent != new.runtime.max_concurrent
        }
        "agents.defaults.timeoutSeconds" => {
            nats && old.runtime.run_timeout != new.runtime.run_timeout
        }
        // The transform engine's call slots and instance pool are sized at start; a mapping's
        // own `maxConcurrent` is refused when read.
        "hooks.transformLimits.maxConcurrent" => {
            old.engine_limits().max_concurrent != new.engine_limits().max_concurrent
        }
        "hooks.mappings[].transform.limits.maxConcurrent" => false,
        // The role, the edge's queue bounds and the link's worker are set up at start; the
        // edge's routes and pull token are read per request.
        "edge.serve" => old.edge.serve_differs(&new.edge),
        "edge.link" => old.edge.link() != new.edge.link(),
        _ => true,
    }
}

/// What a refused reload says of a change that only a restart can take.
const RESTART: &str = "takes effect only after a restart, so the reload was refused and the running configuration kept";

/// The key that asks for more memory per call than the engine's instance pool was sized for at
/// start: `hooks.transformLimits.memoryBytes` when it grew, else the first mapping whose own
/// limits (or, for a JavaScript module, the 64 MiB it gets at least) pass the pool, which an
/// operator adding a first JavaScript mapping has not written anywhere.
fn memory_growth(pool_bytes: usize, new: &Settings) -> ConfigError {
    const DEFAULTS: &str = "hooks.transformLimits.memoryBytes";
    let Some(hooks) = &new.hooks else {
        return ConfigError::invalid(DEFAULTS, format!("changed; {RESTART}"));
    };
    if hooks.transform_limits.memory_bytes > pool_bytes {
        return ConfigError::invalid(DEFAULTS, format!("changed; {RESTART}"));
    }
    let growing = hooks
        .mappings
        .iter()
        .position(|m| hooks.limits_for(m).memory_bytes > pool_bytes);
    match growing {
        Some(i) => ConfigError::invalid(
            format!("hooks.mappings[{i}].transform"),
            format!(
                "needs more memory per call than the transform engine was sized for at start (a JavaScript module gets 64 MiB at least); {RESTART}"
            ),
        ),
        None => ConfigError::invalid(DEFAULTS, format!("changed; {RESTART}")),
    }
}

/// A duration key given in seconds: greater than 0 and at most an hour.
fn seconds(
    value: Option<f64>,
    key: &str,
    default: Duration,
    problems: &mut Vec<ConfigError>,
) -> Duration {
    match value {
        None => default,
        Some(s) if s.is_finite() && s > 0.0 && s <= model::MAX_SECONDS => {
            Duration::from_secs_f64(s)
        }
        Some(_) => {
            problems.push(ConfigError::invalid(
                key,
                "must be a number of seconds greater than 0 and at most 3600",
            ));
            default
        }
    }
}

#[cfg(test)]
mod restart_tests {
    use super::*;

    /// Every key its field calls restart-only has a comparison in [`changed`]: an unknown one
    /// would refuse every reload, which this catches before a release does.
    #[test]
    fn every_restart_only_key_is_compared() {
        let settings = load_candidate("{}", Path::new(".")).unwrap();
        for key in schema::restart_only() {
            if key.reload != schema::RESTART_IF_LARGER {
                assert!(!changed(&key.path, &settings, &settings), "{}", key.path);
            }
        }
    }
}
