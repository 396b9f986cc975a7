//! `hookgate requests replay --status 5xx --mapping github --since 1h`: a bulk replay from a
//! terminal (docs/cli.md). Asks the API's dry run how many requests the filters select, replays
//! them once the operator agrees (`--yes`, or `y` at a prompt on a terminal), follows the job to
//! its end printing progress, and exits non-zero when any replay failed.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::{Map, Value, json};

use super::filters::RequestFilters;
use reqwest::Method;

use super::{Remote, segment, text};

/// How often the job's progress is asked for.
const POLL: Duration = Duration::from_millis(500);

/// The API's bulk replay endpoint.
const REPLAY: &str = "/api/requests/replay";

/// Which requests a bulk replay takes (the filters of `requests list`), and how.
#[derive(Args)]
pub struct BulkReplay {
    #[command(flatten)]
    filters: RequestFilters,
    /// Replays per second (the server's default when not given, 10).
    #[arg(long)]
    rate: Option<u32>,
    /// Replay without asking.
    #[arg(long)]
    yes: bool,
    /// Replay also the requests already replayed successfully (left out otherwise).
    #[arg(long)]
    again: bool,
}

impl BulkReplay {
    /// The API's `filter`: the flags that are set.
    fn filter(&self) -> Map<String, Value> {
        self.filters.json()
    }
}

/// Runs a bulk replay against `remote`; see the module's doc.
pub fn bulk(remote: &Remote, replay: &BulkReplay) -> ExitCode {
    let filter = replay.filter();
    if filter.is_empty() {
        eprintln!("error: name a request id, or filters (--status, --mapping, --since, ...)");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(remote, replay, filter)) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(
    remote: &Remote,
    replay: &BulkReplay,
    filter: Map<String, Value>,
) -> Result<ExitCode, String> {
    let client = reqwest::Client::new();
    let mut body = json!({
        "filter": filter, "dryRun": true, "rate": replay.rate, "again": replay.again,
    });
    let plan = remote
        .exchange(&client, Method::POST, REPLAY, Some(&body))
        .await?;
    let say = Say { json: remote.json };
    print_plan(say, &plan);
    let count = plan["replayable"].as_u64().unwrap_or(0);
    let question = format!(
        "replay {count} requests at {}/s? [y/N] ",
        text(&plan["rate"])
    );
    if count == 0 || !(replay.yes || confirmed(say.json, &question, "replay")?) {
        say.json(&plan);
        return Ok(if count == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    body["dryRun"] = Value::Bool(false);
    let started = remote
        .exchange(&client, Method::POST, REPLAY, Some(&body))
        .await?;
    let id = text(&started["id"]);
    // The job's own selection, made now: requests recorded or replayed since the count differ.
    say.line(&format!(
        "replay job {id}: {} requests at {}/s",
        text(&started["replayable"]),
        text(&started["rate"])
    ));
    let path = format!("/api/requests/replays/{}", segment(&id));
    let mut shown = 0;
    loop {
        // The counts while it runs; every request's replay once, at the end.
        let job = remote
            .exchange(&client, Method::GET, &format!("{path}?summary=true"), None)
            .await?;
        let done = job["done"].as_u64().unwrap_or(0);
        if done != shown {
            say.line(&format!(
                "{done}/{} replayed, {} failed",
                text(&job["total"]),
                text(&job["failed"])
            ));
            shown = done;
        }
        if job["state"] != "running" {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let job = remote.exchange(&client, Method::GET, &path, None).await?;
    Ok(summary(say, &job))
}

/// Where the command's words go: stdout for people, stderr with `--json`, whose stdout is the
/// API's JSON alone (the final job's, or the dry run's when nothing was replayed).
#[derive(Clone, Copy)]
struct Say {
    json: bool,
}

impl Say {
    fn line(self, text: &str) {
        if self.json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }

    /// Prints `answer` as the command's output with `--json`; nothing otherwise.
    fn json(self, answer: &Value) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(answer).unwrap_or_default()
            );
        }
    }
}

/// The dry run's count, and why the others cannot be replayed.
fn print_plan(say: Say, plan: &Value) {
    say.line(&format!(
        "{} requests match, {} can be replayed",
        text(&plan["matched"]),
        text(&plan["replayable"])
    ));
    for group in plan["notReplayable"].as_array().into_iter().flatten() {
        let count = text(&group["count"]);
        say.line(&format!("  {count} cannot: {}", text(&group["reason"])));
    }
}

/// Whether the operator agrees to `question` (to `verb` what the count said): asked on a
/// terminal only; without one, `--yes` is the only way to agree. The question goes where the
/// words go: with `--json` (`json`), stdout is for the answer alone.
pub(super) fn confirmed(json: bool, question: &str, verb: &str) -> Result<bool, String> {
    if !std::io::stdin().is_terminal() {
        eprintln!("not done: pass --yes to {verb} without a terminal to confirm on");
        return Ok(false);
    }
    let written = if json {
        let mut err = std::io::stderr();
        err.write_all(question.as_bytes())
            .and_then(|()| err.flush())
    } else {
        let mut out = std::io::stdout();
        out.write_all(question.as_bytes())
            .and_then(|()| out.flush())
    };
    written.map_err(|e| e.to_string())?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| e.to_string())?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// Prints the job's failures and its totals, and with `--json` its JSON; failure when any
/// replay failed or the job did not finish (cancelled, or stopped by a failure).
fn summary(say: Say, job: &Value) -> ExitCode {
    let failed = job["failed"].as_u64().unwrap_or(0);
    let done = job["done"].as_u64().unwrap_or(0);
    for item in job["items"].as_array().into_iter().flatten() {
        let replayed = !(item["status"].is_null() && item["error"].is_null());
        let ok = item["status"]
            .as_u64()
            .is_some_and(|s| (200..300).contains(&s));
        if replayed && !ok {
            say.line(&format!(
                "failed: {} -> {} {} {}",
                text(&item["original"]),
                text(&item["requestId"]),
                text(&item["status"]),
                text(&item["error"])
            ));
        }
    }
    let ended = match job["state"].as_str() {
        Some("cancelled") => " (cancelled)".to_string(),
        Some("failed") => format!(" (stopped: {})", text(&job["reason"])),
        _ => String::new(),
    };
    // Failed ones are among those done; a server saying otherwise must not panic the command.
    let succeeded = done.saturating_sub(failed);
    say.line(&format!(
        "replayed {done}: {succeeded} succeeded, {failed} failed{ended}"
    ));
    say.json(job);
    if failed > 0 || job["state"] != "finished" {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
