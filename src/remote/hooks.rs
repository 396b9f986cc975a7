//! `hookgate hooks …`: subscriptions (docs/subscriptions.md) from a terminal, through the
//! operator API (`/api/hooks`, `/api/audit`).

use std::process::ExitCode;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Map, Value, json};

use super::{ENVIRONMENT, Remote, print_fields, print_table, segment, text};

#[derive(Subcommand)]
pub enum HooksCommand {
    /// Make a subscription: a hook of its own, live at once; prints its URL and signing
    /// secret, which is never shown again.
    #[command(after_help = ENVIRONMENT)]
    Create {
        /// Its name: the hook name senders post to, and its mapping's id.
        name: String,
        /// github, stripe, slack, gitlab or standard (Standard Webhooks).
        #[arg(long)]
        provider: String,
        /// Event types it admits (comma-separated, or repeated); all when none.
        #[arg(long, value_delimiter = ',')]
        events: Vec<String>,
        /// The agent's message template (`messageTemplate`).
        #[arg(long)]
        template: Option<String>,
        /// The agent that runs it.
        #[arg(long)]
        agent: Option<String>,
        /// The channel the reply goes to.
        #[arg(long, requires = "to")]
        deliver: Option<String>,
        /// The recipient on that channel.
        #[arg(long)]
        to: Option<String>,
        /// A transform module, under the transforms directory.
        #[arg(long)]
        transform: Option<String>,
        /// The provider's own secret (Stripe, Slack), read from this environment variable
        /// rather than the command line.
        #[arg(long, value_name = "ENV")]
        secret_env: Option<String>,
        /// More keys of a file mapping, as JSON (`{"batch": {...}, "budget": {...}}`).
        #[arg(long)]
        mapping: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Every subscription.
    #[command(after_help = ENVIRONMENT)]
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// One subscription (never its secret).
    #[command(after_help = ENVIRONMENT)]
    Show {
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Send a signed sample of the provider's own through the real pipeline and show what it
    /// became.
    #[command(after_help = ENVIRONMENT)]
    Test {
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Stop serving it; its hook name answers as an unknown one's.
    #[command(after_help = ENVIRONMENT)]
    Pause {
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Serve it again.
    #[command(after_help = ENVIRONMENT)]
    Resume {
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Issue a new secret (printed once); the old one keeps verifying for the window.
    #[command(after_help = ENVIRONMENT)]
    Rotate {
        name: String,
        /// How long the old secret keeps verifying (`24h`, `30m`, `90s`).
        #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
        window: std::time::Duration,
        /// The provider's new secret, read from this environment variable.
        #[arg(long, value_name = "ENV")]
        secret_env: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Delete it: its hook name stops being served and its secrets are gone.
    #[command(after_help = ENVIRONMENT)]
    Delete {
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Who changed subscriptions, when, and what; newest first.
    #[command(after_help = ENVIRONMENT)]
    Audit {
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        remote: Remote,
    },
}

pub fn hooks(command: HooksCommand) -> ExitCode {
    match command {
        HooksCommand::Create {
            name,
            provider,
            events,
            template,
            agent,
            deliver,
            to,
            transform,
            secret_env,
            mapping,
            remote,
        } => {
            let mapping: Map<String, Value> = match mapping.as_deref().map(serde_json::from_str) {
                None => Map::new(),
                Some(Ok(mapping)) => mapping,
                Some(Err(e)) => return fail(&format!("--mapping is not a JSON object: {e}")),
            };
            let secret = match secret_from(secret_env.as_deref()) {
                Ok(secret) => secret,
                Err(message) => return fail(&message),
            };
            let body = json!({
                "name": name, "provider": provider, "events": events, "template": template,
                "agent": agent, "deliver": deliver, "to": to, "transform": transform,
                "secret": secret, "mapping": mapping,
            });
            exchange(
                &remote,
                Method::POST,
                "/api/hooks",
                Some(body),
                print_issued,
            )
        }
        HooksCommand::List { remote } => exchange(&remote, Method::GET, "/api/hooks", None, |r| {
            print_table(
                &["NAME", "PROVIDER", "EVENTS", "STATE", "URL"],
                r["hooks"].as_array().into_iter().flatten().map(|h| {
                    vec![
                        text(&h["name"]),
                        text(&h["provider"]),
                        events(&h["events"]),
                        state(h),
                        text(&h["url"]),
                    ]
                }),
            );
        }),
        HooksCommand::Show { name, remote } => {
            let path = format!("/api/hooks/{}", segment(&name));
            exchange(&remote, Method::GET, &path, None, print_fields)
        }
        HooksCommand::Test { name, remote } => {
            let path = format!("/api/hooks/{}/test", segment(&name));
            exchange(&remote, Method::POST, &path, None, print_test)
        }
        HooksCommand::Pause { name, remote } => act(&remote, &name, "pause", None),
        HooksCommand::Resume { name, remote } => act(&remote, &name, "resume", None),
        HooksCommand::Rotate {
            name,
            window,
            secret_env,
            remote,
        } => {
            let secret = match secret_from(secret_env.as_deref()) {
                Ok(secret) => secret,
                Err(message) => return fail(&message),
            };
            let body = json!({ "windowSeconds": window.as_secs(), "secret": secret });
            let path = format!("/api/hooks/{}/rotate", segment(&name));
            exchange(&remote, Method::POST, &path, Some(body), print_issued)
        }
        HooksCommand::Delete { name, remote } => {
            let path = format!("/api/hooks/{}", segment(&name));
            exchange(&remote, Method::DELETE, &path, None, |r| {
                println!("deleted {}", text(&r["deleted"]));
            })
        }
        HooksCommand::Audit { limit, remote } => {
            let path = format!("/api/audit?limit={limit}");
            exchange(&remote, Method::GET, &path, None, |r| {
                print_table(
                    &["AT", "BY", "CLIENT", "ACTION", "HOOK", "DETAIL"],
                    r["entries"].as_array().into_iter().flatten().map(|e| {
                        vec![
                            text(&e["at"]),
                            text(&e["by"]["credential"]),
                            text(&e["by"]["client"]),
                            text(&e["action"]),
                            text(&e["subscription"]),
                            text(&e["detail"]),
                        ]
                    }),
                );
            })
        }
    }
}

fn act(remote: &Remote, name: &str, action: &str, body: Option<Value>) -> ExitCode {
    let path = format!("/api/hooks/{}/{action}", segment(name));
    exchange(remote, Method::POST, &path, body, |r| {
        println!("{} is {}", text(&r["name"]), state(r));
    })
}

/// The secret in environment variable `name`, when one is named.
fn secret_from(name: Option<&str>) -> Result<Option<String>, String> {
    name.map(|name| {
        std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))
    })
    .transpose()
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}

/// Sends one API request and prints the answer with `print` (or as JSON).
fn exchange(
    remote: &Remote,
    method: Method,
    path: &str,
    body: Option<Value>,
    print: impl FnOnce(&Value),
) -> ExitCode {
    match remote.send(method, path, body.as_ref()) {
        Ok(answer) if remote.json => {
            println!(
                "{}",
                serde_json::to_string_pretty(&answer).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Ok(answer) => {
            print(&answer);
            ExitCode::SUCCESS
        }
        Err(message) => fail(&message),
    }
}

/// A subscription just made or rotated: its URL and its secret, said to be shown once.
fn print_issued(r: &Value) {
    println!("hook:    {}", text(&r["name"]));
    println!("url:     {}", text(&r["url"]));
    println!("secret:  {}", text(&r["secret"]));
    if let Some(until) = r["previousSecretValidUntil"].as_str() {
        println!("the previous secret keeps verifying until {until}");
    }
    println!("\nThe secret is shown this once: give it to the sender now.");
}

/// What a test delivery became, and why when it did not run.
fn print_test(r: &Value) {
    println!("sent:     a signed {} sample", text(&r["event"]));
    println!("answer:   {} {}", text(&r["status"]), r["answer"]);
    let record = &r["record"];
    if record.is_object() {
        println!("request:  {}", text(&record["id"]));
        println!("became:   {}", super::became(record));
    }
}

fn events(value: &Value) -> String {
    match value.as_array() {
        Some(events) if !events.is_empty() => events.iter().map(text).collect::<Vec<_>>().join(","),
        _ => "*".into(),
    }
}

fn state(view: &Value) -> String {
    let mut state = if view["paused"].as_bool() == Some(true) {
        "paused".to_string()
    } else {
        "live".to_string()
    };
    if let Some(until) = view["previousSecretValidUntil"].as_str() {
        state.push_str(&format!(" (rotating until {until})"));
    }
    state
}
