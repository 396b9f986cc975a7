//! A transform from zero in two commands (docs/transforms.md#from-zero): `transform new` in each
//! language, `transform build`, the project's own unit tests, and the component served.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::harness::*;
use crate::js::js_transforms;

/// Runs `hookgate <args>` in `dir`; panics with its output unless it succeeds. Returns stdout.
fn hookgate(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(binary())
        .args(args)
        .current_dir(dir)
        // Shares the test suite's WebAssembly builds: the dependencies are compiled once.
        .env("CARGO_TARGET_DIR", wasm_target_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "hookgate {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn run_ok(command: &mut Command) {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Serves `<name>.wasm` from `project` under the mapping `module`, sends the sample payload and
/// checks the wake it became.
async fn serves(project: &Path, name: &str, module: &str) {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": name}, "transform": {"module": module}}]),
    );
    let dir = ConfigDir::new(&config);
    let root = dir.path().join("hooks/transforms");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(
        project.join(format!("{name}.wasm")),
        root.join(format!("{name}.wasm")),
    )
    .unwrap();
    let server = Hookgate::start_in(&dir);
    let sample = std::fs::read(project.join("payloads/sample.json")).unwrap();
    let (status, body) = json_of(
        server
            .hook(&format!("/hooks/{name}"))
            .header("content-type", "application/json")
            .body(sample)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, &body["eventOutcome"]),
        (200, &json!("queued")),
        "{body}"
    );
    assert_eq!(
        server.wake_texts().await,
        [format!("{name}: Deploy finished")]
    );
}

#[tokio::test]
async fn a_rust_transform_from_zero_builds_tests_and_serves() {
    transforms(); // the shared target holds wit-bindgen for wasm32-wasip2 from here on
    let work = tempfile::tempdir().unwrap();
    let out = hookgate(
        work.path(),
        &["transform", "new", "hello-rust", "--lang", "rust"],
    );
    assert!(out.contains("made hello-rust (rust)"), "{out}");
    let project = work.path().join("hello-rust");
    let out = hookgate(&project, &["transform", "build"]);
    assert!(out.contains("hookgate:transform@0.2"), "{out}");
    assert!(
        out.contains(
            r#"{ match: { path: "hello-rust" }, transform: { module: "hello-rust.wasm" } }"#
        ),
        "{out}"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_ok(
        Command::new(cargo)
            .args(["test", "--quiet"])
            .current_dir(&project)
            .env("CARGO_TARGET_DIR", wasm_target_dir()),
    );
    serves(&project, "hello-rust", "hello-rust.wasm").await;
}

async fn javascript_from_zero(name: &str, lang: &str, extension: &str) {
    let sdk_packages = js_transforms(); // installs the SDK's packages once
    let _ = sdk_packages;
    let work = tempfile::tempdir().unwrap();
    hookgate(work.path(), &["transform", "new", name, "--lang", lang]);
    let project = work.path().join(name);
    // The SDK's packages, installed by the suite, stand in for `npm install` (which
    // `transform build` runs when node_modules is missing).
    let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms/js-sdk/node_modules");
    std::os::unix::fs::symlink(installed, project.join("node_modules")).unwrap();
    let out = hookgate(&project, &["transform", "build"]);
    let module = format!("{name}.{extension}");
    assert!(out.contains("hookgate:transform@0.2"), "{out}");
    assert!(out.contains(&format!(r#"module: "{module}""#)), "{out}");
    run_ok(
        Command::new("npm")
            .args(["test", "--silent"])
            .current_dir(&project),
    );
    serves(&project, name, &module).await;
}

#[tokio::test]
async fn a_javascript_transform_from_zero_builds_tests_and_serves() {
    javascript_from_zero("hello-js", "js", "mjs").await;
}

#[tokio::test]
async fn a_typescript_transform_from_zero_builds_tests_and_serves() {
    javascript_from_zero("hello-ts", "ts", "ts").await;
}

#[test]
fn new_refuses_a_bad_name_and_an_existing_directory() {
    let work = tempfile::tempdir().unwrap();
    for name in ["Hello", "1st", "a_b", "a/b", "x-"] {
        let out = Command::new(binary())
            .args(["transform", "new", name, "--lang", "rust"])
            .current_dir(work.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{name}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("NAME must be"));
    }
    std::fs::create_dir(work.path().join("taken")).unwrap();
    let out = Command::new(binary())
        .args(["transform", "new", "taken", "--lang", "js"])
        .current_dir(work.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists already"));
    let out = Command::new(binary())
        .args(["transform", "build"])
        .current_dir(work.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("neither a Cargo.toml nor a package.json")
    );
}

/// Runs `hookgate <args>` in `dir` with `XDG_CACHE_HOME` at `cache`: where the binary installs
/// its JavaScript SDK. `HOME` stays, so npm's own download cache is the machine's.
fn hookgate_cached(dir: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .args(args)
        .current_dir(dir)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .unwrap()
}

/// An OpenClaw transform as it sits in a transforms directory, `hook.mjs`, built with nothing but
/// the binary and Node.js: from a directory outside any checkout, with an empty cache (the SDK
/// is written and its packages installed there, once), into `hook.wasm` beside it, which a
/// mapping naming `hook.mjs` then serves.
#[tokio::test]
async fn a_loose_javascript_module_builds_beside_itself_and_serves() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "hook"}, "transform": {"module": "hook.mjs"}}]),
    );
    let dir = ConfigDir::new(&config);
    let transforms = dir.path().join("hooks/transforms");
    std::fs::create_dir_all(&transforms).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms/fixtures/js/partial.mjs");
    std::fs::copy(fixture, transforms.join("hook.mjs")).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let module = transforms.join("hook.mjs");
    let module = module.to_str().unwrap();

    let first = hookgate_cached(
        elsewhere.path(),
        cache.path(),
        &["transform", "build", module],
    );
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{stderr}");
    assert!(transforms.join("hook.wasm").is_file(), "{stderr}");
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(stdout.contains(r#"module: "hook.mjs""#), "{stdout}");
    assert!(
        stderr.contains("installing"),
        "a fresh cache installs: {stderr}"
    );
    let second = hookgate_cached(
        elsewhere.path(),
        cache.path(),
        &["transform", "build", module],
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    assert!(!stderr.contains("installing"), "installed once: {stderr}");

    let server = Hookgate::start_in(&dir);
    let r = server
        .hook("/hooks/hook")
        .json(&json!({"case": "to-wake-text"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(server.wake_texts().await, ["switched to a wake"]);
}

/// What `transform build` cannot build says why, and what to install when Node.js is missing.
#[test]
fn building_a_loose_module_fails_clearly() {
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("notes.txt"), "not a module").unwrap();
    let out = hookgate_cached(
        work.path(),
        cache.path(),
        &["transform", "build", "notes.txt"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("neither a JavaScript or TypeScript module") && stderr.contains(".mjs"),
        "{stderr}"
    );

    std::fs::write(work.path().join("x.mjs"), "export default () => null;").unwrap();
    let out = Command::new(binary())
        .args(["transform", "build", "x.mjs"])
        .current_dir(work.path())
        .env("XDG_CACHE_HOME", cache.path())
        .env("PATH", work.path()) // no node, no npm
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("install Node.js"), "{stderr}");
    assert!(!work.path().join("x.wasm").exists());
}
