//! `hookgate requests dry-run`: a candidate configuration tried on recorded requests
//! (`POST /api/requests/dry-run`, docs/cli.md). Prints the requests that would become other
//! than they became, and the totals; exits 1 when a request that succeeded would now fail, 2
//! when the dry run could not be made.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};

use super::filters::RequestFilters;
use super::{Remote, print_table, printable, shortened, text};

/// Exit code of a dry run in which a request that succeeded would now fail.
const WOULD_FAIL: u8 = 1;
/// Exit code of a dry run that could not be made.
const NOT_MADE: u8 = 2;

/// The most request ids listed for each reason they were not tried; the totals count them all.
const LISTED_UNTRIED: usize = 20;

/// Why a request was not tried, as the API says it and as the listing says it.
const UNTRIED: [(&str, &str); 6] = [
    ("notCaptured", "not captured"),
    (
        "busy",
        "no transform call slot free in time (live requests held them)",
    ),
    ("unauthenticated", "refused for its authentication"),
    ("pathCut", "its path too long to be recorded"),
    ("gone", "pruned from the log during the dry run"),
    (
        "repeat",
        "a repeat answered with an earlier request's work (its original is tried)",
    ),
];

#[derive(Args)]
pub struct DryRunArgs {
    #[command(flatten)]
    remote: Remote,
    /// The candidate configuration file (JSON5), read here and sent whole.
    #[arg(long)]
    config: PathBuf,
    /// The candidate's transforms directory on the server, inside its transforms root
    /// (replaces the candidate's hooks.transformsDir).
    #[arg(long)]
    transforms: Option<String>,
    #[command(flatten)]
    filters: RequestFilters,
    /// Continue a dry run that stopped at this request (the id it printed).
    #[arg(long)]
    after: Option<String>,
}

/// Runs `hookgate requests dry-run`.
pub fn run(args: DryRunArgs) -> ExitCode {
    let config = match std::fs::read_to_string(&args.config) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", args.config.display());
            return ExitCode::from(NOT_MADE);
        }
    };
    let mut body = json!({"config": config, "filter": args.filters.json()});
    if let Some(dir) = args.transforms {
        body["transformsDir"] = Value::from(dir);
    }
    if let Some(after) = args.after {
        body["after"] = Value::from(after);
    }
    let answer = match args
        .remote
        .send(Method::POST, "/api/requests/dry-run", Some(&body))
    {
        Ok(answer) => answer,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(NOT_MADE);
        }
    };
    if args.remote.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&answer).unwrap_or_default()
        );
    } else {
        print_report(&answer);
    }
    if answer["totals"]["nowFailing"].as_u64().unwrap_or(0) > 0 {
        ExitCode::from(WOULD_FAIL)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_report(answer: &Value) {
    let requests = answer["requests"].as_array().map_or(&[][..], Vec::as_slice);
    print_table(
        &["ID", "AT", "MAPPING", "STATUS", "ACTION"],
        requests.iter().filter(|r| r["differs"] == true).map(|r| {
            let (then, now) = (&r["then"], &r["now"]);
            vec![
                text(&r["id"]),
                text(&r["at"]),
                format!(
                    "{} -> {}",
                    text(&then["mappingId"]),
                    text(&now["mappingId"])
                ),
                format!("{} -> {}", text(&then["status"]), text(&now["status"])),
                format!("{} -> {}", action_then(then), action_now(now)),
            ]
        }),
    );
    for (reason, said) in UNTRIED {
        let untried: Vec<String> = requests
            .iter()
            .filter(|r| r["untried"] == *reason)
            .map(|r| text(&r["id"]))
            .collect();
        if untried.is_empty() {
            continue;
        }
        let listed = untried.len().min(LISTED_UNTRIED);
        let more = untried.len() - listed;
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        println!(
            "\n{said}, not tried: {}{tail}",
            untried[..listed].join(", ")
        );
    }
    let totals = &answer["totals"];
    let untried = match totals["untried"].as_u64() {
        Some(0) | None => String::new(),
        Some(n) => format!(" ({n} of them not tried)"),
    };
    println!(
        "\n{} requests: {} captured{untried}, {} not captured; {} would differ, {} that succeeded would now fail",
        text(&totals["requests"]),
        text(&totals["captured"]),
        text(&totals["notCaptured"]),
        text(&totals["differing"]),
        text(&totals["nowFailing"]),
    );
    let why = match answer["stopped"].as_str() {
        Some("timeLimit") => "the dry run ran for its time limit",
        _ => "more requests matched",
    };
    match answer["next"].as_str() {
        Some(next) => {
            println!("{why}: the dry run stopped at {next} (continue with --after {next})")
        }
        None if answer["stopped"] == "timeLimit" => {
            println!("{why} before it tried a request")
        }
        None => {}
    }
}

/// What a request became then, in a few words.
fn action_then(then: &Value) -> String {
    if let Some(error) = then["error"].as_str() {
        return printable(error, false);
    }
    if let Some(outcome) = then["outcome"].as_str() {
        return outcome.to_string();
    }
    let runs = then["runIds"].as_array().map_or(0, Vec::len);
    match (runs, then["eventOutcome"].as_str()) {
        (0, Some(_)) => "wake".into(),
        (0, None) => "nothing".into(),
        (1, _) => "agent run".into(),
        (n, _) => format!("{n} agent runs"),
    }
}

/// What a request would become now, in a few words: its first action's kind and text.
fn action_now(now: &Value) -> String {
    match now["ending"].as_str() {
        Some("refused") => text(&now["error"]),
        Some("actions") => {
            let actions = now["actions"].as_array().map_or(&[][..], Vec::as_slice);
            let first = actions.first().unwrap_or(&Value::Null);
            let what = if first["kind"] == "wake" {
                &first["text"]
            } else {
                &first["message"]
            };
            let more = match actions.len() {
                0 | 1 => String::new(),
                n => format!(" (+{} more)", n - 1),
            };
            format!("{} {}{more}", text(&first["kind"]), shortened(what, 60))
        }
        _ => text(&now["ending"]),
    }
}
