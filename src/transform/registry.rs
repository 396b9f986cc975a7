//! The transforms in use: loaded from the transforms directory through a cap-std handle, checked
//! against the world, pre-instantiated, and replaced when their file changes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use super::bindings::TransformPre;
use super::cache::CompileCache;
use super::engine::TransformEngine;
use super::host::HostState;

/// Interfaces a transform may import: its own contract and the WASI interfaces a `wasm32-wasip2`
/// guest's standard library needs, all backed by an empty context. Anything else (sockets,
/// HTTP) is refused at load with the import's name.
const ALLOWED_IMPORTS: &[&str] = &[
    "hookgate:transform/",
    "wasi:cli/",
    "wasi:io/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:filesystem/",
    "log",
];

/// A transform ready to instantiate.
pub struct LoadedTransform {
    /// The module path, relative to the transforms directory.
    pub module: String,
    pub(super) pre: TransformPre<HostState>,
    digest: [u8; 32],
}

/// Why a module could not be loaded. The message names the file.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{module}: {reason}")]
pub struct LoadError {
    pub module: String,
    pub reason: String,
}

/// The loaded transforms, by module path. Replacing one is a pointer swap: a request holds the
/// `Arc` it started with, so it never sees half of an old and half of a new version.
pub struct TransformRegistry {
    engine: TransformEngine,
    cache: CompileCache,
    dir: RwLock<Option<(PathBuf, Arc<Dir>)>>,
    loaded: RwLock<HashMap<String, Arc<LoadedTransform>>>,
    /// Why the latest change of a module's file was refused, until a later change loads.
    refused: RwLock<HashMap<String, String>>,
    /// The (modification time, length) of each file when last examined: unchanged files are not
    /// read again.
    examined: RwLock<HashMap<String, FileStamp>>,
}

type FileStamp = (Option<std::time::SystemTime>, u64);

/// A module in use, for operators (`GET /api/config`).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TransformStatus {
    pub module: String,
    /// SHA-256 of the version serving now.
    pub sha256: String,
    /// Why the file's latest content was refused, while the version above keeps serving.
    pub last_error: Option<String>,
}

impl TransformRegistry {
    /// A registry whose compiled code is cached under `cache_dir`.
    pub fn new(engine: TransformEngine, cache_dir: PathBuf) -> Self {
        TransformRegistry {
            engine,
            cache: CompileCache::new(cache_dir),
            dir: RwLock::new(None),
            loaded: RwLock::new(HashMap::new()),
            refused: RwLock::new(HashMap::new()),
            examined: RwLock::new(HashMap::new()),
        }
    }

    pub fn engine(&self) -> &TransformEngine {
        &self.engine
    }

    /// Every module in use, sorted by path.
    pub fn status(&self) -> Vec<TransformStatus> {
        let refused = self.refused.read().unwrap_or_else(|p| p.into_inner());
        let mut list: Vec<TransformStatus> = self
            .loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|t| TransformStatus {
                module: t.module.clone(),
                sha256: hex::encode(t.digest),
                last_error: refused.get(&t.module).cloned(),
            })
            .collect();
        list.sort_by(|a, b| a.module.cmp(&b.module));
        list
    }

    /// The loaded transform for `module`, if any.
    pub fn get(&self, module: &str) -> Option<Arc<LoadedTransform>> {
        self.loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(module)
            .cloned()
    }

    /// Loads exactly `modules` from `dir` (reusing unchanged ones) and makes them the set in use,
    /// or changes nothing and returns every module that failed.
    pub fn load_set(&self, dir: &Path, modules: &[String]) -> Result<(), Vec<LoadError>> {
        let handle = open_dir(dir).map_err(|reason| {
            modules
                .iter()
                .map(|m| LoadError {
                    module: m.clone(),
                    reason: reason.clone(),
                })
                .collect::<Vec<_>>()
        });
        let handle = match (handle, modules.is_empty()) {
            (Ok(handle), _) => Some(Arc::new(handle)),
            (Err(_), true) => None,
            (Err(errors), false) => return Err(errors),
        };
        let mut next = HashMap::new();
        let mut errors = Vec::new();
        for module in modules {
            let handle = handle.as_ref().expect("a directory when modules are named");
            match self.load_one(handle, module) {
                Ok(loaded) => {
                    next.insert(module.clone(), loaded);
                }
                Err(err) => errors.push(err),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        *self.dir.write().unwrap_or_else(|p| p.into_inner()) =
            handle.map(|h| (dir.to_path_buf(), h));
        *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = next;
        self.refused
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        Ok(())
    }

    /// Reloads every module whose file changed. A module that no longer loads keeps its previous
    /// version, and the failure is logged.
    pub fn refresh(&self) {
        let Some((_, dir)) = self.dir.read().unwrap_or_else(|p| p.into_inner()).clone() else {
            return;
        };
        let modules: Vec<String> = self
            .loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        for module in modules {
            let stamp = dir
                .metadata(&module)
                .ok()
                .map(|m| (m.modified().ok().map(|t| t.into_std()), m.len()));
            let mut examined = self.examined.write().unwrap_or_else(|p| p.into_inner());
            match stamp {
                Some(stamp) if examined.get(&module) == Some(&stamp) => continue,
                Some(stamp) => {
                    examined.insert(module.clone(), stamp);
                }
                None => {}
            }
            drop(examined);
            match self.load_one(&dir, &module) {
                Ok(fresh) => {
                    self.refused
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&module);
                    let mut loaded = self.loaded.write().unwrap_or_else(|p| p.into_inner());
                    let changed = loaded
                        .get(&module)
                        .is_none_or(|old| old.digest != fresh.digest);
                    if changed {
                        tracing::info!(%module, "transform replaced");
                        loaded.insert(module, fresh);
                    }
                }
                Err(err) => {
                    let mut refused = self.refused.write().unwrap_or_else(|p| p.into_inner());
                    if refused.get(&module) != Some(&err.reason) {
                        tracing::error!(%err, "transform change refused; the previous version keeps serving");
                        refused.insert(module, err.reason);
                    }
                }
            }
        }
    }

    /// Loads one module, reusing the current version when the file is unchanged.
    fn load_one(&self, dir: &Dir, module: &str) -> Result<Arc<LoadedTransform>, LoadError> {
        let fail = |reason: String| LoadError {
            module: module.to_string(),
            reason,
        };
        let bytes = dir
            .read(module)
            .map_err(|e| fail(format!("cannot read: {e}")))?;
        let digest: [u8; 32] = Sha256::digest(&bytes).into();
        if let Some(current) = self.get(module).filter(|c| c.digest == digest) {
            return Ok(current);
        }
        let component = self
            .cache
            .component(self.engine.engine(), &digest, &bytes)
            .map_err(|e| fail(format!("not a valid WebAssembly component: {e:#}")))?;
        let pre = self.engine.prepare(&component).map_err(fail)?;
        Ok(Arc::new(LoadedTransform {
            module: module.to_string(),
            pre,
            digest,
        }))
    }
}

impl TransformEngine {
    /// Checks a compiled component against the transform world and pre-instantiates it.
    fn prepare(&self, component: &Component) -> Result<TransformPre<HostState>, String> {
        check_imports(component, &self.engine)?;
        let pre = self
            .linker
            .instantiate_pre(component)
            .map_err(|e| format!("cannot be linked: {e:#}"))?;
        TransformPre::new(pre).map_err(|e| {
            format!("does not implement the hookgate:transform world (it must export `transform`): {e:#}")
        })
    }

    /// Compiles and prepares a component from a file anywhere, without the cache: for
    /// `hookgate transform run`, where the author points at their build output.
    pub fn load_file(&self, path: &Path) -> Result<LoadedTransform, LoadError> {
        let module = path.display().to_string();
        let fail = |reason: String| LoadError {
            module: module.clone(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read: {e}")))?;
        let component = Component::new(&self.engine, &bytes)
            .map_err(|e| fail(format!("not a valid WebAssembly component: {e:#}")))?;
        let pre = self.prepare(&component).map_err(fail)?;
        Ok(LoadedTransform {
            module: module.clone(),
            pre,
            digest: Sha256::digest(&bytes).into(),
        })
    }
}

fn open_dir(dir: &Path) -> Result<Dir, String> {
    Dir::open_ambient_dir(dir, ambient_authority())
        .map_err(|e| format!("cannot open transforms directory {}: {e}", dir.display()))
}

/// Entries ending in `/` allow a whole package namespace; others one exact name.
fn allows(allowed: &str, name: &str) -> bool {
    if allowed.ends_with('/') {
        name.starts_with(allowed)
    } else {
        name == allowed
    }
}

fn check_imports(component: &Component, engine: &wasmtime::Engine) -> Result<(), String> {
    let refused: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name)
        .filter(|name| !ALLOWED_IMPORTS.iter().any(|allowed| allows(allowed, name)))
        .map(String::from)
        .collect();
    if refused.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "imports what transforms may not use: {}",
            refused.join(", ")
        ))
    }
}
