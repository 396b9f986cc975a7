//! A real `nats-server` with JetStream on 127.0.0.1, in a temporary directory of its own, for the
//! cluster tests. `.ci/run` (through `scripts/test`) installs it from Debian's packages.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::processes::dies_with_its_test;

/// A JetStream server; killed when dropped.
pub struct NatsServer {
    pub port: u16,
    child: Option<Child>,
    store: tempfile::TempDir,
    /// The clustering arguments of a cluster member, given again when it restarts.
    cluster: Vec<String>,
}

impl NatsServer {
    /// Starts a server on a port of the system's choosing, its JetStream files in a new directory.
    pub fn start() -> NatsServer {
        let store = tempfile::tempdir().expect("tempdir");
        let (child, port) = spawn(store.path(), None, &[]);
        NatsServer {
            port,
            child: Some(child),
            store,
            cluster: Vec::new(),
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
        let (child, _) = spawn(self.store.path(), Some(self.port), &self.cluster);
        self.child = Some(child);
    }
}

/// Three JetStream servers clustered on 127.0.0.1 (named `n1`, `n2`, `n3`), as docs/cluster.md's
/// three-node configuration has them.
pub struct NatsCluster {
    pub servers: Vec<NatsServer>,
}

impl NatsCluster {
    pub fn start() -> NatsCluster {
        // Route ports must be known before the servers start: taken from the system, then freed.
        let route_ports: Vec<u16> = (0..3)
            .map(|_| {
                std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port()
            })
            .collect();
        let routes = route_ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let servers = route_ports
            .iter()
            .enumerate()
            .map(|(i, route_port)| {
                let store = tempfile::tempdir().expect("tempdir");
                let cluster = vec![
                    "-n".to_string(),
                    format!("n{}", i + 1),
                    "--cluster_name".into(),
                    "hookgate".into(),
                    "--cluster".into(),
                    format!("nats://127.0.0.1:{route_port}"),
                    "--routes".into(),
                    routes.clone(),
                ];
                let (child, port) = spawn(store.path(), None, &cluster);
                NatsServer {
                    port,
                    child: Some(child),
                    store,
                    cluster,
                }
            })
            .collect();
        NatsCluster { servers }
    }

    /// The client URL naming every server, as `gateway.store.url` takes it.
    pub fn url(&self) -> String {
        self.servers
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The server named `name` (`n1`...).
    pub fn named(&mut self, name: &str) -> &mut NatsServer {
        let index: usize = name.trim_start_matches('n').parse().expect("a server name");
        &mut self.servers[index - 1]
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
fn spawn(store: &Path, port: Option<u16>, extra: &[String]) -> (Child, u16) {
    let port_arg = port.map_or("-1".to_string(), |p| p.to_string());
    let mut child = dies_with_its_test(&mut Command::new(binary()))
        .args(["-js", "-a", "127.0.0.1", "-p", &port_arg, "-sd"])
        .arg(store)
        .args(extra)
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
