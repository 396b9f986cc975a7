//! Configuration: the JSON5 file, `${ENV}` and `{ "file": ... }` secrets, validation into
//! [`Settings`], and live reload that swaps a whole new `Settings` in at once.

mod confine;
mod load;
pub mod model;
mod reload;
mod settings;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

pub use confine::{module_path, transforms_root};
pub use load::{parse_document, read_document};
pub use reload::watch;
pub use settings::{HookSettings, Settings, normalize_hooks_path};

/// A problem with the configuration. Every message names the key it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("invalid JSON5: {0}")]
    Syntax(String),
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    /// A refusal whose fixed wording (behaviour §1) already names its keys.
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
    let document = read_document(path).map_err(|e| vec![e])?;
    Settings::build(document, &config_dir(path))
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
#[derive(Debug, Clone)]
pub struct LiveConfig {
    path: Arc<PathBuf>,
    current: Arc<ArcSwap<Settings>>,
}

impl LiveConfig {
    pub fn new(path: PathBuf, settings: Settings) -> Self {
        LiveConfig {
            path: Arc::new(path),
            current: Arc::new(ArcSwap::from_pointee(settings)),
        }
    }

    /// The settings in force now.
    pub fn current(&self) -> Arc<Settings> {
        self.current.load_full()
    }

    /// The file the settings come from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Loads the file again; valid settings replace the current ones, invalid ones are returned
    /// and the current ones kept.
    pub fn reload(&self) -> Result<(), Vec<ConfigError>> {
        let settings = load(&self.path)?;
        let old = self.current();
        if settings.state_dir != old.state_dir
            || (settings.bind.as_str(), settings.port) != (old.bind.as_str(), old.port)
        {
            tracing::warn!(
                "gateway.stateDir, gateway.bind and gateway.port take effect only after a restart"
            );
        }
        self.current.store(Arc::new(settings));
        Ok(())
    }
}
