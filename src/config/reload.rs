//! Live reload: the file is polled for changes (and re-read on SIGHUP); a valid new configuration
//! replaces the old one atomically, an invalid one is logged and the old one kept.

use std::time::Duration;

use super::{LiveConfig, file_digest};

/// How often the file is checked. Polling a small file is cheap, needs no platform watcher, and
/// also notices editors that replace the file instead of writing it in place.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// Watches the configuration file until the process ends.
pub async fn watch(config: LiveConfig) {
    let mut hangup = hangup_signal();
    let mut tick = tokio::time::interval(POLL_EVERY);
    loop {
        let forced = tokio::select! {
            _ = tick.tick() => false,
            _ = recv(&mut hangup) => true,
        };
        let now = file_digest(config.path());
        if !forced && (now.is_none() || now == config.status().digest) {
            continue;
        }
        // Admission compiles transforms: keep that off the async threads.
        let reloading = config.clone();
        let Ok(reloaded) = tokio::task::spawn_blocking(move || reloading.reload()).await else {
            continue;
        };
        match reloaded {
            Ok(()) => tracing::info!(path = %config.path().display(), "configuration reloaded"),
            Err(problems) => {
                for problem in &problems {
                    tracing::error!(%problem, "configuration change refused; keeping the previous one");
                }
            }
        }
    }
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = Option<()>;

#[cfg(unix)]
fn hangup_signal() -> Hangup {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
}
#[cfg(not(unix))]
fn hangup_signal() -> Hangup {
    None
}

#[cfg(unix)]
async fn recv(signal: &mut Hangup) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}
#[cfg(not(unix))]
async fn recv(_: &mut Hangup) {
    std::future::pending().await
}
