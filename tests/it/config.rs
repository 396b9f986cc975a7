//! docs/configuration.md: loading, refusing and reloading the configuration.

use serde_json::json;

use crate::harness::*;

fn refused(config: serde_json::Value, message: &str) {
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "check accepted it: {output}");
    assert!(
        output.contains(message),
        "expected {message:?} in:\n{output}"
    );
}

#[test]
fn check_accepts_a_valid_config_with_a_one_line_summary() {
    let (status, output, _dir) = check(&base_config());
    assert!(status.success(), "{output}");
    assert_eq!(output.lines().count(), 1, "{output}");
    assert!(output.starts_with("ok: "), "{output}");
}

#[test]
fn enabled_hooks_require_a_token() {
    refused(
        json!({"hooks": {"enabled": true}}),
        "hooks.enabled requires hooks.token",
    );
    refused(
        json!({"hooks": {"enabled": true, "token": "  "}}),
        "hooks.enabled requires hooks.token",
    );
}

#[test]
fn hook_token_must_differ_from_gateway_token() {
    let mut config = base_config();
    set(&mut config, "gateway.auth.token", json!(HOOK_TOKEN));
    refused(config, "hooks.token must not match gateway auth token");
}

#[test]
fn hooks_path_must_not_normalise_to_root() {
    for path in ["/", "///", " / "] {
        let mut config = base_config();
        set(&mut config, "hooks.path", json!(path));
        refused(config, "hooks.path: must not be '/'");
    }
}

#[test]
fn default_session_key_must_match_prefixes() {
    let mut config = base_config();
    set(&mut config, "hooks.defaultSessionKey", json!("other:x"));
    set(
        &mut config,
        "hooks.allowedSessionKeyPrefixes",
        json!(["hook:"]),
    );
    refused(
        config,
        "hooks.defaultSessionKey must match hooks.allowedSessionKeyPrefixes",
    );
}

#[test]
fn prefixes_must_include_hook_without_default_session_key() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.allowedSessionKeyPrefixes",
        json!(["cron:"]),
    );
    refused(
        config,
        "hooks.allowedSessionKeyPrefixes must include 'hook:' when hooks.defaultSessionKey is unset",
    );
}

#[test]
fn transforms_dir_outside_the_root_is_refused() {
    let mut config = base_config();
    set(&mut config, "hooks.transformsDir", json!("../../elsewhere"));
    refused(config, "hooks.transformsDir: must stay inside");
}

#[test]
fn transform_module_escaping_the_dir_is_refused() {
    for (module, why) in [
        ("", "must not be blank"),
        ("/etc/passwd", "must be relative"),
        ("~/x.wasm", "must not start with '~'"),
        ("c:x.wasm", "must not contain ':'"),
        ("../x.wasm", "must not contain a '..' segment"),
        ("a\\..\\..\\x.wasm", "must not contain a '..' segment"),
    ] {
        let mut config = base_config();
        set(
            &mut config,
            "hooks.mappings",
            json!([{"match": {"path": "x"}, "transform": {"module": module}}]),
        );
        refused(
            config,
            &format!("hooks.mappings[0].transform.module: {why}"),
        );
    }
}

#[cfg(unix)]
#[test]
fn transform_module_symlink_leading_out_is_refused() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "x"}, "transform": {"module": "evil.wasm"}}]),
    );
    let dir = ConfigDir::new(&config);
    let root = dir.path().join("hooks/transforms");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join("evil.wasm")).unwrap();
    let (status, output) = check_in(&dir);
    assert!(!status.success());
    assert!(
        output.contains("resolves outside the transforms directory"),
        "{output}"
    );
}

#[test]
fn unknown_keys_are_refused_with_their_path() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{}, {}, {"chanel": "slack"}]),
    );
    refused(config, "hooks.mappings[2].chanel: unknown field");
}

/// A section in the wrong shape says what it should be, in the words of the file, not the name
/// of the type hookgate reads it into, and never its value.
#[test]
fn a_section_that_is_not_an_object_is_refused_as_such() {
    let mut config = base_config();
    set(
        &mut config,
        "channels",
        json!({"telegram": "tg-never-echoed"}),
    );
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "check accepted it: {output}");
    assert!(
        output.contains("channels.telegram: expected an object, not a string"),
        "{output}"
    );
    assert!(!output.contains("never-echoed"), "{output}");
    assert!(!output.contains("struct"), "{output}");
}

/// docs/coming-from-openclaw.md: an unknown key is refused with the closest known key, under
/// `channels` as in every other section, and never with its value.
#[test]
fn unknown_channel_keys_are_refused_with_the_closest_key() {
    let mut config = base_config();
    set(
        &mut config,
        "channels",
        json!({"telegram": {"botTokn": "tg-never-echoed"}, "slakc": {"botToken": "sl-never-echoed"}}),
    );
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "check accepted it: {output}");
    for problem in [
        "error: channels.telegram.botTokn: unknown field; did you mean `botToken`?",
        "error: channels.slakc: unknown field; did you mean `slack`?",
    ] {
        assert!(
            output.contains(problem),
            "missing {problem:?} in:\n{output}"
        );
    }
    for secret in ["tg-never-echoed", "sl-never-echoed"] {
        assert!(
            !output.contains(secret),
            "a refusal echoed a value: {output}"
        );
    }
}

#[test]
fn check_lists_every_problem() {
    let config = json!({
        "gateway": {"auth": {"token": "same"}},
        "hooks": {"enabled": true, "token": "same", "path": "/", "allowedSessionKeyPrefixes": ["cron:"]},
    });
    let (status, output, _dir) = check(&config);
    assert!(!status.success());
    for message in [
        "hooks.token must not match gateway auth token",
        "hooks.path: must not be '/'",
        "hooks.allowedSessionKeyPrefixes must include 'hook:'",
    ] {
        assert!(
            output.contains(message),
            "missing {message:?} in:\n{output}"
        );
    }
}

#[test]
fn serve_refuses_an_invalid_config_with_a_non_zero_exit() {
    let dir = ConfigDir::new(&json!({"hooks": {"enabled": true}}));
    let err = Hookgate::try_start_in(&dir, &[])
        .err()
        .expect("server must refuse to start");
    assert!(err.contains("hooks.enabled requires hooks.token"), "{err}");
}

#[tokio::test]
async fn env_references_and_secret_files_supply_tokens() {
    let dir = ConfigDir::new(&json!({}));
    std::fs::write(
        dir.path().join("gateway.secret"),
        format!("  {GATEWAY_TOKEN}\n"),
    )
    .unwrap();
    dir.write_text(
        "// JSON5 with comments\n{ gateway: { auth: { token: { file: 'gateway.secret' } } },\n  hooks: { enabled: true, token: '${TEST_HOOK_TOKEN}' } }",
    );
    let server = Hookgate::try_start_in(&dir, &[("TEST_HOOK_TOKEN", HOOK_TOKEN)]).unwrap();
    let wake = server
        .hook("/hooks/wake")
        .json(&json!({"text": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wake.status(), 200);
    let api = server
        .api("/api/sessions/main/events")
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 200);
}

#[test]
fn unset_env_reference_is_refused_naming_the_key_only() {
    let dir = ConfigDir::new(&json!({}));
    dir.write_text("{ hooks: { enabled: true, token: '${HOOKGATE_TEST_UNSET_VAR}' } }");
    let (status, output) = check_in(&dir);
    assert!(!status.success());
    assert!(
        output.contains("hooks.token: refers to an environment variable that is not set"),
        "{output}"
    );
    assert!(!output.contains("HOOKGATE_TEST_UNSET_VAR"), "{output}");
}

#[tokio::test]
async fn valid_config_change_is_picked_up_without_restart() {
    let (server, dir) = Hookgate::start(&base_config());
    let mut config = base_config();
    set(&mut config, "hooks.path", json!("/ingress"));
    dir.write(&config);
    eventually("the new hooks.path to be served", async || {
        let r = server
            .hook("/ingress/wake")
            .json(&json!({"text": "x"}))
            .send()
            .await
            .unwrap();
        r.status() == 200
    })
    .await;
    let old = server
        .hook("/hooks/wake")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(old.status(), 404);
}

#[tokio::test]
async fn invalid_config_change_keeps_the_old_config() {
    let (server, dir) = Hookgate::start(&base_config());
    dir.write_text("{ hooks: { enabled: true } }");
    eventually("the refusal to be reported", async || {
        let (_, status) = json_of(server.api("/api/config").send().await.unwrap()).await;
        status["lastError"]
            .to_string()
            .contains("hooks.enabled requires hooks.token")
    })
    .await;
    let still = server
        .hook("/hooks/wake")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(still.status(), 200);
    let (_, status) = json_of(server.api("/api/config").send().await.unwrap()).await;
    assert_eq!(status["generation"], 1);
}

#[test]
fn an_msteams_default_route_takes_no_recipient() {
    let mut config = base_config();
    set(
        &mut config,
        "channels",
        json!({"msteams": {"webhookUrl": "http://127.0.0.1:9/hook"},
               "defaultRoute": {"channel": "msteams", "to": "19:abc"}}),
    );
    refused(
        config,
        "channels.defaultRoute.to: cannot be used with channel msteams",
    );
}

/// A problem names the key and what is expected, never any part of the value: a value may be a
/// secret pasted into the wrong key, and the message reaches `check`, the log and `/api/config`.
#[test]
fn no_problem_repeats_any_part_of_a_value() {
    let mut config = base_config();
    set(
        &mut config,
        "gateway.auth.token",
        json!("gw-Pa55${word-is-SECRET1}x"),
    );
    set(
        &mut config,
        "gateway.store",
        json!({"kind": "nats://user:PASS2@h:4222"}),
    );
    set(&mut config, "gateway.mode", json!("SECRET3-mode"));
    set(&mut config, "gateway.retention.events", json!("SECRET4"));
    set(&mut config, "hooks.presets", json!(["SECRET5"]));
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"match": {"path": "a"}, "signature": {"scheme": "SECRET6", "secret": "s"}},
            {"match": {"path": "b"}, "signature": {"scheme": "hmac-sha256", "secret": "s", "header": "x-s", "encoding": "SECRET7"}},
        ]),
    );
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "{output}");
    for key in [
        "gateway.auth.token:",
        "gateway.store.kind:",
        "gateway.mode:",
        "gateway.retention.events:",
        "hooks.presets[0]:",
        "hooks.mappings[0].signature.scheme:",
        "hooks.mappings[1].signature.encoding:",
    ] {
        assert!(output.contains(key), "{key} in:\n{output}");
    }
    for secret in ["SECRET", "PASS2", "word-is", "nats://"] {
        assert!(!output.contains(secret), "{secret} in:\n{output}");
    }
}

#[tokio::test]
async fn a_refused_reload_repeats_no_part_of_a_value_either() {
    let config = base_config();
    let (server, dir) = Hookgate::start(&config);
    let mut broken = config.clone();
    set(
        &mut broken,
        "gateway.store",
        json!({"kind": "nats://u:PASS8@h:4222"}),
    );
    dir.write(&broken);
    let mut last_error = String::new();
    eventually("the refused reload", async || {
        let (_, status) = json_of(server.api("/api/config").send().await.unwrap()).await;
        last_error = status["lastError"].to_string();
        last_error.contains("gateway.store.kind")
    })
    .await;
    assert!(!last_error.contains("PASS8"), "{last_error}");
    let (_, log) = server.terminate();
    assert!(log.contains("gateway.store.kind"), "{log}");
    assert!(!log.contains("PASS8"), "{log}");
}

/// A FIFO (or a device) as a secret file is refused at once, not waited on for a writer.
#[tokio::test]
async fn a_fifo_secret_file_is_refused_without_hanging() {
    let dir = ConfigDir::new(&json!({}));
    let fifo = dir.path().join("token.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    dir.write_text("{ hooks: { enabled: true, token: { file: 'token.fifo' } } }");
    let mut child = std::process::Command::new(binary())
        .args(["check", "--config"])
        .arg(dir.config_file())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = {
        let running = KillOnDrop(&mut child);
        let limit = std::time::Duration::from_secs(20);
        let every = std::time::Duration::from_millis(50);
        eventually_within("hookgate check to end", limit, every, async || {
            let status = running.0.try_wait().unwrap();
            status.ok_or_else(|| "hookgate check still waits on the FIFO".to_string())
        })
        .await
    };
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("hooks.token: cannot read secret file")
            && text.contains("not a regular file"),
        "{text}"
    );
}

/// Kills the process when dropped: a test that fails while waiting for it leaves none behind.
struct KillOnDrop<'a>(&'a mut std::process::Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        // An error only says the process has ended already.
        let _ = self.0.kill();
    }
}

/// A mapping may not take a preset's id: that would give it the preset's capture and limits.
#[test]
fn a_mapping_id_may_not_be_a_presets() {
    let mut config = base_config();
    set(&mut config, "hooks.presets", json!(["gmail"]));
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "gmail", "match": {"path": "mail"}, "action": "wake", "textTemplate": "x",
                "capture": {"enabled": true}}]),
    );
    refused(
        config,
        "hooks.mappings[0].id: is the id of the preset gmail (hooks.presets)",
    );
    let mut twice = base_config();
    set(&mut twice, "hooks.presets", json!(["gmail", "gmail"]));
    refused(twice, "hooks.presets[1]: names a preset listed before it");
}
