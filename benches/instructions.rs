//! Instructions per request, counted with valgrind's callgrind: a figure that does not move with
//! the machine's neighbours, unlike requests/s (docs/performance.md, "Instructions per request").
//!
//! Each case starts its server under `valgrind --tool=callgrind` (the bare axum echo too: this
//! binary re-executed with `--echo`, so that the baseline is a process of its own, counted the
//! same way), sends `INSTR_WARMUP` requests (default 100), waits for the runs they queued,
//! zeroes the counters (`callgrind_control -z`), sends `INSTR_REQUESTS` (default 400) one after
//! the other over one keep-alive connection, waits for the runs those queued, dumps the counters
//! (`callgrind_control -d`) and divides the instructions of that dump by the requests. Every
//! answer must be a 2xx. Each case's profile of the measured requests is kept as
//! `<target>/instructions/<case>.callgrind.out`, for `callgrind_annotate`. `INSTR_CASE=wake`
//! runs the cases whose name contains that text; `INSTR_CASE=echo,wake` those that contain
//! either. valgrind is installed with apt-get when missing and the user may.
//!
//! hookgate's transforms run in the pooling allocator, as in production: the configuration caps
//! `hooks.transformLimits.maxConcurrent` at [`MAX_CONCURRENT`], so that the pool's one reservation
//! of address space fits in what valgrind gives a process ([`MAX_CONCURRENT`] says how much).
//! A hookgate server that logs that it fell back to allocating on demand fails the case, so a
//! figure is never the count of a path production does not take. `INSTR_ON_DEMAND=1` leaves the
//! default `maxConcurrent`, whose pool valgrind cannot reserve, and checks that the servers did
//! allocate on demand: the path the figures counted before, for comparison.
//!
//! Run: `cargo bench --bench instructions`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

mod support;
use support::callgrind::{Running, callgrind_control, dumped_instructions};
use support::receiver::Receiver;
use support::{
    SERIAL, build_js, build_transforms, echo_router, example_payload, installed, listening,
    selected, serve_in_thread, start_hookgate, start_hookgate_under, stop, wait_for_empty_outbox,
    wait_for_empty_queue,
};

/// Transform calls at once (`hooks.transformLimits.maxConcurrent`) in the benchmark's
/// configuration. The pool reserves, in one mapping, 4 GiB and a 32 MiB guard for each of two
/// memories per slot, and two slots per call at once (calls and idle kept instances): 516 GiB at
/// the default 32, where valgrind 3.19 maps at most about 63.9 GiB in one piece (126 GiB in
/// all), so the engine fell back to allocating on demand. Two calls at once is 32.3 GiB; the
/// requests are sent one at a time, so no call waits for a slot. Only the pool's bookkeeping
/// depends on how many slots it has (wasmtime shards an index of 128 slots or more); the
/// instantiation, the call and the slot's reset do not.
const MAX_CONCURRENT: u32 = 2;

/// What hookgate logs when it cannot reserve the pool (`src/transform/engine.rs`).
const POOL_FALLBACK: &str = "pooling allocator unavailable";

/// Whether the transforms run in the pool (unless `INSTR_ON_DEMAND` is set).
fn pooled() -> bool {
    std::env::var_os("INSTR_ON_DEMAND").is_none()
}

const HOOK_TOKEN: &str = "bench-hook-token-0123";
const GATEWAY_TOKEN: &str = "bench-gateway-token-0123";
/// What the callbacks are signed with (docs/outbound.md, "Signatures and rotation").
const CALLBACK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// `gateway.secretsKey`, which subscriptions need (docs/subscriptions.md).
const SECRETS_KEY: &str = "bench-sealing-key-0123456789abcdef0123";
/// The text of the template → wake case's wake, and of the subscription's.
const DEPLOY_TEXT: &str = "Deployed {{service}} {{version}}";

/// Which server a case is sent to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Server {
    /// The bare axum JSON echo of the wrk bench.
    Echo,
    /// hookgate without a model provider: runs end at once.
    Hookgate,
    /// hookgate with `outbound` and `gateway.secretsKey` set, on a configuration of its own
    /// (`outbound/` beside the main one, [`prepare_dir`]), so that the other cases count what
    /// a server without them does. The `template → agent, outbound on` case holds what these
    /// keys cost a run that has no callback of its own: every run once woke the webhooks'
    /// worker (376.8k against 330.5k, docs/performance.md).
    Outbound,
    /// hookgate as an edge (docs/edge.md), on a configuration of its own ([`edge_dir`]): it
    /// stores each hook request for a private node and answers `202`.
    Edge,
}

/// One kind of request.
struct Case {
    name: &'static str,
    /// The name of the case's profile file, `<file>.callgrind.out`.
    file: &'static str,
    server: Server,
    path: &'static str,
    /// The request body; each [`SERIAL`] in it becomes a number no other request has.
    body: String,
    headers: Vec<(&'static str, &'static str)>,
    /// The request queues an agent run, whose work is counted: the queue is left to drain
    /// before the counters are zeroed and before they are dumped.
    runs: bool,
    /// Each run posts a callback to the bench's [`Receiver`]: every one is received, and the
    /// outbox empty, before the counters are zeroed and before they are dumped.
    callbacks: bool,
    /// The hook is a subscription made with this body of `POST /api/hooks` once the server is
    /// up, before the warm-up; each request is signed with its secret, without the hook token.
    subscription: Option<Value>,
}

fn case(name: &'static str, file: &'static str, path: &'static str, body: Value) -> Case {
    Case {
        name,
        file,
        server: Server::Hookgate,
        path,
        body: body.to_string(),
        headers: Vec::new(),
        runs: false,
        callbacks: false,
        subscription: None,
    }
}

/// The cases of issue 35's table, in its order.
fn cases() -> Vec<Case> {
    let issues = example_payload("github-issues.json");
    let deploy = json!({"service": "api", "version": format!("1.2.{SERIAL}")});
    let title = json!({"title": format!("a benchmark {SERIAL}"), "n": 1});
    // A GitHub `issues` delivery that queues an agent run, on `server`.
    let issues_run = |name, file, path, server| Case {
        server,
        headers: vec![("x-github-event", "issues")],
        runs: true,
        ..case(name, file, path, issues.clone())
    };
    vec![
        Case {
            server: Server::Echo,
            ..case(
                "axum echo",
                "echo",
                "/",
                json!({"text": format!("x {SERIAL}")}),
            )
        },
        case(
            "/hooks/wake",
            "wake",
            "/hooks/wake",
            json!({"text": format!("benchmark event {SERIAL}"), "mode": "next-heartbeat"}),
        ),
        Case {
            runs: true,
            ..case(
                "/hooks/agent",
                "agent",
                "/hooks/agent",
                json!({"message": format!("benchmark run {SERIAL}"), "wakeMode": "next-heartbeat", "deliver": false}),
            )
        },
        case(
            "template → wake",
            "template-wake",
            "/hooks/deploy",
            deploy.clone(),
        ),
        issues_run(
            "template → agent (issues)",
            "template-agent",
            "/hooks/issues-run",
            Server::Hookgate,
        ),
        // The template → agent case where callbacks are configured for another mapping: a run
        // without a callback must not pay for those of others.
        issues_run(
            "template → agent, outbound on",
            "template-agent-outbound",
            "/hooks/issues-run",
            Server::Outbound,
        ),
        Case {
            callbacks: true,
            ..issues_run(
                "callback → agent (issues)",
                "callback",
                "/hooks/issues-callback",
                Server::Outbound,
            )
        },
        issues_run(
            "github → agent, fresh",
            "github",
            "/hooks/github",
            Server::Hookgate,
        ),
        case(
            "js → wake, .mjs kept",
            "js-kept",
            "/hooks/title",
            title.clone(),
        ),
        case(
            "js → wake, .wasm fresh",
            "js-fresh",
            "/hooks/title-fresh",
            title,
        ),
        Case {
            // The template → wake case's mapping, made at runtime and signed as GitHub signs.
            server: Server::Outbound,
            subscription: Some(json!({"name": "deploy-sub", "provider": "github",
                "mapping": {"action": "wake", "wakeMode": "next-heartbeat",
                            "textTemplate": DEPLOY_TEXT}})),
            ..case(
                "subscription → wake",
                "subscription",
                "/hooks/deploy-sub",
                deploy.clone(),
            )
        },
        Case {
            server: Server::Edge,
            ..case(
                "edge stores a wake",
                "edge",
                "/hooks/wake",
                json!({"text": format!("benchmark event {SERIAL}"), "mode": "next-heartbeat"}),
            )
        },
    ]
}

/// The ratios the issues name (35; 50 for JavaScript, callbacks and subscriptions; 46 for the
/// edge): (what, numerator, denominator, its target when it has one).
const RATIOS: [(&str, &str, &str, Option<f64>); 10] = [
    ("wake / echo", "/hooks/wake", "axum echo", Some(2.5)),
    ("agent / wake", "/hooks/agent", "/hooks/wake", Some(1.8)),
    (
        "template wake / wake",
        "template → wake",
        "/hooks/wake",
        None,
    ),
    (
        "template agent, outbound on / off",
        "template → agent, outbound on",
        "template → agent (issues)",
        Some(1.03),
    ),
    (
        "callback agent / template agent",
        "callback → agent (issues)",
        "template → agent (issues)",
        None,
    ),
    (
        "subscription wake / template wake",
        "subscription → wake",
        "template → wake",
        None,
    ),
    (
        "Rust transform / template agent",
        "github → agent, fresh",
        "template → agent (issues)",
        Some(1.15),
    ),
    (
        "JS kept / template wake",
        "js → wake, .mjs kept",
        "template → wake",
        Some(1.6),
    ),
    (
        "JS fresh / template wake",
        "js → wake, .wasm fresh",
        "template → wake",
        Some(2.0),
    ),
    (
        "edge / wake",
        "edge stores a wake",
        "/hooks/wake",
        Some(1.1),
    ),
];

/// A configuration directory with the github and JavaScript transforms in place. A `.wasm`
/// module gets a fresh instance per call; naming the JavaScript one `.mjs` keeps its instances
/// (docs/transforms.md). Beside it, in `outbound/`, the configuration of the callback and
/// subscription cases: runs of its `issues-callback` mapping post their outcome to
/// `callback_url`, on 127.0.0.1, which `outbound.allowHosts` lists.
fn prepare_dir(wasm: &Path, js: &Path, callback_url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hooks/transforms");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(wasm.join("github.wasm"), root.join("github.wasm")).unwrap();
    std::fs::copy(js, root.join("title.wasm")).unwrap();
    // Under callgrind a call runs some 50 times slower, and a transform's time limit is wall
    // time: a minute keeps the limit out of the way without changing what it costs. Few enough
    // slots for valgrind to reserve the pool ([`MAX_CONCURRENT`]).
    let mut limits = json!({"timeoutMs": 60_000});
    if pooled() {
        limits["maxConcurrent"] = json!(MAX_CONCURRENT);
    }
    let issue = "GitHub issue {{action}} in {{repository.full_name}}: #{{issue.number}} {{issue.title}} ({{issue.html_url}})";
    let config = json!({
        "gateway": {"auth": {"token": GATEWAY_TOKEN}},
        "hooks": {"enabled": true, "token": HOOK_TOKEN, "transformLimits": limits,
         "mappings": [
            {"id": "deploy", "match": {"path": "deploy"}, "action": "wake", "wakeMode": "next-heartbeat",
             "textTemplate": DEPLOY_TEXT},
            {"id": "issues-run", "match": {"path": "issues-run"}, "action": "agent", "name": "GitHub",
             "wakeMode": "next-heartbeat", "messageTemplate": issue},
            {"id": "github", "match": {"path": "github"}, "wakeMode": "next-heartbeat",
             "transform": {"module": "github.wasm"}},
            {"id": "title", "match": {"path": "title"}, "action": "wake", "textTemplate": "-",
             "transform": {"module": "title.mjs"}},
            {"id": "title-fresh", "match": {"path": "title-fresh"}, "action": "wake", "textTemplate": "-",
             "transform": {"module": "title.wasm"}},
        ]},
        // No heartbeats: the benchmark measures intake.
        "agents": {"defaults": {"heartbeat": {"every": "0"}}},
    });
    std::fs::write(dir.path().join("hookgate.json5"), config.to_string()).unwrap();
    let outbound = dir.path().join("outbound");
    std::fs::create_dir_all(&outbound).unwrap();
    std::fs::write(outbound.join("secrets.key"), SECRETS_KEY).unwrap();
    let config = json!({
        "gateway": {"auth": {"token": GATEWAY_TOKEN}, "secretsKey": {"file": "secrets.key"}},
        "outbound": {"allowHosts": ["127.0.0.1"]},
        "hooks": {"enabled": true, "token": HOOK_TOKEN, "mappings": [
            {"id": "issues-callback", "match": {"path": "issues-callback"}, "action": "agent",
             "name": "GitHub", "wakeMode": "next-heartbeat", "messageTemplate": issue,
             "callback": {"url": callback_url, "secret": CALLBACK_SECRET, "format": "outcome"}},
            {"id": "issues-run", "match": {"path": "issues-run"}, "action": "agent", "name": "GitHub",
             "wakeMode": "next-heartbeat", "messageTemplate": issue},
        ]},
        "agents": {"defaults": {"heartbeat": {"every": "0"}}},
    });
    std::fs::write(outbound.join("hookgate.json5"), config.to_string()).unwrap();
    dir
}

/// An edge's configuration directory inside `dir`, made on first use: the hook token, a pull
/// token, and its own state directory (its `edge.db`).
fn edge_dir(dir: &Path) -> PathBuf {
    let edge = dir.join("edge");
    std::fs::create_dir_all(&edge).unwrap();
    let config = json!({
        "gateway": {"auth": {"token": GATEWAY_TOKEN}},
        "hooks": {"enabled": true, "token": HOOK_TOKEN},
        "edge": {"serve": {"pullToken": "bench-pull-token-0123"}},
    });
    std::fs::write(edge.join("hookgate.json5"), config.to_string()).unwrap();
    edge
}

/// One keep-alive HTTP/1.1 connection, written by hand so that every request of a case goes
/// over the same one.
struct Connection {
    stream: BufReader<TcpStream>,
    authority: String,
}

impl Connection {
    fn open(base: &str) -> Connection {
        let authority = base.strip_prefix("http://").expect("an http base URL");
        let stream = TcpStream::connect(authority).expect("connect");
        stream.set_nodelay(true).unwrap();
        // Under valgrind a request takes milliseconds; a hung server fails the run instead.
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        Connection {
            stream: BufReader::new(stream),
            authority: authority.to_string(),
        }
    }

    /// Sends `case`'s request with `serial` in its body, signed with the subscription's
    /// `secret` when it has one, else with the hook token; panics unless the answer is a 2xx.
    fn send(&mut self, case: &Case, serial: u64, secret: Option<&str>) {
        let body = case.body.replace(SERIAL, &serial.to_string());
        let credential = match secret {
            Some(secret) => format!(
                "x-hub-signature-256: {}",
                support::subscription::github_signature(secret, body.as_bytes())
            ),
            None => format!("authorization: Bearer {HOOK_TOKEN}"),
        };
        let mut request = format!(
            "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             {credential}\r\ncontent-length: {}\r\n",
            case.path,
            self.authority,
            body.len()
        );
        for (name, value) in &case.headers {
            request += &format!("{name}: {value}\r\n");
        }
        request += "\r\n";
        request += &body;
        self.stream
            .get_mut()
            .write_all(request.as_bytes())
            .expect("send");
        let (status, answer) = self.answer();
        assert!(
            (200..300).contains(&status),
            "{}: answered {status}: {answer}",
            case.name
        );
    }

    /// Reads one answer, which must give its length (hyper does for the bodies both servers
    /// send); returns its status and body.
    fn answer(&mut self) -> (u16, String) {
        let mut line = String::new();
        self.stream.read_line(&mut line).expect("status line");
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("status line: {line:?}"));
        let mut length = None;
        loop {
            line.clear();
            self.stream.read_line(&mut line).expect("header");
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse::<usize>().ok();
            }
        }
        let mut body = vec![0; length.expect("content-length")];
        self.stream.read_exact(&mut body).expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

/// Starts `case`'s server under callgrind writing to `profile`, its standard error to `log`;
/// returns it and its base URL.
fn start_under_callgrind(case: &Case, dir: &Path, profile: &Path, log: &Path) -> (Child, String) {
    let wrapper = vec![
        installed("valgrind", "valgrind").to_string(),
        "--tool=callgrind".to_string(),
        format!("--callgrind-out-file={}", profile.display()),
    ];
    let stderr = || Stdio::from(std::fs::File::create(log).unwrap());
    match case.server {
        Server::Hookgate => {
            let (child, base, _) = start_hookgate_under(dir, &wrapper, stderr());
            (child, base)
        }
        Server::Outbound => {
            let (child, base, _) = start_hookgate_under(&dir.join("outbound"), &wrapper, stderr());
            (child, base)
        }
        Server::Edge => {
            let (child, base, _) = start_hookgate_under(&edge_dir(dir), &wrapper, stderr());
            (child, base)
        }
        Server::Echo => {
            let mut child = Command::new(&wrapper[0])
                .args(&wrapper[1..])
                .arg(std::env::current_exe().unwrap())
                .arg("--echo")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("valgrind");
            let base = listening(&mut child);
            (child, base)
        }
    }
}

/// How many requests, and the number of the next request's body.
struct Plan {
    warmup: u64,
    requests: u64,
    serial: u64,
}

/// Measures `case`, whose callbacks go to `receiver`; returns the instructions its server
/// retired for `plan.requests` requests and keeps their profile as
/// `<out>/<case.file>.callgrind.out`.
fn measure(case: &Case, dir: &Path, out: &Path, plan: &mut Plan, receiver: &Receiver) -> u64 {
    let profile = out.join(format!("{}.callgrind.out", case.file));
    // callgrind numbers the dumps it is asked for: the first is `<file>.1`.
    let dump = PathBuf::from(format!("{}.1", profile.display()));
    let _ = std::fs::remove_file(&dump);
    let log = out.join(format!("{}.stderr", case.file));
    let (child, base) = start_under_callgrind(case, dir, &profile, &log);
    let server = Running(Some(child));
    let pid = server.0.as_ref().unwrap().id();
    let secret = case
        .subscription
        .as_ref()
        .map(|spec| support::subscription::create(&base, GATEWAY_TOKEN, spec));
    let mut connection = Connection::open(&base);
    let mut callbacks = receiver.verified();
    let mut send = |count: u64, plan: &mut Plan| {
        for _ in 0..count {
            connection.send(case, plan.serial, secret.as_deref());
            plan.serial += 1;
        }
        if case.runs {
            wait_for_empty_queue(&base, GATEWAY_TOKEN);
        }
        if case.callbacks {
            callbacks += count;
            receiver.wait_for(callbacks);
            wait_for_empty_outbox(&base, GATEWAY_TOKEN);
        }
    };
    send(plan.warmup, plan);
    callgrind_control("-z", pid);
    send(plan.requests, plan);
    callgrind_control("-d", pid);
    let instructions = dumped_instructions(&dump);
    drop(connection);
    server.stop();
    assert_pooled(case, &log);
    // The file the server wrote at its exit counts its shutdown; the measured dump replaces it.
    std::fs::rename(&dump, &profile).unwrap();
    instructions
}

/// Panics when `case`'s hookgate, configured by [`prepare_dir`], allocated its transforms'
/// instances otherwise than [`pooled`] asks, as it logged to `log`.
fn assert_pooled(case: &Case, log: &Path) {
    if case.server != Server::Hookgate {
        return;
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let on_demand = text.contains(POOL_FALLBACK);
    assert!(
        on_demand != pooled(),
        "{}: hookgate's instances were {} under valgrind, not as asked (see {})",
        case.name,
        if on_demand {
            "allocated on demand"
        } else {
            "pooled"
        },
        log.display()
    );
}

/// Where the profiles are kept: `instructions/` in the target directory.
fn profile_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("instructions");
    std::fs::create_dir_all(&out).unwrap();
    out
}

fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The baseline's process: the echo, until it is stopped.
fn serve_echo() -> ! {
    println!("listening on {}", serve_in_thread(echo_router()));
    loop {
        std::thread::park();
    }
}

fn main() {
    if std::env::args().any(|arg| arg == "--echo") {
        serve_echo();
    }
    let mut plan = Plan {
        warmup: env_count("INSTR_WARMUP", 100),
        requests: env_count("INSTR_REQUESTS", 400).max(1),
        serial: 0,
    };
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| selected("INSTR_CASE", c.name))
        .collect();
    let receiver = Receiver::start(CALLBACK_SECRET);
    let dir = prepare_dir(&build_transforms(), &build_js(), &receiver.url);
    // Once natively first, so that the servers under callgrind find the transforms compiled.
    let (warming, _, _) = start_hookgate(dir.path());
    stop(warming);
    let out = profile_dir();
    println!(
        "instructions per request under callgrind: {} warm-up, {} measured over one connection; \
         transform instances {}; profiles in {}",
        plan.warmup,
        plan.requests,
        if pooled() { "pooled" } else { "on demand" },
        out.display()
    );
    let mut figures: Vec<(&str, f64)> = Vec::new();
    for case in &cases {
        let instructions = measure(case, dir.path(), &out, &mut plan, &receiver);
        let per_request = instructions as f64 / plan.requests as f64;
        println!(
            "{:<28} {:>9.1}k  {}.callgrind.out",
            case.name,
            per_request / 1e3,
            case.file
        );
        figures.push((case.name, per_request));
    }
    let figure = |name: &str| figures.iter().find(|(n, _)| *n == name).map(|(_, f)| *f);
    for (what, of, to, target) in RATIOS {
        let (Some(of), Some(to)) = (figure(of), figure(to)) else {
            continue;
        };
        let ratio = of / to;
        let verdict = target.map_or(String::new(), |t| {
            let met = if ratio <= t { "met" } else { "NOT met" };
            format!("  (target ≤ {t}: {met})")
        });
        println!("{what:<32} {ratio:>5.2}{verdict}");
    }
}
