//! Failover. A lone NATS server SIGKILLed under load and restarted loses nothing acknowledged.
//! And on the three-node configuration of docs/cluster.md: three `nats-server` processes clustered
//! with JetStream on 127.0.0.1 (stream and buckets with three replicas) and two hookgate nodes.
//! Under load, the stream's leader is SIGKILLed, and then one hookgate node: every request
//! answered 200 is afterwards on both nodes exactly once, and every acknowledged run ends once.
//! The refused requests of each failover are reported (`--nocapture` shows them).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::cluster::{all_events, all_ok, node_config_at, summaries_per_run};
use crate::fake::Fake;
use crate::harness::*;
use crate::nats::{NatsCluster, NatsServer};

/// Clients posting wakes and agent runs, round robin over the nodes, recording what was
/// acknowledged.
struct Load {
    wakes: Arc<Mutex<Vec<String>>>,
    /// Run id and the run's name (its summary reads `Hook <name>: ...`).
    runs: Arc<Mutex<Vec<(String, String)>>>,
    refused: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(bases: &[String], clients: usize) -> Load {
        let load = Load {
            wakes: Arc::default(),
            runs: Arc::default(),
            refused: Arc::default(),
            stop: Arc::default(),
            clients: Vec::new(),
        };
        let clients = (0..clients)
            .map(|c| {
                let bases = bases.to_vec();
                let (wakes, runs) = (Arc::clone(&load.wakes), Arc::clone(&load.runs));
                let (refused, stop) = (Arc::clone(&load.refused), Arc::clone(&load.stop));
                tokio::spawn(async move {
                    let http = client();
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        i += 1;
                        let base = &bases[(c + i) % bases.len()];
                        let name = format!("c{c}-{i}");
                        let wake = i % 3 != 0;
                        let (path, body) = if wake {
                            (
                                "/hooks/wake",
                                json!({"text": name, "mode": "next-heartbeat"}),
                            )
                        } else {
                            (
                                "/hooks/agent",
                                json!({"message": name, "name": name, "deliver": false}),
                            )
                        };
                        let sent = http
                            .post(format!("{base}{path}"))
                            .bearer_auth(HOOK_TOKEN)
                            .timeout(Duration::from_secs(10))
                            .json(&body)
                            .send()
                            .await;
                        let accepted = match sent {
                            Ok(response) if response.status() == 200 => response,
                            _ => {
                                refused.fetch_add(1, Ordering::SeqCst);
                                // Pacing, not synchronisation: a dead node refuses at once.
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                continue;
                            }
                        };
                        if wake {
                            wakes.lock().unwrap().push(name);
                        } else {
                            let reply: serde_json::Value = accepted.json().await.unwrap();
                            let id = reply["runId"].as_str().unwrap().to_string();
                            runs.lock().unwrap().push((id, name));
                        }
                    }
                })
            })
            .collect();
        Load { clients, ..load }
    }

    fn acked(&self) -> usize {
        self.wakes.lock().unwrap().len() + self.runs.lock().unwrap().len()
    }

    fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    /// Waits until `more` requests beyond those acknowledged now are acknowledged.
    async fn until_more(&self, more: usize, what: &str) {
        let target = self.acked() + more;
        let (limit, every) = (Duration::from_secs(60), Duration::from_millis(50));
        let what = format!("{what}: {more} more acknowledged");
        eventually_within(&what, limit, every, async || match self.acked() {
            acked if acked >= target => Ok(()),
            acked => Err(format!("load stalled at {acked} of {target}")),
        })
        .await
    }

    async fn stop(self) -> (Vec<String>, Vec<(String, String)>) {
        self.stop.store(true, Ordering::SeqCst);
        for client in self.clients {
            client.await.unwrap();
        }
        let wakes = self.wakes.lock().unwrap().clone();
        let runs = self.runs.lock().unwrap().clone();
        (wakes, runs)
    }
}

/// Starts a node on `dir` (on `port`, or one of the system's choosing), retrying while the
/// JetStream cluster is still electing its leaders.
async fn start_node(dir: &ConfigDir, port: u16) -> Hookgate {
    let (limit, every) = (Duration::from_secs(60), Duration::from_millis(500));
    eventually_within("a node to start", limit, every, async || {
        Hookgate::try_start_on(dir, port).map_err(|log| format!("no node started:\n{log}"))
    })
    .await
}

/// The name of the server leading the stream (`n1`...).
async fn stream_leader(url: &str) -> String {
    let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
    let mut stream = js.get_stream("HOOKGATE").await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.config.num_replicas, 3, "the stream has three replicas");
    info.cluster
        .as_ref()
        .and_then(|cluster| cluster.leader.clone())
        .expect("the stream has a leader")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_work_survives_the_stream_leader_and_a_node_killed() {
    let mut nats = NatsCluster::start();
    let provider = Fake::provider("done").await;
    let mut config = node_config_at(&nats.url(), &provider);
    set(&mut config, "gateway.store.replicas", json!(3));
    let (dir_a, dir_b) = (ConfigDir::new(&config), ConfigDir::new(&config));
    let a = start_node(&dir_a, 0).await;
    let b = start_node(&dir_b, 0).await;
    let b_port: u16 = b.base.rsplit(':').next().unwrap().parse().unwrap();
    let load = Load::start(&[a.base.clone(), b.base.clone()], 4);
    load.until_more(150, "before any failure").await;

    let leader = stream_leader(&nats.servers[0].url()).await;
    let refused = load.refused();
    nats.named(&leader).kill();
    load.until_more(150, "after the stream leader was killed")
        .await;
    let refused_leader = load.refused() - refused;
    nats.named(&leader).start_again();

    let refused = load.refused();
    b.kill();
    load.until_more(100, "after node b was killed").await;
    let b = start_node(&dir_b, b_port).await;
    load.until_more(100, "after node b came back").await;
    let refused_node = load.refused() - refused;
    let (wakes, runs) = load.stop().await;

    for node in [&a, &b] {
        all_present_once(node, &wakes, &runs).await;
    }
    eprintln!(
        "3-node JetStream cluster: acknowledged {} wakes and {} runs; refused {refused_leader} \
         while the stream leader ({leader}) failed over, {refused_node} while node b was down",
        wakes.len(),
        runs.len(),
    );
}

/// Checks that every acknowledged wake is on `node` exactly once, and every acknowledged run
/// ended with exactly one summary, waiting (within a minute) for the node's view to catch up.
async fn all_present_once(node: &Hookgate, wakes: &[String], runs: &[(String, String)]) {
    let (limit, every) = (Duration::from_secs(60), Duration::from_millis(200));
    eventually_within("every acknowledged wake", limit, every, async || {
        let mut seen = BTreeMap::<String, usize>::new();
        for event in all_events(node)
            .await
            .iter()
            .filter(|e| e["kind"] == "system")
        {
            *seen
                .entry(event["text"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        let missing: Vec<_> = wakes.iter().filter(|w| !seen.contains_key(*w)).collect();
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "wakes stored twice on {}: {twice:?}",
            node.base
        );
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} acknowledged wakes missing on {}: {missing:?}",
                missing.len(),
                node.base
            ))
        }
    })
    .await;
    let run_ids: Vec<String> = runs.iter().map(|(id, _)| id.clone()).collect();
    all_ok(node, &run_ids, Duration::from_secs(60)).await;
    let summaries = summaries_per_run(&all_events(node).await);
    let names: BTreeSet<&String> = runs.iter().map(|(_, name)| name).collect();
    for name in names {
        assert_eq!(
            summaries.get(name.as_str()),
            Some(&1),
            "summaries of {name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_request_survives_nats_killed_and_restarted() {
    let mut nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let config = node_config_at(&nats.url(), &provider);
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    let load = Load::start(&[a.base.clone(), b.base.clone()], 4);
    load.until_more(150, "before the restart").await;
    nats.kill();
    let refused = load.refused();
    nats.start_again();
    load.until_more(150, "after the restart").await;
    let refused = load.refused() - refused;
    let (wakes, runs) = load.stop().await;
    for node in [&a, &b] {
        all_present_once(node, &wakes, &runs).await;
    }
    eprintln!(
        "one NATS server: acknowledged {} wakes and {} runs, {refused} refused during its restart",
        wakes.len(),
        runs.len()
    );
}
