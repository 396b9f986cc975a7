//! docs/operations.md#runs-in-bulk: `POST /api/runs/release|cancel|retry` and `hookgate runs
//! release|cancel|retry` by filters, counted first, applied once confirmed, through the real
//! binary; held runs on the embedded store and on NATS JetStream.

use serde_json::{Value, json};

use crate::browser::Browser;
use crate::budgets::{becomes, shown};
use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::runtime::{Backend, Kept, finished, with_provider};

/// Mappings `github` and `other`, each allowed one run an hour, holding the runs past it.
fn config(provider: &Fake) -> Value {
    let mut config = with_provider(provider);
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    let mapping = |id: &str| {
        json!({"id": id, "match": {"path": id}, "messageTemplate": "event {{n}}",
               "deliver": false, "wakeMode": "next-heartbeat", "budget": {"runsPerHour": 1}})
    };
    set(
        &mut config,
        "hooks.mappings",
        json!([mapping("github"), mapping("other")]),
    );
    config
}

/// Posts event `n` to mapping `id`'s path: the run id it was answered with.
async fn accepted(server: &Hookgate, id: &str, n: u32) -> String {
    let path = format!("/hooks/{id}");
    let (status, reply) = server.hook_json(&path, &json!({"n": n})).await;
    assert_eq!(status, 200, "{reply}");
    reply["runId"].as_str().unwrap().to_string()
}

/// A server whose mappings each ran one run and hold the next ones: two of `github`'s, one of
/// `other`'s, each shown held. Returns the held runs of each.
async fn held_runs(backend: Backend) -> (Fake, Hookgate, Kept, Vec<String>, String) {
    let provider = Fake::provider("done").await;
    let (server, kept) = backend.start(&config(&provider));
    for id in ["github", "other"] {
        let first = accepted(&server, id, 1).await;
        assert_eq!(finished(&server, &first).await["status"], "ok");
    }
    let github = vec![
        accepted(&server, "github", 2).await,
        accepted(&server, "github", 3).await,
    ];
    let other = accepted(&server, "other", 2).await;
    for run_id in github.iter().chain([&other]) {
        assert_eq!(shown(&server, run_id).await["status"], "held");
    }
    (provider, server, kept, github, other)
}

/// `POST /api/runs/<action>` with `body`.
async fn bulk(server: &Hookgate, action: &str, body: Value) -> (u16, Value) {
    let request = client()
        .post(server.url(&format!("/api/runs/{action}")))
        .bearer_auth(GATEWAY_TOKEN)
        .json(&body);
    json_of(request.send().await.unwrap()).await
}

/// Held runs released by a mapping filter: counted first without a change, then released and
/// run; the other mapping's held run untouched, then cancelled by its own filter.
pub(crate) async fn held_runs_are_released_in_bulk_by_mapping(backend: Backend) {
    let (provider, server, _kept, github, other) = held_runs(backend).await;
    let filter = json!({"mapping": "github"});
    let (status, count) = bulk(
        &server,
        "release",
        json!({"filter": filter, "dryRun": true}),
    )
    .await;
    assert_eq!(status, 200, "{count}");
    assert_eq!(
        count,
        json!({"ok": true, "dryRun": true, "action": "release", "matched": 2, "applied": 2,
               "skipped": [], "failed": []})
    );
    for run_id in github.iter().chain([&other]) {
        assert_eq!(
            shown(&server, run_id).await["status"],
            "held",
            "a count changes nothing"
        );
    }
    let (status, released) = bulk(&server, "release", json!({"filter": filter})).await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(
        (&released["applied"], &released["failed"]),
        (&json!(2), &json!([]))
    );
    for run_id in &github {
        becomes(&server, run_id, "ok").await;
    }
    assert_eq!(shown(&server, &other).await["status"], "held");
    assert_eq!(provider.requests().len(), 4, "two first runs, two released");
    // The released runs are not held any more: a second release finds none.
    let (_, again) = bulk(&server, "release", json!({"filter": filter})).await;
    assert_eq!(
        (&again["matched"], &again["applied"]),
        (&json!(0), &json!(0))
    );
    // With a status named, the runs that are not held are counted as such.
    let ok = json!({"filter": {"mapping": "github", "status": "ok"}, "dryRun": true});
    let (_, not_held) = bulk(&server, "release", ok).await;
    assert_eq!(not_held["applied"], 0, "{not_held}");
    assert_eq!(
        not_held["skipped"],
        json!([{"reason": "not held", "count": 3}])
    );
    let (status, cancelled) =
        bulk(&server, "cancel", json!({"filter": {"mapping": "other"}})).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["applied"], 1, "{cancelled}");
    becomes(&server, &other, "cancelled").await;
}

/// Failed runs retried by a mapping filter once the provider is mended: counted, then run again
/// as their second attempts; the other mapping's failed run left failed.
pub(crate) async fn failed_runs_are_retried_in_bulk_by_mapping(backend: Backend) {
    let provider = Fake::start(|_, _| Answer::Text(400, "unknown model".into())).await;
    let mut config = config(&provider);
    for mapping in config["hooks"]["mappings"].as_array_mut().unwrap() {
        mapping.as_object_mut().unwrap().remove("budget");
    }
    let (server, _kept) = backend.start(&config);
    let mut runs = Vec::new();
    for (id, n) in [("github", 1), ("github", 2), ("other", 1)] {
        let run_id = accepted(&server, id, n).await;
        assert_eq!(finished(&server, &run_id).await["status"], "error");
        runs.push(run_id);
    }
    provider.respond_with(|_, _| Answer::Json(200, chat_reply("fixed it")));
    let filter = json!({"mapping": "github"});
    let (status, count) = bulk(&server, "retry", json!({"filter": filter, "dryRun": true})).await;
    assert_eq!(status, 200, "{count}");
    assert_eq!(
        (&count["matched"], &count["applied"]),
        (&json!(2), &json!(2))
    );
    let (status, retried) = bulk(&server, "retry", json!({"filter": filter})).await;
    assert_eq!(status, 200, "{retried}");
    assert_eq!(
        (&retried["applied"], &retried["failed"]),
        (&json!(2), &json!([]))
    );
    for run_id in &runs[..2] {
        becomes(&server, run_id, "ok").await;
        assert_eq!(shown(&server, run_id).await["attempts"], 2);
    }
    assert_eq!(shown(&server, &runs[2]).await["status"], "error");
}

on_both_stores!(
    held_runs_are_released_in_bulk_by_mapping,
    failed_runs_are_retried_in_bulk_by_mapping,
);

/// A filter that names no known key, a bad status or a listing's paging is refused with 400
/// naming it, and nothing is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_filter_is_refused_naming_the_key() {
    let (_provider, server, _kept, github, _) = held_runs(Backend::Embedded).await;
    for (filter, expected) in [
        (
            json!({"mapping": "github", "mapingId": "x"}),
            "unknown field `mapingId`",
        ),
        (json!({"status": "stuck"}), "status must be one of"),
        (
            json!({"since": "yesterday"}),
            "since must be an RFC 3339 time",
        ),
        (json!({"limit": "5"}), "before and limit do not apply"),
    ] {
        let (status, answer) = bulk(&server, "release", json!({"filter": filter})).await;
        assert_eq!(status, 400, "{answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(expected), "{expected} in {error}");
    }
    for run_id in &github {
        assert_eq!(shown(&server, run_id).await["status"], "held");
    }
}

/// `hookgate runs release --mapping github` counts first and, without a terminal to confirm
/// on, releases nothing (exit 1); with `--yes` it releases them and says how many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_counts_then_releases_with_yes() {
    let (_provider, server, _kept, github, other) = held_runs(Backend::Embedded).await;
    let cli = |extra: &[&str]| {
        let mut args = vec![
            "runs",
            "release",
            "--mapping",
            "github",
            "--url",
            &server.base,
        ];
        args.extend(extra);
        std::process::Command::new(binary())
            .args(args)
            .env("HOOKGATE_GATEWAY_TOKEN", GATEWAY_TOKEN)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let counted = cli(&[]);
    assert_eq!(counted.status.code(), Some(1), "{counted:?}");
    let stdout = String::from_utf8_lossy(&counted.stdout);
    assert!(
        stdout.contains("2 runs match, release applies to 2"),
        "{stdout}"
    );
    assert!(
        String::from_utf8_lossy(&counted.stderr).contains("pass --yes"),
        "{counted:?}"
    );
    assert_eq!(shown(&server, &github[0]).await["status"], "held");
    let released = cli(&["--yes"]);
    assert_succeeded(&released);
    let stdout = String::from_utf8_lossy(&released.stdout);
    assert!(stdout.contains("release: 2 applied, 0 failed"), "{stdout}");
    for run_id in &github {
        becomes(&server, run_id, "ok").await;
    }
    assert_eq!(shown(&server, &other).await["status"], "held");
}

/// The console's runs page: the count first, nothing released until the operator confirms it,
/// then the runs released and the page saying how many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_counts_then_releases_once_confirmed() {
    let (_provider, server, _kept, github, other) = held_runs(Backend::Embedded).await;
    let browser = Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    browser.click("nav button[data-view=runs]").await;
    browser.type_into("#runs-bulk-mapping", "github").await;
    browser.click("#runs-bulk button[type=submit]").await;
    browser
        .wait_for_text("#runs-bulk-result", "2 runs match, release applies to 2.")
        .await;
    browser
        .wait_for_text("#runs-bulk-confirm", "Confirm: release 2 runs")
        .await;
    assert_eq!(
        shown(&server, &github[0]).await["status"],
        "held",
        "not yet"
    );
    browser.click("#runs-bulk-confirm").await;
    browser
        .wait_for_text("#runs-bulk-result", "Released 2 of 2 runs, 0 failed.")
        .await;
    for run_id in &github {
        becomes(&server, run_id, "ok").await;
    }
    assert_eq!(shown(&server, &other).await["status"], "held");
}
