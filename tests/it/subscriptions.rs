//! Subscriptions (docs/subscriptions.md): hooks made at runtime by the CLI and the API, live on
//! every node of a NATS cluster without a reload, their secrets shown once and sealed at rest,
//! rotated without a gap, audited.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cluster::node_config_at;
use crate::fake::Fake;
use crate::harness::*;
use crate::nats::NatsCluster;

/// The sealing key, kept in a file beside the configuration (not in the state directory).
const SECRETS_KEY: &str = "sealing-key-0123456789abcdef0123456789";

/// `config` with `gateway.secretsKey` read from `secrets.key` in `dir`.
fn with_key(dir: &ConfigDir, mut config: Value) -> Value {
    std::fs::write(dir.path().join("secrets.key"), SECRETS_KEY).unwrap();
    set(
        &mut config,
        "gateway.secretsKey",
        json!({"file": "secrets.key"}),
    );
    dir.write(&config);
    config
}

/// `hookgate hooks ARGS --json` against `node`: its JSON answer, or the failure's stderr.
fn cli(node: &Hookgate, args: &[&str]) -> Result<Value, String> {
    let out = Command::new(binary())
        .arg("hooks")
        .args(args)
        .arg("--json")
        .env("HOOKGATE_URL", &node.base)
        .env("HOOKGATE_GATEWAY_TOKEN", GATEWAY_TOKEN)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The signer's directory, its packages installed once per test process (as CI does).
pub(crate) fn octokit_signer() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/octokit-signer");
        if !dir.join("node_modules/@octokit/webhooks-methods").is_dir() {
            let status = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir)
                .status()
                .expect("run npm (is Node.js installed?)");
            assert!(status.success(), "npm ci of the octokit signer failed");
        }
        dir
    })
}

/// `X-Hub-Signature-256` of `body` under `secret`, as octokit (`@octokit/webhooks-methods`,
/// GitHub's own JavaScript client) computes it.
fn octokit_signature(secret: &str, body: &[u8]) -> String {
    let mut child = Command::new("node")
        .arg(octokit_signer().join("sign.mjs"))
        .env("SECRET", secret)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run node");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "octokit's sign failed");
    String::from_utf8(out.stdout).unwrap()
}

/// A GitHub delivery to `hook` on `node`, signed with `secret` by octokit: the status and the
/// request's id.
async fn deliver(node: &Hookgate, hook: &str, secret: &str) -> (u16, String) {
    let body = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/github/issues-opened.json"),
    )
    .unwrap();
    // As GitHub sends it: no hook token, the signature alone.
    let response = client()
        .post(node.url(&format!("/hooks/{hook}")))
        .header("x-hub-signature-256", octokit_signature(secret, &body))
        .header("x-github-delivery", uuid::Uuid::new_v4().to_string())
        .header("x-github-event", "push")
        .body(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), request_id(&response))
}

/// The record of request `id` on `node`, once it is written.
async fn recorded(node: &Hookgate, id: &str) -> Value {
    let mut record = Value::Null;
    eventually("the request is recorded", async || {
        let (status, found) = node.api_json(&format!("/api/requests/{id}")).await;
        record = found;
        status == 200
    })
    .await;
    record
}

/// Starts a node once the cluster has elected its leaders.
async fn start_node(dir: &ConfigDir) -> Hookgate {
    let (limit, every) = (Duration::from_secs(60), Duration::from_millis(500));
    eventually_within("a node to start", limit, every, async || {
        Hookgate::try_start_in(dir, &[]).map_err(|log| format!("no node started:\n{log}"))
    })
    .await
}

/// A POST to the operator API's `path` with the gateway token.
fn api_post(node: &Hookgate, path: &str) -> reqwest::RequestBuilder {
    client().post(node.url(path)).bearer_auth(GATEWAY_TOKEN)
}

async fn listed(node: &Hookgate) -> Vec<String> {
    let (status, page) = node.api_json("/api/hooks").await;
    assert_eq!(status, 200, "{page}");
    page["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap().to_string())
        .collect()
}

/// Two nodes on a NATS cluster: a subscription made by the CLI on one and one made by the API
/// on the other are live on both without a reload; rotation keeps the old secret for its
/// window, says which secret verified, then refuses the old one as expired; every change is
/// in the audit; a name of a file mapping is refused, naming both.
#[tokio::test(flavor = "multi_thread")]
async fn subscriptions_are_live_on_every_node_and_rotate_without_a_gap() {
    let cluster = NatsCluster::start();
    let provider = Fake::provider("done").await;
    let mut config = node_config_at(&cluster.url(), &provider);
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "from-file", "match": {"path": "from-file"}, "action": "agent", "messageTemplate": "x"}]),
    );
    set(
        &mut config,
        "gateway.publicUrl",
        json!("https://hooks.example.test/"),
    );
    let dir_a = ConfigDir::new(&config);
    with_key(&dir_a, config.clone());
    let dir_b = ConfigDir::new(&config);
    with_key(&dir_b, config);
    let a = start_node(&dir_a).await;
    let b = start_node(&dir_b).await;

    // The CLI on node A: the URL uses gateway.publicUrl; the secret is printed this once.
    let made = cli(
        &a,
        &[
            "create",
            "gh",
            "--provider",
            "github",
            "--events",
            "issues,push",
            "--template",
            "{{issue.title}}",
        ],
    )
    .unwrap();
    assert_eq!(made["url"], "https://hooks.example.test/hooks/gh", "{made}");
    let secret = made["secret"].as_str().unwrap().to_string();
    assert_eq!(secret.len(), 64, "32 random bytes in hex");

    // The API on node B, with the operator's own secret (Stripe makes its own).
    let given = "whsec_stripe_given_secret_0123456789";
    let response = api_post(&b, "/api/hooks")
        .json(&json!({"name": "pay", "provider": "stripe", "events": ["charge.succeeded"], "template": "paid", "secret": given}))
        .send()
        .await
        .unwrap();
    let (status, answer) = json_of(response).await;
    assert_eq!(
        (status, answer["secret"].as_str()),
        (201, Some(given)),
        "{answer}"
    );

    // Live on both nodes, without a reload.
    for node in [&a, &b] {
        eventually("both subscriptions are listed on every node", async || {
            listed(node).await == ["gh", "pay"]
        })
        .await;
    }
    eventually(
        "node B serves the subscription made on node A",
        async || deliver(&b, "gh", &secret).await.0 == 200,
    )
    .await;
    let (status, id) = deliver(&a, "gh", &secret).await;
    assert_eq!(status, 200);
    let record = recorded(&a, &id).await;
    assert_eq!(record["signature"]["secret"], "current", "{record}");
    assert_eq!(deliver(&a, "gh", "not-the-secret").await.0, 401);

    // Nothing shows the secret again.
    for node in [&a, &b] {
        for path in ["/api/hooks", "/api/hooks/gh", "/api/audit"] {
            let text = node.api(path).send().await.unwrap().text().await.unwrap();
            assert!(!text.contains(&secret), "{path} shows the secret: {text}");
        }
    }
    assert_eq!(cli(&b, &["show", "gh"]).unwrap()["secret"], Value::Null);

    // A name of the file's mappings is refused, naming both.
    let refused = cli(&b, &["create", "from-file", "--provider", "github"]).unwrap_err();
    assert!(
        refused.contains("subscription from-file") && refused.contains("hooks.mappings[0]"),
        "{refused}"
    );

    // Rotation: a short window, so the test sees it close.
    let rotated = cli(&a, &["rotate", "gh", "--window", "4s"]).unwrap();
    let new_secret = rotated["secret"].as_str().unwrap().to_string();
    assert_ne!(new_secret, secret);
    eventually("node B takes the new secret", async || {
        deliver(&b, "gh", &new_secret).await.0 == 200
    })
    .await;
    let (status, id) = deliver(&b, "gh", &secret).await;
    assert_eq!(status, 200, "the old secret still verifies in the window");
    let record = recorded(&b, &id).await;
    assert_eq!(record["signature"]["secret"], "previous", "{record}");
    // Polled on the view, gently: failed signatures count toward the client's lockout.
    eventually_within(
        "the rotation's window closes",
        Duration::from_secs(30),
        Duration::from_millis(250),
        async || {
            let shown = a.api_json("/api/hooks/gh").await.1;
            match shown["previousSecretValidUntil"] {
                Value::Null => Ok(()),
                _ => Err(shown.to_string()),
            }
        },
    )
    .await;
    let (status, id) = deliver(&a, "gh", &secret).await;
    assert_eq!(status, 401, "the old secret is refused after the window");
    let refusal = recorded(&a, &id).await;
    let reason = refusal["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("expired"), "{refusal}");
    assert_eq!(deliver(&a, "gh", &new_secret).await.0, 200);

    // Every change is audited, with who made it, on every node.
    let (status, audit) = a.api_json("/api/audit").await;
    assert_eq!(status, 200);
    let entries: Vec<(String, String, String)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().into(),
                e["subscription"].as_str().unwrap().into(),
                e["by"]["credential"].as_str().unwrap().into(),
            )
        })
        .collect();
    for (action, name) in [("create", "gh"), ("create", "pay"), ("rotate", "gh")] {
        assert!(
            entries.contains(&(action.into(), name.into(), "gateway-token".into())),
            "{action} {name} not audited: {audit}"
        );
    }

    // Pause and delete reach the other node too.
    cli(&a, &["pause", "gh"]).unwrap();
    // Its name then answers as an unknown hook's: 404 to the hook token (401 without it).
    eventually("node B stops serving the paused subscription", async || {
        let response = b.hook("/hooks/gh").json(&json!({})).send().await.unwrap();
        response.status() == 404
    })
    .await;
    assert_eq!(deliver(&b, "gh", &new_secret).await.0, 401);
    cli(&b, &["delete", "pay"]).unwrap();
    eventually("node A no longer lists the deleted one", async || {
        listed(&a).await == ["gh"]
    })
    .await;
}

/// On the embedded store: the state directory holds no secret (a copy of it without the key
/// gives nothing away), subscriptions outlive a reload of the file and a restart, and without
/// `gateway.secretsKey` none can be made.
#[tokio::test(flavor = "multi_thread")]
async fn secrets_are_sealed_and_subscriptions_outlive_reloads_and_restarts() {
    let provider = Fake::provider("done").await;
    let mut config = base_config();
    set(
        &mut config,
        "agents.defaults.provider",
        json!({"baseUrl": provider.base, "apiKey": "sk-test"}),
    );
    set(&mut config, "agents.defaults.model", json!("m"));
    let (node, dir) = Hookgate::start(&config);
    let response = api_post(&node, "/api/hooks")
        .json(&json!({"name": "gh", "provider": "github", "template": "t"}))
        .send()
        .await
        .unwrap();
    let (status, answer) = json_of(response).await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("gateway.secretsKey")
    );

    let config = with_key(&dir, config);
    eventually("the key is taken on reload", async || {
        let response = api_post(&node, "/api/hooks")
            .json(&json!({"name": "gh", "provider": "github", "template": "t"}))
            .send()
            .await
            .unwrap();
        response.status().as_u16() == 201 && {
            let answer: Value = response.json().await.unwrap();
            std::fs::write(
                dir.path().join("issued"),
                answer["secret"].as_str().unwrap(),
            )
            .unwrap();
            true
        }
    })
    .await;
    let secret = std::fs::read_to_string(dir.path().join("issued")).unwrap();
    std::fs::remove_file(dir.path().join("issued")).unwrap();
    assert_eq!(deliver(&node, "gh", &secret).await.0, 200);

    // A test delivery: GitHub's ping, signed with the sealed secret, through the real pipeline.
    let tested = cli(&node, &["test", "gh"]).unwrap();
    assert_eq!(
        (tested["event"].as_str(), tested["status"].as_u64()),
        (Some("ping"), Some(200)),
        "{tested}"
    );
    assert_eq!(tested["record"]["signature"]["verified"], true, "{tested}");
    let response = api_post(&node, "/api/hooks")
        .json(
            &json!({"name": "pushes", "provider": "github", "events": ["push"], "template": "t",
                      "mapping": {"match": {"payload": {"/ref": "refs/heads/release"}}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let tested = cli(&node, &["test", "pushes"]).unwrap();
    assert_eq!(
        tested["event"], "push",
        "a sample of an event it admits: {tested}"
    );
    assert_eq!(
        tested["record"]["outcome"], "filtered",
        "the sample's ref is main: {tested}"
    );
    assert!(
        tested["record"]["reason"]
            .as_str()
            .unwrap()
            .contains("/ref"),
        "says why: {tested}"
    );
    let (_, audit) = node.api_json("/api/audit").await;
    assert_eq!(audit["entries"][0]["action"], "test", "{audit}");

    // A reload of the file keeps the subscription.
    let mut changed = config.clone();
    set(&mut changed, "hooks.maxBodyBytes", json!(300_000));
    dir.write(&changed);
    eventually("the file is reloaded", async || {
        node.api_json("/api/config").await.1["generation"] == 3
    })
    .await;
    assert_eq!(deliver(&node, "gh", &secret).await.0, 200);

    // So does a restart.
    node.terminate();
    let node = Hookgate::start_in(&dir);
    assert_eq!(deliver(&node, "gh", &secret).await.0, 200);
    node.terminate();

    // The state directory, copied without the key, holds no trace of the secret.
    let state = dir.path().join("state");
    let found = grep(&state, secret.as_bytes());
    assert!(found.is_empty(), "the secret is in {found:?}");
    assert!(grep(&state, b"sealing-key").is_empty());
}

/// The files under `dir` whose bytes contain `needle`.
fn grep(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if std::fs::read(&path)
                .unwrap_or_default()
                .windows(needle.len())
                .any(|w| w == needle)
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// `check` warns when subscriptions can be made (a secrets key is set) but `gateway.publicUrl`
/// is not, on a listener that is not public; set, the warning is gone; a bad one is refused,
/// naming the key.
#[test]
fn check_warns_when_the_public_url_is_unset_on_a_private_listener() {
    let mut config = base_config();
    set(&mut config, "gateway.secretsKey", json!(SECRETS_KEY));
    let (status, output, _dir) = check(&config);
    assert!(status.success(), "{output}");
    assert!(
        output.contains("warning: gateway.publicUrl: is not set and the listener (127.0.0.1)"),
        "{output}"
    );
    set(
        &mut config,
        "gateway.publicUrl",
        json!("https://hooks.example.test"),
    );
    let (status, output, _dir) = check(&config);
    assert!(
        status.success() && !output.contains("publicUrl"),
        "{output}"
    );
    set(
        &mut config,
        "gateway.publicUrl",
        json!("hooks.example.test"),
    );
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("gateway.publicUrl: must be an http:// or https:// URL"),
        "{output}"
    );
    set(
        &mut config,
        "gateway.publicUrl",
        json!("https://hooks.example.test"),
    );
    set(&mut config, "gateway.secretsKey", json!("short"));
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("gateway.secretsKey: must be at least 32 characters"),
        "{output}"
    );
    assert!(
        !output.contains("short"),
        "never echoes the value: {output}"
    );
}

/// The console's Subscriptions tab, in headless Chromium: a subscription made there shows its
/// secret once, is listed live, is tested, paused and audited.
#[tokio::test]
async fn the_console_makes_tests_and_pauses_a_subscription() {
    let provider = Fake::provider("done").await;
    let mut config = base_config();
    set(
        &mut config,
        "agents.defaults.provider",
        json!({"baseUrl": provider.base, "apiKey": "sk-test"}),
    );
    set(&mut config, "agents.defaults.model", json!("m"));
    set(&mut config, "gateway.secretsKey", json!(SECRETS_KEY));
    let (server, _dir) = Hookgate::start(&config);

    let browser = crate::browser::Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    browser.click("nav button[data-view=hooks]").await;
    browser
        .type_into("#hooks-form input[name=name]", "gh")
        .await;
    browser
        .type_into("#hooks-form input[name=events]", "push")
        .await;
    browser
        .type_into("#hooks-form input[name=template]", "t")
        .await;
    browser.click("#hooks-form button[type=submit]").await;
    let issued = browser
        .wait_for_text("#hooks-issued", "shown this once")
        .await;
    let secret = issued
        .split("the secret ")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .unwrap()
        .to_string();
    assert_eq!(secret.len(), 64, "{issued}");
    let shown = server.api_json("/api/hooks/gh").await.1;
    assert_eq!(shown["events"], json!(["push"]), "{shown}");
    let (status, id) = deliver(&server, "gh", &secret).await;
    assert_eq!(status, 200, "{}", recorded(&server, &id).await);

    let row = "#hooks-table tr[data-name=\"gh\"]";
    browser.wait_for_text(row, "live").await;
    browser
        .click(&format!("{row} button[data-action=test]"))
        .await;
    // The sample is GitHub's push event, which the subscription admits.
    browser
        .wait_for_text("#hooks-result", "a signed push): answered 200")
        .await;
    browser
        .click(&format!("{row} button[data-action=pause]"))
        .await;
    browser.wait_for_text("#hooks-result", "gh is paused").await;
    browser.wait_for_text(row, "paused").await;
    let audit = browser.wait_for_text("#audit-table", "pause").await;
    assert!(
        audit.contains("create") && audit.contains("test"),
        "{audit}"
    );
    assert!(!audit.contains(&secret));
}
