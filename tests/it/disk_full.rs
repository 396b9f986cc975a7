//! A full disk (docs/reliability.md#a-full-disk): the state directory is a small tmpfs, filled to
//! its last byte while wakes and agent requests arrive from several clients at once. No request
//! may be answered 200 unless what it promised is in the store afterwards; the refused ones get
//! 503 with `Retry-After`; `/livez` stays up, `/readyz` says why it is not ready; the log says so
//! once, not once per request; and once the filler is deleted everything works again, without a
//! restart, a run that ended while the disk was full included.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;

/// Concurrent clients while the disk is full.
const CLIENTS: usize = 8;
/// Requests each client sends while the disk is full.
const REQUESTS_PER_CLIENT: usize = 30;
/// The answer of a request refused for lack of space (docs/http-contract.md).
const FULL_MESSAGE: &str = "store full; retry";
/// `/readyz`'s reason while the store cannot commit for lack of space (docs/operations.md#health).
const NOT_READY_FULL: &str = "store full";

/// A small tmpfs mounted on a fresh directory; unmounted when dropped, test failed or not.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// `None`, said loudly, when the test does not run as root: only root may mount. CI runs the
    /// suite as root, so there it always runs.
    fn mount(size: &str) -> Option<SmallFs> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!(
                "\n*** disk_full SKIPPED: mounting a small filesystem needs root (CI is root) ***\n"
            );
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("hookgate-disk-full")
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(status.success(), "mounting a tmpfs failed");
        Some(SmallFs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(self.dir.path()).status();
        if !unmounted.is_ok_and(|s| s.success()) {
            // Something still holds a file open: detach it now, freed once that lets go.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// Writes zeros into a new file at `path` until the filesystem has no byte left.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).expect("create the filler");
    let mut chunk = vec![0u8; 64 * 1024];
    while !chunk.is_empty() {
        match file.write(&chunk) {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::StorageFull => {
                // Smaller writes take what a page-sized rest still holds.
                chunk.truncate(chunk.len() / 2);
            }
            Err(err) => panic!("writing the filler: {err}"),
        }
    }
}

/// What one request was answered, and what a 200 promised.
struct Answered {
    status: StatusCode,
    retry_after: Option<String>,
    body: Value,
    /// The wake's text, for a wake.
    wake: Option<String>,
}

/// Sends the `n`th request of the mix: a wake with a text of its own, or an agent request.
async fn send(server: &Hookgate, n: usize) -> Answered {
    let text = format!("disk-full-{n}");
    let (path, body, wake) = if n.is_multiple_of(2) {
        (
            "/hooks/wake",
            json!({"text": text, "mode": "next-heartbeat"}),
            Some(text),
        )
    } else {
        (
            "/hooks/agent",
            json!({"message": text, "deliver": false}),
            None,
        )
    };
    let response = server.hook(path).json(&body).send().await.expect("send");
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap_or_default().to_string());
    let body = response.json().await.unwrap_or(Value::Null);
    Answered {
        status,
        retry_after,
        body,
        wake,
    }
}

/// Sends [`CLIENTS`] × [`REQUESTS_PER_CLIENT`] requests from concurrent clients, numbered from `first`.
async fn load(server: &std::sync::Arc<Hookgate>, first: usize) -> Vec<Answered> {
    let mut clients = JoinSet::new();
    for client in 0..CLIENTS {
        let server = std::sync::Arc::clone(server);
        clients.spawn(async move {
            let mut answers = Vec::new();
            for i in 0..REQUESTS_PER_CLIENT {
                answers.push(send(&server, first + client * REQUESTS_PER_CLIENT + i).await);
            }
            answers
        });
    }
    clients.join_all().await.into_iter().flatten().collect()
}

/// `/readyz`'s status and its reason (`error`), if any.
async fn readiness(server: &Hookgate) -> (u16, Option<String>) {
    let response = client()
        .get(server.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    let (status, body) = json_of(response).await;
    (status, body["error"].as_str().map(str::to_string))
}

/// Every request answered 200 is in the store: its wake among the session's events, its run
/// found by its id.
async fn all_acknowledged_present(server: &Hookgate, answers: &[Answered]) {
    let wakes = server.wake_texts().await;
    for answer in answers.iter().filter(|a| a.status == StatusCode::OK) {
        match &answer.wake {
            Some(text) => assert!(wakes.contains(text), "acknowledged wake {text} is missing"),
            None => {
                let run = server.run_of(&answer.body).await;
                assert_eq!(run["runId"], answer.body["runId"], "{run}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_refuses_with_503_and_recovers_without_a_restart() {
    // Room, once the filler is gone, for both databases' write-ahead logs to grow to their
    // checkpoint size (about 4 MiB each): on a 4 MiB file system they filled it up again.
    let Some(fs) = SmallFs::mount("32m") else {
        return;
    };
    let mut config = base_config();
    set(
        &mut config,
        "gateway.stateDir",
        json!(fs.path().to_str().unwrap()),
    );
    let dir = ConfigDir::new(&config);
    let server = std::sync::Arc::new(Hookgate::start_in(&dir));
    let filler = fs.path().join("filler");
    fill(&filler);
    let filled = std::time::Instant::now();

    let during = load(&server, 0).await;
    let refused: Vec<&Answered> = during
        .iter()
        .filter(|a| a.status != StatusCode::OK)
        .collect();
    assert!(
        refused.len() > during.len() / 2,
        "with no space left most requests must be refused, {} of {} were",
        refused.len(),
        during.len()
    );
    for answer in &refused {
        assert_eq!(
            answer.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            answer.body
        );
        assert_eq!(
            answer.body,
            json!({"ok": false, "error": FULL_MESSAGE}),
            "the documented answer"
        );
        assert!(answer.retry_after.is_some(), "a 503 carries Retry-After");
    }
    let live = client().get(server.url("/livez")).send().await.unwrap();
    assert_eq!(live.status(), 200, "/livez stays up");
    assert_eq!(
        readiness(&server).await,
        (503, Some(NOT_READY_FULL.to_string())),
        "/readyz says why it is not ready"
    );

    std::fs::remove_file(&filler).expect("delete the filler");
    let full_for = filled.elapsed();
    eventually("/readyz ready again once space is freed", async || {
        readiness(&server).await.0 == 200
    })
    .await;
    let after = load(&server, CLIENTS * REQUESTS_PER_CLIENT).await;
    for answer in &after {
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    all_acknowledged_present(&server, &during).await;
    all_acknowledged_present(&server, &after).await;

    // And on disk: what was acknowledged is there after a restart too.
    let server = std::sync::Arc::into_inner(server).expect("no client holds the server");
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    // A line per database when the failures begin, and one a minute at most while they last.
    let bound = 2 * (1 + full_for.as_secs() / 60) as usize;
    let full_lines = log.lines().filter(|l| l.contains("full")).count();
    assert!(
        full_lines <= bound,
        "{} refused requests were logged in {full_lines} lines about the full disk, not {bound}:\n{log}",
        refused.len()
    );
    let server = Hookgate::start_in(&dir);
    all_acknowledged_present(&server, &during).await;
    all_acknowledged_present(&server, &after).await;
}

/// A run whose turn ends while the disk is full (docs/reliability.md#a-full-disk): its outcome
/// is kept and recorded once the store takes writes again, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ends_while_the_disk_is_full_is_recorded_once_there_is_room() {
    let Some(fs) = SmallFs::mount("32m") else {
        return;
    };
    // The provider answers when the test says: once the disk is full.
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let answer = Answer::Gated(
        std::sync::Arc::clone(&gate),
        Box::new(Answer::Json(200, chat_reply("done while full"))),
    );
    let provider = Fake::start(move |_, _| answer.clone()).await;
    let mut config = crate::runtime::with_provider(&provider);
    set(
        &mut config,
        "gateway.stateDir",
        json!(fs.path().to_str().unwrap()),
    );
    let dir = ConfigDir::new(&config);
    let server = Hookgate::start_in(&dir);
    let body = json!({"message": "m", "deliver": false, "wakeMode": "next-heartbeat"});
    let (status, queued) = server.hook_json("/hooks/agent", &body).await;
    assert_eq!(status, 200, "{queued}");
    let run_id = queued["runId"].as_str().unwrap().to_string();
    eventually("the run to call its model", async || {
        provider.requests().len() == 1
    })
    .await;

    let filler = fs.path().join("filler");
    fill(&filler);
    let mut n = 0;
    eventually("the store to refuse a write", async || {
        n += 1;
        send(&server, 2 * n).await.status == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    gate.add_permits(1);
    eventually("/readyz to say the store is full", async || {
        readiness(&server).await == (503, Some(NOT_READY_FULL.to_string()))
    })
    .await;
    let (_, run) = server.api_json(&format!("/api/runs/{run_id}")).await;
    assert_eq!(
        run["status"], "running",
        "not recorded while the disk is full: {run}"
    );

    std::fs::remove_file(&filler).expect("delete the filler");
    let waited = std::time::Instant::now();
    let mut run = server.api_json(&format!("/api/runs/{run_id}")).await.1;
    while run["status"] != "ok" && waited.elapsed() < std::time::Duration::from_secs(10) {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        run = server.api_json(&format!("/api/runs/{run_id}")).await.1;
    }
    let (status, log) = server.terminate();
    assert_eq!(
        (&run["status"], &run["reply"]),
        (&json!("ok"), &json!("done while full")),
        "recorded without a restart once there is room: {run}\n{log}"
    );
    assert!(status.success(), "{log}");
    assert!(
        log.contains("cannot record the run's outcome; kept"),
        "the outcome's first write must have failed for the test to show anything:\n{log}"
    );
}
