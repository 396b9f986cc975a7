//! The JavaScript SDK (`transforms/js-sdk`) as the binary carries it: its files, copied into a
//! project by `transform new`, and installed once per SDK into the user's cache directory for
//! `transform build FILE.mjs`, so that a loose module builds with nothing but the binary and
//! Node.js.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use hookgate::private_fs;
use sha2::{Digest, Sha256};

pub const ADAPTER: &str = include_str!("../../transforms/js-sdk/adapter.js");
pub const BUILD: &str = include_str!("../../transforms/js-sdk/build.mjs");
/// The QuickJS runtime the build loads a module into (built from `transforms/js-runtime`).
pub const RUNTIME: &[u8] = include_bytes!("../../transforms/js-sdk/hookgate-js-runtime.wasm");
pub const README: &str = include_str!("../../transforms/js-sdk/README.md");
pub const PACKAGE: &str = include_str!("../../transforms/js-sdk/package.json");
pub const LOCK: &str = include_str!("../../transforms/js-sdk/package-lock.json");

/// What an installed SDK is made of, by file name; the README is left out (the build reads only
/// these).
const FILES: [(&str, &[u8]); 5] = [
    ("adapter.js", ADAPTER.as_bytes()),
    ("build.mjs", BUILD.as_bytes()),
    ("hookgate-js-runtime.wasm", RUNTIME),
    ("package.json", PACKAGE.as_bytes()),
    ("package-lock.json", LOCK.as_bytes()),
];

/// How much of npm's stderr an error carries: its end, where npm sums up what went wrong.
const NPM_STDERR_BYTES: usize = 4096;

/// Why the SDK cannot be installed or run. A message includes the I/O error it comes from,
/// which is therefore a field (`cause`), not a [`std::error::Error::source`] said twice by a
/// chain printer.
#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    #[error(
        "neither XDG_CACHE_HOME nor HOME is set: the JavaScript SDK is installed under the user's cache directory"
    )]
    NoCacheDir,
    #[error(
        "cannot run {program}: {cause} (install Node.js 20 or later, with npm: https://nodejs.org or the system's packages, e.g. `apt install nodejs npm`)"
    )]
    Missing {
        program: &'static str,
        cause: io::Error,
    },
    #[error(
        "refusing to use {}: it is a symlink, another user's, or writable by others, or under a directory others can write to (remove it, or set XDG_CACHE_HOME to a private directory, and build again)",
        .0.display()
    )]
    NotPrivate(PathBuf),
    #[error(
        "{} is incomplete (no node_modules): remove it and build again",
        .0.display()
    )]
    Incomplete(PathBuf),
    #[error("{}: {cause}", path.display())]
    Io { path: PathBuf, cause: io::Error },
    #[error("`npm ci` of the JavaScript SDK's packages failed ({status}):\n{stderr}")]
    Npm {
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("the build failed ({0}); its messages are above")]
    Build(std::process::ExitStatus),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> SdkError + '_ {
    move |cause| SdkError::Io {
        path: path.to_path_buf(),
        cause,
    }
}

/// Builds the JavaScript or TypeScript module `source` into the component `out` with the SDK
/// installed in the user's cache (`installed`): `node build.mjs SOURCE -o OUT`, whose messages
/// go to this process's stderr. Costs an install the first time, then about a second.
pub fn build_module(source: &Path, out: &Path) -> Result<(), SdkError> {
    let sdk = installed(&cache_base()?)?;
    let absolute = |path: &Path| std::path::absolute(path).map_err(io_error(path));
    let status = Command::new("node")
        .arg(sdk.join("build.mjs"))
        .arg(absolute(source)?)
        .arg("-o")
        .arg(absolute(out)?)
        .stdin(Stdio::null())
        .status()
        .map_err(|cause| SdkError::Missing {
            program: "node",
            cause,
        })?;
    status
        .success()
        .then_some(())
        .ok_or(SdkError::Build(status))
}

/// The SDK's directory in the user's cache `cache` (`$XDG_CACHE_HOME`, else `~/.cache`),
/// `hookgate/js-sdk-<version>-<hash of its files>`, installed by this call when missing: its files written
/// and `npm ci` run (offline-first, without install scripts), in a private directory beside it
/// that is renamed into place once complete. So the directory is either absent or whole, two
/// builds at once install it at most twice and keep one, and another SDK gets another
/// directory. Refuses a directory that is not this user's alone (a symlink planted there, say):
/// its code runs as this user.
fn installed(cache: &Path) -> Result<PathBuf, SdkError> {
    let base = cache.join("hookgate");
    private_fs::create_private_dir(&base).map_err(io_error(&base))?;
    ensure_private(&base)?;
    let dir = base.join(dir_name());
    match std::fs::symlink_metadata(&dir) {
        Ok(_) => return checked(dir),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(io_error(&dir)(err)),
    }
    let staging = Staging::create(&base, &dir)?;
    eprintln!(
        "installing the JavaScript SDK into {} (once for this version of hookgate): npm ci",
        dir.display()
    );
    for (name, bytes) in FILES {
        let path = staging.0.join(name);
        std::fs::write(&path, bytes).map_err(io_error(&path))?;
    }
    npm_ci(&staging.0)?;
    if let Err(err) = std::fs::rename(&staging.0, &dir) {
        // Another build installed it meanwhile: theirs is as good as ours.
        if std::fs::symlink_metadata(&dir).is_err() {
            return Err(io_error(&dir)(err));
        }
    }
    checked(dir)
}

/// `dir`, once it is known to be ours alone and complete.
fn checked(dir: PathBuf) -> Result<PathBuf, SdkError> {
    ensure_private(&dir)?;
    if !dir.join("node_modules").is_dir() || !dir.join("build.mjs").is_file() {
        return Err(SdkError::Incomplete(dir));
    }
    Ok(dir)
}

/// Refuses `dir` unless only this user can write to it or replace it: the directory itself, and
/// every directory above it (one that others could write to would let them swap `dir` between
/// this check and `node` running the code in it).
fn ensure_private(dir: &Path) -> Result<(), SdkError> {
    if private_fs::only_we_can_write(dir) && private_fs::untrusted_ancestry(dir).is_none() {
        Ok(())
    } else {
        Err(SdkError::NotPrivate(dir.to_path_buf()))
    }
}

/// The user's cache directory: `$XDG_CACHE_HOME`, else `~/.cache`, an empty variable taken as
/// unset (as the XDG specification says), so that `XDG_CACHE_HOME=` never means the current
/// directory. Where the SDK is installed and `transform run` caches compiled code.
pub fn user_cache_dir() -> Option<PathBuf> {
    let nonempty = |name| std::env::var_os(name).filter(|value| !value.is_empty());
    nonempty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|home| PathBuf::from(home).join(".cache")))
}

fn cache_base() -> Result<PathBuf, SdkError> {
    user_cache_dir().ok_or(SdkError::NoCacheDir)
}

/// `js-sdk-<version>-<16 hex digits>`: the hash tells apart two builds of one version whose SDK
/// differs, and the version tells a person which hookgate wrote it.
fn dir_name() -> String {
    let mut hash = Sha256::new();
    for (name, bytes) in FILES {
        // Lengths first, so that no two sets of files hash alike by moving bytes between them.
        hash.update((name.len() as u64).to_le_bytes());
        hash.update(name);
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    }
    let digest = hex::encode(hash.finalize());
    format!("js-sdk-{}-{}", hookgate::build::VERSION, &digest[..16])
}

/// The directory an install is made in before it is renamed into place; removed when dropped
/// unless renamed by then (a failed install leaves nothing behind).
struct Staging(PathBuf);

impl Staging {
    fn create(base: &Path, dir: &Path) -> Result<Staging, SdkError> {
        let mut name = dir.file_name().unwrap_or_default().to_owned();
        name.push(format!(".installing-{}", std::process::id()));
        let path = base.join(name);
        // One left by a process of this id that was killed: ours, inside our private directory.
        match std::fs::remove_dir_all(&path) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(io_error(&path)(err)),
            _ => {}
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(io_error(&path))?;
        Ok(Staging(path))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `npm ci` in `dir`: the packages its lock file pins, from npm's cache when there (the registry
/// otherwise). Install scripts do not run: the build needs none (esbuild's and wizer's binaries
/// come as packages of their own), and none of them should run as this user unasked.
fn npm_ci(dir: &Path) -> Result<(), SdkError> {
    let output = Command::new("npm")
        .args([
            "ci",
            "--prefer-offline",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|cause| SdkError::Missing {
            program: "npm",
            cause,
        })?;
    if output.status.success() {
        return Ok(());
    }
    Err(SdkError::Npm {
        status: output.status,
        stderr: tail(&String::from_utf8_lossy(&output.stderr), NPM_STDERR_BYTES),
    })
}

/// The last `max` bytes of `text` (at a character boundary), marked when cut.
fn tail(text: &str, max: usize) -> String {
    let text = text.trim_end();
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    match start {
        0 => text.to_string(),
        _ => format!("[…]{}", &text[start..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SDK's build records the revision this hookgate compares with, in the section it reads.
    #[test]
    fn the_build_records_the_adapter_revision_hookgate_expects() {
        use hookgate::transform::{JS_ADAPTER_REVISION, JS_SDK_SECTION};
        assert!(BUILD.contains(&format!("const ADAPTER_REVISION = {JS_ADAPTER_REVISION};")));
        assert!(BUILD.contains(&format!("const SDK_SECTION = '{JS_SDK_SECTION}';")));
    }

    #[test]
    fn a_chain_says_the_io_error_once() {
        let err = io_error(Path::new("/x"))(io::Error::other("denied"));
        assert_eq!(format!("{:#}", anyhow::Error::from(err)), "/x: denied");
    }

    #[test]
    fn a_tail_is_bounded_and_marked_when_cut() {
        assert_eq!(tail("short\n", 10), "short");
        assert_eq!(tail("abcdef", 3), "[…]def");
        assert_eq!(tail("aé", 1), "[…]", "never half a character");
    }

    #[test]
    fn an_installed_sdk_that_is_not_ours_alone_is_refused() {
        let cache = tempfile::tempdir().unwrap();
        let planted = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(planted.path().join("node_modules")).unwrap();
        std::fs::write(planted.path().join("build.mjs"), "// not ours").unwrap();
        let dir = cache.path().join("hookgate").join(dir_name());
        std::fs::create_dir_all(cache.path().join("hookgate")).unwrap();
        std::os::unix::fs::symlink(planted.path(), &dir).unwrap();
        assert!(matches!(installed(cache.path()), Err(SdkError::NotPrivate(d)) if d == dir));

        std::fs::remove_file(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        assert!(
            matches!(installed(cache.path()), Err(SdkError::Incomplete(d)) if d == dir),
            "a directory without its packages is not taken for an install"
        );
    }
}
