//! The compiled-code cache: each component is compiled once per content and engine, and the native
//! code kept under `<stateDir>/transform-cache` so that restarts skip compilation.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

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

    /// The component for `bytes`: from the cache when present and loadable, else compiled (and
    /// then stored, best effort).
    pub fn component(
        &self,
        engine: &Engine,
        digest: &[u8; 32],
        bytes: &[u8],
    ) -> wasmtime::Result<Component> {
        let entry = self.entry(engine, digest);
        // Native code is run unchecked, so only from a directory and a file that no other user
        // could have written (hookgate makes both so; an operator's lax directory is skipped).
        let trusted = || {
            crate::private_fs::only_we_can_write(&self.dir)
                && crate::private_fs::only_we_can_write(&entry)
        };
        if entry.exists() && !trusted() {
            tracing::warn!(path = %entry.display(), "ignoring a cache entry that other users could have written");
        } else if entry.exists() {
            // SAFETY: `deserialize_file` trusts its input to be native code wasmtime produced.
            // Entries are written only by `store` below, into the state directory, which the
            // configuration refuses to place inside the transforms directory; their names bind
            // them to the exact source bytes and engine settings.
            match unsafe { Component::deserialize_file(engine, &entry) } {
                Ok(component) => return Ok(component),
                Err(err) => {
                    tracing::warn!(%err, path = %entry.display(), "ignoring unusable cache entry")
                }
            }
        }
        let component = Component::new(engine, bytes)?;
        if let Err(err) = self.store(&entry, &component) {
            tracing::warn!(%err, path = %entry.display(), "cannot write compile cache entry");
        }
        Ok(component)
    }

    fn store(&self, entry: &Path, component: &Component) -> anyhow::Result<()> {
        crate::private_fs::create_private_dir(&self.dir)?;
        let code = component.serialize()?;
        // Written aside and renamed, so a reader never sees half an entry.
        let partial = entry.with_extension(format!("partial-{}", std::process::id()));
        crate::private_fs::write_private(&partial, &code)?;
        std::fs::rename(&partial, entry)?;
        Ok(())
    }
}
