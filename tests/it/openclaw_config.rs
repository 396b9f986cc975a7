//! An `openclaw.json` runs unchanged (docs/coming-from-openclaw.md): `check` accepts a complete
//! one, warning once for each key hookgate takes in its own form or leaves out, and `serve`
//! serves its hooks; a file with several problems has them all reported in one run.

use std::process::Command;

use serde_json::{Value, json};

use crate::harness::*;

const FIXTURE: &str = include_str!("fixtures/openclaw.json5");
const HOOKS_TOKEN: &str = "openclaw-hooks-token-0123456789";

fn check_with_env(dir: &ConfigDir) -> (bool, String, String) {
    let out = Command::new(binary())
        .args(["check", "--config"])
        .arg(dir.config_file())
        .env("OPENCLAW_HOOKS_TOKEN", HOOKS_TOKEN)
        .env("OPENCLAW_GATEWAY_TOKEN", GATEWAY_TOKEN)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_complete_openclaw_json_runs_unchanged() {
    let dir = ConfigDir::new(&json!({}));
    dir.write_text(FIXTURE);
    let (ok, stdout, stderr) = check_with_env(&dir);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("hooks at /hooks, 3 mapping(s)"), "{stdout}");
    for warned in [
        "warning: gateway.mode: \"local\" is hookgate's embedded mode",
        "warning: gateway.bind: \"loopback\" listens on 127.0.0.1",
        "warning: gateway.auth.mode: \"token\" is implied",
        "warning: gateway.controlUi: ignored: hookgate's console is /console, always on, used \
         with the gateway token",
        "warning: hooks.gmail: ignored: hookgate does not watch a Gmail account: run the watcher \
         (`openclaw webhooks gmail run`, gog) with its hook URL at <hooks.path>/gmail and \
         hooks.token as its hook token; a Pub/Sub push cannot send that token",
        "warning: hooks.internal: ignored",
        "warning: logging: ignored",
        "warning: env.shellEnv: ignored",
        "warning: agents.defaults.workspace: ignored",
        "warning: agents.entries.main.identity: ignored",
        "warning: agents.defaults.heartbeat.target: ignored",
        "warning: models.providers.openrouter.headers: ignored",
        "warning: channels.telegram.dmPolicy: ignored",
        "warning: channels.slack.enabled: false",
        "warning: channels.matrix: ignored",
    ] {
        assert!(stderr.contains(warned), "missing {warned:?} in:\n{stderr}");
    }
    assert!(
        !stderr.contains("123456:telegram-token") && !stderr.contains("sk-or-from-env-vars"),
        "a warning echoed a secret:\n{stderr}"
    );
    // Each key is named once.
    let controls = stderr.matches("gateway.controlUi").count();
    assert_eq!(controls, 1, "{stderr}");

    // `serve` on the same file (the port aside, so that tests do not collide).
    let server = Hookgate::try_start_in(
        &dir,
        &[
            ("OPENCLAW_HOOKS_TOKEN", HOOKS_TOKEN),
            ("OPENCLAW_GATEWAY_TOKEN", GATEWAY_TOKEN),
        ],
    )
    .unwrap_or_else(|log| panic!("serve refused the file:\n{log}"));
    let r = client()
        .post(server.url("/hooks/deploy"))
        .bearer_auth(HOOKS_TOKEN)
        .json(&json!({"service": "api", "version": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(server.wake_texts().await, ["Deployed api 3"]);
}

#[test]
fn every_problem_of_a_file_is_reported_in_one_run() {
    let dir = ConfigDir::new(&json!({}));
    dir.write_text(
        r#"{
          gateway: { bind: "tailnet", mode: "remote", prot: 1 },
          hooks: { enabled: true, token: "t0123456789", mapings: [] },
          models: { providers: { o: { baseUrl: "https://x", apiKey: { source: "exec", provider: "v", id: "k" } } } },
          agents: { defaults: { maxConcurrent: "many" } },
        }"#,
    );
    let (ok, _, stderr) = check_with_env(&dir);
    assert!(!ok);
    for problem in [
        "error: gateway.bind: \"tailnet\": hookgate does not look up a Tailscale address",
        "error: gateway.mode: \"remote\" makes an OpenClaw gateway a client of another",
        "error: gateway.prot: unknown field; did you mean `port`?",
        "error: hooks.mapings: unknown field; did you mean `mappings`?",
        "error: models.providers.o.apiKey: a SecretRef must have source \"env\" here",
        "error: agents.defaults.maxConcurrent: expected u32, not a string",
    ] {
        assert!(
            stderr.contains(problem),
            "missing {problem:?} in:\n{stderr}"
        );
    }
}

/// The fenced `json5` block of docs/coming-from-openclaw.md whose first line is `first`.
fn documented(first: &str) -> String {
    let doc = include_str!("../../docs/coming-from-openclaw.md");
    doc.split("```json5\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .find(|block| block.starts_with(first))
        .unwrap_or_else(|| panic!("no json5 block starting {first:?} in the doc"))
        .to_string()
}

/// The two ways to run hookgate, as docs/coming-from-openclaw.md gives them: its forward-mode
/// configuration passes `check` as it is, and runs in front of the real OpenClaw gateway started
/// on the doc's `openclaw.json` (tests/it/openclaw.rs has the gateway's set-up). Only what a test
/// must change is changed: the gateway's port, the state directory, the tokens' values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_forward_configuration_relays_to_the_real_openclaw_gateway() {
    const OPENCLAW_HOOKS: &str = "openclaw-hooks-token-documented-0123";
    const OPENCLAW_GATEWAY: &str = "openclaw-gateway-token-documented-01";
    let hookgate_config = documented("// hookgate.json5: hookgate in front of the OpenClaw");
    let openclaw_config = documented("// openclaw.json: the OpenClaw gateway behind hookgate");
    let env = [
        ("HOOKGATE_HOOK_TOKEN", HOOK_TOKEN),
        ("HOOKGATE_GATEWAY_TOKEN", GATEWAY_TOKEN),
        ("OPENCLAW_HOOKS_TOKEN", OPENCLAW_HOOKS),
    ];

    let dir = ConfigDir::new(&json!({}));
    dir.write_text(&hookgate_config);
    let out = Command::new(binary())
        .args(["check", "--config"])
        .arg(dir.config_file())
        .envs(env)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("hooks at /hooks, 2 mapping(s), presets [gmail]"),
        "{stdout}"
    );
    assert!(
        stderr.is_empty(),
        "hookgate's own keys need no warning:\n{stderr}"
    );

    let openclaw_config = openclaw_config
        .replace("${OPENCLAW_HOOKS_TOKEN}", OPENCLAW_HOOKS)
        .replace("${OPENCLAW_GATEWAY_TOKEN}", OPENCLAW_GATEWAY);
    let mut openclaw_config: Value = json5::from_str(&openclaw_config).unwrap();
    let mut openclaw = crate::openclaw::OpenClaw::start_with(|state| {
        set(
            &mut openclaw_config,
            "logging",
            json!({"file": state.join("openclaw.log")}),
        );
        openclaw_config
    });
    dir.write_text(
        &hookgate_config
            .replace("http://127.0.0.1:18789", &openclaw.url())
            .replace("/var/lib/hookgate", "state"),
    );
    let server =
        Hookgate::try_start_in(&dir, &env).unwrap_or_else(|log| panic!("serve refused:\n{log}"));
    openclaw.ready().await;

    let post = async |path: &str, body: Value| {
        let response = server.hook(path).json(&body).send().await.unwrap();
        let (status, reply) = json_of(response).await;
        assert_eq!(status, 200, "{path}: {reply}");
        reply
    };
    post("/hooks/wake", json!({"text": "deploy done"})).await;
    let runs = [
        post("/hooks/agent", json!({"message": "hello"})).await,
        post(
            "/hooks/ci",
            json!({"build": {"status": "green", "branch": "main"}}),
        )
        .await,
        post(
            "/hooks/gmail",
            json!({"messages": [{"id": "m1", "from": "a@example.com", "subject": "Hi",
                                 "snippet": "s", "body": "b"}]}),
        )
        .await,
    ];
    // The upstream queues the runs of its one session behind each other (tests/it/openclaw.rs
    // gives each a minute).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    for reply in &runs {
        let limit = deadline.saturating_duration_since(std::time::Instant::now());
        let every = std::time::Duration::from_millis(100);
        let run = eventually_within("the run relayed", limit, every, async || {
            let run = server.run_of(reply).await;
            if run["status"] == "queued" || run["status"] == "forwarding" {
                Err(format!("still forwarding: {run}"))
            } else {
                Ok(run)
            }
        })
        .await;
        assert_eq!(run["status"], "forwarded", "{run}\n{}", openclaw.log());
    }
    let metrics = server.metrics().await;
    for line in [
        r#"hookgate_forward_relays_total{kind="wake",outcome="forwarded"} 1"#,
        r#"hookgate_forward_relays_total{kind="agent",outcome="forwarded"} 3"#,
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
}
