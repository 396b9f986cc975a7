//! Driving a server with wrk (the C load generator, a process of its own) and reading what it
//! and the server's process spent: shared by the wrk bench and the OpenClaw comparison.

use std::process::Command;
use std::time::Duration;

use super::{SERIAL, installed};

/// One kind of request wrk sends: `POST <path>` with a JSON body, a bearer token and headers.
pub struct Load<'a> {
    pub path: &'a str,
    /// The request body; each [`SERIAL`] in it becomes a number no other request of the run has.
    pub body: &'a str,
    pub token: &'a str,
    pub headers: &'a [(&'static str, &'static str)],
}

/// What one wrk run measured.
pub struct Measured {
    pub rate: f64,
    pub p50: Duration,
    pub p99: Duration,
    /// Answers that were not 2xx or 3xx, and socket errors.
    pub failed: u64,
    /// Requests answered in the measured run.
    pub requests: u64,
}

/// Drives `base` with `load`'s request from `connections` connections for `seconds`.
pub fn drive(base: &str, load: &Load, connections: usize, seconds: u64) -> Measured {
    let script = tempfile::NamedTempFile::new().unwrap();
    let mut lua = String::from("wrk.method = \"POST\"\n");
    lua += "wrk.headers[\"Content-Type\"] = \"application/json\"\n";
    lua += &format!(
        "wrk.headers[\"Authorization\"] = \"Bearer {}\"\n",
        load.token
    );
    for (name, value) in load.headers {
        lua += &format!("wrk.headers[\"{name}\"] = \"{value}\"\n");
    }
    lua += &body_script(load.body);
    std::fs::write(script.path(), lua).unwrap();
    let output = Command::new(installed("wrk", "wrk"))
        .args(["-t2", &format!("-c{connections}"), &format!("-d{seconds}s")])
        .args(["--latency", "-s"])
        .arg(script.path())
        .arg(format!("{base}{}", load.path))
        .output()
        .expect("run wrk");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "wrk failed: {text}");
    parse(&text)
}

/// The Lua that gives wrk's requests their body: the same one every time, or, when `body` holds
/// [`SERIAL`], a new number for each request (`<thread>.<count>`: each wrk thread has a Lua
/// state of its own, numbered by `setup`).
fn body_script(body: &str) -> String {
    let Some((before, after)) = body.split_once(SERIAL) else {
        return format!("wrk.body = [==[{body}]==]\n");
    };
    assert!(!after.contains(SERIAL), "one {SERIAL} per body");
    format!(
        "local threads = 0\n\
         function setup(thread) threads = threads + 1; thread:set(\"id\", threads) end\n\
         local count = 0\n\
         function request()\n  \
           count = count + 1\n  \
           return wrk.format(nil, nil, nil, [==[{before}]==] .. id .. \".\" .. count .. [==[{after}]==])\n\
         end\n"
    )
}

/// Reads wrk's `--latency` report.
fn parse(text: &str) -> Measured {
    let field = |prefix: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::trim)
    };
    let percentile = |p: &str| field(p).map_or(Duration::ZERO, duration);
    let errors: u64 = field("Socket errors:").map_or(0, |rest| {
        rest.split(',')
            .filter_map(|part| part.split_whitespace().last()?.parse::<u64>().ok())
            .sum()
    });
    Measured {
        rate: field("Requests/sec:")
            .and_then(|r| r.parse().ok())
            .unwrap_or(0.0),
        p50: percentile("50%"),
        p99: percentile("99%"),
        failed: field("Non-2xx or 3xx responses:")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
            + errors,
        requests: text
            .lines()
            .find_map(|l| l.trim().split_once(" requests in"))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or(0),
    }
}

/// CPU time the process `pid` has used so far (user + system), from `/proc/<pid>/stat`.
///
/// Requests per second on a shared two-core machine move with its neighbours; the server's CPU
/// time per request moves much less, so each case reports both.
pub fn cpu_time(pid: u32) -> Duration {
    let usage = Usage::of(pid);
    usage.user + usage.system
}

/// What the process `pid` has used so far, from `/proc/<pid>/stat`: CPU time in user space and
/// in the kernel, and the page faults the kernel served without reading a file (minor faults).
///
/// A fresh WebAssembly instance can cost the kernel as much as the guest: the pages of its
/// memory it touches are faulted in, and those unmapped when it is freed are shot down. The
/// split says which share a change moves.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub user: Duration,
    pub system: Duration,
    pub minor_faults: u64,
}

impl Usage {
    pub fn of(pid: u32) -> Usage {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command name (which may hold spaces, inside parentheses), counted
        // from the state (field 3 of the line): minflt is the 10th of the line, utime and stime
        // the 14th and 15th, in ticks of 1/100 s (USER_HZ on Linux).
        let fields: Vec<u64> = stat.rsplit_once(')').map_or(vec![], |(_, rest)| {
            rest.split_whitespace()
                .skip(1)
                .map(|f| f.parse().unwrap_or(0))
                .collect()
        });
        let field = |line_index: usize| fields.get(line_index - 4).copied().unwrap_or(0);
        Usage {
            user: Duration::from_millis(field(14) * 10),
            system: Duration::from_millis(field(15) * 10),
            minor_faults: field(10),
        }
    }
}

impl std::ops::Sub for Usage {
    type Output = Usage;
    fn sub(self, earlier: Usage) -> Usage {
        Usage {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
        }
    }
}

/// The machine's CPU time so far, all of it and what the hypervisor took for others (steal),
/// in ticks, from the first line of `/proc/stat`.
///
/// On a shared virtual machine a case that ran while its neighbours were busy got a fraction of
/// the two cores: its requests per second say little then, and the steal column says so.
pub fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    // cpu  user nice system idle iowait irq softirq steal guest guest_nice
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("cpu "))
        .map_or(vec![], |rest| {
            rest.split_whitespace()
                .filter_map(|t| t.parse().ok())
                .collect()
        });
    // guest time is already counted in user time.
    let total = ticks.iter().take(8).sum();
    (total, ticks.get(7).copied().unwrap_or(0))
}

/// `276.00us`, `1.23ms`, `2.00s`.
fn duration(text: &str) -> Duration {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().unwrap_or(0.0);
    Duration::from_secs_f64(match unit {
        "us" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        _ => 0.0,
    })
}

/// The machine, for the report.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map_or("unknown CPU", |m| m.trim_start_matches([' ', '\t', ':']));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {model}")
}
