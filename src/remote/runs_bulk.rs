//! `hookgate runs release --mapping github --since 1h` (and `cancel`, `retry`): a run operation
//! over every run the filters select, from a terminal (docs/cli.md). Asks the API's dry run how
//! many runs the operation applies to, applies it once the operator agrees (`--yes`, or `y` at
//! a prompt on a terminal), prints what became of them, and exits non-zero when any failed.

use clap::Args;
use hookgate::http::BulkAction;
use reqwest::Method;
use serde_json::{Map, Value, json};
use std::process::ExitCode;

use super::filters::{filter_object, time_or_ago};
use super::replay::confirmed;
use super::{Remote, text};

/// Which runs a command means: the filters of `runs list`.
#[derive(Args)]
pub struct RunFilters {
    /// Only runs this mapping admitted.
    #[arg(long)]
    mapping: Option<String>,
    /// Only this status (a release or a cancel takes `held` runs when not given).
    #[arg(long)]
    status: Option<String>,
    /// Only runs for this agent.
    #[arg(long)]
    agent: Option<String>,
    /// Only runs of this hook name.
    #[arg(long)]
    hook: Option<String>,
    /// Only runs of this session key.
    #[arg(long)]
    session_key: Option<String>,
    /// Only runs created at or after this time: RFC 3339, or a duration back from now (`1h`).
    #[arg(long, value_name = "TIME", value_parser = time_or_ago)]
    since: Option<String>,
}

impl RunFilters {
    /// The API's `filter` object: the flags that are set, by their API names.
    fn json(&self) -> Map<String, Value> {
        filter_object([
            ("mapping", self.mapping.clone()),
            ("status", self.status.clone()),
            ("agent", self.agent.clone()),
            ("hook", self.hook.clone()),
            ("sessionKey", self.session_key.clone()),
            ("since", self.since.clone()),
        ])
    }
}

/// A run operation by filters instead of a run id.
#[derive(Args)]
pub struct BulkRuns {
    #[command(flatten)]
    filters: RunFilters,
    /// Apply it without asking.
    #[arg(long)]
    yes: bool,
}

/// Applies `action` to the runs `bulk`'s filters select on `remote`; see the module's doc.
pub fn bulk(remote: &Remote, action: BulkAction, bulk: &BulkRuns) -> ExitCode {
    let action = action.as_str();
    let filter = bulk.filters.json();
    if filter.is_empty() {
        eprintln!("error: name a run id, or filters (--mapping, --status, --since, --agent, ...)");
        return ExitCode::FAILURE;
    }
    let path = format!("/api/runs/{action}");
    let mut body = json!({"filter": filter, "dryRun": true});
    let outcome = remote
        .send(Method::POST, &path, Some(&body))
        .and_then(|plan| {
            say(
                remote.json,
                &format!(
                    "{} runs match, {action} applies to {}",
                    text(&plan["matched"]),
                    text(&plan["applied"])
                ),
            );
            print_skipped(remote.json, &plan);
            let count = plan["applied"].as_u64().unwrap_or(0);
            let question = format!("{action} {count} runs? [y/N] ");
            if count == 0 || !(bulk.yes || confirmed(remote.json, &question, action)?) {
                print_json(remote.json, &plan);
                return Ok(if count == 0 {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                });
            }
            body["dryRun"] = Value::Bool(false);
            let done = remote.send(Method::POST, &path, Some(&body))?;
            Ok(summary(remote.json, action, &done))
        });
    outcome.unwrap_or_else(|message| {
        eprintln!("error: {message}");
        ExitCode::FAILURE
    })
}

/// Prints `line` for people: on stdout, or on stderr with `--json`, whose stdout is the API's
/// JSON alone.
fn say(json: bool, line: &str) {
    if json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

fn print_json(json: bool, answer: &Value) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(answer).unwrap_or_default()
        );
    }
}

/// The runs the operation does not apply to, by why.
fn print_skipped(json: bool, answer: &Value) {
    for group in answer["skipped"].as_array().into_iter().flatten() {
        let count = text(&group["count"]);
        say(
            json,
            &format!("  {count} skipped: {}", text(&group["reason"])),
        );
    }
}

/// Prints what became of the runs, and with `--json` the answer; failure when any failed.
fn summary(json: bool, action: &str, done: &Value) -> ExitCode {
    let failed = done["failed"].as_array().map_or(0, Vec::len);
    for run in done["failed"].as_array().into_iter().flatten() {
        say(
            json,
            &format!("failed: {} {}", text(&run["runId"]), text(&run["error"])),
        );
    }
    print_skipped(json, done);
    say(
        json,
        &format!(
            "{action}: {} applied, {failed} failed",
            text(&done["applied"])
        ),
    );
    print_json(json, done);
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
