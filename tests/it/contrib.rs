//! What `contrib/` ships, checked by the tools that will read it: the systemd unit by systemd
//! itself (`systemd-analyze`, Debian package systemd), the alerting rules by Prometheus's
//! `promtool` (Debian package prometheus) against the metrics the real binary exports.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::harness::*;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The unit with its ExecStart pointing at the binary under test (verify checks it exists).
fn unit() -> (tempfile::TempDir, std::path::PathBuf) {
    let text = std::fs::read_to_string(repo("contrib/hookgate.service")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookgate.service");
    std::fs::write(&path, text.replace("/usr/local/bin/hookgate", binary())).unwrap();
    (dir, path)
}

#[test]
fn the_systemd_unit_verifies_cleanly() {
    let (_dir, path) = unit();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian package systemd) must be installed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze complained: {stderr}"
    );
}

#[test]
fn the_systemd_unit_is_hardened() {
    let (_dir, path) = unit();
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian package systemd) must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let level: f64 = stdout
        .lines()
        .find_map(|line| {
            line.split("Overall exposure level for hookgate.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|level| level.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {stdout}"));
    // 0 is fully locked down, 10 not at all; systemd calls under 2 "OK". What keeps it above 0:
    // network families (a server needs them) and no MemoryDenyWriteExecute (wasmtime's JIT).
    assert!(level <= 2.0, "exposure {level}:\n{stdout}");
    for line in ["PrivateNetwork=", "MemoryDenyWriteExecute="] {
        assert!(stdout.contains(line), "{stdout}");
    }
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repo("contrib"))
        .output()
        .expect("promtool (Debian package prometheus) must be installed");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alerting_rules_are_valid_and_fire_as_their_tests_say() {
    let checked = promtool(&["check", "rules", "prometheus-alerts.yml"]);
    assert!(checked.contains("SUCCESS: 9 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "prometheus-alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// Every hookgate metric the rules name is one the binary exports: a renamed metric would leave
/// an alert that can never fire.
#[tokio::test]
async fn the_alerting_rules_name_metrics_hookgate_exports() {
    let rules = std::fs::read_to_string(repo("contrib/prometheus-alerts.yml")).unwrap();
    let mut families: Vec<&str> = rules
        .split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
        .filter(|word| word.starts_with("hookgate_"))
        .map(|name| {
            ["_total", "_count", "_sum", "_bucket"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name)
        })
        .collect();
    families.sort_unstable();
    families.dedup();
    assert!(families.len() >= 6, "{families:?}");

    // A family shows once it has a sample: a relay (forward mode, to an upstream that is not
    // there, so it is retried), a run, and a transform that fails.
    let mut config = base_config();
    set(&mut config, "gateway.mode", json!("forward"));
    let closed = crate::runtime::free_port();
    set(
        &mut config,
        "gateway.forward",
        json!({"url": format!("http://127.0.0.1:{closed}"), "token": "upstream-token"}),
    );
    let (server, _dir) = start_with_trapping_alerts(config, json!({}));
    let trapped = server.hook("/hooks/alerts").json(&json!({})).send().await;
    assert_eq!(trapped.unwrap().status(), 500);
    let run = server
        .hook("/hooks/agent")
        .json(&json!({"message": "m"}))
        .send();
    assert_eq!(run.await.unwrap().status(), 200);
    let mut missing = Vec::new();
    eventually("every family the rules name to be exported", async || {
        let text = server.metrics().await;
        missing = families
            .iter()
            .filter(|family| !text.contains(&format!("# TYPE {family} ")))
            .copied()
            .collect();
        missing.is_empty()
    })
    .await;
    assert!(missing.is_empty(), "{missing:?}");
}
