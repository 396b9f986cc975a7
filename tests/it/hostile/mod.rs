//! The bad input table: hostile and malformed requests across every endpoint, each with the
//! exact answer docs/http-contract.md gives it (where it is silent, what a correct HTTP server gives; the
//! case says so), each followed by a check that `/livez` still answers. The table runs against
//! one server, twice, with its heaviest cases many more times in between; the server's memory
//! must stay flat and its log free of panics. Clients too slow to finish get a server of their
//! own, with short timeouts.
//!
//! The tables: `bodies` and `mapped` (JSON of every wrong shape, for `/wake`, `/agent` and the
//! mapped hooks), `paths` (query tokens, methods, path tricks, credentials, the operator API and
//! health) and `wire` (headers, HTTP versions, pipelines, lengths, chunks, slow clients, and the
//! few known deviations from what a correct server answers, each naming the right answer). The
//! types and the raw-socket client are in `case` and `raw`.

mod bodies;
mod case;
mod mapped;
mod paths;
mod raw;
mod wire;

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;
use case::{Case, Theme, Want, check, send};

/// `hooks.maxBodyBytes` by default; the table's server keeps it.
const MAX_BODY: usize = 262_144;

/// How long one case may take on the table's server before it counts as a hang. The slowest
/// case waits 2 s for a body it means to discard; the body timeout is the default 30 s and no
/// case waits for it.
const BOUND: Duration = Duration::from_secs(20);

/// The body and header timeouts of the slow-clients server, and how long its cases may take:
/// well above the timeouts, far below the default 30 s.
const SLOW_TIMEOUT_SECONDS: f64 = 2.0;
const SLOW_BOUND: Duration = Duration::from_secs(15);

/// Heavy rounds run before memory is first measured, and then between the two measures.
const WARM_ROUNDS: usize = 5;
const HEAVY_ROUNDS: usize = 30;

/// How much the server's resident memory may grow over [`HEAVY_ROUNDS`] rounds of the heavy
/// cases and a second pass of the whole table, measured from after a first pass and
/// [`WARM_ROUNDS`] rounds (so that the allocator's arenas, hyper's buffers, SQLite's page cache
/// and the transforms' instance pool have reached their working size).
///
/// A heavy round makes the server take in about 3 MiB (1 MiB of header of which it reads up to
/// hyper's ~400 KiB limit, twice; 10 000 headers; 200–300 KiB bodies; 64 KiB names; a 100-request
/// pipeline). If even a tenth of that stayed behind per round, 30 rounds would hold ~9 MiB more;
/// if a whole request's buffers leaked, ~90 MiB. 32 MiB is well above what allocator
/// fragmentation and the store's growing WAL index plausibly add, and well below a real leak.
const RSS_GROWTH_KIB: u64 = 32 * 1024;

fn table() -> Vec<Theme> {
    vec![
        bodies::wake_bodies(),
        bodies::agent_bodies(),
        mapped::mapped_bodies(),
        paths::query_tokens(),
        paths::paths_and_methods(),
        paths::credentials(),
        paths::api_and_health(),
        wire::framing(MAX_BODY),
        wire::deviations(),
    ]
}

/// The server every table but the slow one runs against: default limits and timeouts, every
/// kind of mapped hook the tables aim at, and a model allowlist.
fn table_server() -> (Hookgate, ConfigDir) {
    let mut config = base_config();
    set(&mut config, "hooks.presets", json!(["gmail"]));
    // The gmail preset's key comes from the payload: it needs the prefixes, and without
    // allowRequestSessionKey its runs are refused (docs/hooks.md).
    set(
        &mut config,
        "hooks.allowedSessionKeyPrefixes",
        json!(["hook:"]),
    );
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "deploy", "match": {"path": "deploy"}, "action": "wake", "textTemplate": "{{service}}"},
            {"id": "ci", "match": {"path": "ci"}, "messageTemplate": "{{status}}", "model": "{{model}}"},
            {"id": "ingest-ci", "match": {"path": "ingest", "source": "ci"}, "action": "wake", "textTemplate": "from ci"},
            {"id": "github", "match": {"path": "github"}, "transform": {"module": "github.wasm"}},
            {"id": "slack", "match": {"path": "slack"}, "transform": {"module": "slack.wasm"}},
            {"id": "stripe", "match": {"path": "stripe"}, "transform": {"module": "stripe.wasm"}},
            {"id": "alerts", "match": {"path": "alerts"}, "transform": {"module": "passthrough.wasm",
                "config": {"action": "wake", "field": "/alert/summary", "prefix": "Alert: "}}},
            {"id": "signed", "match": {"path": "signed"}, "action": "wake", "textTemplate": "{{x}}",
                "signature": {"scheme": "github", "secret": mapped::SIGNING_SECRET}},
            {"id": "unicode", "match": {"path": "ünï"}, "action": "wake", "textTemplate": "{{x}}"},
        ]),
    );
    set(
        &mut config,
        "agents.defaults.models",
        json!({"openai/gpt-4.1-mini": {"alias": "mini"}}),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["github", "slack", "stripe", "passthrough"]);
    (Hookgate::start_in(&dir), dir)
}

fn slow_server() -> (Hookgate, ConfigDir) {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.bodyTimeoutSeconds",
        json!(SLOW_TIMEOUT_SECONDS),
    );
    set(
        &mut config,
        "gateway.headerTimeoutSeconds",
        json!(SLOW_TIMEOUT_SECONDS),
    );
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "deploy", "match": {"path": "deploy"}, "action": "wake", "textTemplate": "{{service}}"}]),
    );
    Hookgate::start(&config)
}

/// How many cases docs/reliability.md says the table holds: the number its "Bad input table"
/// entry opens with.
fn documented_cases() -> usize {
    let doc = include_str!("../../../docs/reliability.md");
    let entry = "**Bad input table** (`tests/it/hostile/`, in `scripts/test`): ";
    let (_, rest) = doc
        .split_once(entry)
        .expect("docs/reliability.md has a Bad input table entry");
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .expect("the Bad input table entry opens with its number of cases")
}

#[test]
fn the_table_has_the_documented_cases_and_no_5xx() {
    let themes: Vec<Theme> = table().into_iter().chain([wire::slow_clients()]).collect();
    let mut names = HashSet::new();
    for theme in &themes {
        for case in &theme.cases {
            assert!(
                names.insert((theme.name, case.name.as_str())),
                "[{}] {}: two cases of one name",
                theme.name,
                case.name
            );
            assert!(
                case.want.statuses().iter().all(|s| *s < 500),
                "[{}] {} expects {}",
                theme.name,
                case.name,
                case.want
            );
        }
    }
    let sizes: Vec<String> = themes
        .iter()
        .map(|t| format!("{} {}", t.name, t.cases.len()))
        .collect();
    eprintln!("{} cases: {}", names.len(), sizes.join(", "));
    assert_eq!(
        names.len(),
        documented_cases(),
        "docs/reliability.md states another number of cases than the table holds"
    );
}

#[tokio::test]
async fn hostile_requests_get_their_answers_and_the_server_stays_up() {
    let (server, _dir) = table_server();
    let themes = table();
    let mut outcomes = Outcomes::default();
    for theme in &themes {
        for case in &theme.cases {
            outcomes.record(theme, case, run(&server, case, BOUND).await);
        }
    }
    outcomes.assert_none(&server);

    let heavy: Vec<(&Theme, &Case)> = themes
        .iter()
        .flat_map(|t| t.cases.iter().filter(|c| c.heavy).map(move |c| (t, c)))
        .collect();
    for _ in 0..WARM_ROUNDS {
        for (theme, case) in &heavy {
            outcomes.record(theme, case, run(&server, case, BOUND).await);
        }
    }
    let warm = rss_kib(server.pid());
    for _ in 0..HEAVY_ROUNDS {
        for (theme, case) in &heavy {
            outcomes.record(theme, case, run(&server, case, BOUND).await);
        }
    }
    for theme in &themes {
        for case in &theme.cases {
            outcomes.record(theme, case, run(&server, case, BOUND).await);
        }
    }
    let after = rss_kib(server.pid());
    outcomes.assert_none(&server);

    let (status, log) = server.terminate();
    assert!(status.success(), "{status}");
    assert_no_panic(&log);
    eprintln!("resident memory: {warm:?} KiB warm, {after:?} KiB after");
    if let (Some(warm), Some(after)) = (warm, after) {
        assert!(
            after <= warm + RSS_GROWTH_KIB,
            "resident memory grew from {warm} KiB to {after} KiB over {HEAVY_ROUNDS} rounds of {} heavy cases and a second pass of the table",
            heavy.len()
        );
    }
}

#[tokio::test]
async fn slow_clients_get_408_or_are_cut_off_in_time() {
    let (server, _dir) = slow_server();
    let theme = wire::slow_clients();
    // The cases wait on the server's clocks, not on each other: all at once.
    let base = server.base.clone();
    let mut running = tokio::task::JoinSet::new();
    for (index, case) in theme.cases.iter().enumerate() {
        let (request, want, base) = (case.request.clone(), case.want.clone(), base.clone());
        running.spawn(async move { (index, run_at(&base, &request, &want, SLOW_BOUND).await) });
    }
    let mut outcomes = Outcomes::default();
    while let Some(done) = running.join_next().await {
        let (index, outcome) = done.expect("a case task panicked");
        outcomes.record(&theme, &theme.cases[index], outcome);
    }
    outcomes.assert_none(&server);
    let (status, log) = server.terminate();
    assert!(status.success(), "{status}");
    assert_no_panic(&log);
}

/// The default bounds end a trickle too (the minimum receive rate, before the 30 s body
/// timeout): one slow case on a default server.
#[tokio::test]
async fn a_trickle_is_cut_off_by_the_default_bounds() {
    let (server, _dir) = Hookgate::start(&base_config());
    let theme = wire::slow_clients();
    let trickle = &theme.cases[0];
    assert_eq!(trickle.name, "a body trickling one byte a second");
    let bound = Duration::from_secs(45);
    if let Err(problem) = run(&server, trickle, bound).await {
        panic!("{}: {problem}", trickle.name);
    }
}

async fn run(server: &Hookgate, case: &Case, bound: Duration) -> Result<(), String> {
    run_at(&server.base, &case.request, &case.want, bound).await
}

/// Sends one case, checks its answer, then that the server still serves. A 401 is forgiven
/// (a correct token clears the client's failures, docs/http-contract.md): the tables hold more 401s than
/// the 20 that lock a client out, and each case must get its own answer, not the lockout's.
async fn run_at(
    base: &str,
    request: &case::Request,
    want: &Want,
    bound: Duration,
) -> Result<(), String> {
    let answers = send(base, request, bound).await;
    let verdict = match &answers {
        Ok(got) => check(want, got),
        Err(e) => Err(format!("expected {want}, got no answer: {e}")),
    };
    if answers.is_ok_and(|got| got.iter().any(|g| g.status == 401)) {
        forgive(base).await?;
    }
    still_serving(base).await?;
    verdict
}

async fn forgive(base: &str) -> Result<(), String> {
    let hook = client()
        .post(format!("{base}/hooks/wake"))
        .bearer_auth(HOOK_TOKEN)
        .body("{}")
        .send()
        .await
        .map_err(|e| format!("clearing the hook lockout: {e}"))?;
    let api = client()
        .get(format!("{base}/api/config"))
        .bearer_auth(GATEWAY_TOKEN)
        .send()
        .await
        .map_err(|e| format!("clearing the API lockout: {e}"))?;
    match (hook.status().as_u16(), api.status().as_u16()) {
        (400, 200) => Ok(()),
        other => Err(format!("clearing the lockouts got {other:?}")),
    }
}

/// `/livez` answers `200 {"ok":true}`.
async fn still_serving(base: &str) -> Result<(), String> {
    let response = client()
        .get(format!("{base}/livez"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| format!("then /livez did not answer: {e}"))?;
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.ok();
    if status == 200 && body == Some(json!({"ok": true})) {
        Ok(())
    } else {
        Err(format!("then /livez answered {status} {body:?}"))
    }
}

/// Failures, each case reported once however often it ran.
#[derive(Default)]
struct Outcomes {
    failures: Vec<String>,
    failed: HashSet<(&'static str, String)>,
    runs: usize,
}

impl Outcomes {
    fn record(&mut self, theme: &Theme, case: &Case, outcome: Result<(), String>) {
        self.runs += 1;
        if let Err(problem) = outcome
            && self.failed.insert((theme.name, case.name.clone()))
        {
            self.failures
                .push(format!("[{}] {}: {problem}", theme.name, case.name));
        }
    }

    /// Fails the test with the first failure first, then every other one.
    fn assert_none(&self, server: &Hookgate) {
        if let Some(first) = self.failures.first() {
            panic!(
                "{} hostile case(s) failed (of {} runs) against {}.\nThe first: {first}\nAll:\n  {}",
                self.failures.len(),
                self.runs,
                server.base,
                self.failures.join("\n  ")
            );
        }
    }
}

fn assert_no_panic(log: &str) {
    if let Some(line) = log.lines().find(|l| l.contains("panicked")) {
        panic!("the server log shows a panic: {line}");
    }
}

/// The resident set of process `pid`, in KiB; `None` where `/proc` does not say.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
}
