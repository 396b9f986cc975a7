//! What a client can hold of the server (docs/configuration.md, "Connections"): attack clients
//! on 127.0.0.2 against a real client on 127.0.0.1, each bounded in count and time.
//!
//! Each test would hang, or fail on its deadline, without the bound it is about: the real
//! request would wait behind connections held for ever or for the whole body timeout.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::harness::*;
use crate::signatures::sign;

/// The attacker's address: another loopback address, so that per-client bounds tell it apart.
const ATTACKER: [u8; 4] = [127, 0, 0, 2];

/// Longer than any bound under test and shorter than the timeouts the test sets, so that a
/// request that only ends at one of those fails the test.
const PATIENCE: Duration = Duration::from_secs(20);

fn addr(server: &Hookgate) -> SocketAddr {
    server.base.trim_start_matches("http://").parse().unwrap()
}

/// A connection from `from`, with a small receive buffer when `receive_buffer` is set (so that
/// unread answers back up into the server quickly).
async fn connect_from(server: &Hookgate, from: [u8; 4], receive_buffer: Option<u32>) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    if let Some(size) = receive_buffer {
        socket.set_recv_buffer_size(size).unwrap();
    }
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(addr(server)).await.unwrap()
}

/// Reads until the server closes the connection or `PATIENCE` passes; `None` on the deadline.
async fn read_to_close(stream: &mut TcpStream) -> Option<String> {
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut out))
        .await
        .ok()
        .map(|_| String::from_utf8_lossy(&out).into_owned())
}

/// A real wake from 127.0.0.1, which must be answered within `PATIENCE`.
async fn real_wake(server: &Hookgate, text: &str) -> u16 {
    let request = server.hook("/hooks/wake").json(&json!({ "text": text }));
    let response = tokio::time::timeout(PATIENCE, request.send())
        .await
        .unwrap_or_else(|_| panic!("the real wake '{text}' got no answer"))
        .unwrap();
    response.status().as_u16()
}

fn config_with(pairs: &[(&str, Value)]) -> Value {
    let mut config = base_config();
    for (key, value) in pairs {
        set(&mut config, key, value.clone());
    }
    config
}

#[tokio::test]
async fn clients_that_never_read_their_answers_lose_their_connections() {
    let config = config_with(&[
        ("gateway.maxConnections", json!(4)),
        ("gateway.writeTimeoutSeconds", json!(1)),
    ]);
    let (server, _dir) = Hookgate::start(&config);
    // Four clients pipeline health checks and never read: their answers fill both socket
    // buffers and the server's writes block. Each writes until the server gives up on it.
    let pipeline = b"GET /livez HTTP/1.1\r\nhost: h\r\n\r\n".repeat(2048);
    let mut attackers = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let mut stream = connect_from(&server, ATTACKER, Some(4096)).await;
        let pipeline = pipeline.clone();
        attackers.spawn(async move {
            let write = async {
                loop {
                    if stream.write_all(&pipeline).await.is_err() {
                        return;
                    }
                }
            };
            tokio::time::timeout(PATIENCE * 2, write).await.is_ok()
        });
    }
    assert_eq!(real_wake(&server, "behind the non-readers").await, 200);
    // And the non-readers were cut off, not merely joined by a fifth slot.
    while let Some(cut_off) = attackers.join_next().await {
        assert!(
            cut_off.unwrap(),
            "a client that never reads kept its connection"
        );
    }
    let (_, log) = server.terminate();
    assert!(log.contains("connection ended with an error"), "{log}");
}

#[tokio::test]
async fn one_client_cannot_take_every_connection() {
    let config = config_with(&[
        ("gateway.maxConnections", json!(8)),
        ("gateway.maxConnectionsPerClient", json!(4)),
        ("gateway.headerTimeoutSeconds", json!(60)),
    ]);
    let (server, _dir) = Hookgate::start(&config);
    // Slowloris: twelve connections that send half a request line and wait.
    let mut held = Vec::new();
    for _ in 0..12 {
        let mut stream = connect_from(&server, ATTACKER, None).await;
        stream.write_all(b"POST /hooks/wake HT").await.unwrap();
        held.push(stream);
    }
    // The connections over the cap are answered 503 and closed; the four under it stay open.
    let mut refused = 0;
    for stream in held.iter_mut().skip(4) {
        let answer = read_to_close(stream)
            .await
            .expect("an over-cap connection stayed open");
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(
            answer.ends_with(r#"{"ok":false,"error":"too many connections from this client"}"#),
            "{answer}"
        );
        refused += 1;
    }
    assert_eq!(refused, 8);
    assert_eq!(real_wake(&server, "beside the slowloris").await, 200);
    drop(held);
}

/// How a slow client sends its head: a line every `SLOW_LINE_INTERVAL`, `SLOW_LINES` of them,
/// then the blank line that ends it, 10 s in all.
const SLOW_LINE_INTERVAL: Duration = Duration::from_millis(500);
const SLOW_LINES: usize = 20;

/// What became of a slow client's connection.
#[derive(Debug, PartialEq)]
enum SlowFate {
    /// The server closed it while the head was still coming, having sent this.
    ClosedMidHead(String),
    /// The client sent its whole head.
    Finished,
    /// Still open when the test was done with it.
    Open,
}

/// Sends a head slowly on `stream` until it is finished, the server closes the connection, or
/// `stop` changes. Sets `finished` before it sends the blank line that ends the head.
async fn send_slow_head(
    stream: TcpStream,
    finished: Arc<AtomicBool>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> SlowFate {
    let (mut reader, mut writer) = stream.into_split();
    let mut received = Vec::new();
    let closed =
        |received: &[u8]| SlowFate::ClosedMidHead(String::from_utf8_lossy(received).into());
    let first = b"GET /livez HTTP/1.1\r\nhost: h\r\nconnection: close\r\n";
    if writer.write_all(first).await.is_err() {
        return closed(&received);
    }
    let mut ticks = tokio::time::interval(SLOW_LINE_INTERVAL);
    ticks.tick().await;
    let mut lines = 0;
    loop {
        tokio::select! {
            biased;
            read = reader.read_buf(&mut received) => if matches!(read, Ok(0) | Err(_)) {
                return closed(&received);
            },
            _ = stop.changed() => return SlowFate::Open,
            _ = ticks.tick() => {
                if lines == SLOW_LINES {
                    finished.store(true, Ordering::SeqCst);
                    let _ = writer.write_all(b"\r\n").await;
                    return SlowFate::Finished;
                }
                lines += 1;
                let line = format!("x-slow-{lines}: {lines}\r\n");
                if writer.write_all(line.as_bytes()).await.is_err() {
                    return closed(&received);
                }
            }
        }
    }
}

#[tokio::test]
async fn slow_headers_from_many_addresses_give_way_to_a_real_sender() {
    let config = config_with(&[
        ("gateway.maxConnections", json!(10)),
        ("gateway.headerTimeoutSeconds", json!(60)),
    ]);
    let (server, _dir) = Hookgate::start(&config);
    // Twelve slow clients on 127.0.0.2 to 127.0.0.13, one each, all within the per-client cap:
    // ten take every slot, the last two each take the slot of the one idle longest.
    let finished = Arc::new(AtomicBool::new(false));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut slow = Vec::new();
    for i in 0..12 {
        let stream = connect_from(&server, [127, 0, 0, 2 + i], None).await;
        let fate = send_slow_head(stream, Arc::clone(&finished), stopped.clone());
        slow.push(tokio::spawn(fate));
    }
    // Without eviction the wake waits in the accept queue until slow clients finish their heads.
    let status = real_wake(&server, "beside the slow flood").await;
    assert!(
        !finished.load(Ordering::SeqCst),
        "the real wake was answered only once a slow client had finished"
    );
    assert_eq!(status, 200);
    stop.send(true).unwrap();
    let mut fates = Vec::new();
    for fate in slow {
        fates.push(fate.await.unwrap());
    }
    // The oldest gave way, told nothing; the newest, idle the shortest, kept its connection.
    assert_eq!(
        fates[0],
        SlowFate::ClosedMidHead(String::new()),
        "{fates:?}"
    );
    assert_eq!(fates[11], SlowFate::Open, "{fates:?}");
    let (_, log) = server.terminate();
    assert!(log.contains("closed the connections idle longest"), "{log}");
}

/// The issue's connection flood: silent connections (never a byte sent) from four addresses,
/// 127.0.0.2 to 127.0.0.5, one every [`FLOOD_INTERVAL`], [`FLOOD`] of them, each held open until
/// the flood's task is dropped. `opened` counts them as they connect.
async fn silent_flood(server: SocketAddr, opened: Arc<AtomicUsize>) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(FLOOD);
    let mut ticks = tokio::time::interval(FLOOD_INTERVAL);
    for i in 0..FLOOD {
        ticks.tick().await;
        let socket = TcpSocket::new_v4().unwrap();
        let from = [127, 0, 0, 2 + (i % 4) as u8];
        socket.bind(SocketAddr::from((from, 0))).unwrap();
        held.push(socket.connect(server).await.unwrap());
        opened.fetch_add(1, Ordering::SeqCst);
    }
    held
}

/// About 200 connections a second for 5 s: a connection that never sends a byte lived 80 ms
/// under it with `maxConnections: 16` (after the fix). Before it, evictions were capped at 32
/// a second, so that the accept queue grew by 168 a second, a real sender's connection behind
/// it; 1,000 connections stay within the listen backlog (1,024), so that the flood's own
/// connects never wait.
const FLOOD: usize = 1000;
const FLOOD_INTERVAL: Duration = Duration::from_millis(5);

#[tokio::test]
async fn a_flood_of_silent_connections_gives_way_to_a_real_sender_at_once() {
    let config = config_with(&[
        ("gateway.maxConnections", json!(16)),
        ("gateway.headerTimeoutSeconds", json!(60)),
    ]);
    let (server, _dir) = Hookgate::start(&config);
    let opened = Arc::new(AtomicUsize::new(0));
    let flood = tokio::spawn(silent_flood(addr(&server), Arc::clone(&opened)));
    // 2 s in: every slot is held by the flood, and (without eviction at once) hundreds of its
    // connections wait in the accept queue ahead of the real sender's.
    eventually("the flood to be under way", async || {
        opened.load(Ordering::SeqCst) >= 400
    })
    .await;
    let started = std::time::Instant::now();
    let mut attempts = 0;
    let answered = loop {
        attempts += 1;
        let request = server
            .hook("/hooks/wake")
            .json(&json!({"text": "beside the flood"}));
        match tokio::time::timeout(PATIENCE, request.send()).await {
            Ok(Ok(response)) => break response.status().as_u16(),
            // Evicted before its head was read: a connection that sent nothing yet may go.
            Ok(Err(_)) if !flood.is_finished() => continue,
            outcome => panic!("the real wake failed after {attempts} attempts: {outcome:?}"),
        }
    };
    let took = started.elapsed();
    eprintln!("the real wake was answered {answered} in {took:?}, {attempts} attempt(s)");
    assert!(
        !flood.is_finished(),
        "the real wake was answered only after the flood had ended ({took:?})"
    );
    assert_eq!(answered, 200);
    drop(flood.await.unwrap());
    let metrics = server.metrics().await;
    let evicted: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(r#"hookgate_connections_evicted_total{reason="no_request"} "#))
        .unwrap_or_else(|| panic!("no eviction count:\n{metrics}"))
        .parse()
        .unwrap();
    assert!(evicted >= 100, "{evicted} evictions counted:\n{metrics}");
    assert!(
        metrics.contains(r#"hookgate_connections_evicted_total{reason="idle"} "#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_stalled_body_is_cut_off_at_the_minimum_receive_rate() {
    let config = config_with(&[("hooks.bodyTimeoutSeconds", json!(3600))]);
    let (server, _dir) = Hookgate::start(&config);
    let mut stream = connect_from(&server, ATTACKER, None).await;
    let head = format!(
        "POST /hooks/wake HTTP/1.1\r\nhost: h\r\nauthorization: Bearer {HOOK_TOKEN}\r\ncontent-length: 1000\r\n\r\n{{\"text\":"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = read_to_close(&mut stream)
        .await
        .expect("a stalled body held its connection until the body timeout");
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(answer.contains("request body timeout"), "{answer}");
}

#[tokio::test]
async fn a_signed_mapping_refuses_a_request_without_its_signature_before_the_body() {
    let config = config_with(&[
        ("hooks.bodyTimeoutSeconds", json!(3600)),
        ("gateway.minReceiveBytesPerSecond", json!(0)),
        (
            "hooks.mappings",
            json!([{"id": "gh", "match": {"path": "github"}, "action": "wake", "textTemplate": "push",
                    "signature": {"scheme": "github", "secret": "s3cret"}}]),
        ),
    ]);
    let (server, _dir) = Hookgate::start(&config);
    for extra in ["", "x-hub-signature-256: md5=00\r\n"] {
        let mut stream = connect_from(&server, ATTACKER, None).await;
        let head = format!(
            "POST /hooks/github HTTP/1.1\r\nhost: h\r\ncontent-length: 1000\r\n{extra}\r\n{{"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let answer = read_to_close(&mut stream)
            .await
            .unwrap_or_else(|| panic!("headers '{extra}' waited for the body"));
        assert!(answer.starts_with("HTTP/1.1 401 "), "{answer}");
    }
    // A request that presents the headers is still checked over its body.
    let body = br#"{"ref":"main"}"#;
    let mut request = client()
        .post(server.url("/hooks/github"))
        .body(body.to_vec());
    for (name, value) in sign("github", "s3cret", body, 0, "d1") {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn a_stop_closes_what_is_still_open_at_the_shutdown_deadline() {
    let config = config_with(&[
        ("gateway.shutdownTimeoutSeconds", json!(1)),
        ("hooks.bodyTimeoutSeconds", json!(3600)),
        ("gateway.minReceiveBytesPerSecond", json!(0)),
    ]);
    let (server, dir) = Hookgate::start(&config);
    assert_eq!(real_wake(&server, "committed before the stop").await, 200);
    // A request in flight for ever: its body never comes. The signal waits until the handler
    // reads the body (the interim 100), or it could arrive before the connection is even accepted.
    let mut stuck = connect_from(&server, ATTACKER, None).await;
    let head = format!(
        "POST /hooks/wake HTTP/1.1\r\nhost: h\r\nauthorization: Bearer {HOOK_TOKEN}\r\nexpect: 100-continue\r\ncontent-length: 100\r\n\r\n"
    );
    send_head_until_continue(&mut stuck, &head).await;
    stuck.write_all(b"{").await.unwrap();
    server.signal("-TERM");
    let waited = tokio::task::spawn_blocking(move || server.wait());
    let (status, log) = tokio::time::timeout(PATIENCE, waited)
        .await
        .expect("the stop waited for the stuck request without a deadline")
        .unwrap();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("requests still in flight at the shutdown deadline"),
        "{log}"
    );
    // What was answered 200 before the stop is in the store.
    let restarted = Hookgate::start_in(&dir);
    assert!(
        restarted
            .wake_texts()
            .await
            .contains(&"committed before the stop".to_string())
    );
}

#[tokio::test]
async fn junk_signatures_lock_out_their_sender_and_not_the_provider() {
    let config = config_with(&[(
        "hooks.mappings",
        json!([{"id": "gh", "match": {"path": "github"}, "action": "wake", "textTemplate": "push {{ref}}",
                "signature": {"scheme": "github", "secret": "s3cret"}}]),
    )]);
    let (server, _dir) = Hookgate::start(&config);
    let attacker = reqwest::Client::builder()
        .local_address(IpAddr::from(ATTACKER))
        .build()
        .unwrap();
    let body = br#"{"ref":"junk"}"#;
    let post = |client: &reqwest::Client, secret: &str, body: &[u8]| {
        let mut request = client.post(server.url("/hooks/github")).body(body.to_vec());
        for (name, value) in sign("github", secret, body, 0, "d") {
            request = request.header(name, value);
        }
        request.send()
    };
    for _ in 0..20 {
        assert_eq!(post(&attacker, "guess", body).await.unwrap().status(), 401);
    }
    assert_eq!(post(&attacker, "guess", body).await.unwrap().status(), 429);
    let real = br#"{"ref":"main"}"#;
    assert_eq!(post(&client(), "s3cret", real).await.unwrap().status(), 200);
    // Signature failures are their own count: the attacker still has its hook-token attempts.
    let wake = attacker
        .post(server.url("/hooks/wake"))
        .bearer_auth(HOOK_TOKEN)
        .json(&json!({"text": "x"}));
    assert_eq!(wake.send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn a_proxy_that_names_no_client_locks_no_one_out() {
    let config = config_with(&[("gateway.trustedProxies", json!(["127.0.0.1"]))]);
    let (server, _dir) = Hookgate::start(&config);
    let guess = || {
        client()
            .post(server.url("/hooks/wake"))
            .bearer_auth("wrong")
            .send()
    };
    for _ in 0..25 {
        assert_eq!(guess().await.unwrap().status(), 401);
    }
    // Counting those under the proxy's own address would have locked out everyone behind it.
    assert_eq!(real_wake(&server, "behind the proxy").await, 200);
}

#[tokio::test]
async fn rfc_7239_forwarded_identifies_clients_when_configured() {
    let config = config_with(&[
        ("gateway.trustedProxies", json!(["::ffff:127.0.0.1"])),
        ("gateway.forwardedHeader", json!("forwarded")),
    ]);
    let (server, _dir) = Hookgate::start(&config);
    let guess = |forwarded: &'static str| {
        client()
            .post(server.url("/hooks/wake"))
            .bearer_auth("wrong")
            .header("forwarded", forwarded)
            // Ignored: the proxy is configured to write `Forwarded`.
            .header("x-forwarded-for", "192.0.2.99")
            .send()
    };
    for _ in 0..20 {
        guess("for=198.51.100.7:5555;proto=https").await.unwrap();
    }
    let locked = guess("for=\"198.51.100.7\"").await.unwrap();
    assert_eq!(locked.status(), 429);
    let other = guess("for=\"[2001:db8::8]:443\"").await.unwrap();
    assert_eq!(other.status(), 401);
}
