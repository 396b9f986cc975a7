//! Build facts `hookgate --version` and the `hookgate_build_info` metric report: the git commit
//! the binary was built from (`unknown` outside a git checkout of this crate) and the wasmtime
//! version that Cargo.lock pins.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = git(&manifest).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=HOOKGATE_GIT_COMMIT={commit}");
    let lock = std::fs::read_to_string(manifest.join("Cargo.lock")).unwrap_or_default();
    let wasmtime = lock
        .split("[[package]]")
        .find(|package| package.contains("\nname = \"wasmtime\"\n"))
        .and_then(|package| {
            package
                .lines()
                .find_map(|line| line.strip_prefix("version = "))
        })
        .map(|version| version.trim_matches('"').to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=HOOKGATE_WASMTIME_VERSION={wasmtime}");
    println!("cargo:rerun-if-changed=Cargo.lock");
}

/// The commit checked out in `manifest`, when `manifest` is the top of a git work tree (not a
/// directory inside some other repository), and the files whose change means a new commit.
fn git(manifest: &Path) -> Option<String> {
    let ask = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(manifest)
            .output()
            .ok()
            .filter(|out| out.status.success())?;
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let top = ask(&["rev-parse", "--show-toplevel"])?;
    let same = |a: &Path, b: &Path| a.canonicalize().ok() == b.canonicalize().ok();
    if !same(Path::new(&top), manifest) {
        return None;
    }
    // A linked work tree has its own HEAD; branches live in the common directory. A path
    // that does not exist is left out: cargo would run this script at every build.
    let absolute = |dir: String| {
        let dir = PathBuf::from(dir);
        if dir.is_absolute() {
            dir
        } else {
            manifest.join(dir)
        }
    };
    let git_dir = absolute(ask(&["rev-parse", "--git-dir"])?);
    let common = absolute(ask(&["rev-parse", "--git-common-dir"])?);
    for path in [
        git_dir.join("HEAD"),
        common.join("refs/heads"),
        common.join("packed-refs"),
        common.join("reftable"),
    ] {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    ask(&["rev-parse", "--short=12", "HEAD"]).filter(|commit| !commit.is_empty())
}
