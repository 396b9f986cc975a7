//! `hookgate mcp`: the MCP server over stdio, for an agent that starts its tools as processes
//! (docs/mcp.md#over-stdio). It is a bridge, not a second server: each line of standard input
//! (one JSON-RPC message) goes to a running hookgate's `/mcp` with an MCP token
//! (`HOOKGATE_MCP_TOKEN`), and each answer comes back as one line of standard output. The scopes
//! are checked, and every call recorded, where the tools run: in the server, as for an agent
//! that speaks HTTP to it. Messages are carried one at a time, in order.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use clap::Args;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};

/// What `hookgate mcp` reads from the environment, for its `--help`.
pub const ENVIRONMENT: &str = "Environment:
  HOOKGATE_MCP_TOKEN  an MCP token (mcp.tokens[].token); required
  HOOKGATE_URL        the hookgate to carry the messages to, as --url (default http://127.0.0.1:8787)";

/// Where the running hookgate is.
#[derive(Args)]
pub struct McpArgs {
    /// The hookgate to carry the messages to (its gateway listener).
    #[arg(long, env = "HOOKGATE_URL", default_value = "http://127.0.0.1:8787")]
    url: String,
}

/// Carries standard input to `/mcp` and the answers to standard output until input ends.
pub fn mcp(args: McpArgs) -> ExitCode {
    let Ok(token) = std::env::var("HOOKGATE_MCP_TOKEN") else {
        eprintln!("set HOOKGATE_MCP_TOKEN to an MCP token (mcp.tokens[].token)");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bridge = Bridge {
        client: reqwest::Client::new(),
        endpoint: format!("{}/mcp", args.url.trim_end_matches('/')),
        token: token.trim().to_string(),
        version: None,
    };
    runtime.block_on(bridge.run())
}

struct Bridge {
    client: reqwest::Client,
    endpoint: String,
    token: String,
    /// The protocol version `initialize` settled, sent with every later message.
    version: Option<String>,
}

impl Bridge {
    async fn run(mut self) -> ExitCode {
        let mut stdout = std::io::stdout();
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            let answers = match serde_json::from_str::<Value>(&line) {
                Ok(message) => self.carry(&message).await,
                Err(_) => vec![failure(Value::Null, -32700, "parse error".into())],
            };
            for answer in answers {
                if writeln!(stdout, "{answer}")
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    return ExitCode::FAILURE;
                }
            }
        }
        ExitCode::SUCCESS
    }

    /// Sends `message` and returns what the server answered: nothing for a notification, else
    /// its answer, or a JSON-RPC error saying why there was none.
    async fn carry(&mut self, message: &Value) -> Vec<Value> {
        let id = message.get("id").cloned();
        match self.send(message).await {
            Ok(answers) => {
                if message["method"] == "initialize" {
                    let settled = answers
                        .iter()
                        .find_map(|a| a["result"]["protocolVersion"].as_str());
                    self.version = settled.map(String::from);
                }
                answers
            }
            Err(why) => match id {
                Some(id) => vec![failure(id, -32603, why)],
                None => {
                    eprintln!("{why}");
                    Vec::new()
                }
            },
        }
    }

    async fn send(&self, message: &Value) -> Result<Vec<Value>, String> {
        let mut request = self
            .client
            .post(&self.endpoint)
            .bearer_auth(&self.token)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .body(message.to_string());
        if let Some(version) = &self.version {
            request = request.header("mcp-protocol-version", version);
        }
        let endpoint = &self.endpoint;
        let response = request
            .send()
            .await
            .map_err(|e| format!("cannot reach {endpoint}: {e}"))?;
        let status = response.status();
        let stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let body = response
            .text()
            .await
            .map_err(|e| format!("{endpoint} answered {status}, then failed: {e}"))?;
        if !status.is_success() {
            let error = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|answer| answer["error"].as_str().map(String::from))
                .unwrap_or(body);
            return Err(format!("{endpoint} answered {}: {error}", status.as_u16()));
        }
        Ok(match stream {
            true => events(&body),
            false => serde_json::from_str(&body).into_iter().collect(),
        })
    }
}

/// The JSON-RPC messages of a `text/event-stream` body: its `data:` lines, each one message.
fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

fn failure(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_stream_gives_each_message() {
        let body = "id: 1\ndata: {\"a\":1}\n\ndata: {\"b\":2}\n\n";
        assert_eq!(events(body), vec![json!({"a": 1}), json!({"b": 2})]);
    }
}
