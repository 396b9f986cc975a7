//! The `hookgate` command: `serve`, `check`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hookgate::config::{self, LiveConfig, Settings};
use hookgate::server::Server;

#[derive(Parser)]
#[command(name = "hookgate", version, about = "A webhook ingress for AI agents")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve hooks and the operator API.
    Serve {
        /// The JSON5 configuration file.
        #[arg(long)]
        config: PathBuf,
        /// Listen here instead of gateway.bind:gateway.port (port 0 picks a free port).
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Validate a configuration file and report every problem found.
    Check {
        #[arg(long)]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "hookgate=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Check { config } => check(&config),
        Command::Serve { config, listen } => serve(config, listen),
    }
}

fn report(problems: &[config::ConfigError]) -> ExitCode {
    for problem in problems {
        eprintln!("error: {problem}");
    }
    ExitCode::FAILURE
}

fn check(path: &std::path::Path) -> ExitCode {
    let settings: Settings = match config::load(path) {
        Ok(settings) => settings,
        Err(problems) => return report(&problems),
    };
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

fn serve(path: PathBuf, listen: Option<SocketAddr>) -> ExitCode {
    let config = match LiveConfig::open(path) {
        Ok(config) => config,
        Err(problems) => return report(&problems),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let server = match Server::start(config, listen).await {
            Ok(server) => server,
            Err(err) => {
                eprintln!("error: {err:#}");
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
        match server.run(shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => return interrupt.await.unwrap_or(()),
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
    tracing::info!("shutting down: finishing in-flight requests");
}
