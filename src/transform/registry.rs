//! The transforms in use: loaded from the transforms directory through a cap-std handle, checked
//! against the world, pre-instantiated, and replaced when their file changes.

use std::collections::HashMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptionsExt as _};
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use super::builder::Builder;
use super::cache::CompileCache;
use super::contract::{Contract, TransformPre};
use super::engine::TransformEngine;
use super::module_file;
use super::warm::IdleInstance;
use crate::mapping::javascript_component;

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
    pub(super) pre: TransformPre,
    digest: [u8; 32],
    /// What built it: a JavaScript component of an older SDK keeps no instance between calls.
    pub builder: Builder,
    /// Idle instances of mappings with `transform.reuse` above 1 (JavaScript modules' by
    /// default), by mapping id, each with the limits it was made for: never shared between
    /// mappings, and dropped with this module's version. Keyed by configured mapping ids,
    /// hashed without SipHash: no key comes from a sender.
    pub(super) warm: std::sync::Mutex<FxHashMap<String, Vec<IdleInstance>>>,
    /// Calls of this version of the file, kept across reloads that keep its code.
    pub(super) stats: Arc<CallStats>,
}

/// How a module's calls went, for operators.
#[derive(Debug, Default)]
pub struct CallStats {
    calls: std::sync::atomic::AtomicU64,
    failures: std::sync::atomic::AtomicU64,
    last_failure: std::sync::Mutex<Option<String>>,
}

impl CallStats {
    /// Counts one call, and remembers why it failed when it did.
    pub(super) fn record<T>(&self, result: &Result<T, super::TransformFailure>) {
        use std::sync::atomic::Ordering::Relaxed;
        self.calls.fetch_add(1, Relaxed);
        if let Err(failure) = result {
            self.failures.fetch_add(1, Relaxed);
            let text = format!("{} ({failure})", failure.cause());
            *self
                .last_failure
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(text);
        }
    }
}

/// Why a module could not be loaded. The message names the file.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{module}: {reason}")]
pub struct LoadError {
    pub module: String,
    pub reason: String,
}

/// A module in use, for operators (`GET /api/config`).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TransformStatus {
    pub module: String,
    /// SHA-256 of the version serving now.
    pub sha256: String,
    /// Why the file's latest content was refused, while the version above keeps serving.
    pub last_error: Option<String>,
    /// Calls of the version serving now, and how many failed.
    pub calls: u64,
    pub failures: u64,
    /// The cause of the latest failed call.
    pub last_failure: Option<String>,
    /// A JavaScript component built by an older SDK: each of its calls gets a fresh instance
    /// until it is rebuilt (docs/transforms.md#javascript-components-built-by-an-older-sdk).
    pub built_by_older_sdk: bool,
}

type FileStamp = (Option<std::time::SystemTime>, u64);

/// The transforms one configuration names, loaded from its transforms directory.
///
/// A configuration snapshot holds its set, so a request sees the mappings and the transforms of
/// one configuration. Replacing a module's file updates the set of the configuration in force,
/// one pointer swap per module: a call keeps the `Arc` it started with.
pub struct TransformSet {
    dir: Option<Dir>,
    /// Where `dir` is, for messages.
    path: PathBuf,
    /// By the module paths the configuration names (looked up per call: no SipHash).
    modules: RwLock<FxHashMap<String, Arc<LoadedTransform>>>,
    /// Why the latest change of a module's file was refused, until a later change loads.
    refused: RwLock<HashMap<String, String>>,
    /// The (modification time, length) of each file when last examined: unchanged files are not
    /// read again.
    examined: Mutex<HashMap<String, FileStamp>>,
}

impl std::fmt::Debug for TransformSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let modules: Vec<String> = read(&self.modules).keys().cloned().collect();
        f.debug_struct("TransformSet")
            .field("modules", &modules)
            .finish()
    }
}

impl LoadedTransform {
    /// The version of the contract the component was built against.
    pub fn contract(&self) -> Contract {
        self.pre.contract()
    }
}

impl TransformSet {
    /// The loaded transform for `module`, if the configuration names it.
    pub fn get(&self, module: &str) -> Option<Arc<LoadedTransform>> {
        read(&self.modules).get(module).cloned()
    }

    /// Every module, sorted by path.
    pub fn status(&self) -> Vec<TransformStatus> {
        let refused = read(&self.refused);
        let mut list: Vec<TransformStatus> = read(&self.modules)
            .values()
            .map(|t| TransformStatus {
                module: t.module.clone(),
                sha256: hex::encode(t.digest),
                last_error: refused.get(&t.module).cloned(),
                calls: t.stats.calls.load(std::sync::atomic::Ordering::Relaxed),
                failures: t.stats.failures.load(std::sync::atomic::Ordering::Relaxed),
                last_failure: t
                    .stats
                    .last_failure
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .clone(),
                built_by_older_sdk: t.builder.is_outdated(),
            })
            .collect();
        list.sort_by(|a, b| a.module.cmp(&b.module));
        list
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    // Maps of `Arc`s and strings: a panic elsewhere cannot leave them half-updated.
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

/// Loads transform sets and keeps the one in force up to date with its files.
pub struct TransformRegistry {
    engine: TransformEngine,
    cache: CompileCache,
    /// The set of the configuration in force (or about to be).
    current: RwLock<Option<Arc<TransformSet>>>,
    /// Serialises loading a new set with refreshing the current one.
    loading: Mutex<()>,
}

impl TransformRegistry {
    /// A registry whose compiled code is cached under `cache_dir`.
    pub fn new(engine: TransformEngine, cache_dir: PathBuf) -> Self {
        TransformRegistry {
            engine,
            cache: CompileCache::new(cache_dir),
            current: RwLock::new(None),
            loading: Mutex::new(()),
        }
    }

    pub fn engine(&self) -> &TransformEngine {
        &self.engine
    }

    /// The modules of the set in force.
    pub fn status(&self) -> Vec<TransformStatus> {
        read(&self.current)
            .as_ref()
            .map_or_else(Vec::new, |set| set.status())
    }

    /// Loads `modules` from `dir` (reusing unchanged ones from the set in force) and makes the
    /// result the set in force, or changes nothing and returns every module that failed.
    pub fn load_set(
        &self,
        dir: &Path,
        modules: &[String],
    ) -> Result<Arc<TransformSet>, Vec<LoadError>> {
        let _loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        let previous = read(&self.current).clone();
        let set = self.load(dir, modules, previous.as_deref())?;
        *write(&self.current) = Some(Arc::clone(&set));
        Ok(set)
    }

    /// Loads `modules` from `dir` as a set apart, which never becomes the set in force nor
    /// shares anything with it (its instances and call counts are its own): a candidate
    /// configuration's transforms, tried on recorded requests. Compiled code comes from the
    /// cache, so an unchanged module costs a read and a digest, not a compilation.
    pub fn load_candidate(
        &self,
        dir: &Path,
        modules: &[String],
    ) -> Result<Arc<TransformSet>, Vec<LoadError>> {
        self.load(dir, modules, None)
    }

    /// Loads `modules` from `dir`, reusing the compiled code of `previous`'s unchanged ones.
    fn load(
        &self,
        dir: &Path,
        modules: &[String],
        previous: Option<&TransformSet>,
    ) -> Result<Arc<TransformSet>, Vec<LoadError>> {
        let handle = if modules.is_empty() {
            None
        } else {
            let handle = open_dir(dir).map_err(|reason| {
                modules
                    .iter()
                    .map(|m| LoadError {
                        module: m.clone(),
                        reason: reason.clone(),
                    })
                    .collect::<Vec<_>>()
            })?;
            Some(handle)
        };
        let mut loaded = FxHashMap::default();
        let mut errors = Vec::new();
        // Each file's stamp, taken before it is read: the refresh that follows the load then
        // reads and digests only what changed since (a change during the read moves the stamp),
        // rather than every module again at each start and reload.
        let examined = handle.as_ref().map_or_else(HashMap::new, |handle| {
            modules
                .iter()
                .filter_map(|m| Some((m.clone(), stamp(handle, m)?)))
                .collect()
        });
        if let Some(handle) = &handle {
            // Compiles run side by side: a configuration naming several JavaScript modules
            // (seconds each) starts in the time of the slowest.
            let results = in_parallel(modules, |module| {
                let reusable = previous.and_then(|set| set.get(module));
                self.load_one(handle, dir, module, reusable)
            });
            for (module, result) in modules.iter().zip(results) {
                match result {
                    Ok(transform) => {
                        loaded.insert(module.clone(), transform);
                    }
                    Err(err) => errors.push(err),
                }
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Arc::new(TransformSet {
            dir: handle,
            path: dir.to_path_buf(),
            modules: RwLock::new(loaded),
            refused: RwLock::new(HashMap::new()),
            examined: Mutex::new(examined),
        }))
    }

    /// Reloads every module of the set in force whose file changed. A module that no longer
    /// loads keeps its previous version; the failure is logged and reported in its status.
    pub fn refresh(&self) {
        let _loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        let Some(set) = read(&self.current).clone() else {
            return;
        };
        let Some(dir) = &set.dir else {
            return;
        };
        let modules: Vec<String> = read(&set.modules).keys().cloned().collect();
        for module in modules {
            if !self.changed(&set, dir, &module) {
                continue;
            }
            match self.load_one(dir, &set.path, &module, set.get(&module)) {
                Ok(fresh) => {
                    write(&set.refused).remove(&module);
                    let mut loaded = write(&set.modules);
                    if loaded
                        .get(&module)
                        .is_none_or(|old| old.digest != fresh.digest)
                    {
                        tracing::info!(%module, "transform replaced");
                        if fresh.builder.is_outdated() {
                            tracing::warn!(%module, "the new version was built by an older JavaScript SDK: each of its calls gets a fresh instance until it is rebuilt with `hookgate transform build`");
                        }
                        loaded.insert(module, fresh);
                    }
                }
                Err(err) => {
                    let mut refused = write(&set.refused);
                    if refused.get(&module) != Some(&err.reason) {
                        tracing::error!(%err, "transform change refused; the previous version keeps serving");
                        refused.insert(module, err.reason);
                    }
                }
            }
        }
    }

    /// Whether the file's (modification time, length) differs from when it was last examined.
    fn changed(&self, set: &TransformSet, dir: &Dir, module: &str) -> bool {
        let Some(stamp) = stamp(dir, module) else {
            return true;
        };
        let mut examined = set.examined.lock().unwrap_or_else(|p| p.into_inner());
        examined.insert(module.to_string(), stamp) != Some(stamp)
    }

    /// Loads one module, reusing `current` when the file's content is unchanged.
    fn load_one(
        &self,
        dir: &Dir,
        dir_path: &Path,
        module: &str,
        current: Option<Arc<LoadedTransform>>,
    ) -> Result<Arc<LoadedTransform>, LoadError> {
        let fail = |reason: String| LoadError {
            module: module.to_string(),
            reason,
        };
        let max = module_file::max_module_bytes(self.engine.memory_bytes);
        let bytes = read_module(dir, dir_path, module, max).map_err(fail)?;
        let digest: [u8; 32] = Sha256::digest(&bytes).into();
        if let Some(current) = current.filter(|c| c.digest == digest) {
            // Same code, new configuration: compiled once, but idle instances stay with the old
            // configuration's version and are dropped with it, so a mapping renumbered or
            // reconfigured by the change never receives another's instance.
            return Ok(Arc::new(LoadedTransform {
                module: current.module.clone(),
                pre: current.pre.clone(),
                digest,
                builder: current.builder,
                warm: Default::default(),
                stats: Arc::clone(&current.stats),
            }));
        }
        let component = self
            .cache
            .component(self.engine.engine(), module, &digest, &bytes)
            .map_err(|e| fail(format!("not a valid WebAssembly component: {e:#}")))?;
        let pre = self.engine.prepare(&component).map_err(fail)?;
        Ok(Arc::new(LoadedTransform {
            module: module.to_string(),
            pre,
            digest,
            builder: Builder::of(&bytes, javascript_component(module).is_some()),
            warm: Default::default(),
            stats: Default::default(),
        }))
    }
}

impl TransformEngine {
    /// Checks a compiled component against the transform world and pre-instantiates it.
    fn prepare(&self, component: &Component) -> Result<TransformPre, String> {
        let contract = Contract::of(component, &self.engine)?;
        check_imports(component, &self.engine)?;
        let pre = self
            .linker
            .instantiate_pre(component)
            .map_err(|e| format!("cannot be linked: {e:#}"))?;
        TransformPre::new(contract, pre).map_err(|e| {
            format!(
                "does not implement the hookgate:transform@{} world: {e:#}",
                contract.as_str()
            )
        })
    }

    /// Compiles (or finds in `cache`) and prepares a component from a file anywhere: for
    /// `hookgate transform run`, where the author points at their build output.
    pub fn load_file(
        &self,
        path: &Path,
        cache: &CompileCache,
    ) -> Result<LoadedTransform, LoadError> {
        let module = path.display().to_string();
        let fail = |reason: String| LoadError {
            module: module.clone(),
            reason,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(module_file::OPEN_FLAGS)
            .open(path)
            .map_err(|e| fail(format!("cannot open: {e}")))?;
        let meta = file
            .metadata()
            .map_err(|e| fail(format!("cannot read: {e}")))?;
        let max = module_file::max_module_bytes(self.memory_bytes);
        let bytes = module_file::read(file, meta.is_file(), meta.len(), max).map_err(fail)?;
        let digest: [u8; 32] = Sha256::digest(&bytes).into();
        let component = cache
            .component(&self.engine, &module, &digest, &bytes)
            .map_err(|e| fail(format!("not a valid WebAssembly component: {e:#}")))?;
        let pre = self.prepare(&component).map_err(fail)?;
        Ok(LoadedTransform {
            module: module.clone(),
            pre,
            digest,
            builder: Builder::of(&bytes, false),
            warm: Default::default(),
            stats: Default::default(),
        })
    }
}

/// Opens `module` inside `dir` (never outside it: `Dir` refuses `..` and symlinks that leave it)
/// and reads it as a module file of at most `max` bytes.
fn read_module(dir: &Dir, dir_path: &Path, module: &str, max: u64) -> Result<Vec<u8>, String> {
    let component = component_name(module);
    if component != module && !dir.exists(component.as_ref()) {
        return Err(format!(
            "is JavaScript or TypeScript, which hookgate runs as the WebAssembly component built from it, and there is no {component} beside it: build it with `hookgate transform build {source}`",
            source = dir_path.join(module).display(),
        ));
    }
    let mut options = cap_std::fs::OpenOptions::new();
    options.read(true).custom_flags(module_file::OPEN_FLAGS);
    let file = dir
        .open_with(component.as_ref(), &options)
        .map_err(|e| format!("cannot open: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    module_file::read(file, meta.is_file(), meta.len(), max)
}

/// The (modification time, length) of the file `module` stands for, if it can be read.
fn stamp(dir: &Dir, module: &str) -> Option<FileStamp> {
    let meta = dir.metadata(component_name(module).as_ref()).ok()?;
    Some((meta.modified().ok().map(|t| t.into_std()), meta.len()))
}

/// The file a module name stands for: itself, or the component built from a JavaScript source.
fn component_name(module: &str) -> std::borrow::Cow<'_, str> {
    javascript_component(module).map_or(module.into(), Into::into)
}

/// `f` of each item, in order, computed on up to as many threads as the machine has cores.
fn in_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, f(item)));
        }
    };
    let mut results: Vec<(usize, R)> = std::thread::scope(|scope| {
        // A worker that cannot be started (a process limit) leaves its share to the others and
        // to this thread.
        let workers: Vec<_> = (1..threads)
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, work).ok())
            .collect();
        let mut results = work();
        for worker in workers {
            results.extend(
                worker
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p)),
            );
        }
        results
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
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
