//! docs/hooks.md transforms: the example components over real HTTP, hostile components within
//! their limits while the server keeps serving, load-time refusals and live replacement.

use serde_json::{Value, json};

use crate::harness::*;

/// A server whose mappings call transforms from the transforms directory.
fn start_with(transforms: &[&str], mappings: Value) -> (Hookgate, ConfigDir) {
    let mut config = base_config();
    set(&mut config, "hooks.mappings", mappings);
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, transforms);
    (Hookgate::start_in(&dir), dir)
}

/// `hookgate transform run <module> --body <payload>`, the payload one of `examples/payloads`.
fn transform_run(module: &str, payload: &str) -> std::process::Command {
    let body = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/payloads")
        .join(payload);
    let mut command = std::process::Command::new(binary());
    command
        .args(["transform", "run"])
        .arg(transforms().join(module))
        .arg("--body")
        .arg(body);
    command
}

fn example(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/payloads")
        .join(name);
    serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

fn github() -> (Hookgate, ConfigDir) {
    start_with(
        &["github"],
        json!([{"id": "github", "match": {"path": "github"}, "transform": {"module": "github.wasm"}}]),
    )
}

#[tokio::test]
async fn github_push_becomes_an_agent_run() {
    let (server, _dir) = github();
    let r = server
        .hook("/hooks/github")
        .header("x-github-event", "push")
        .json(&example("github-push.json"))
        .send()
        .await
        .unwrap();
    let (status, reply) = json_of(r).await;
    assert_eq!(status, 200, "{reply}");
    let run = server.run_of(&reply).await;
    assert_eq!(run["hookName"], "GitHub");
    assert!(
        run["message"]
            .as_str()
            .unwrap()
            .starts_with("[octo-org/hookgate] ana pushed 2 commits to main: "),
        "{run}"
    );
}

#[tokio::test]
async fn github_pull_request_issue_release_and_workflow_run() {
    let (server, _dir) = github();
    for (event, file, starts) in [
        (
            "pull_request",
            "github-pull-request.json",
            "[octo-org/hookgate] Pull request #42 merged by bo: ",
        ),
        (
            "issues",
            "github-issues.json",
            "[octo-org/hookgate] Issue #7 opened by cy: ",
        ),
        (
            "release",
            "github-release.json",
            "[octo-org/hookgate] Release v1.0.0 published: ",
        ),
        (
            "workflow_run",
            "github-workflow-run.json",
            "[octo-org/hookgate] Workflow \"CI\" failure on main",
        ),
    ] {
        let r = server
            .hook("/hooks/github")
            .header("x-github-event", event)
            .json(&example(file))
            .send()
            .await
            .unwrap();
        let (status, reply) = json_of(r).await;
        assert_eq!(status, 200, "{event}: {reply}");
        let message = server.run_of(&reply).await["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(message.starts_with(starts), "{event}: {message}");
    }
}

#[tokio::test]
async fn github_ping_is_skipped_with_204() {
    let (server, _dir) = github();
    let r = server
        .hook("/hooks/github")
        .header("x-github-event", "ping")
        .json(&json!({"zen": "Keep it simple."}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert!(r.text().await.unwrap().is_empty());
}

#[tokio::test]
async fn transforms_see_headers_and_query_but_no_credentials() {
    let (server, _dir) = start_with(
        &["hostile"],
        json!([{"match": {"path": "echo"}, "transform": {"module": "hostile.wasm", "config": {"mode": "headers"}}}]),
    );
    let r = server
        .hook("/hooks/echo?a=1")
        .header("x-service-token", "also-secret")
        .header("cookie", "session=1")
        .header("X-Other", "seen")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = server.event_texts().await.remove(0);
    assert!(text.contains("x-other=seen"), "{text}");
    assert!(text.contains("?a=1"), "{text}");
    for secret in ["authorization", "x-service-token", "cookie", HOOK_TOKEN] {
        assert!(
            !text.contains(secret),
            "{secret} reached the transform: {text}"
        );
    }
}

#[tokio::test]
async fn slack_url_verification_answers_the_challenge() {
    let (server, _dir) = start_with(
        &["slack"],
        json!([{"match": {"path": "slack"}, "transform": {"module": "slack.wasm"}}]),
    );
    let r = server
        .hook("/hooks/slack")
        .json(&example("slack-url-verification.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(
        json_of(r).await,
        (
            200,
            json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
        )
    );
}

#[tokio::test]
async fn slack_message_becomes_an_agent_run_replying_in_its_channel() {
    let (server, _dir) = start_with(
        &["slack"],
        json!([{"match": {"path": "slack"}, "transform": {"module": "slack.wasm"}}]),
    );
    let (status, reply) = json_of(
        server
            .hook("/hooks/slack")
            .json(&example("slack-message.json"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let run = server.run_of(&reply).await;
    assert_eq!(run["channel"], "slack");
    assert_eq!(run["to"], "C024BE91L");
    assert_eq!(
        run["message"],
        "Slack message from <@U2147483697> in <#C024BE91L>:\nIs the deploy done?"
    );
}

#[tokio::test]
async fn stripe_listed_event_wakes_and_others_are_skipped() {
    let (server, _dir) = start_with(
        &["stripe"],
        json!([{"match": {"path": "stripe"}, "transform": {"module": "stripe.wasm", "config": {"events": ["invoice.payment_failed"]}}}]),
    );
    let r = server
        .hook("/hooks/stripe")
        .json(&example("stripe-invoice-payment-failed.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await,
        (
            200,
            json!({"ok": true, "mode": "now", "eventOutcome": "queued"})
        )
    );
    let r = server
        .hook("/hooks/stripe")
        .json(&json!({"type": "charge.succeeded", "data": {"object": {}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(
        server.event_texts().await,
        ["Stripe invoice.payment_failed: in_1OtYLq2eZvKYlo2C, 20.50 USD, customer cus_PjKz"]
    );
}

#[tokio::test]
async fn passthrough_turns_json_into_a_wake_or_an_agent_run() {
    let (server, _dir) = start_with(
        &["passthrough"],
        json!([
            {"match": {"path": "alert"}, "transform": {"module": "passthrough.wasm", "config": {"action": "wake", "field": "/alert/summary", "prefix": "Alert: "}}},
            {"match": {"path": "ask"}, "action": "wake", "transform": {"module": "passthrough.wasm", "config": {"field": "/q", "name": "Ask", "channel": "discord", "to": "c1"}}},
        ]),
    );
    let r = server
        .hook("/hooks/alert")
        .json(&example("passthrough-alert.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        server.event_texts().await,
        ["Alert: disk /var is 95% full on db-1"]
    );
    // An agent action from a wake mapping: the transform decides the kind.
    let (status, reply) = json_of(
        server
            .hook("/hooks/ask")
            .json(&json!({"q": "Why?"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let run = server.run_of(&reply).await;
    assert_eq!(
        (
            run["message"].as_str(),
            run["hookName"].as_str(),
            run["channel"].as_str()
        ),
        (Some("Why?"), Some("Ask"), Some("discord"))
    );
}

fn hostile(mode: &str) -> Value {
    json!({"match": {"path": mode}, "transform": {"module": "hostile.wasm", "config": {"mode": mode}}})
}

/// Each hostile behaviour gets 500 `hook mapping failed`, while wakes sent at the same time
/// keep succeeding, and the server keeps serving afterwards.
#[tokio::test]
async fn hostile_transforms_fail_alone_within_their_limits() {
    let modes = [
        "loop",
        "memory",
        "recursion",
        "output",
        "trap",
        "stdout-flood",
        "read-file",
        "env",
    ];
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        Value::Array(modes.iter().map(|m| hostile(m)).collect()),
    );
    set(
        &mut config,
        "hooks.transformLimits",
        json!({"timeoutMs": 200, "memoryBytes": 8388608}),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    for mode in modes {
        let attack = server
            .hook(&format!("/hooks/{mode}"))
            .json(&json!({}))
            .send();
        let wakes = async {
            for i in 0..5 {
                let r = server
                    .hook("/hooks/wake")
                    .json(&json!({"text": format!("{mode} {i}")}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "wake during {mode}");
            }
        };
        let (attacked, ()) = tokio::join!(attack, wakes);
        let (status, body) = json_of(attacked.unwrap()).await;
        assert_eq!(
            (status, body),
            (500, json!({"ok": false, "error": "hook mapping failed"})),
            "{mode}"
        );
    }
    assert_eq!(
        client()
            .get(server.url("/livez"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let (_, log) = server.terminate();
    for (mode, cause) in [
        ("loop", "timeout"),
        ("memory", "memory"),
        ("recursion", "trap"),
        ("output", "output"),
        ("stdout-flood", "output"),
        ("trap", "trap"),
        ("read-file", "error"),
        ("env", "error"),
    ] {
        let line = log.lines().find(|l| {
            l.contains("transform failed")
                && l.contains(&format!(
                    "mapping=mapping-{}",
                    modes.iter().position(|m| *m == mode).unwrap() + 1
                ))
        });
        let line = line.unwrap_or_else(|| panic!("no failure logged for {mode}:\n{log}"));
        assert!(
            line.contains(&format!("cause=\"{cause}\""))
                || line.contains(&format!("cause={cause}")),
            "{mode}: {line}"
        );
    }
}

/// Calls that time out, even inside a host call, give their slot back: with two slots, more
/// timed-out calls than slots still leave the transform serving.
#[tokio::test]
async fn timed_out_calls_free_their_slots() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([hostile("sleep"), hostile("rest")]),
    );
    set(
        &mut config,
        "hooks.transformLimits",
        json!({"timeoutMs": 150, "maxConcurrent": 2}),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let sleepers: Vec<_> = (0..4)
        .map(|_| tokio::spawn(server.hook("/hooks/sleep").json(&json!({})).send()))
        .collect();
    for sleeper in sleepers {
        assert_eq!(sleeper.await.unwrap().unwrap().status(), 500);
    }
    let r = server
        .hook("/hooks/rest")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(server.event_texts().await, ["hostile fixture at rest"]);
}

#[tokio::test]
async fn transform_log_import_reaches_the_server_log_with_the_mapping_id() {
    let (server, _dir) = start_with(
        &["hostile"],
        json!([{"id": "chatty", "match": {"path": "log"}, "transform": {"module": "hostile.wasm", "config": {"mode": "log"}}}]),
    );
    assert_eq!(
        server
            .hook("/hooks/log")
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let (_, log) = server.terminate();
    assert!(
        log.lines()
            .any(|l| l.contains("hello from a transform") && l.contains("chatty")),
        "{log}"
    );
}

fn with_module(module: &str) -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "x"}, "transform": {"module": module}}]),
    );
    config
}

#[test]
fn a_core_module_is_refused_at_load_naming_the_file() {
    let dir = ConfigDir::new(&with_module("core.wasm"));
    std::fs::create_dir_all(dir.path().join("hooks/transforms")).unwrap();
    std::fs::write(
        dir.path().join("hooks/transforms/core.wasm"),
        wat::parse_str("(module)").unwrap(),
    )
    .unwrap();
    let (status, output) = check_in(&dir);
    assert!(!status.success());
    assert!(
        output.contains(
            "hooks.mappings[0].transform.module: core.wasm: a WebAssembly core module, not a component"
        ),
        "{output}"
    );
}

#[test]
fn a_component_without_the_transform_export_is_refused_at_load() {
    let dir = ConfigDir::new(&with_module("empty.wasm"));
    std::fs::create_dir_all(dir.path().join("hooks/transforms")).unwrap();
    std::fs::write(
        dir.path().join("hooks/transforms/empty.wasm"),
        wat::parse_str("(component)").unwrap(),
    )
    .unwrap();
    let err = Hookgate::try_start_in(&dir, &[])
        .err()
        .expect("must refuse to start");
    assert!(
        err.contains("empty.wasm: exports neither `hookgate:transform/handler@0.2.0` nor (as 0.1 components do) `transform`: it is not a hookgate transform"),
        "{err}"
    );
}

#[test]
fn a_missing_module_is_refused_at_load() {
    let (status, output, _dir) = check(&with_module("nowhere.wasm"));
    assert!(!status.success());
    assert!(
        output.contains("hooks.mappings[0].transform.module: nowhere.wasm: cannot"),
        "{output}"
    );
}

#[test]
fn a_component_that_imports_sockets_is_refused_at_load() {
    let dir = ConfigDir::new(&with_module("sockets.wasm"));
    install_transforms(&dir, &["sockets"]);
    let (status, output) = check_in(&dir);
    assert!(!status.success());
    assert!(
        output.contains("sockets.wasm: imports what transforms may not use: wasi:sockets/"),
        "{output}"
    );
}

#[test]
fn check_loads_every_transform_the_config_names() {
    let dir = ConfigDir::new(&with_module("github.wasm"));
    install_transforms(&dir, &["github"]);
    let (status, output) = check_in(&dir);
    assert!(status.success(), "{output}");
}

async fn status_of(server: &Hookgate) -> Value {
    json_of(server.api("/api/config").send().await.unwrap())
        .await
        .1
}

#[tokio::test]
async fn replaced_transform_takes_effect_without_restart_and_broken_one_is_refused() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "swap"}, "transform": {"module": "live.wasm", "config": {"action": "wake"}}}]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["github", "passthrough"]);
    let root = dir.path().join("hooks/transforms");
    std::fs::copy(root.join("github.wasm"), root.join("live.wasm")).unwrap();
    let server = Hookgate::start_in(&dir);
    // Served by the github transform: a ping is skipped.
    let r = server
        .hook("/hooks/swap")
        .header("x-github-event", "ping")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);

    // Replace it with passthrough: the same request now becomes a wake.
    replace_file(
        &root.join("live.wasm"),
        &std::fs::read(root.join("passthrough.wasm")).unwrap(),
    );
    eventually_200("the replacement to serve", || {
        server
            .hook("/hooks/swap")
            .header("x-github-event", "ping")
            .json(&json!({"n": 1}))
    })
    .await;

    // A broken replacement is refused and reported; the passthrough version keeps serving.
    replace_file(&root.join("live.wasm"), b"\0asm broken");
    eventually("the broken replacement to be reported", async || {
        status_of(&server).await["transforms"][0]["lastError"].is_string()
    })
    .await;
    for _ in 0..5 {
        let r = server
            .hook("/hooks/swap")
            .json(&json!({"n": 2}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
}

#[test]
fn transform_run_prints_the_outcome_as_json() {
    let out = transform_run("github.wasm", "github-push.json")
        .args(["--name", "github", "--header", "X-GitHub-Event: push"])
        .output()
        .unwrap();
    assert_succeeded(&out);
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["outcome"], "run");
    assert_eq!(outcome["action"]["kind"], "agent");
    assert_eq!(outcome["action"]["name"], "GitHub");
}

/// `transform run` makes one call at a time and sizes the engine's pool for that: in an address
/// space of 32 GiB its instance still comes from the pool, as a server's do. Sized for a
/// server's default 32 calls at once, the pool's reservation (516 GiB) failed there, and under
/// valgrind (about 64 GiB in one mapping), so the engine allocated on demand and a call counted
/// there was not the call a server makes (docs/performance.md, "Profiling").
#[test]
fn transform_run_takes_its_instance_from_the_pool_in_a_small_address_space() {
    use std::os::unix::process::CommandExt;
    let mut command = transform_run("github.wasm", "github-push.json");
    command.args(["--name", "github", "--header", "X-GitHub-Event: push"]);
    // SAFETY: between fork and exec the closure only calls setrlimit, which is
    // async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            let bytes = 32 << 30;
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let out = command.output().unwrap();
    assert_succeeded(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("pooling allocator unavailable"),
        "the engine fell back to allocating on demand: {stderr}"
    );
}

/// `transform run` shows what the transform returned, not what hookgate reads from it: names
/// as the transform spelled them, texts untrimmed, blanks as they are.
#[test]
fn transform_run_prints_the_transforms_own_spelling() {
    let config = json!({
        "channel": "Telegram", "thinking": "x-high", "name": "  Monitoring ", "to": "",
        "mode": "next-heartbeat",
    });
    let out = transform_run("passthrough.wasm", "passthrough-alert.json")
        .args(["--config", &config.to_string()])
        .output()
        .unwrap();
    assert_succeeded(&out);
    let printed = String::from_utf8_lossy(&out.stdout);
    let outcome: Value = serde_json::from_str(&printed).unwrap();
    // The message is the body as the transform's JSON library writes it.
    let message = outcome["action"]["message"].to_string();
    let expected = format!(
        concat!(
            r#"{{"outcome":"run","action":{{"kind":"agent","message":{},"name":"  Monitoring ","#,
            r#""agentId":null,"sessionKey":null,"wakeMode":"next-heartbeat","deliver":null,"#,
            r#""channel":"Telegram","to":"","model":null,"thinking":"x-high","timeoutSeconds":null}}}}"#,
        ),
        message
    );
    assert_eq!(printed.trim_end(), expected, "{outcome:#}");
}

/// An empty `XDG_CACHE_HOME` is unset (the XDG specification): the compile cache goes under
/// `$HOME/.cache`, never into the current directory.
#[test]
fn transform_run_caches_under_home_when_xdg_cache_home_is_empty() {
    let (cwd, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let out = transform_run("github.wasm", "github-push.json")
        .current_dir(cwd.path())
        .env("XDG_CACHE_HOME", "")
        .env("HOME", home.path())
        .args(["--name", "github", "--header", "X-GitHub-Event: push"])
        .output()
        .unwrap();
    assert_succeeded(&out);
    assert!(
        !cwd.path().join("hookgate").exists(),
        "a cache in the current directory"
    );
    assert!(home.path().join(".cache/hookgate/transform-cache").is_dir());
}

#[test]
fn transform_run_exits_non_zero_on_a_trap() {
    let out = transform_run("hostile.wasm", "passthrough-alert.json")
        .args(["--config", r#"{"mode": "trap"}"#])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("(trap)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One mapping's slow transform leaves the other mappings their share of `maxConcurrent`: with
/// every slot held by a flood of calls that spin to their 2 s limit, a quick mapping (100 ms to
/// wait and run) timed out behind them.
#[tokio::test]
async fn a_slow_mapping_cannot_starve_the_others() {
    let mut slow = hostile("loop");
    slow["transform"]["limits"] = json!({"timeoutMs": 2000});
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([slow, hostile("rest")]),
    );
    set(
        &mut config,
        "hooks.transformLimits",
        json!({"timeoutMs": 100, "maxConcurrent": 4}),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let flood: Vec<_> = (0..8)
        .map(|_| tokio::spawn(server.hook("/hooks/loop").json(&json!({})).send()))
        .collect();
    // Quick calls, one after another, for as long as the flood runs (each of its calls holds
    // a slot for 2 s).
    let mut quick = 0;
    while !flood.iter().any(|call| call.is_finished()) {
        let response = server
            .hook("/hooks/rest")
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "quick call {quick}");
        quick += 1;
    }
    assert!(quick >= 3, "only {quick} quick calls ran beside the flood");
    for call in flood {
        assert_eq!(call.await.unwrap().unwrap().status(), 500);
    }
}

/// A module named by its JavaScript or TypeScript source, as an openclaw.json names it, is the
/// component built from it beside it; without one, the refusal gives the command that builds it.
#[tokio::test]
async fn a_javascript_module_name_loads_the_component_built_beside_it() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "alert"}, "transform": {"module": "passthrough.mjs",
                "config": {"action": "wake", "field": "/alert/summary"}}}]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["passthrough"]);
    let server = Hookgate::start_in(&dir);
    let r = server
        .hook("/hooks/alert")
        .json(&json!({"alert": {"summary": "from the built component"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(server.event_texts().await, ["from the built component"]);

    let missing = ConfigDir::new(&with_module("digest.ts"));
    std::fs::create_dir_all(missing.path().join("hooks/transforms")).unwrap();
    let (status, output) = check_in(&missing);
    assert!(!status.success());
    let transforms = missing.path().join("hooks/transforms");
    let command = format!(
        "hookgate transform build {}",
        transforms.join("digest.ts").display()
    );
    assert!(
        output.contains("digest.ts: is JavaScript or TypeScript") && output.contains(&command),
        "{output}"
    );
}
