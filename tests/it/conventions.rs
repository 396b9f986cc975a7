//! What operators expect of any server: a version that says what was built, the configuration
//! from the environment, `/healthz`, build and process metrics, request ids and an access log.

use std::process::Command;

use serde_json::json;

use crate::harness::*;

#[test]
fn version_names_the_commit_and_wasmtime() {
    let out = Command::new(binary()).arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let pattern = regex::Regex::new(
        r"^hookgate \d+\.\d+\.\d+ \(commit ([0-9a-f]{12}|unknown), wasmtime \d+\.\d+\.\d+\)\n$",
    )
    .unwrap();
    assert!(pattern.is_match(&text), "{text:?}");
}

#[test]
fn the_configuration_path_may_come_from_the_environment() {
    let dir = ConfigDir::new(&base_config());
    let out = Command::new(binary())
        .arg("check")
        .env("HOOKGATE_CONFIG", dir.config_file())
        .output()
        .unwrap();
    assert_succeeded(&out);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: "));
    let out = Command::new(binary())
        .arg("check")
        .env_remove("HOOKGATE_CONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config"));
}

#[tokio::test]
async fn healthz_answers_as_livez() {
    let (server, _dir) = Hookgate::start(&base_config());
    for path in ["/healthz", "/livez"] {
        let (status, body) = json_of(client().get(server.url(path)).send().await.unwrap()).await;
        assert_eq!((status, body), (200, json!({"ok": true})), "{path}");
    }
}

#[tokio::test]
async fn build_and_process_metrics_are_exported() {
    let (server, _dir) = Hookgate::start(&base_config());
    let text = server.metrics().await;
    let build = regex::Regex::new(
        r#"hookgate_build_info\{version="\d+\.\d+\.\d+",commit="([0-9a-f]{12}|unknown)",wasmtime="\d+\.\d+\.\d+"\} 1"#,
    )
    .unwrap();
    assert!(build.is_match(&text), "{text}");
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .parse()
            .unwrap()
    };
    assert!(value("process_resident_memory_bytes") > 1e6);
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_cpu_seconds_total") > 0.0);
    let started = value("process_start_time_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - 600.0..=now + 5.0).contains(&started),
        "{started} vs {now}"
    );
}

#[tokio::test]
async fn every_answer_has_a_request_id_and_the_access_log_a_line() {
    let dir = ConfigDir::new(&base_config());
    let server = Hookgate::try_start_in(&dir, &[("HOOKGATE_ACCESS_LOG", "1")]).unwrap();
    let kept = client()
        .get(server.url("/livez?token=secret-in-query"))
        .header("x-request-id", "lb-7f3a.1")
        .send()
        .await
        .unwrap();
    assert_eq!(kept.headers()["x-request-id"], "lb-7f3a.1");
    let replaced = client()
        .get(server.url("/readyz"))
        .header("x-request-id", "<script>")
        .send()
        .await
        .unwrap();
    let fresh = request_id(&replaced);
    assert_eq!(fresh.len(), 36, "a UUID replaces an unsafe id: {fresh}");
    let woke = server
        .hook("/hooks/wake")
        .header("x-request-id", "ci-run-12")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(woke.headers()["x-request-id"], "ci-run-12");
    // The request log finds a hook request by the id its client chose.
    let mut found = serde_json::Value::Null;
    eventually("the wake's record", async || {
        found = json_of(
            server
                .api("/api/requests?requestId=ci-run-12")
                .send()
                .await
                .unwrap(),
        )
        .await
        .1;
        found["requests"].as_array().is_some_and(|r| r.len() == 1)
    })
    .await;
    assert_eq!(found["requests"][0]["requestId"], "ci-run-12");
    assert_ne!(
        found["requests"][0]["id"], "ci-run-12",
        "the record keeps an id of its own"
    );

    let (_, log) = server.terminate();
    let line = log
        .lines()
        .find(|line| line.contains("lb-7f3a.1"))
        .unwrap_or_else(|| panic!("no access line in {log}"));
    for part in [
        "access",
        "client=127.0.0.1",
        "method=GET",
        "path=/livez",
        "status=200",
    ] {
        assert!(line.contains(part), "{part} in {line}");
    }
    assert!(
        !log.contains("secret-in-query"),
        "the query is never logged"
    );
    assert!(log.contains(&fresh));
}

#[test]
fn completions_are_printed_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _hookgate"),
        ("zsh", "#compdef hookgate"),
        ("fish", "complete -c hookgate"),
    ] {
        let out = Command::new(binary())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(
            script.contains("requests"),
            "{shell} completes the subcommands"
        );
    }
}

/// docs/architecture.md is the map of the source: a row for every file under `src/`, each
/// saying what it owns, and no row for a file that is gone.
#[test]
fn the_map_lists_every_module() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut listed = std::collections::BTreeSet::new();
    for row in map.lines().filter(|line| line.starts_with("| `src/")) {
        let mut cells = row.split(" | ");
        let path = cells
            .next()
            .unwrap()
            .trim_start_matches("| ")
            .trim_matches('`');
        let owns = cells.next().unwrap_or("").trim_end_matches(" |").trim();
        assert!(
            !owns.is_empty(),
            "docs/architecture.md: `{path}` says nothing of what it owns"
        );
        listed.insert(path.to_string());
    }
    let mut files = std::collections::BTreeSet::new();
    let mut folders = vec![root.join("src")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let relative = path.strip_prefix(root).unwrap();
                files.insert(relative.to_string_lossy().into_owned());
            }
        }
    }
    let missing: Vec<_> = files.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&files).collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "docs/architecture.md is out of date: no row for {missing:?}; rows for files that are gone: {gone:?}"
    );
}
