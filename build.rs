//! Build facts `hookgate --version` and the `hookgate_build_info` metric report: the git commit
//! the binary was built from (`unknown` outside a git checkout) and the wasmtime version that
//! Cargo.lock pins.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|commit| !commit.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=HOOKGATE_GIT_COMMIT={commit}");
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
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
    // A new commit moves a branch ref (loose or packed); a checkout moves HEAD.
    // A path that does not exist would run this script at every build.
    for path in [
        ".git/HEAD",
        ".git/refs/heads",
        ".git/packed-refs",
        "Cargo.lock",
    ] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
