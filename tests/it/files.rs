//! What hookgate reads from disk that others might have placed there: module files (a FIFO, a
//! huge file, a file renamed over a live module) and the compile cache (a symlink in it, a state
//! directory others may write to).

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::harness::*;
use crate::security::{alerts_dir, post_alert};

/// Longer than anything here should take; a hang fails on it instead of stalling the suite.
const PATIENCE: Duration = Duration::from_secs(30);

fn mkfifo(path: &std::path::Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

fn module_path(dir: &ConfigDir) -> std::path::PathBuf {
    dir.path().join("hooks/transforms/passthrough.wasm")
}

/// `hookgate check` on `dir`, failing the test if it does not end within `PATIENCE`.
async fn check_in_time(dir: &ConfigDir) -> (std::process::ExitStatus, String) {
    let config = dir.config_file();
    let checked = tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(binary())
            .args(["check", "--config"])
            .arg(config)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status, text)
    });
    tokio::time::timeout(PATIENCE, checked)
        .await
        .expect("check hung on the module file")
        .unwrap()
}

#[tokio::test]
async fn a_module_that_is_a_fifo_or_huge_is_refused_without_reading_it() {
    let dir = alerts_dir();
    let module = module_path(&dir);
    std::fs::remove_file(&module).unwrap();
    mkfifo(&module);
    let (status, output) = check_in_time(&dir).await;
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("passthrough.wasm: not a regular file"),
        "{output}"
    );

    std::fs::remove_file(&module).unwrap();
    // Sparse: a gibibyte that takes no disk, and would take a gibibyte of memory to read.
    std::fs::File::create(&module)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let (status, output) = check_in_time(&dir).await;
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("1073741824 bytes, over the 67108864-byte limit of a module file"),
        "{output}"
    );

    std::fs::write(&module, b"\0asm\x01\0\0\0").unwrap();
    let (_, output) = check_in_time(&dir).await;
    assert!(
        output.contains("a WebAssembly core module, not a component"),
        "{output}"
    );
}

#[tokio::test]
async fn a_fifo_renamed_over_a_live_module_is_refused_and_the_old_version_serves_on() {
    let dir = alerts_dir();
    let server = Hookgate::start_in(&dir);
    let fifo = dir.path().join("hooks/transforms/incoming.fifo");
    mkfifo(&fifo);
    std::fs::rename(&fifo, module_path(&dir)).unwrap();
    eventually("the replacement is refused", async || {
        let status = server.api("/api/config").send().await.unwrap();
        let body: serde_json::Value = status.json().await.unwrap();
        body.to_string().contains("not a regular file")
    })
    .await;
    assert_eq!(post_alert(&server, "served by the old version").await, 200);
    server.signal("-TERM");
    let stopped = tokio::task::spawn_blocking(move || server.wait());
    let (status, log) = tokio::time::timeout(PATIENCE, stopped)
        .await
        .expect("the stop hung behind the module reload")
        .unwrap();
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn a_symlink_in_the_compile_cache_is_never_followed() {
    let dir = alerts_dir();
    let (status, _) = Hookgate::start_in(&dir).terminate();
    assert!(status.success());
    let cache = dir.path().join("state/transform-cache");
    let entry = std::fs::read_dir(&cache)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // Someone's own code, planted where the entry was.
    let planted = dir.path().join("planted.cwasm");
    std::fs::rename(&entry, &planted).unwrap();
    std::os::unix::fs::symlink(&planted, &entry).unwrap();

    let server = Hookgate::start_in(&dir);
    assert_eq!(post_alert(&server, "compiled again").await, 200);
    let (_, log) = server.terminate();
    assert!(
        log.contains("ignoring a cache entry") && log.contains("it is a symlink"),
        "{log}"
    );
    let meta = std::fs::symlink_metadata(&entry).unwrap();
    assert!(
        meta.file_type().is_file(),
        "the entry was compiled again and rewritten"
    );
}

#[tokio::test]
async fn a_state_directory_others_may_write_to_is_refused() {
    let dir = alerts_dir();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (status, output) = check_in(&dir);
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("gateway.stateDir: must be writable by hookgate's user alone")
            && output.contains("other users may write to it"),
        "{output}"
    );
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let error = Hookgate::try_start_in(&dir, &[])
        .err()
        .expect("started anyway");
    assert!(
        error.contains("other users may write to a directory above it"),
        "{error}"
    );
}
