//! The compiled-code cache: each component is compiled once per content and engine, and the native
//! code kept under `<stateDir>/transform-cache` so that restarts skip compilation.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wasmtime::Engine;
use wasmtime::component::Component;

/// The largest cache entry read. Compiled code is a few times its module's code, and the code
/// of a module is small whatever its file's size (a large module file is data: segments or a
/// heap snapshot, kept in the entry at their own size). An entry past this is read cut, found
/// unusable, and the module compiled again: a module whose data passes 1 GiB, which a mapping
/// granting that much memory may load, is compiled at every load rather than read.
const MAX_ENTRY_BYTES: u64 = 1024 * 1024 * 1024;

/// How long a compile runs before it is announced: most take less, and a JavaScript component
/// (1.6 MB, most of it the QuickJS runtime) takes about 3 s in a release build, which an operator
/// should not mistake for a hang.
const ANNOUNCE_AFTER: Duration = Duration::from_secs(1);

/// Compiles `bytes`, logging the compile; one that runs over [`ANNOUNCE_AFTER`] is announced
/// while it runs.
pub fn compile(engine: &Engine, name: &str, bytes: &[u8]) -> wasmtime::Result<Component> {
    let started = Instant::now();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let compiled = std::thread::scope(|scope| {
        let announcer = std::thread::Builder::new().spawn_scoped(scope, move || {
            // Disconnected: the compile ended first.
            let timeout = std::sync::mpsc::RecvTimeoutError::Timeout;
            if finished.recv_timeout(ANNOUNCE_AFTER) == Err(timeout) {
                tracing::info!(module = %name, bytes = bytes.len(), "compiling a transform (cached once compiled)");
            }
        });
        // Without a thread for it (a process limit), the compile goes unannounced.
        drop(announcer);
        let compiled = Component::new(engine, bytes);
        drop(done);
        compiled
    });
    if compiled.is_ok() {
        let elapsed_ms = started.elapsed().as_millis();
        tracing::info!(module = %name, bytes = bytes.len(), elapsed_ms, "transform compiled");
    }
    compiled
}

/// A directory of compiled components, named by the SHA-256 of the `.wasm` bytes and a hash of
/// the engine's compatibility settings. Only hookgate writes here.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
}

impl CompileCache {
    pub fn new(dir: PathBuf) -> Self {
        CompileCache { dir }
    }

    fn entry(&self, engine: &Engine, digest: &[u8; 32]) -> PathBuf {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hasher.finish();
        self.dir
            .join(format!("{}-{engine_key:016x}.cwasm", hex::encode(digest)))
    }

    /// The component for `bytes` (the file `name`): from the cache when present and loadable,
    /// else compiled (and then stored, best effort). A compile is logged with its name, size
    /// and duration, and announced when it takes over a second.
    pub fn component(
        &self,
        engine: &Engine,
        name: &str,
        digest: &[u8; 32],
        bytes: &[u8],
    ) -> wasmtime::Result<Component> {
        let entry = self.entry(engine, digest);
        match self.read_entry(&entry) {
            Ok(None) => {}
            Ok(Some(code)) => {
                // SAFETY: `deserialize` trusts its input to be native code wasmtime produced.
                // Entries are written only by `store` below, into the state directory, which
                // only hookgate's user can write to (checked at start, ancestors included, and
                // the configuration refuses to place it inside the transforms directory); the
                // bytes are the ones read from a descriptor found to be a regular file of
                // ours, and the entry's name binds them to the exact source bytes and engine.
                match unsafe { Component::deserialize(engine, &code) } {
                    Ok(component) => return Ok(component),
                    Err(err) => {
                        tracing::warn!(%err, path = %entry.display(), "ignoring unusable cache entry")
                    }
                }
            }
            Err(why) => {
                tracing::warn!(path = %entry.display(), why, "ignoring a cache entry");
            }
        }
        let component = compile(engine, name, bytes)?;
        if let Err(err) = self.store(&entry, &component) {
            tracing::warn!(%err, path = %entry.display(), "cannot write compile cache entry");
        }
        Ok(component)
    }

    /// The bytes of a cache entry, `None` when there is none, or why it may not be run: it is
    /// opened without following a symlink, and the descriptor itself (not the path looked up
    /// again) must be a regular file of this user that no one else may write, in a directory of
    /// the same kind.
    fn read_entry(&self, entry: &Path) -> Result<Option<Vec<u8>>, &'static str> {
        use std::io::Read;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(entry);
        let file = match opened {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) if err.raw_os_error() == Some(libc::ELOOP) => return Err("it is a symlink"),
            Err(_) => return Err("it cannot be opened"),
        };
        let meta = file.metadata().map_err(|_| "it cannot be examined")?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let we = unsafe { libc::geteuid() };
        if !meta.is_file() {
            return Err("it is not a regular file");
        }
        if meta.uid() != we || meta.mode() & 0o022 != 0 {
            return Err("other users could have written it");
        }
        if !crate::private_fs::only_we_can_write(&self.dir) {
            return Err("other users could have written its directory");
        }
        let mut code = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(MAX_ENTRY_BYTES)
            .read_to_end(&mut code)
            .map_err(|_| "it cannot be read")?;
        Ok(Some(code))
    }

    fn store(&self, entry: &Path, component: &Component) -> anyhow::Result<()> {
        crate::private_fs::create_private_dir(&self.dir)?;
        let code = component.serialize()?;
        // Written aside and renamed, so a reader never sees half an entry; the name is this
        // write's own, since two modules of the same bytes may be compiled side by side.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let partial = entry.with_extension(format!("partial-{}-{write}", std::process::id()));
        crate::private_fs::write_private(&partial, &code)?;
        std::fs::rename(&partial, entry)?;
        Ok(())
    }
}
