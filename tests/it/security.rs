//! Security checks: what must never reach the log, what a transform cannot see, and which files
//! hookgate keeps to its own user. (The operator API refusing the hook token is in `api.rs`, the
//! lockout against spoofed `X-Forwarded-For` in `pipeline.rs`, files, environment and sockets
//! denied to transforms in `transforms.rs`.)

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};

use crate::fake::{Answer, Fake};
use crate::harness::*;
use crate::signatures::sign;

/// Planted in every payload below; the log may name the request, never repeat its content.
const CANARY: &str = "canary-payload-5f1c2e";
const SIGNING_SECRET: &str = "signing-secret-a8d3f0";
const PROVIDER_KEY: &str = "sk-provider-key-77c1d4";
const BOT_TOKEN: &str = "bot-token-e49b20";

fn config(provider: &Fake, chat: &Fake) -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "agents.defaults.provider",
        json!({"baseUrl": provider.base, "apiKey": PROVIDER_KEY}),
    );
    set(&mut config, "agents.defaults.model", json!("test-model"));
    set(
        &mut config,
        "channels",
        json!({"telegram": {"botToken": BOT_TOKEN, "apiBase": chat.base}}),
    );
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "deploy", "match": {"path": "deploy"}, "action": "wake",
             "textTemplate": "deployed {{service}}"},
            {"id": "signed", "match": {"path": "signed"}, "messageTemplate": "{{note}}",
             "deliver": false, "signature": {"scheme": "github", "secret": SIGNING_SECRET}},
            {"id": "alerts", "match": {"path": "alerts"},
             "transform": {"module": "passthrough.wasm",
                           "config": {"action": "wake", "field": "/alert/summary"}}},
        ]),
    );
    config
}

/// Every kind of request, accepted and refused, with the secrets and the canary in the places an
/// attacker or a careless log line would put them; then the whole debug log is searched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_secret_signature_or_payload_reaches_the_debug_log() {
    let provider = Fake::provider("the reply").await;
    // The chat API fails first, so that the delivery's error path is logged too.
    let chat = Fake::start(|_, index| match index {
        0 => Answer::Text(500, "down".into()),
        _ => Answer::Json(200, json!({"ok": true})),
    })
    .await;
    let dir = ConfigDir::new(&config(&provider, &chat));
    install_transforms(&dir, &["passthrough"]);
    let server = Hookgate::start_in(&dir);
    let http = client();
    let post = |path: &str| http.post(server.url(path));

    let accepted = [
        server
            .hook("/hooks/wake")
            .json(&json!({"text": CANARY}))
            .send()
            .await,
        server
            .hook("/hooks/agent")
            .json(&json!({"message": CANARY, "channel": "telegram", "to": "42"}))
            .send()
            .await,
        server
            .hook("/hooks/deploy")
            .json(&json!({"service": CANARY}))
            .send()
            .await,
        server
            .hook("/hooks/alerts")
            .json(&json!({"alert": {"summary": CANARY}}))
            .send()
            .await,
        post("/hooks/wake")
            .header("x-openclaw-token", HOOK_TOKEN)
            .json(&json!({"text": CANARY}))
            .send()
            .await,
    ];
    for response in accepted {
        assert_eq!(response.unwrap().status(), 200);
    }
    let body = serde_json::to_vec(&json!({"note": CANARY})).unwrap();
    let headers = sign("github", SIGNING_SECRET, &body, 0, "delivery-1");
    let signature = headers[0].1.clone();
    let mut signed = post("/hooks/signed").body(body.clone());
    for (name, value) in &headers {
        signed = signed.header(name, value);
    }
    assert_eq!(signed.send().await.unwrap().status(), 200);

    let refused = [
        (
            post(&format!("/hooks/wake?token={HOOK_TOKEN}")).json(&json!({"text": CANARY})),
            400,
        ),
        (
            post("/hooks/wake")
                .bearer_auth(format!("{HOOK_TOKEN}x"))
                .json(&json!({"text": CANARY})),
            401,
        ),
        (
            post("/hooks/wake")
                .bearer_auth(GATEWAY_TOKEN)
                .json(&json!({"text": CANARY})),
            401,
        ),
        (
            post("/hooks/wake")
                .bearer_auth(HOOK_TOKEN)
                .header("content-type", "application/json")
                .body(format!("{{\"text\": \"{CANARY}\"")),
            400,
        ),
        (
            post("/hooks/agent")
                .bearer_auth(HOOK_TOKEN)
                .json(&json!({"message": 1, "note": CANARY})),
            400,
        ),
        (
            post("/hooks/signed")
                .header("x-hub-signature-256", format!("sha256={}", "0".repeat(64)))
                .header("x-github-delivery", CANARY)
                .body(body.clone()),
            401,
        ),
        (
            http.get(server.url("/api/sessions/main/events"))
                .bearer_auth(HOOK_TOKEN),
            401,
        ),
    ];
    for (request, status) in refused {
        assert_eq!(request.send().await.unwrap().status().as_u16(), status);
    }
    for path in [
        "/api/config",
        "/api/runs",
        "/metrics",
        "/api/sessions/main/events",
    ] {
        assert_eq!(
            server.api(path).send().await.unwrap().status(),
            200,
            "{path}"
        );
    }
    eventually("the reply to be delivered after one failure", async || {
        chat.requests().len() == 2
    })
    .await;

    let (_, log) = server.terminate();
    assert!(
        log.lines().count() > 5,
        "debug logging was on, so there is plenty to search: {log}"
    );
    assert_no_secrets(
        &log,
        &[
            HOOK_TOKEN,
            GATEWAY_TOKEN,
            SIGNING_SECRET,
            &signature,
            PROVIDER_KEY,
            BOT_TOKEN,
            CANARY,
        ],
    );
}

/// A transform may read the time of day but not a timer fine enough to measure the host: both
/// WASI clocks tick in whole milliseconds.
#[tokio::test]
async fn transform_clocks_tick_in_whole_milliseconds() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "clocks"},
                "transform": {"module": "hostile.wasm", "config": {"mode": "clocks"}}}]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let response = server
        .hook("/hooks/clocks")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let texts = server.wake_texts().await;
    let readings: Vec<u64> = texts[0]
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect();
    assert_eq!(readings.len(), 2, "{texts:?}");
    for granularity in readings {
        assert!(
            granularity >= 1_000_000,
            "a clock finer than a millisecond: {texts:?}"
        );
    }
}

/// The state directory (every accepted payload, and the compile cache whose native code hookgate
/// runs) is its owner's alone; the configuration, which holds the secrets, is never written.
#[tokio::test]
async fn state_is_owner_only_and_the_config_is_never_written() {
    let dir = alerts_dir();
    let config_file = dir.config_file();
    std::fs::set_permissions(&config_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let written = std::fs::read(&config_file).unwrap();
    let modified = std::fs::metadata(&config_file).unwrap().modified().unwrap();

    let server = Hookgate::start_in(&dir);
    for path in ["/hooks/wake", "/hooks/alerts"] {
        let body = json!({"text": "t", "alert": {"summary": "s"}});
        let response = server.hook(path).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    server.signal("-HUP");
    eventually("the reload the SIGHUP asks for", async || {
        let (_, status) = json_of(server.api("/api/config").send().await.unwrap()).await;
        status["generation"].as_u64() >= Some(2)
    })
    .await;
    let (status, _) = server.terminate();
    assert!(status.success());

    let metadata = std::fs::metadata(&config_file).unwrap();
    assert_eq!(std::fs::read(&config_file).unwrap(), written);
    assert_eq!(metadata.modified().unwrap(), modified);
    assert_eq!(metadata.permissions().mode() & 0o777, 0o600);

    let state = dir.path().join("state");
    let mut checked = 0;
    for entry in walk(&state) {
        let mode = std::fs::metadata(&entry).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} is {:o}", entry.display(), mode & 0o777);
        checked += 1;
    }
    assert!(
        checked >= 4,
        "the state directory, the database, its WAL and the compile cache were all checked"
    );
}

/// A configuration whose only mapping, `alerts`, runs the passthrough transform (so that the
/// state directory gets a compile cache).
pub(crate) fn alerts_dir() -> ConfigDir {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "alerts"}, "transform": {"module": "passthrough.wasm",
                "config": {"action": "wake", "field": "/alert/summary"}}}]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["passthrough"]);
    dir
}

/// Posts an alert to the `alerts` mapping of [`alerts_dir`]; the status.
pub(crate) async fn post_alert(server: &Hookgate, summary: &str) -> u16 {
    let body = json!({"alert": {"summary": summary}});
    let response = server
        .hook("/hooks/alerts")
        .json(&body)
        .send()
        .await
        .unwrap();
    response.status().as_u16()
}

/// `dir` and everything below it.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = vec![dir.to_path_buf()];
    if dir.is_dir() {
        for entry in std::fs::read_dir(dir).unwrap() {
            found.extend(walk(&entry.unwrap().path()));
        }
    }
    found
}

/// Compiled code is run unchecked, so a cache entry another user could have written is ignored
/// (and the module compiled again), never loaded.
#[tokio::test]
async fn a_cache_entry_others_could_write_is_not_loaded() {
    let dir = alerts_dir();
    let (status, _) = Hookgate::start_in(&dir).terminate();
    assert!(status.success());
    let cache = dir.path().join("state/transform-cache");
    let entries: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    std::fs::set_permissions(&entries[0], std::fs::Permissions::from_mode(0o666)).unwrap();

    let server = Hookgate::start_in(&dir);
    assert_eq!(post_alert(&server, "still served").await, 200);
    let (_, log) = server.terminate();
    assert!(
        log.contains("ignoring a cache entry") && log.contains("other users could have written it"),
        "{log}"
    );
    let mode = std::fs::metadata(&entries[0]).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the entry was compiled again and rewritten"
    );
}

/// What a guest makes the host write reaches the log escaped and bounded: an error cannot forge a
/// line or colour a terminal, and 10,000 empty `log` lines write at most the call's budget.
#[tokio::test]
async fn guest_text_in_the_log_is_escaped_and_bounded() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"match": {"path": "forge"},
             "transform": {"module": "hostile.wasm", "config": {"mode": "forge"}}},
            {"match": {"path": "flood"},
             "transform": {"module": "hostile.wasm", "config": {"mode": "log-flood"},
                           "limits": {"timeoutMs": 2000}}},
        ]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let forged = server
        .hook("/hooks/forge")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 500);
    let flooded = server
        .hook("/hooks/flood")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(flooded.status(), 200);
    let (status, log) = server.terminate();
    assert!(status.success(), "{status}");
    assert!(
        !log.lines()
            .any(|line| line.starts_with("2026-11-22T00:00:00.000Z")),
        "a guest forged a log line"
    );
    assert!(!log.contains('\u{1b}'), "a guest's ESC reached the log");
    assert!(
        log.contains("forged line\\u{1b}[31m"),
        "the error, escaped, is still there"
    );
    assert!(log.len() < 64 * 1024, "the log grew to {} bytes", log.len());
    let lines = log.lines().filter(|l| l.contains("transform: ")).count();
    assert!(lines <= 16 * 1024 / 96, "{lines} guest log lines");
}

/// `wasi:random` hands out at most 64 KiB a call: more traps at once instead of holding a runtime
/// worker and 64 MiB of host memory past the call's limits.
#[tokio::test]
async fn a_huge_random_request_traps_instead_of_escaping_the_limits() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "huge", "match": {"path": "huge"},
             "transform": {"module": "hostile.wasm", "config": {"mode": "random"}}},
            {"id": "some", "match": {"path": "some"},
             "transform": {"module": "hostile.wasm", "config": {"mode": "random", "bytes": 1024}}},
        ]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let some = server
        .hook("/hooks/some")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(some.status(), 200);
    assert_eq!(server.wake_texts().await, ["got 1024 random bytes"]);
    let huge = server
        .hook("/hooks/huge")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(huge.status(), 500);
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"hookgate_transform_failures_total{mapping="huge",cause="trap"} 1"#),
        "{metrics}"
    );
    // Refused by the bound, before any work: not by the memory cap after 64 MiB were made.
    let (_, log) = server.terminate();
    assert!(log.contains("exceeds limit 65536"), "{log}");
}
