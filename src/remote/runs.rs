//! `hookgate runs …`: runs, their spend, and what the operator does to them (retry, release,
//! cancel, one or in bulk), from a terminal (docs/cli.md).

use std::process::ExitCode;

use clap::Subcommand;
use hookgate::gateway::Retry;
use hookgate::http::BulkAction;
use serde::Deserialize;
use serde_json::Value;

use super::{
    ENVIRONMENT, ERROR_COLUMN_CHARS, Remote, print_fields, print_page, print_table, query,
    runs_bulk, segment, shortened, text,
};

#[derive(Subcommand)]
pub enum RunsCommand {
    /// Agent runs, newest first.
    #[command(after_help = ENVIRONMENT)]
    List {
        #[command(flatten)]
        remote: Remote,
        /// Only this status (queued, batching, running, ok, error, timeout, forwarding,
        /// forwarded, forward_failed, held, cancelled).
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this hook name.
        #[arg(long)]
        hook: Option<String>,
        /// Only runs this mapping admitted.
        #[arg(long)]
        mapping: Option<String>,
        /// Only runs for this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only runs of this session key.
        #[arg(long)]
        session_key: Option<String>,
        /// Only runs created at or after this RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// The cursor a previous page printed.
        #[arg(long)]
        before: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One run.
    #[command(after_help = ENVIRONMENT)]
    Show {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Recover what failed of a run: its turn again (a failed model call), its reply or relay;
    /// or, given filters instead of an id, of every run they select, oldest first (counted
    /// first, done once confirmed).
    #[command(after_help = ENVIRONMENT)]
    Retry {
        /// The run; leave it out to act by filters.
        #[arg(conflicts_with_all = ["BulkRuns", "RunFilters"])]
        id: Option<String>,
        #[command(flatten)]
        bulk: runs_bulk::BulkRuns,
        #[command(flatten)]
        remote: Remote,
    },
    /// What each agent mapping's runs cost: runs admitted and tokens used, over the last 24
    /// hours.
    #[command(after_help = ENVIRONMENT)]
    Spend {
        #[command(flatten)]
        remote: Remote,
        /// Since this RFC 3339 time instead.
        #[arg(long)]
        since: Option<String>,
    },
    /// Start a run a budget held, whatever its budget says; or, given filters instead of an
    /// id, every held run they select, oldest first (counted first, done once confirmed).
    #[command(after_help = ENVIRONMENT)]
    Release {
        /// The run; leave it out to act by filters.
        #[arg(conflicts_with_all = ["BulkRuns", "RunFilters"])]
        id: Option<String>,
        #[command(flatten)]
        bulk: runs_bulk::BulkRuns,
        #[command(flatten)]
        remote: Remote,
    },
    /// Cancel a run a budget held: it never runs; or, given filters instead of an id, every
    /// held run they select (counted first, done once confirmed).
    #[command(after_help = ENVIRONMENT)]
    Cancel {
        /// The run; leave it out to act by filters.
        #[arg(conflicts_with_all = ["BulkRuns", "RunFilters"])]
        id: Option<String>,
        #[command(flatten)]
        bulk: runs_bulk::BulkRuns,
        #[command(flatten)]
        remote: Remote,
    },
}

pub fn runs(command: RunsCommand) -> ExitCode {
    match command {
        RunsCommand::List {
            remote,
            status,
            hook,
            mapping,
            agent,
            session_key,
            since,
            before,
            limit,
        } => {
            let query = query(&[
                ("status", status),
                ("hook", hook),
                ("mapping", mapping),
                ("agent", agent),
                ("sessionKey", session_key),
                ("since", since),
                ("before", before),
                ("limit", Some(limit.to_string())),
            ]);
            remote.call("GET", &format!("/api/runs?{query}"), print_runs)
        }
        RunsCommand::Show { id, remote } => {
            remote.call("GET", &format!("/api/runs/{}", segment(&id)), print_fields)
        }
        RunsCommand::Retry {
            id: None,
            bulk,
            remote,
        } => runs_bulk::bulk(&remote, BulkAction::Retry, &bulk),
        RunsCommand::Retry {
            id: Some(id),
            remote,
            ..
        } => remote.call(
            "POST",
            &format!("/api/runs/{}/retry", segment(&id)),
            print_retried,
        ),
        RunsCommand::Spend { remote, since } => {
            let query = query(&[("since", since)]);
            remote.call("GET", &format!("/api/spend?{query}"), print_spend)
        }
        RunsCommand::Release {
            id: Some(id),
            remote,
            ..
        } => held(&remote, &id, "release"),
        RunsCommand::Cancel {
            id: Some(id),
            remote,
            ..
        } => held(&remote, &id, "cancel"),
        RunsCommand::Release {
            id: None,
            bulk,
            remote,
        } => runs_bulk::bulk(&remote, BulkAction::Release, &bulk),
        RunsCommand::Cancel {
            id: None,
            bulk,
            remote,
        } => runs_bulk::bulk(&remote, BulkAction::Cancel, &bulk),
    }
}

/// A run's usage as table text: `<input>/<output>` tokens, `-` when not reported.
fn tokens(usage: &Value) -> String {
    match (
        usage["inputTokens"].as_u64(),
        usage["outputTokens"].as_u64(),
    ) {
        (Some(input), Some(output)) => format!("{input}/{output}"),
        _ => "-".into(),
    }
}

/// `runs release` and `runs cancel`: `action` is the API's path segment; prints the run's
/// status now.
fn held(remote: &Remote, id: &str, action: &str) -> ExitCode {
    remote.call(
        "POST",
        &format!("/api/runs/{}/{action}", segment(id)),
        |r| {
            println!("{} {}", text(&r["runId"]), text(&r["status"]));
        },
    )
}

/// A page of `GET /api/runs` as a table.
fn print_runs(page: &Value) {
    let header = [
        "CREATED", "STATUS", "HOOK", "SESSION", "RUN", "TOKENS", "ERROR",
    ];
    print_page(page, "runs", &header, |r| {
        vec![
            text(&r["createdAt"]),
            text(&r["status"]),
            text(&r["hookName"]),
            text(&r["sessionKey"]),
            text(&r["runId"]),
            tokens(&r["usage"]),
            shortened(&r["error"], ERROR_COLUMN_CHARS),
        ]
    });
}

/// What a retry of one run did.
fn print_retried(r: &Value) {
    let run = text(&r["runId"]);
    match Retry::deserialize(&r["retried"]) {
        Ok(Retry::Run) => println!("running {run} again"),
        Ok(Retry::Delivery) => println!("sending the reply of {run} again"),
        Ok(Retry::Relay) => println!("relaying {run} again"),
        Err(_) => println!("retrying {run}"),
    }
}

/// `GET /api/spend` as two tables: the agent mappings', then the agents' (heartbeats too).
fn print_spend(answer: &Value) {
    println!("since {}", text(&answer["since"]));
    let mappings = answer["mappings"].as_array().into_iter().flatten();
    print_table(
        &["MAPPING", "RUNS", "INPUT TOKENS", "OUTPUT TOKENS"],
        mappings.map(|m| {
            vec![
                text(&m["mappingId"]),
                text(&m["runs"]),
                text(&m["inputTokens"]),
                text(&m["outputTokens"]),
            ]
        }),
    );
    println!();
    let agents = answer["agents"].as_array().into_iter().flatten();
    print_table(
        &[
            "AGENT",
            "RUNS",
            "HEARTBEATS",
            "INPUT TOKENS",
            "OUTPUT TOKENS",
        ],
        agents.map(|a| {
            vec![
                text(&a["agentId"]),
                text(&a["runs"]),
                text(&a["heartbeats"]),
                text(&a["inputTokens"]),
                text(&a["outputTokens"]),
            ]
        }),
    );
}
