//! The `hookgate` command: `serve`, `check`, `config`, `transform`, and the operator API's
//! `requests` and `runs`.

mod remote;
mod scaffold;

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use hookgate::config::{self, Settings};
use hookgate::server::{self, Server, StartError};
use hookgate::transform::{
    CompileCache, SlotShare, TransformEngine, TransformInput, TransformLimits,
};

/// glibc's allocator cost a fifth of the request path's CPU under /hooks/wake (perf: malloc,
/// free and their consolidation across the runtime's threads); mimalloc's per-thread heaps take
/// most of that away (docs/performance.md#allocation).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "hookgate",
    version = hookgate::build::LONG_VERSION,
    about = "A webhook ingress for AI agents"
)]
struct Cli {
    /// Log lines as human text (default) or as JSON objects, one per line.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve hooks and the operator API.
    Serve {
        /// The JSON5 configuration file.
        #[arg(long, env = "HOOKGATE_CONFIG")]
        config: PathBuf,
        /// Listen here instead of gateway.bind:gateway.port (port 0 picks a free port).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Log one line per request: its id, client, method, path, status and time.
        #[arg(
            long,
            env = "HOOKGATE_ACCESS_LOG",
            value_parser = clap::builder::BoolishValueParser::new()
        )]
        access_log: bool,
    },
    /// Validate a configuration file, and every transform it names, and report every problem.
    Check {
        /// The JSON5 configuration file.
        #[arg(long, env = "HOOKGATE_CONFIG")]
        config: PathBuf,
    },
    /// What the configuration file may hold, generated from hookgate's own types.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Tools for transform authors.
    #[command(subcommand)]
    Transform(TransformCommand),
    /// The request log of a running hookgate: list, show, replay.
    #[command(subcommand, after_help = remote::ENVIRONMENT)]
    Requests(remote::RequestsCommand),
    /// The agent runs of a running hookgate: list, show, retry, release or cancel a held one.
    #[command(subcommand, after_help = remote::ENVIRONMENT)]
    Runs(remote::RunsCommand),
    /// The MCP server over stdio: carries each message to a running hookgate's `/mcp` with an
    /// MCP token, for an agent that starts its tools as processes.
    #[command(after_help = remote::mcp::ENVIRONMENT)]
    Mcp(remote::mcp::McpArgs),
    /// Subscriptions of a running hookgate: hooks made at runtime, each with its own URL and
    /// signing secret (create, list, show, test, pause, resume, rotate, delete, audit).
    #[command(subcommand, after_help = remote::ENVIRONMENT)]
    Hooks(remote::HooksCommand),
    /// The callbacks and lifecycle webhooks of a running hookgate: list, retry a failed one.
    #[command(subcommand, after_help = remote::ENVIRONMENT)]
    Outbound(remote::OutboundCommand),
    /// Print a completion script for a shell: `hookgate completions bash > /etc/bash_completion.d/hookgate`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the configuration file's JSON Schema, for editors: name it in the file's
    /// `$schema` key to have keys completed and checked as you type.
    Schema,
    /// Print the key reference of docs/configuration.md: every key, its default, its values,
    /// whether a reload takes it, and what it means.
    Reference,
}

#[derive(Subcommand)]
enum TransformCommand {
    /// Make a transform project that builds as it is: a sample transform, a sample payload and
    /// its unit tests.
    New {
        /// The project's name: the crate or package, the hook it serves, the .wasm it builds.
        name: String,
        #[arg(long, value_enum)]
        lang: scaffold::Lang,
        /// Where to write it (default: ./NAME); must not exist.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Build a project made by `transform new` into NAME.wasm, or one JavaScript or TypeScript
    /// module (x.mjs, x.ts) into x.wasm beside it, and check that hookgate loads it.
    Build {
        /// The project's directory, or the module (built with the SDK this binary carries,
        /// installed once under ~/.cache/hookgate; needs Node.js 20+ and npm).
        #[arg(default_value = ".")]
        path: PathBuf,
    },
    /// Run a transform component on a request and print its outcome as JSON.
    Run {
        /// The component (`.wasm`) to run, or a JavaScript module (`.mjs`, `.ts`, ...) to run
        /// the component built beside it with a mapping's JavaScript limits.
        module: PathBuf,
        /// A file holding the request body.
        #[arg(long)]
        body: PathBuf,
        /// The hook name the request is for.
        #[arg(long, default_value = "test")]
        name: String,
        /// A request header, `Name: value` (repeatable).
        #[arg(long = "header")]
        headers: Vec<String>,
        /// A query parameter, `name=value` (repeatable).
        #[arg(long = "query")]
        query: Vec<String>,
        /// The mapping's `transform.config`, as JSON text.
        #[arg(long)]
        config: Option<String>,
        /// The mapping's `transform.export`: which entry point to run.
        #[arg(long)]
        export: Option<String>,
        #[command(flatten)]
        limits: LimitArgs,
    },
}

/// A mapping's limits, to try a transform with the ones it will have.
#[derive(clap::Args)]
struct LimitArgs {
    /// `memoryBytes`: the most linear memory, in bytes.
    #[arg(long)]
    memory: Option<usize>,
    /// `timeoutMs`: the most running time of a call, in milliseconds.
    #[arg(long)]
    timeout: Option<u64>,
    /// `reuse`: calls one instance serves before it is replaced.
    #[arg(long)]
    reuse: Option<u32>,
    /// Send the request this many times (to one instance, with --reuse), and report the time
    /// of the first call and of the others.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
}

impl LimitArgs {
    /// The defaults of a mapping naming `module` (a JavaScript module's are larger), with
    /// these options over them.
    fn limits(&self, javascript: bool) -> TransformLimits {
        let mut limits = TransformLimits::default();
        if javascript {
            limits = limits.for_javascript();
        }
        if let Some(bytes) = self.memory {
            limits.memory_bytes = bytes;
        }
        if let Some(ms) = self.timeout {
            limits.timeout = Duration::from_millis(ms);
        }
        if let Some(calls) = self.reuse {
            limits.reuse = calls.max(1);
        }
        limits
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve { .. }) {
        die_on_closed_pipe();
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "hookgate=info".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
    }
    match cli.command {
        Command::Check { config } => check(&config),
        Command::Config(ConfigCommand::Schema) => {
            let schema = serde_json::to_string_pretty(config::schema::schema());
            println!("{}", schema.expect("a JSON value serialises"));
            ExitCode::SUCCESS
        }
        Command::Config(ConfigCommand::Reference) => {
            print!("{}", config::schema::reference());
            ExitCode::SUCCESS
        }
        Command::Serve {
            config,
            listen,
            access_log,
        } => serve(config, listen, access_log),
        Command::Requests(command) => remote::requests(command),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "hookgate",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
        Command::Runs(command) => remote::runs(command),
        Command::Mcp(args) => remote::mcp::mcp(args),
        Command::Hooks(command) => remote::hooks(command),
        Command::Outbound(command) => remote::outbound(command),
        Command::Transform(TransformCommand::New { name, lang, dir }) => {
            scaffold::new(&name, lang, dir)
        }
        Command::Transform(TransformCommand::Build { path }) => scaffold::build(&path),
        Command::Transform(TransformCommand::Run {
            module,
            body,
            name,
            headers,
            query,
            config,
            export,
            limits,
        }) => {
            let input = match transform_input(&body, name, &headers, &query, config) {
                Ok(input) => TransformInput {
                    export_name: export,
                    ..input
                },
                Err(message) => {
                    eprintln!("error: {message}");
                    return ExitCode::FAILURE;
                }
            };
            run_transform(&module, input, &limits)
        }
    }
}

/// A command whose output is piped into a reader that stops early (`hookgate requests list |
/// head -3`) ends as `cat` or `grep` end there: killed by SIGPIPE at its next write, quietly,
/// exit status 141 in a shell (docs/cli.md). Rust ignores SIGPIPE, which turns that write into
/// an error that `println!` panics on. Not for `serve`: a server outlives whoever reads its
/// stdout. Sockets are unaffected: the standard library sends with `MSG_NOSIGNAL`.
fn die_on_closed_pipe() {
    // SAFETY: called before any other thread exists; setting a signal's disposition to its
    // default installs no handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn report(problems: &[config::ConfigError]) -> ExitCode {
    for problem in problems {
        eprintln!("error: {problem}");
    }
    ExitCode::FAILURE
}

fn check(path: &std::path::Path) -> ExitCode {
    let settings: Settings = match server::check(path) {
        Ok((settings, _)) => settings,
        Err(StartError::Config(problems)) => return report(&problems),
        Err(err) => {
            eprintln!("error: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(nats) = settings.store.nats() {
        let checked = tokio::runtime::Runtime::new().map(|rt| {
            rt.block_on(hookgate::gateway::nats::check(
                nats,
                settings.runtime.run_timeout,
            ))
        });
        match checked {
            Ok(Ok(found)) => println!("ok: {found}"),
            Ok(Err(err)) => {
                eprintln!("error: gateway.store: {err}");
                return ExitCode::FAILURE;
            }
            Err(err) => {
                eprintln!("error: {err}");
                return ExitCode::FAILURE;
            }
        }
    }
    for notice in settings.notices.iter().chain(&settings.transform_notices()) {
        eprintln!("warning: {notice}");
    }
    match &settings.hooks {
        Some(hooks) => println!(
            "ok: {} — hooks at {}, {} mapping(s), presets [{}], default agent '{}'",
            path.display(),
            hooks.path,
            hooks.mappings.len(),
            hooks.presets.join(", "),
            settings.agents.default_id()
        ),
        None => println!("ok: {} — hooks disabled", path.display()),
    }
    ExitCode::SUCCESS
}

fn serve(path: PathBuf, listen: Option<SocketAddr>, access_log: bool) -> ExitCode {
    hookgate::allocator::start_trimming();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async move {
        let server = match Server::start(path, listen).await {
            Ok(server) => server,
            Err(StartError::Config(problems)) => return report(&problems),
            Err(err) => {
                eprintln!("error: {err:#}");
                return ExitCode::FAILURE;
            }
        };
        if access_log {
            server.log_access();
        }
        // Before `listening on`: from then on a supervisor may signal us.
        let shutdown = match shutdown_signal() {
            Ok(shutdown) => shutdown,
            Err(err) => {
                eprintln!("error: cannot install the signal handlers: {err}");
                return ExitCode::FAILURE;
            }
        };
        match server.local_addr() {
            Ok(addr) => {
                println!("listening on http://{addr}");
                let _ = std::io::stdout().flush();
            }
            Err(err) => {
                eprintln!("error: {err}");
                return ExitCode::FAILURE;
            }
        }
        match server.run(shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::FAILURE
            }
        }
    });
    // The store is committed and closed by now. Blocking work still running (a module being
    // compiled, say) is not waited for: dropping the runtime would wait for it without a bound.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// Completes on SIGINT or SIGTERM. The handlers are installed when this is called, not when the
/// future is first polled: a signal that arrives between `listening on` and the server's first
/// poll then still begins a graceful stop, instead of the default action killing the process.
///
/// SIGHUP (a reload, which `config::watch` listens for once the server runs) is registered here
/// too: tokio keeps a signal's handler for the life of the process, so its default action,
/// termination, no longer applies from this point.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    drop(signal(SignalKind::hangup())?);
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        tracing::info!("shutting down: finishing in-flight requests");
    })
}

fn transform_input(
    body: &std::path::Path,
    name: String,
    headers: &[String],
    query: &[String],
    config: Option<String>,
) -> Result<TransformInput, String> {
    let body = std::fs::read(body).map_err(|e| format!("cannot read {}: {e}", body.display()))?;
    let headers = headers
        .iter()
        .map(|h| {
            h.split_once(':')
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                .ok_or_else(|| format!("--header '{h}' is not 'Name: value'"))
        })
        .collect::<Result<_, _>>()?;
    let query: Vec<(String, String)> = query
        .iter()
        .map(|q| {
            q.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("--query '{q}' is not 'name=value'"))
        })
        .collect::<Result<_, _>>()?;
    if let Some(config) = &config {
        serde_json::from_str::<serde_json::Value>(config)
            .map_err(|e| format!("--config is not JSON: {e}"))?;
    }
    let url = match form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&query)
        .finish()
    {
        search if search.is_empty() => format!("/hooks/{name}"),
        search => format!("/hooks/{name}?{search}"),
    };
    Ok(TransformInput {
        name,
        url,
        headers,
        query,
        body,
        mapping_id: "cli".into(),
        config,
        export_name: None,
    })
}

fn run_transform(module: &std::path::Path, input: TransformInput, args: &LimitArgs) -> ExitCode {
    let component = module
        .to_str()
        .and_then(hookgate::mapping::javascript_component)
        .map(PathBuf::from);
    let limits = TransformLimits {
        // One call at a time: a pool of two slots, which reserves 16 GiB of address space where
        // the server's default reserves 516 GiB. That fits under valgrind (63.9 GiB at most in
        // one mapping), so a call counted there is a pooled one, as in a server
        // (docs/performance.md, "Profiling").
        max_concurrent: 1,
        ..args.limits(component.is_some())
    };
    let module = component.as_deref().unwrap_or(module);
    let outcome = tokio::runtime::Runtime::new()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
        .and_then(|runtime| {
            let engine = TransformEngine::new(&limits)
                .map_err(|e| format!("cannot start the transform engine: {e:#}"))?;
            let loaded = engine
                .load_file(module, &user_compile_cache())
                .map_err(|e| e.to_string())?;
            let mut took = Vec::new();
            let mut last = None;
            for _ in 0..args.repeat.max(1) {
                let started = std::time::Instant::now();
                let outcome = runtime
                    .block_on(engine.call_as_returned(
                        &loaded,
                        input.clone(),
                        &limits,
                        SlotShare::Mapping,
                    ))
                    .map_err(|failure| format!("{} ({})", failure, failure.cause()))?;
                took.push(started.elapsed());
                last = Some(outcome);
            }
            if let [first, rest @ ..] = took.as_slice() {
                let mut rest = rest.to_vec();
                rest.sort();
                match rest.get(rest.len() / 2) {
                    Some(median) => eprintln!(
                        "{} calls: the first {first:.1?}, the others {median:.1?} (median)",
                        took.len()
                    ),
                    None => eprintln!("1 call: {first:.1?}"),
                }
            }
            last.ok_or_else(|| "no call made".to_string())
        });
    match outcome {
        Ok(outcome) => {
            println!("{}", outcome.to_json());
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The compile cache of `transform run`: the user's cache directory (`$XDG_CACHE_HOME`, else
/// `~/.cache`) under `hookgate/transform-cache`, so that trying a JavaScript transform again
/// does not compile it again. Without a home, nothing is cached.
fn user_compile_cache() -> CompileCache {
    CompileCache::new(scaffold::user_cache_dir().map_or_else(
        || std::env::temp_dir().join(format!("hookgate-{}", std::process::id())),
        |base| base.join("hookgate/transform-cache"),
    ))
}
