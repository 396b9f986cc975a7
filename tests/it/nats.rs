//! A real `nats-server` with JetStream on 127.0.0.1, in a temporary directory of its own, for the
//! cluster tests. `.ci/run` (through `scripts/test`) installs it from Debian's packages.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A JetStream server; killed when dropped.
pub struct NatsServer {
    pub port: u16,
    child: Option<Child>,
    store: tempfile::TempDir,
}

impl NatsServer {
    /// Starts a server on a port of the system's choosing, its JetStream files in a new directory.
    pub fn start() -> NatsServer {
        let store = tempfile::tempdir().expect("tempdir");
        let (child, port) = spawn(store.path(), None);
        NatsServer {
            port,
            child: Some(child),
            store,
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL: no chance to flush anything) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port with the same files.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "kill it first");
        let (child, _) = spawn(self.store.path(), Some(self.port));
        self.child = Some(child);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn binary() -> String {
    std::env::var("NATS_SERVER").unwrap_or_else(|_| {
        // Debian installs it outside a normal user's PATH.
        ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or("nats-server")
            .to_string()
    })
}

/// Spawns the server and waits until it is ready; returns it with the port it listens on.
fn spawn(store: &Path, port: Option<u16>) -> (Child, u16) {
    let port_arg = port.map_or("-1".to_string(), |p| p.to_string());
    let mut child = Command::new(binary())
        .args(["-js", "-a", "127.0.0.1", "-p", &port_arg, "-sd"])
        .arg(store)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run nats-server ({e}); install it: apt-get install nats-server")
        });
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut listening = port;
    let mut seen = String::new();
    for line in lines.by_ref() {
        let Ok(line) = line else { break };
        seen.push_str(&line);
        seen.push('\n');
        if let Some(at) = line.find("Listening for client connections on ") {
            let address = &line[at + "Listening for client connections on ".len()..];
            listening = address
                .rsplit(':')
                .next()
                .and_then(|p| p.trim().parse().ok());
        }
        if line.contains("Server is ready") {
            // Keep draining its log so that it never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines {});
            if let Some(port) = listening {
                return (child, port);
            }
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("nats-server did not start (or named no client port):\n{seen}");
}
