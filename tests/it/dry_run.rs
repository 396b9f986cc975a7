//! docs/operations.md "Trying a change on recorded traffic": `POST /api/requests/dry-run` and
//! `hookgate requests dry-run` over a request log filled with GitHub deliveries of many event
//! types, through the real binary, with the example github transform changed to handle one
//! more event type.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::browser::Browser;
use crate::harness::*;

/// GitHub deliveries of many event types: the event, and the payload (the examples' and
/// octokit's, tests/it/fixtures/github). The example transform skips `star` and `ping`.
const DELIVERIES: &[(&str, &str)] = &[
    ("push", "examples/payloads/github-push.json"),
    ("pull_request", "examples/payloads/github-pull-request.json"),
    ("issues", "examples/payloads/github-issues.json"),
    ("release", "examples/payloads/github-release.json"),
    ("workflow_run", "examples/payloads/github-workflow-run.json"),
    ("star", "tests/it/fixtures/github/star-created.json"),
    ("issues", "tests/it/fixtures/github/issues-opened.json"),
    ("issues", "tests/it/fixtures/github/issues-edited.json"),
    (
        "pull_request",
        "tests/it/fixtures/github/pull-request-opened.json",
    ),
    ("push", "tests/it/fixtures/github/push.json"),
    ("star", "tests/it/fixtures/github/star-created.json"),
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The live configuration: the example github transform, every request captured up to 32 KiB.
fn live_config() -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.capture",
        json!({"enabled": true, "maxBytes": 32768}),
    );
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "github", "match": {"path": "github"}, "transform": {"module": "github.wasm"}}]),
    );
    config
}

/// The example github transform with one more event type, `star`, built as a real component
/// from the example's source (patched, not copied). Returns the directory holding
/// `github_star.wasm`.
fn github_with_star() -> &'static Path {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let source = std::fs::read_to_string(repo().join("transforms/github/src/lib.rs")).unwrap();
        let skip = "        _ => return Decision::Skip,";
        let star = "        \"star\" => format!(\"[{repo}] {} starred it\", text(p, &[\"sender\", \"login\"])),\n";
        assert!(source.contains(skip), "the example transform changed");
        let wit = format!("path: {:?}", repo().join("wit").display().to_string());
        let patched = source
            .replacen(skip, &format!("{star}{skip}"), 1)
            .replacen("path: \"../../wit\"", &wit, 1);
        let root = wasm_target_dir().join("github-star");
        std::fs::create_dir_all(root.join("src")).unwrap();
        // Written only when changed: an unchanged source is not built again.
        let lib = root.join("src/lib.rs");
        if std::fs::read_to_string(&lib).ok().as_deref() != Some(patched.as_str()) {
            std::fs::write(&lib, patched).unwrap();
        }
        std::fs::copy(repo().join("transforms/Cargo.lock"), root.join("Cargo.lock")).unwrap();
        std::fs::write(
            root.join("Cargo.toml"),
            r#"[package]
name = "github_star"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
wit-bindgen = { version = "0.61", default-features = false, features = ["macros", "realloc"] }
serde_json = "1"

[workspace]

[profile.release]
opt-level = 3
lto = true
codegen-units = 1
strip = true
"#,
        )
        .unwrap();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--release", "--target", "wasm32-wasip2", "--manifest-path"])
            .arg(root.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", wasm_target_dir())
            .status()
            .expect("run cargo to build the changed transform");
        assert!(status.success(), "building the changed github transform failed");
        wasm_target_dir().join("wasm32-wasip2/release")
    })
}

/// A server with the live configuration, the changed transform installed as
/// `hooks/transforms/candidate/github.wasm`, and its log filled: every delivery (each with an
/// idempotency key), then a wake too large to be captured. Returns the ids of the deliveries.
async fn filled() -> (Hookgate, ConfigDir, Vec<String>) {
    let dir = ConfigDir::new(&live_config());
    install_transforms(&dir, &["github"]);
    let candidate = dir.path().join("hooks/transforms/candidate");
    std::fs::create_dir_all(&candidate).unwrap();
    std::fs::copy(
        github_with_star().join("github_star.wasm"),
        candidate.join("github.wasm"),
    )
    .unwrap();
    let server = Hookgate::start_in(&dir);
    let mut ids = Vec::new();
    for (i, (event, file)) in DELIVERIES.iter().enumerate() {
        let body = std::fs::read(repo().join(file)).unwrap();
        let response = server
            .hook("/hooks/github")
            .header("x-github-event", *event)
            .header("content-type", "application/json")
            .header("idempotency-key", format!("delivery-{i}"))
            .body(body)
            .send()
            .await
            .unwrap();
        let expected = if *event == "star" { 204 } else { 200 };
        assert_eq!(response.status(), expected, "{event} {file}");
        ids.push(request_id(&response));
    }
    let big = json!({"text": "x".repeat(40_000)});
    let (status, _) = server.hook_json("/hooks/wake", &big).await;
    assert_eq!(status, 200);
    logged(&server, DELIVERIES.len() + 1).await;
    (server, dir, ids)
}

/// Waits until the request log holds `count` records.
pub(crate) async fn logged(server: &Hookgate, count: usize) {
    eventually(&format!("{count} records in the log"), async || {
        let (_, page) = server.api_json("/api/requests?limit=1000").await;
        page["requests"].as_array().map_or(0, Vec::len) == count
    })
    .await;
}

pub(crate) async fn dry_run(server: &Hookgate, body: &Value) -> (u16, Value) {
    let response = client()
        .post(server.url("/api/requests/dry-run"))
        .bearer_auth(GATEWAY_TOKEN)
        .json(body)
        .send()
        .await
        .unwrap();
    json_of(response).await
}

/// The rows of the store and the request log that a request's work leaves: runs, hook events
/// (not the runs' summaries, which the runtime adds as runs end), idempotency keys, records.
fn footprint(dir: &ConfigDir) -> [i64; 4] {
    let count = |file: &str, sql: &str| -> i64 {
        let conn = rusqlite::Connection::open_with_flags(
            dir.path().join("state").join(file),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        conn.query_row(sql, [], |row| row.get(0)).unwrap()
    };
    [
        count("hookgate.db", "SELECT count(*) FROM runs"),
        count(
            "hookgate.db",
            "SELECT count(*) FROM events WHERE run_id IS NULL",
        ),
        count("hookgate.db", "SELECT count(*) FROM idempotency"),
        count("requests.db", "SELECT count(*) FROM requests"),
    ]
}

pub(crate) fn ids_where(answer: &Value, test: impl Fn(&Value) -> bool) -> Vec<String> {
    answer["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| test(r))
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_transform_handling_one_more_event_type_changes_exactly_those_requests() {
    let (server, dir, ids) = filled().await;
    let before = footprint(&dir);
    let text = serde_json::to_string_pretty(&live_config()).unwrap();
    let body = json!({"config": text, "transformsDir": "candidate", "filter": {"hook": "github"}});
    let (status, answer) = dry_run(&server, &body).await;
    assert_eq!(status, 200, "{answer}");
    let stars: Vec<String> = DELIVERIES
        .iter()
        .zip(&ids)
        .filter(|((event, _), _)| *event == "star")
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(
        ids_where(&answer, |r| r["differs"] == true),
        stars,
        "{answer}"
    );
    assert_eq!(
        answer["totals"],
        json!({"requests": DELIVERIES.len(), "captured": DELIVERIES.len(), "notCaptured": 0,
               "differing": 2, "nowFailing": 0, "untried": 0})
    );
    let star = answer["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == stars[0])
        .unwrap();
    assert_eq!(star["then"]["status"], 204);
    assert_eq!(star["now"]["status"], 200);
    assert_eq!(star["now"]["ending"], "actions");
    assert_eq!(star["now"]["mappingId"], "github");
    assert_eq!(star["now"]["actions"][0]["kind"], "agent");
    assert_eq!(star["now"]["actions"][0]["agentId"], "main");
    let message = star["now"]["actions"][0]["message"].as_str().unwrap();
    assert!(message.ends_with("starred it"), "{message}");
    // The oldest first, and each unchanged request's runs as they were made.
    assert_eq!(ids_where(&answer, |_| true), ids);
    let push = &answer["requests"][0];
    assert_eq!(
        push["then"]["actions"][0]["message"],
        push["now"]["actions"][0]["message"]
    );
    // The command line reports the same two, and exits 0: nothing that succeeded would fail.
    let candidate = dir.path().join("candidate.json5");
    std::fs::write(&candidate, &text).unwrap();
    let filter = ["--transforms", "candidate", "--hook", "github"];
    let (code, output) = cli_dry_run(&server, &candidate, &filter);
    println!("{output}");
    assert_eq!(code, Some(0), "{output}");
    for id in &stars {
        let row = output.lines().find(|line| line.starts_with(id.as_str()));
        let row = row.unwrap_or_else(|| panic!("{id} missing from\n{output}"));
        assert!(row.contains("204 -> 200"), "{row}");
        assert!(row.contains("nothing -> agent ["), "{row}");
    }
    assert!(
        output.contains("2 would differ, 0 that succeeded"),
        "{output}"
    );
    // Nothing of it stored: no run, no event, no idempotency key, no record (a request after
    // it is the one new record: the log writes in order).
    assert_eq!(footprint(&dir), before);
    let (status, _) = server
        .hook_json("/hooks/wake", &json!({"text": "after the dry run"}))
        .await;
    assert_eq!(status, 200);
    logged(&server, DELIVERIES.len() + 2).await;
    let after = footprint(&dir);
    assert_eq!(after[3], before[3] + 1, "{before:?} {after:?}");
    assert_eq!(after[..3], [before[0], before[1] + 1, before[2]]);
}

#[tokio::test]
async fn a_request_not_captured_is_counted_and_listed_not_guessed() {
    let (server, _dir, _) = filled().await;
    let text = serde_json::to_string(&live_config()).unwrap();
    let (status, answer) = dry_run(
        &server,
        &json!({"config": text, "filter": {"hook": "wake"}}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["totals"]["requests"], 1);
    assert_eq!(answer["totals"]["notCaptured"], 1);
    assert_eq!(answer["totals"]["differing"], 0);
    let wake = &answer["requests"][0];
    assert_eq!(wake["untried"], "notCaptured");
    assert_eq!(wake["now"], Value::Null);
    assert_eq!(wake["then"]["status"], 200);
}

/// A dry run continues past a request with `after`, oldest first; a listing's `before`, which
/// would mean the other side of the log, is refused.
#[tokio::test]
async fn a_dry_run_continues_with_after_and_refuses_a_listings_before() {
    let (server, _dir, ids) = filled().await;
    let text = serde_json::to_string(&live_config()).unwrap();
    let filter = json!({"hook": "github"});
    let (status, all) = dry_run(&server, &json!({"config": text, "filter": filter})).await;
    assert_eq!(status, 200, "{all}");
    let (status, rest) = dry_run(
        &server,
        &json!({"config": text, "filter": filter, "after": ids[0]}),
    )
    .await;
    assert_eq!(status, 200, "{rest}");
    let tried = |answer: &Value| ids_where(answer, |_| true);
    assert_eq!(tried(&rest), tried(&all)[1..], "{rest}");
    let (status, refused) = dry_run(
        &server,
        &json!({"config": text, "filter": {"hook": "github", "before": ids[3]}}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("continue one with after"),
        "{refused}"
    );
}

#[tokio::test]
async fn an_invalid_candidate_is_refused_naming_the_key_not_the_value() {
    let dir = ConfigDir::new(&live_config());
    install_transforms(&dir, &["github"]);
    let server = Hookgate::start_in(&dir);
    let mut config = live_config();
    set(&mut config, "hooks.maxBodyBytes", json!("sekrit-value-77"));
    let text = serde_json::to_string(&config).unwrap();
    let (status, answer) = dry_run(&server, &json!({"config": text})).await;
    assert_eq!(status, 400, "{answer}");
    let problems = answer["problems"].to_string();
    assert!(problems.contains("hooks.maxBodyBytes"), "{answer}");
    assert!(!answer.to_string().contains("sekrit-value-77"), "{answer}");
    // A candidate's transforms directory stays inside the transforms root, as the key's does.
    let text = serde_json::to_string(&live_config()).unwrap();
    let body = json!({"config": text, "transformsDir": "../../etc"});
    let (status, answer) = dry_run(&server, &body).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["problems"]
            .to_string()
            .contains("hooks.transformsDir"),
        "{answer}"
    );
    // A filter key the listing does not take is refused too.
    let (status, answer) =
        dry_run(&server, &json!({"config": text, "filter": {"mappng": "x"}})).await;
    assert_eq!(status, 400, "{answer}");
}

#[tokio::test]
async fn the_cli_names_the_requests_a_broken_mapping_would_fail_and_exits_1() {
    let (server, dir, ids) = filled().await;
    let mut broken = live_config();
    let mut mappings = live_config()["hooks"]["mappings"].clone();
    mappings[0]["match"]["path"] = json!("gh");
    set(&mut broken, "hooks.mappings", mappings);
    let candidate = dir.path().join("candidate.json5");
    std::fs::write(&candidate, serde_json::to_string_pretty(&broken).unwrap()).unwrap();
    let filter = ["--since", "1h", "--mapping", "github"];
    let (code, stdout) = cli_dry_run(&server, &candidate, &filter);

    assert_eq!(code, Some(1), "{stdout}");
    // Every delivery the mapping admitted (the skipped ones took it too) now finds no mapping.
    for id in &ids {
        assert!(stdout.contains(id.as_str()), "{id} missing from\n{stdout}");
    }
    assert!(stdout.contains("200 -> 404"), "{stdout}");
    assert!(stdout.contains("github -> -"), "{stdout}");
    // The skipped ones succeeded too (204).
    assert!(
        stdout.contains(&format!(
            "{} that succeeded would now fail",
            DELIVERIES.len()
        )),
        "{stdout}"
    );
    // The unchanged configuration: nothing differs, exit 0.
    std::fs::write(&candidate, serde_json::to_string(&live_config()).unwrap()).unwrap();
    let (code, stdout) = cli_dry_run(&server, &candidate, &["--hook", "github"]);

    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("0 would differ, 0 that succeeded"),
        "{stdout}"
    );
}

/// `hookgate requests dry-run --config <candidate> <filter>` against `server`: its exit code,
/// and its output (standard error after standard output).
fn cli_dry_run(server: &Hookgate, candidate: &Path, filter: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(binary())
        .args(["requests", "dry-run", "--config"])
        .arg(candidate)
        .args(filter)
        .args(["--url", &server.url("")])
        .env("HOOKGATE_GATEWAY_TOKEN", GATEWAY_TOKEN)
        .output()
        .unwrap();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), output)
}

#[tokio::test]
async fn the_console_tries_a_pasted_candidate_and_shows_what_would_differ() {
    let (server, _dir, ids) = filled().await;
    let star = &ids[DELIVERIES.iter().position(|(e, _)| *e == "star").unwrap()];
    let browser = Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    browser.click("nav button[data-view=dryrun]").await;
    let text =
        serde_json::to_string(&serde_json::to_string_pretty(&live_config()).unwrap()).unwrap();
    browser
        .run(&format!(
            "document.getElementById('dryrun-config').value = {text}; return true"
        ))
        .await;
    browser.type_into("#dryrun-transforms", "candidate").await;
    browser.type_into("#dryrun-hook", "github").await;
    browser.click("#dryrun-form button[type=submit]").await;
    let totals = browser
        .wait_for_text("#dryrun-totals", "would differ")
        .await;
    assert!(
        totals.contains(&format!(
            "{} requests: {0} captured, 0 not captured; 2 would differ, 0 that succeeded",
            DELIVERIES.len()
        )),
        "{totals}"
    );
    let table = browser.text("#dryrun-table tbody").await;
    assert!(table.contains(star.as_str()), "{table}");
    assert!(table.contains("204 → 200"), "{table}");
    assert!(table.contains("starred it"), "{table}");
    assert_eq!(table.lines().count(), 2, "{table}");
    // An invalid candidate: its problems listed, by key.
    browser
        .run("document.getElementById('dryrun-config').value = '{hooks: {enabled: true, token: 5}}'; return true")
        .await;
    browser.click("#dryrun-form button[type=submit]").await;
    browser
        .wait_for_text(
            "#dryrun-totals",
            "Not tried: the candidate configuration is invalid",
        )
        .await;
    browser
        .wait_for_text("#dryrun-problems", "hooks.token")
        .await;
}

/// Agents `main` and `ops`; a mapping a GitHub signature admits (`partner`) and one the token
/// does (`internal`), on one path, told apart by the payload's `source`.
pub(crate) fn policy_config(allowed_agents: Value, mappings: Value) -> Value {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    set(
        &mut config,
        "agents.list",
        json!([{"id": "main", "default": true}, {"id": "ops"}]),
    );
    set(&mut config, "hooks.allowedAgentIds", allowed_agents);
    set(&mut config, "hooks.mappings", mappings);
    config
}

fn partner() -> Value {
    json!({"id": "partner", "match": {"path": "events", "source": "partner"}, "messageTemplate": "partner", "signature": {"scheme": "github", "secret": "partner-secret"}})
}

pub(crate) fn internal(source: &str) -> Value {
    json!({"id": "internal", "match": {"path": "events", "source": source}, "messageTemplate": "internal"})
}

#[tokio::test]
async fn policies_direct_endpoints_and_a_signatures_admission_are_tried_too() {
    let live = policy_config(json!(["*"]), json!([partner(), internal("internal")]));
    let (server, _dir) = Hookgate::start(&live);
    let (status, _) = server
        .hook_json("/hooks/agent", &json!({"message": "m", "agentId": "ops"}))
        .await;
    assert_eq!(status, 200);
    let (status, _) = server.hook_json("/hooks/wake", &json!({"text": "w"})).await;
    assert_eq!(status, 200);
    let body = br#"{"source":"partner"}"#;
    let at = chrono::Utc::now().timestamp();
    let mut signed = client()
        .post(server.url("/hooks/events"))
        .body(body.to_vec());
    for (name, value) in crate::signatures::sign("github", "partner-secret", body, at, "d-1") {
        signed = signed.header(name, value);
    }
    assert_eq!(signed.send().await.unwrap().status(), 200);
    logged(&server, 3).await;

    // Only `main` allowed, and the token's mapping now matching the partner's payload first.
    let candidate = policy_config(json!(["main"]), json!([internal("partner"), partner()]));
    let body = json!({"config": serde_json::to_string(&candidate).unwrap()});
    let (status, answer) = dry_run(&server, &body).await;
    assert_eq!(status, 200, "{answer}");
    let [agent, wake, signed] = [0, 1, 2].map(|i| answer["requests"][i]["now"].clone());
    assert_eq!(agent["status"], 400, "{answer}");
    assert_eq!(
        agent["error"],
        "agentId is not allowed by hooks.allowedAgentIds"
    );
    assert_eq!(wake["status"], 200, "{answer}");
    assert_eq!(
        wake["actions"],
        json!([{"kind": "wake", "text": "w", "agentId": "main"}])
    );
    assert_eq!(answer["requests"][1]["differs"], false);
    // Admitted by the partner's signature, it may take the partner's mapping only.
    assert_eq!(signed["status"], 401, "{answer}");
    assert_eq!(signed["mappingId"], "internal");
    let reason = signed["reason"].as_str().unwrap();
    assert!(reason.contains("signed for mapping partner"), "{reason}");
    assert_eq!(answer["totals"]["nowFailing"], 2, "{answer}");

    // Without the partner's mapping, the signed request has nothing it may take.
    let candidate = policy_config(json!(["*"]), json!([internal("internal")]));
    let body =
        json!({"config": serde_json::to_string(&candidate).unwrap(), "filter": {"hook": "events"}});
    let (status, answer) = dry_run(&server, &body).await;
    assert_eq!(status, 200, "{answer}");
    let now = &answer["requests"][0]["now"];
    assert_eq!(now["status"], 409, "{answer}");
    assert!(
        now["error"]
            .as_str()
            .unwrap()
            .contains("no longer configured"),
        "{answer}"
    );
}

/// A `forEach` mapping: one run per element of `items`, its message from `template`.
fn for_each_config(template: &str) -> Value {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    let mapping = json!({"id": "list", "match": {"path": "list"}, "forEach": "items", "messageTemplate": template});
    set(&mut config, "hooks.mappings", json!([mapping]));
    config
}

#[tokio::test]
async fn a_for_each_request_is_several_actions_compared_with_the_runs_it_made() {
    let (server, _dir) = Hookgate::start(&for_each_config("item {{items[0].name}}"));
    let items = json!({"items": [{"name": "a"}, {"name": "b"}]});
    let (status, reply) = server.hook_json("/hooks/list", &items).await;
    assert_eq!(status, 200, "{reply}");
    logged(&server, 1).await;
    let try_template = async |template: &str| {
        let config = serde_json::to_string(&for_each_config(template)).unwrap();
        let (status, answer) = dry_run(&server, &json!({"config": config})).await;
        assert_eq!(status, 200, "{answer}");
        answer["requests"][0].clone()
    };
    let same = try_template("item {{items[0].name}}").await;
    assert_eq!(same["differs"], false, "{same}");
    let messages = |actions: &Value| -> Vec<String> {
        let actions = actions.as_array().unwrap();
        actions
            .iter()
            .map(|a| a["message"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(messages(&same["then"]["actions"]), ["item a", "item b"]);
    assert_eq!(messages(&same["now"]["actions"]), ["item a", "item b"]);
    let changed = try_template("thing {{items[0].name}}").await;
    assert_eq!(changed["differs"], true, "{changed}");
    assert_eq!(changed["now"]["status"], 200);
    assert_eq!(messages(&changed["now"]["actions"]), ["thing a", "thing b"]);
}
