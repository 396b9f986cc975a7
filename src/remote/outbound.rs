//! `hookgate outbound …`: the callbacks and lifecycle webhooks in a running hookgate's outbox,
//! listed by status, and a failed one sent again with its `webhook-id` (docs/cli.md,
//! docs/outbound.md).

use std::process::ExitCode;

use clap::Subcommand;

use super::{ENVIRONMENT, ERROR_COLUMN_CHARS, Remote, print_page, query, segment, shortened, text};

#[derive(Subcommand)]
pub enum OutboundCommand {
    /// Callbacks and lifecycle webhooks, newest first.
    #[command(after_help = ENVIRONMENT)]
    List {
        #[command(flatten)]
        remote: Remote,
        /// Only this status (waiting, pending, sending, done, failed).
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Send a failed message again: the same webhook-id, its retry window restarted.
    #[command(after_help = ENVIRONMENT)]
    Retry {
        /// The message's id (the list's ID column).
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

pub fn outbound(command: OutboundCommand) -> ExitCode {
    match command {
        OutboundCommand::List {
            remote,
            status,
            limit,
        } => {
            let query = query(&[("status", status), ("limit", Some(limit.to_string()))]);
            remote.call("GET", &format!("/api/outbound?{query}"), print_messages)
        }
        OutboundCommand::Retry { id, remote } => remote.call(
            "POST",
            &format!("/api/outbound/{}/retry", segment(&id)),
            |r| println!("message {} pending again", text(&r["id"])),
        ),
    }
}

/// A page of `GET /api/outbound` as a table.
fn print_messages(page: &serde_json::Value) {
    let header = ["ID", "STATUS", "EVENT", "TO", "ATTEMPTS", "RUN", "ERROR"];
    print_page(page, "messages", &header, |m| {
        vec![
            text(&m["id"]),
            text(&m["status"]),
            text(&m["event"]),
            text(&m["destination"]),
            text(&m["attempts"]),
            text(&m["runId"]),
            shortened(&m["lastError"], ERROR_COLUMN_CHARS),
        ]
    });
}
