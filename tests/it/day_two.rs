//! What an operator meets on the second day: the command line in a pipeline and its help, what
//! `check` warns about, and the answers that must be OpenClaw's (docs/cli.md,
//! docs/configuration.md, docs/coming-from-openclaw.md).

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

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
fn cli(server: &Hookgate, args: &[&str]) -> String {
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
    let (status, answer) = json_of(
        server
            .hook("/hooks/agent")
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
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
