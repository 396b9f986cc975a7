//! Wake throughput with and without group commit, in one process, as a ratio.
//!
//! Starts the real server twice on 127.0.0.1 (once with `gateway.groupCommit: false`, which gives
//! every request its own transaction and fsync, once with the default group commit) and drives
//! each with the same concurrent load of `POST /hooks/wake`. Run: `cargo bench --bench wake_throughput`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hookgate::server::Server;

const TOKEN: &str = "bench-hook-token";
const REQUESTS: usize = 4000;

async fn measure(group_commit: bool, connections: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookgate.json5");
    let config = format!(
        "{{ gateway: {{ groupCommit: {group_commit} }}, hooks: {{ enabled: true, token: '{TOKEN}' }} }}"
    );
    std::fs::write(&path, config).unwrap();
    let server = Server::start(path, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let url = format!("http://{}/hooks/wake", server.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));

    let client = reqwest::Client::new();
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (client, url, next) = (client.clone(), url.clone(), Arc::clone(&next));
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < REQUESTS {
                    let r = client
                        .post(&url)
                        .bearer_auth(TOKEN)
                        .body(r#"{"text":"benchmark event"}"#)
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status(), 200);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let elapsed = started.elapsed();
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
    REQUESTS as f64 / elapsed.max(Duration::from_micros(1)).as_secs_f64()
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    println!("wake throughput, {REQUESTS} requests per case, durable commits (synchronous=FULL)");
    println!(
        "{:>12} {:>16} {:>16} {:>8}",
        "connections", "per-request tx/s", "group commit/s", "ratio"
    );
    for connections in [1, 16, 64] {
        let single = runtime.block_on(measure(false, connections));
        let grouped = runtime.block_on(measure(true, connections));
        println!(
            "{connections:>12} {single:>16.0} {grouped:>16.0} {:>7.2}x",
            grouped / single
        );
    }
}
