//! What an operator meets on the second day: the command line in a pipeline and its help, what
//! `check` warns about, and the answers that must be OpenClaw's (docs/cli.md,
//! docs/configuration.md, docs/coming-from-openclaw.md).

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::fake::Fake;
use crate::harness::*;

/// Runs `hookgate <args>` with its stdout a pipe whose reader is already gone, as `| head` is
/// once it has read its lines: the first write meets a closed pipe.
fn into_closed_pipe(args: &[&str]) -> Output {
    let mut fds = [0; 2];
    // Close-on-exec, so that no child another test spawns meanwhile holds the reader open.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 just opened both descriptors, and nothing else owns them.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    Command::new(binary())
        .args(args)
        .env("HOOKGATE_GATEWAY_TOKEN", GATEWAY_TOKEN)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// Runs `hookgate <args>` against `server`; its stdout, after asserting that it succeeded.
pub(crate) fn cli(server: &Hookgate, args: &[&str]) -> String {
    let out = Command::new(binary())
        .args(args)
        .args(["--url", &server.base])
        .env("HOOKGATE_GATEWAY_TOKEN", GATEWAY_TOKEN)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

async fn agent(server: &Hookgate, body: Value) -> Value {
    let (status, answer) = server.hook_json("/hooks/agent", &body).await;
    assert_eq!(status, 200, "{answer}");
    server.run_of(&answer).await
}

#[tokio::test]
async fn a_reader_that_stops_early_ends_the_cli_quietly() {
    let (server, dir) = Hookgate::start(&base_config());
    let run = agent(&server, json!({"message": "m"})).await;
    let run_id = run["runId"].as_str().unwrap();
    eventually("the request is recorded", async || {
        cli(&server, &["requests", "list", "--json"]).contains("\"id\"")
    })
    .await;
    let config = dir.config_file().display().to_string();
    let url = server.base.as_str();
    let commands: [&[&str]; 6] = [
        &["requests", "list", "--url", url],
        &["runs", "list", "--url", url],
        &["runs", "show", run_id, "--url", url],
        &["runs", "show", run_id, "--json", "--url", url],
        &["completions", "bash"],
        &["check", "--config", &config],
    ];
    for args in commands {
        let out = into_closed_pipe(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn the_remote_commands_name_their_environment_in_their_help() {
    for args in [
        &["requests", "--help"][..],
        &["runs", "--help"],
        &["requests", "list", "--help"],
        &["requests", "replay", "--help"],
        &["runs", "show", "--help"],
    ] {
        let out = Command::new(binary()).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        let help = String::from_utf8_lossy(&out.stdout);
        for variable in ["HOOKGATE_GATEWAY_TOKEN", "HOOKGATE_URL"] {
            assert!(
                help.contains(variable),
                "{args:?} does not name {variable}:\n{help}"
            );
        }
    }
}

#[tokio::test]
async fn runs_show_prints_line_breaks_and_escapes_other_control_characters() {
    let (server, _dir) = Hookgate::start(&base_config());
    let run = agent(
        &server,
        json!({"message": "line one\nline two \u{1b}[31mred"}),
    )
    .await;
    let out = cli(&server, &["runs", "show", run["runId"].as_str().unwrap()]);
    let message = out
        .lines()
        .position(|l| l.starts_with("message ") && l.ends_with("line one"))
        .unwrap_or_else(|| panic!("no message line in:\n{out}"));
    let next = out.lines().nth(message + 1).unwrap();
    assert!(
        next.starts_with("   ") && next.trim_start().starts_with("line two"),
        "{out}"
    );
    assert!(
        !out.contains('\u{1b}'),
        "an escape reached the terminal: {out:?}"
    );
    assert!(next.contains("\\u{1b}[31mred"), "{out}");
    assert!(!out.contains("\\n"), "{out}");
}

#[tokio::test]
async fn a_request_timeout_of_zero_is_the_default_and_a_fraction_is_a_second() {
    let (server, _dir) = Hookgate::start(&base_config());
    let zero = agent(&server, json!({"message": "m", "timeoutSeconds": 0})).await;
    assert_eq!(zero["timeoutSeconds"], Value::Null, "{zero}");
    let half = agent(&server, json!({"message": "m", "timeoutSeconds": 0.5})).await;
    assert_eq!(half["timeoutSeconds"], 1, "{half}");
    let unknown = agent(&server, json!({"message": "m", "thinking": "hgih"})).await;
    assert_eq!(unknown["thinking"], Value::Null, "{unknown}");
}

/// A configuration whose runs reach a model (none answers at this address: `check` calls none).
fn with_a_model(mut config: Value, base_url: &str) -> Value {
    set(
        &mut config,
        "agents.defaults.provider",
        json!({"baseUrl": base_url, "apiKey": "sk-never-echoed-0123"}),
    );
    set(&mut config, "agents.defaults.model", json!("default-model"));
    config
}

#[test]
fn check_warns_about_replies_that_would_be_given_up() {
    let mut config = with_a_model(base_config(), "http://127.0.0.1:9");
    set(
        &mut config,
        "channels",
        json!({"telegram": {"botToken": "tg-never-echoed-0123"}}),
    );
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "ci"}, "messageTemplate": "m", "channel": "slack", "to": "C1"}]),
    );
    let (status, out, _dir) = check(&config);
    assert!(status.success(), "a warning is not a refusal: {out}");
    assert!(
        out.contains(
            "warning: channels.defaultRoute: not set: replies to channel \"last\" (the default of \
             hook runs, and every heartbeat's) are given up until an owner route is set with the \
             API (PUT /api/sessions/main/route)"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "warning: hooks.mappings[0].channel: names slack, which is not configured under \
             channels: its replies are given up"
        ),
        "{out}"
    );
    for secret in ["sk-never-echoed", "tg-never-echoed", "C1"] {
        assert!(!out.contains(secret), "a warning echoed a value: {out}");
    }

    set(
        &mut config,
        "channels.defaultRoute",
        json!({"channel": "signal", "to": "+15550000"}),
    );
    let (status, out, _dir) = check(&config);
    assert!(status.success(), "{out}");
    assert!(
        out.contains(
            "warning: channels.defaultRoute.channel: names signal, which is not configured"
        ),
        "{out}"
    );
    assert!(!out.contains("defaultRoute: not set"), "{out}");

    // With no channel at all, no owner route can help: it says so once, and only that.
    let (status, out, _dir) = check(&with_a_model(base_config(), "http://127.0.0.1:9"));
    assert!(status.success(), "{out}");
    assert!(
        out.contains(
            "warning: channels: no channel is configured: every reply of a run and a heartbeat \
             is given up (configure one under channels, or set deliver: false)"
        ),
        "{out}"
    );
    assert_eq!(out.matches("warning:").count(), 1, "{out}");
    // The printed line is one sentence: no run of spaces left by a broken line continuation.
    let warning = out.lines().find(|l| l.starts_with("warning:")).unwrap();
    assert!(!warning.contains("  "), "{out}");

    // Without a model no turn has a reply to lose.
    let (status, out, _dir) = check(&base_config());
    assert!(status.success() && !out.contains("warning:"), "{out}");
}

#[tokio::test]
async fn a_missing_channel_is_logged_once_per_configuration() {
    let provider = Fake::provider("Reply text").await;
    let config = with_a_model(base_config(), &provider.base);
    let (server, dir) = Hookgate::start(&config);
    let failed = async |server: &Hookgate| {
        let body =
            json!({"message": "m", "channel": "slack", "to": "C1", "wakeMode": "next-heartbeat"});
        let run = agent(server, body).await;
        eventually("the reply to be given up", async || {
            server.run_of(&run).await["delivery"]["status"] == "failed"
        })
        .await;
    };
    failed(&server).await;
    failed(&server).await;
    let mut reloaded = config.clone();
    set(&mut reloaded, "hooks.maxBodyBytes", json!(100_000));
    dir.write(&reloaded);
    eventually("the reload", async || {
        let (_, status) = json_of(server.api("/api/config").send().await.unwrap()).await;
        status["generation"] == 2
    })
    .await;
    failed(&server).await;
    let (_, log) = server.terminate();
    let said = log
        .lines()
        .filter(|l| l.contains("channel slack is not configured"))
        .count();
    assert_eq!(said, 2, "once per configuration:\n{log}");
}

#[test]
fn a_transforms_dir_that_is_not_there_says_how_relative_paths_resolve() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.transformsDir",
        json!("./hooks/transforms"),
    );
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "x"}, "transform": {"module": "passthrough.wasm"}}]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["passthrough"]);
    let (status, out) = check_in(&dir);
    assert!(!status.success(), "{out}");
    let root = dir.path().canonicalize().unwrap().join("hooks/transforms");
    assert_eq!(
        out.trim(),
        format!(
            "error: hooks.transformsDir: is not a directory: a relative path resolves against the \
             transforms root {} (hooks/transforms is a directory inside it); leave \
             hooks.transformsDir out for the root itself",
            root.display()
        )
    );
    // Without it, the root itself.
    set(&mut config, "hooks.transformsDir", Value::Null);
    dir.write(&config);
    let (status, out) = check_in(&dir);
    assert!(status.success(), "{out}");
}
