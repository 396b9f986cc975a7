//! Forward mode in front of the real OpenClaw gateway (2026.9.6 from the npm registry, on Node 24,
//! installed by `scripts/install-openclaw`), both sides on the recommended configuration: a fixed
//! `defaultSessionKey`, `hook:` prefixes, request session keys off upstream (hookgate allows the
//! gmail preset's, which it does not relay). Wakes, agent runs, the gmail
//! preset and mapped hooks are relayed and accepted; a refusal fails the run with the upstream's
//! answer (docs/configuration.md, forward mode).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;
use crate::processes::{Group, kill_marked};
use crate::runtime::free_port;

pub(crate) const OPENCLAW_HOOK_TOKEN: &str = "openclaw-hook-token-0123456789abcdef";
const OPENCLAW_GATEWAY_TOKEN: &str = "openclaw-gateway-token-0123456789ab";

/// A running OpenClaw gateway on 127.0.0.1; stopped with SIGTERM when dropped, and whatever it
/// started then killed.
pub(crate) struct OpenClaw {
    child: Group,
    port: u16,
    state: tempfile::TempDir,
}

impl OpenClaw {
    fn start() -> OpenClaw {
        OpenClaw::start_with(recommended)
    }

    /// Starts a gateway on the recommended configuration whose agents' model is `model` of the
    /// OpenAI-compatible provider at `base_url` (a stand-in the test runs).
    pub(crate) fn start_with_model(base_url: &str, model: &str) -> OpenClaw {
        OpenClaw::start_with(|state| {
            let mut config = recommended(state);
            config["models"] = json!({"providers": {"stand-in": {
                "baseUrl": base_url, "apiKey": "stand-in-key", "api": "openai-completions",
                "models": [{"id": model, "name": model, "reasoning": false, "input": ["text"],
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                            "contextWindow": 128000, "maxTokens": 4096}],
            }}});
            config["agents"] =
                json!({"defaults": {"model": {"primary": format!("stand-in/{model}")}}});
            config
        })
    }

    /// Starts a gateway on the configuration `config` makes, given the gateway's own directory.
    pub(crate) fn start_with(config: impl FnOnce(&std::path::Path) -> Value) -> OpenClaw {
        let home = PathBuf::from(
            std::env::var("OPENCLAW_HOME").unwrap_or_else(|_| "/var/tmp/hookgate-openclaw".into()),
        );
        let node = home.join("node/bin/node");
        let entry = home.join("node_modules/openclaw/openclaw.mjs");
        assert!(
            node.exists() && entry.exists(),
            "the OpenClaw gateway is not installed in {}: run scripts/install-openclaw",
            home.display()
        );
        let state = tempfile::tempdir().unwrap();
        let config = config(state.path());
        let config_path = state.path().join("openclaw.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let port = free_port();
        let log = std::fs::File::create(state.path().join("stdout.log")).unwrap();
        let child = Group::spawn(
            Command::new(node)
                .arg(entry)
                .args(["gateway", "run", "--port", &port.to_string()])
                .env("OPENCLAW_STATE_DIR", state.path().join("state"))
                .env("OPENCLAW_CONFIG_PATH", &config_path)
                .env("OPENCLAW_SKIP_CHANNELS", "1")
                .env("OPENCLAW_DISABLE_BONJOUR", "1")
                .env("OPENCLAW_NO_AUTO_UPDATE", "1")
                .env("OPENCLAW_SKIP_GMAIL_WATCHER", "1")
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log),
        )
        .unwrap();
        OpenClaw { child, port, state }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What the gateway printed, for a failing assertion.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("stdout.log")).unwrap_or_default()
    }

    /// Waits for `/readyz` (20–30 s after the start on this machine).
    pub(crate) async fn ready(&mut self) {
        let (limit, every) = (Duration::from_secs(150), Duration::from_millis(250));
        eventually_within("the OpenClaw gateway ready", limit, every, async || {
            if let Ok(Some(status)) = self.child.leader().try_wait() {
                panic!("the OpenClaw gateway exited with {status}:\n{}", self.log());
            }
            let probe = client().get(format!("{}/readyz", self.url())).send().await;
            match probe {
                Ok(response) if response.status() == 200 => Ok(()),
                _ => Err(self.log()),
            }
        })
        .await
    }
}

/// OpenClaw's recommended hooks: a fixed `defaultSessionKey`, `hook:` prefixes, request session
/// keys off.
fn recommended(state: &std::path::Path) -> Value {
    json!({
        "gateway": {
            "mode": "local",
            "bind": "loopback",
            "auth": {"mode": "token", "token": OPENCLAW_GATEWAY_TOKEN},
        },
        "hooks": {
            "enabled": true,
            "token": OPENCLAW_HOOK_TOKEN,
            "defaultSessionKey": "hook:ingress",
            "allowRequestSessionKey": false,
            "allowedSessionKeyPrefixes": ["hook:"],
        },
        "logging": {"file": state.join("openclaw.log")},
    })
}

impl Drop for OpenClaw {
    fn drop(&mut self) {
        // SIGTERM first: the gateway stops its own children only when it shuts down cleanly.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.leader().try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Then whatever is left: one of its children leads a process group of its own, which
        // the drop of `child` (its group) would miss; each carries this gateway's state path.
        let state = self.state.path().join("state");
        kill_marked("OPENCLAW_STATE_DIR", state.as_os_str());
    }
}

/// The run once it has left `queued` and `forwarding`, waiting up to a minute (the upstream queues runs of
/// its one default session behind each other).
async fn relayed(server: &Hookgate, run_id: &str) -> Value {
    let (limit, every) = (Duration::from_secs(60), Duration::from_millis(100));
    eventually_within("the run relayed", limit, every, async || {
        let run = server.run_of(&json!({"runId": run_id})).await;
        if run["status"] == "queued" || run["status"] == "forwarding" {
            Err(format!("still forwarding: {run}"))
        } else {
            Ok(run)
        }
    })
    .await
}

async fn post(server: &Hookgate, path: &str, body: Value) -> Value {
    let (status, reply) = json_of(server.hook(path).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 200, "{path}: {reply}");
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_mode_relays_to_the_real_openclaw_gateway() {
    let mut openclaw = OpenClaw::start();
    let mut config = base_config();
    set(
        &mut config,
        "hooks.defaultSessionKey",
        json!("hook:ingress"),
    );
    // The gmail preset's session key comes from the payload, which takes allowRequestSessionKey
    // here (as it would upstream); the key is not relayed, so the upstream keeps its own off.
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    set(
        &mut config,
        "hooks.allowedSessionKeyPrefixes",
        json!(["hook:"]),
    );
    set(&mut config, "hooks.presets", json!(["gmail"]));
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"match": {"path": "ci"}, "action": "agent", "name": "CI",
             "messageTemplate": "Build {{build.status}} on {{build.branch}}"},
            {"match": {"path": "ping"}, "action": "wake", "textTemplate": "ping from {{who}}"},
        ]),
    );
    set(&mut config, "gateway.mode", json!("forward"));
    set(
        &mut config,
        "gateway.forward",
        json!({"url": openclaw.url(), "token": OPENCLAW_HOOK_TOKEN}),
    );
    let (server, _dir) = Hookgate::start(&config);
    openclaw.ready().await;

    post(&server, "/hooks/wake", json!({"text": "deploy done"})).await;
    post(&server, "/hooks/ping", json!({"who": "ci"})).await;
    let mut runs = vec![
        post(
            &server,
            "/hooks/agent",
            json!({"message": "hello", "name": "Test"}),
        )
        .await,
        post(
            &server,
            "/hooks/ci",
            json!({"build": {"status": "green", "branch": "main"}}),
        )
        .await,
    ];
    let gmail = json!({"messages": [
        {"id": "m1", "from": "a@example.com", "subject": "Hi", "snippet": "s", "body": "b"},
    ]});
    runs.push(post(&server, "/hooks/gmail", gmail).await);
    for reply in &runs {
        let run = relayed(&server, reply["runId"].as_str().unwrap()).await;
        assert_eq!(run["status"], "forwarded", "{run}\n{}", openclaw.log());
        let upstream = run["upstreamRunId"].as_str().unwrap_or("");
        assert!(uuid::Uuid::parse_str(upstream).is_ok(), "{run}");
        assert_ne!(upstream, run["runId"].as_str().unwrap());
    }

    // An explicit `channel: "last"` without `to` is the client's choice, and the upstream refuses
    // it: the run fails for good with the upstream's answer, after one attempt.
    let refused = post(
        &server,
        "/hooks/agent",
        json!({"message": "to nowhere", "channel": "last"}),
    )
    .await;
    let run = relayed(&server, refused["runId"].as_str().unwrap()).await;
    assert_eq!(run["status"], "forward_failed", "{run}");
    assert_eq!(
        run["error"],
        "upstream answered 400: channel and to must be set together for hook delivery"
    );

    let metrics = server.metrics().await;
    for line in [
        r#"hookgate_forward_relays_total{kind="wake",outcome="forwarded"} 2"#,
        r#"hookgate_forward_relays_total{kind="agent",outcome="forwarded"} 3"#,
        r#"hookgate_forward_relays_total{kind="agent",outcome="failed"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
}
