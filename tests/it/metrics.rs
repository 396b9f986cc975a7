//! `GET /metrics` and machine-readable logs.

use serde_json::json;

use crate::harness::*;

async fn scrape(server: &Hookgate) -> String {
    let r = server.api("/metrics").send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

fn has_line(text: &str, starts: &str) -> bool {
    text.lines().any(|l| l.starts_with(starts))
}

#[tokio::test]
async fn metrics_need_the_gateway_token_unless_public() {
    let (server, _dir) = Hookgate::start(&base_config());
    let r = client().get(server.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = client()
        .get(server.url("/metrics"))
        .bearer_auth(HOOK_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let mut config = base_config();
    set(&mut config, "gateway.metrics", json!({"public": true}));
    let (public, _dir) = Hookgate::start(&config);
    let r = client().get(public.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn requests_hooks_store_and_runs_are_measured() {
    let (server, _dir) = Hookgate::start(&base_config());
    server
        .hook("/hooks/wake")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    server
        .hook("/hooks/agent")
        .json(&json!({"message": "m"}))
        .send()
        .await
        .unwrap();
    server
        .hook("/hooks/agent")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    client()
        .post(server.url("/hooks/wake"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    server
        .hook("/hooks/some-random-name-123")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let text = scrape(&server).await;
    assert!(
        has_line(
            &text,
            r#"http_server_request_duration_seconds_count{route="/hooks/wake",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(
        has_line(
            &text,
            r#"hookgate_hook_requests_total{hook="wake",outcome="accepted"} 1"#
        ),
        "{text}"
    );
    assert!(
        has_line(
            &text,
            r#"hookgate_hook_requests_total{hook="agent",outcome="rejected"} 1"#
        ),
        "{text}"
    );
    assert!(
        has_line(
            &text,
            r#"hookgate_hook_requests_total{hook="wake",outcome="unauthorized"} 1"#
        ),
        "{text}"
    );
    assert!(
        has_line(
            &text,
            r#"hookgate_hook_requests_total{hook="<unknown>",outcome="rejected"} 1"#
        ),
        "{text}"
    );
    assert!(
        !text.contains("some-random-name-123"),
        "a URL made a label: {text}"
    );
    assert!(
        !has_line(&text, "hookgate_store_commit_seconds_count 0"),
        "{text}"
    );
    assert!(has_line(&text, "hookgate_runs{status="), "{text}");
    assert!(has_line(&text, "hookgate_queue_depth "), "{text}");
}

#[tokio::test]
async fn transform_calls_and_failures_are_measured_by_mapping_and_cause() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "spin", "match": {"path": "spin"}, "transform": {"module": "hostile.wasm", "config": {"mode": "loop"}}},
            {"id": "calm", "match": {"path": "calm"}, "transform": {"module": "hostile.wasm"}},
        ]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    assert_eq!(
        server
            .hook("/hooks/spin")
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .status(),
        500
    );
    assert_eq!(
        server
            .hook("/hooks/calm")
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let text = scrape(&server).await;
    assert!(
        has_line(
            &text,
            r#"hookgate_transform_failures_total{mapping="spin",cause="timeout"} 1"#
        ),
        "{text}"
    );
    assert!(
        has_line(
            &text,
            r#"hookgate_transform_duration_seconds_count{mapping="calm"} 1"#
        ),
        "{text}"
    );
    assert!(
        has_line(
            &text,
            r#"hookgate_hook_requests_total{hook="spin",outcome="failed"} 1"#
        ),
        "{text}"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = ConfigDir::new(&base_config());
    let mut child = std::process::Command::new(binary())
        .args([
            "--log-format",
            "json",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(dir.config_file())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    assert!(first.starts_with("listening on "), "{first}");
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(!log.trim().is_empty(), "no log lines");
    for line in log.lines() {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            value["level"].is_string() && value["fields"].is_object(),
            "{line}"
        );
    }
}

/// Every series an alert rule reads (contrib/prometheus-alerts.yml) is exported by a fresh
/// server, at 0: a series that appears only at its first event shows no increase then, so
/// `increase()` and `delta()` over it stay 0 and an isolated drop, failure or refusal never
/// fires its alert. Read from the rules themselves, so that a rule added later is checked too.
#[tokio::test]
async fn a_fresh_server_exports_every_series_the_alert_rules_read() {
    let rules = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/prometheus-alerts.yml"),
    )
    .unwrap();
    let watched = watched_series(&rules);
    assert!(watched.len() >= 10, "{watched:?}");
    // A mapping with a transform, for the series of each mapping's transform.
    let (server, _dir) = start_with_trapping_alerts(base_config(), json!({}));
    let text = scrape(&server).await;
    let missing: Vec<_> = watched
        .iter()
        .filter(|(name, labels)| {
            !text.lines().any(|line| {
                let Some(rest) = line.strip_prefix(name.as_str()) else {
                    return false;
                };
                (rest.starts_with('{') || rest.starts_with(' '))
                    && labels
                        .iter()
                        .all(|(label, value)| rest.contains(&format!("{label}=\"{value}\"")))
            })
        })
        .collect();
    assert!(missing.is_empty(), "not exported: {missing:?}\n{text}");
    for series in [
        r#"hookgate_request_log_records_total{outcome="dropped"} 0"#,
        r#"hookgate_runs{status="error"} 0"#,
        r#"hookgate_forward_relays_total{kind="agent",outcome="failed"} 0"#,
        r#"hookgate_hook_requests_total{hook="alerts",outcome="failed"} 0"#,
        r#"hookgate_transform_failures_total{mapping="alerts",cause="trap"} 0"#,
    ] {
        assert!(has_line(&text, series), "{series} missing:\n{text}");
    }
}

/// The hookgate series `rules` select, each as its metric and the label values it must have
/// (`job` aside, which Prometheus adds): one per alternative of a `=~"a|b"` matcher.
fn watched_series(rules: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut watched = Vec::new();
    let mut rest = rules;
    while let Some(at) = rest.find("hookgate_") {
        rest = &rest[at..];
        let end = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(rest.len());
        let name = rest[..end].to_string();
        rest = &rest[end..];
        let mut fixed = Vec::new();
        let mut alternatives = vec![None];
        if let Some(selector) = rest.strip_prefix('{') {
            let close = selector.find('}').unwrap();
            for matcher in selector[..close].split(',') {
                let (label, value) = matcher.split_once('=').unwrap();
                let (label, value) = (label.trim(), value.trim_start_matches('~').trim());
                let value = value.trim_matches('"');
                match (label, matcher.contains("=~")) {
                    ("job", _) => {}
                    (_, false) => fixed.push((label.to_string(), value.to_string())),
                    (_, true) => {
                        alternatives = value
                            .split('|')
                            .map(|v| Some((label.to_string(), v.to_string())))
                            .collect();
                    }
                }
            }
        }
        for alternative in alternatives {
            let mut labels = fixed.clone();
            labels.extend(alternative);
            watched.push((name.clone(), labels));
        }
    }
    watched.sort();
    watched.dedup();
    watched
}
