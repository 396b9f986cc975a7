//! `hookgate requests …`, `hookgate runs …` and `hookgate outbound …`: the operator API from a
//! terminal
//! (docs/cli.md). Part of the binary, not the library: these commands talk to a running hookgate
//! over HTTP (`--url`, the gateway token from `HOOKGATE_GATEWAY_TOKEN`) and print a table for
//! people, or the API's JSON with `--json`.

mod dry_run;
mod filters;
mod hooks;
pub mod mcp;
mod outbound;
mod replay;
mod runs;
mod runs_bulk;

pub use hooks::{HooksCommand, hooks};
pub use outbound::{OutboundCommand, outbound};
pub use runs::{RunsCommand, runs};

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::Value;

/// What every one of these commands reads from the environment, for their `--help`.
pub const ENVIRONMENT: &str = "Environment:
  HOOKGATE_GATEWAY_TOKEN  the gateway token (gateway.auth.token); required
  HOOKGATE_URL            the hookgate to ask, as --url (default http://127.0.0.1:8787)";

/// Where the running hookgate is, and how to print.
#[derive(Args)]
pub struct Remote {
    /// The hookgate to ask (its gateway listener).
    #[arg(long, env = "HOOKGATE_URL", default_value = "http://127.0.0.1:8787")]
    url: String,
    /// Print the API's JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum RequestsCommand {
    /// Recorded hook requests, newest first.
    #[command(after_help = ENVIRONMENT)]
    List {
        #[command(flatten)]
        remote: Remote,
        #[command(flatten)]
        filters: filters::RequestFilters,
        /// The cursor a previous page printed.
        #[arg(long)]
        before: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One request: what it was, what it became, and what was captured of it.
    #[command(after_help = ENVIRONMENT)]
    Show {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Send a captured request through its hook again, as the mappings are now; or, given
    /// filters instead of an id, every request they select, oldest first (counted first,
    /// replayed once confirmed).
    #[command(after_help = ENVIRONMENT)]
    Replay {
        /// The request to replay; leave it out to replay by filters.
        #[arg(conflicts_with_all = ["BulkReplay", "RequestFilters"])]
        id: Option<String>,
        #[command(flatten)]
        bulk: replay::BulkReplay,
        #[command(flatten)]
        remote: Remote,
    },
    /// Try a candidate configuration on recorded requests: which would become other than
    /// they became. Exits 1 when a request that succeeded would now fail.
    #[command(after_help = ENVIRONMENT)]
    DryRun(dry_run::DryRunArgs),
}

pub fn requests(command: RequestsCommand) -> ExitCode {
    match command {
        RequestsCommand::List {
            remote,
            filters,
            before,
            limit,
        } => {
            let paging = [("before", before), ("limit", Some(limit.to_string()))];
            let query = query(&[&filters.pairs()[..], &paging].concat());
            remote.call("GET", &format!("/api/requests?{query}"), |page| {
                print_table(
                    &["AT", "STATUS", "HOOK", "MAPPING", "BECAME", "ID"],
                    page["requests"].as_array().into_iter().flatten().map(|r| {
                        vec![
                            text(&r["at"]),
                            text(&r["status"]),
                            text(&r["hook"]),
                            text(&r["mappingId"]),
                            became(r),
                            text(&r["id"]),
                        ]
                    }),
                );
                print_next(page);
            })
        }
        RequestsCommand::Show { id, remote } => {
            remote.call("GET", &format!("/api/requests/{}", segment(&id)), |r| {
                print_fields(r);
                print_capture(&r["capture"]);
            })
        }
        RequestsCommand::DryRun(args) => dry_run::run(args),
        RequestsCommand::Replay {
            id: None,
            bulk,
            remote,
        } => replay::bulk(&remote, &bulk),
        RequestsCommand::Replay {
            id: Some(id),
            remote,
            ..
        } => remote.call(
            "POST",
            &format!("/api/requests/{}/replay", segment(&id)),
            |r| {
                println!(
                    "replayed {} as {}: {} {}",
                    text(&r["replayOf"]),
                    text(&r["requestId"]),
                    text(&r["status"]),
                    printable(&r["answer"].to_string(), false)
                );
            },
        ),
    }
}

/// Prints a request record's `capture` (headers, query, body or the note saying why there is
/// none), escaped for the terminal; nothing when the record has no capture.
fn print_capture(capture: &Value) {
    // Indexing a `Value` (not its map) reads a missing key as null, never panics.
    if !capture.is_object() {
        return;
    }
    println!("\ncaptured headers:");
    for pair in capture["headers"].as_array().into_iter().flatten() {
        println!("  {}: {}", text(&pair[0]), text(&pair[1]));
    }
    if let Some(query) = capture["query"].as_str() {
        println!("\ncaptured query: {}", printable(query, false));
    }
    match (&capture["body"], &capture["bodyBase64"], &capture["note"]) {
        (Value::String(body), _, _) => println!("\ncaptured body:\n{}", printable(body, true)),
        (_, Value::String(body), _) => {
            println!("\ncaptured body (base64, not UTF-8):\n{body}")
        }
        (_, _, Value::String(note)) => println!("\n{}", printable(note, false)),
        _ => {}
    }
}

impl Remote {
    /// Sends one API request; on success prints the answer with `print` (or as JSON), else the
    /// API's error. The exit code says which.
    fn call(&self, method: &str, path: &str, print: impl FnOnce(&Value)) -> ExitCode {
        let method = match method {
            "POST" => Method::POST,
            _ => Method::GET,
        };
        match self.send(method, path, None) {
            Ok(body) => {
                if self.json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&body).unwrap_or_default()
                    );
                } else {
                    print(&body);
                }
                ExitCode::SUCCESS
            }
            Err(message) => {
                eprintln!("error: {message}");
                ExitCode::FAILURE
            }
        }
    }

    /// Sends `method path` (with `body` as JSON) through `client` with the gateway token; the
    /// answer's JSON on a 2xx, else the message to print: the API's error and the HTTP status,
    /// or why there is no answer (no token, no connection, no JSON). Reads the token from the
    /// environment each time.
    async fn exchange(
        &self,
        client: &reqwest::Client,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        let token = std::env::var("HOOKGATE_GATEWAY_TOKEN").map_err(|_| {
            "set HOOKGATE_GATEWAY_TOKEN to the gateway token (gateway.auth.token)".to_string()
        })?;
        let url = format!("{}{path}", self.url.trim_end_matches('/'));
        let mut request = client.request(method, url).bearer_auth(token.trim());
        if let Some(body) = body {
            request = request.json(body);
        }
        let base = &self.url;
        let response = request
            .send()
            .await
            .map_err(|e| format!("cannot reach {base}: {e}"))?;
        let status = response.status();
        let answer: Value = response
            .json()
            .await
            .map_err(|e| format!("{base} answered {status} with no JSON: {e}"))?;
        if status.is_success() {
            return Ok(answer);
        }
        let mut message = format!("{} (HTTP {})", text(&answer["error"]), status.as_u16());
        for problem in answer["problems"].as_array().into_iter().flatten() {
            message.push_str(&format!("\n  {}", text(problem)));
        }
        Err(message)
    }

    /// [`Remote::exchange`] on a runtime of its own, for a command that sends one request.
    fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the async runtime: {e}"))?;
        let client = reqwest::Client::new();
        runtime.block_on(self.exchange(&client, method, path, body))
    }
}

/// A query string of the parameters that are set.
fn query(pairs: &[(&str, Option<String>)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        if let Some(value) = value {
            query.append_pair(name, value);
        }
    }
    query.finish()
}

/// An id as one path segment: whatever the user typed cannot reach another endpoint.
fn segment(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Text from the server as a terminal may show it: control characters (an escape sequence a
/// payload could carry) written as escapes; line breaks kept when `lines`.
fn printable(text: &str, lines: bool) -> String {
    text.chars()
        .map(|c| match c {
            '\n' if lines => c.to_string(),
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// A JSON value as table text: strings bare, null as `-`.
fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => printable(s, false),
        other => printable(&other.to_string(), false),
    }
}

/// The most characters of a run's error a table shows (`runs show` has all of it).
const ERROR_COLUMN_CHARS: usize = 80;

/// Table text cut to `max` characters, marked with `…` when cut.
fn shortened(value: &Value, max: usize) -> String {
    let text = text(value);
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

/// What a request became, in a few words, as the console says it: a refusal with its reason
/// (cut to [`ERROR_COLUMN_CHARS`]), a filtered request with why, a repeat with the work that
/// answered it.
fn became(record: &Value) -> String {
    if let Some(error) = record["error"].as_str() {
        let error = match record["transform"]["failure"].as_str() {
            Some(cause) => format!("{error} ({cause})"),
            None => error.to_string(),
        };
        return match record["reason"].as_str() {
            Some(_) => format!(
                "{error}: {}",
                shortened(&record["reason"], ERROR_COLUMN_CHARS)
            ),
            None => error,
        };
    }
    if let Some(outcome) = record["outcome"].as_str() {
        // `filtered`: what it made is nothing; why is the reason. `batched`, `held`: its run.
        return match (record["reason"].as_str(), record["runIds"][0].as_str()) {
            (Some(_), _) => format!(
                "{outcome}: {}",
                shortened(&record["reason"], ERROR_COLUMN_CHARS)
            ),
            (None, Some(run)) => format!("{outcome}, run {run}"),
            (None, None) => outcome.to_string(),
        };
    }
    let runs = record["runIds"].as_array().map_or(0, Vec::len);
    if let Some(repeat) = record["repeat"].as_str() {
        return match runs {
            0 => format!("repeat ({repeat})"),
            1 => format!("repeat ({repeat}), run {}", text(&record["runIds"][0])),
            n => format!("repeat ({repeat}), {n} runs"),
        };
    }
    match (runs, record["eventOutcome"].as_str()) {
        (0, Some(outcome)) => format!("wake {outcome}"),
        (0, None) => record["transform"]["outcome"]
            .as_str()
            .map_or_else(|| "-".into(), |o| format!("transform: {o}")),
        (1, _) => format!("run {}", text(&record["runIds"][0])),
        (n, _) => format!("{n} runs"),
    }
}

fn print_table(header: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    let rows: Vec<Vec<String>> = rows.collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

/// A page of an API listing as a table: a row (made by `row`) per item under `key`, then the
/// next page's `--before` when the page has one.
fn print_page(page: &Value, key: &str, header: &[&str], row: impl Fn(&Value) -> Vec<String>) {
    print_table(header, page[key].as_array().into_iter().flatten().map(row));
    print_next(page);
}

fn print_next(page: &Value) {
    if let Some(next) = page["next"].as_str() {
        println!("\nmore: --before {next}");
    }
}

/// One of a run's model calls on a line of its own, as the console says it: its model and
/// provider, when, why it failed (or `answered`) and the wait before the next call.
fn model_call_line(call: &Value) -> String {
    let said = match &call["error"] {
        Value::Null => "answered".to_string(),
        error => text(error),
    };
    let wait = call["retryInMs"]
        .as_u64()
        .map(|ms| format!(", called again after {:.1} s", ms as f64 / 1000.0))
        .unwrap_or_default();
    format!(
        "{} ({}) at {}: {said}{wait}",
        text(&call["model"]),
        text(&call["provider"]),
        text(&call["at"])
    )
}

/// An object's fields, one per line, nested values as JSON. A text's line breaks are kept (a
/// message or a reply of several lines), its later lines indented under the first; its other
/// control characters are escaped, so that a payload cannot write to the terminal.
fn print_fields(object: &Value) {
    let Some(fields) = object.as_object() else {
        return;
    };
    let width = fields.keys().map(String::len).max().unwrap_or(0);
    let indent = format!("\n{:width$}  ", "");
    for (name, value) in fields {
        if name == "capture" {
            continue;
        }
        let shown = match value {
            Value::String(s) => printable(s, true).replace('\n', &indent),
            Value::Array(calls) if name == "modelCalls" => calls
                .iter()
                .map(model_call_line)
                .collect::<Vec<_>>()
                .join(&indent),
            other => text(other),
        };
        println!("{name:width$}  {shown}");
    }
}
