//! An `openclaw.json` runs unchanged (docs/coming-from-openclaw.md): `check` accepts a complete
//! one, warning once for each key hookgate takes in its own form or leaves out, and `serve`
//! serves its hooks; a file with several problems has them all reported in one run.

use std::process::Command;

use serde_json::json;

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
