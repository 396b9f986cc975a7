//! A fuzzer of the glue between QuickJS and the host, run natively: generated hostile programs
//! (rejections, `toJSON`, getters, Proxies, console and `log` calls, thrown values of every type,
//! a polluted `Object.prototype`) are loaded and called as the component loads and calls a
//! bundle ([`crate::load`], [`crate::call`]), through the SDK's real adapter, the runtime reading
//! each outcome from what the generated function returned. A call may succeed or fail; the
//! runtime must not panic, and must keep answering.
//!
//! `cargo test --release fuzz -- --nocapture` in `transforms/js-runtime` runs
//! `HOOKGATE_JS_FUZZ_CASES` programs (default 300) from seed `HOOKGATE_JS_FUZZ_SEED` (default
//! 0), or as many as fit in `HOOKGATE_JS_FUZZ_SECONDS`. Each program is written to
//! `target/js-fuzz-case-<first seed>.js` before it runs, so that one that aborts the process is
//! at hand; `HOOKGATE_JS_FUZZ_REPLAY=<file>` runs that one program again.

use std::cell::Cell;
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::exports::hookgate::transform::handler::Request;

/// How long one call of a program may run before the engine interrupts it.
const CALL_TIME: Duration = Duration::from_millis(500);

/// How long past its interrupt a program may run before the fuzzer gives up on it.
const STALLED: Duration = Duration::from_secs(30);

/// splitmix64: enough randomness for choosing program shapes, and reproducible from a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Leaves: a value of every type JavaScript has, and some that conversions trip on.
#[rustfmt::skip]
const LEAVES: &[&str] = &[
    "undefined", "null", "true", "false", "0", "-0", "NaN", "Infinity", "1e308", "-1",
    "4294967296", "(2 ** 53)", "7", "123n", "'text'", "''", "'\\uD800'", "'a\\u0000b'",
    "'x'.repeat(5000)", "Symbol('s')", "[]", "{}", "(() => 1)", "new Error('e')",
    "new TypeError('t')", "Object.create(null)", "new Uint8Array([1, 2])", "new ArrayBuffer(4)",
    "new Date(NaN)", "/re/g", "new Map([[1, 2]])", "Promise.resolve(1)", "globalThis", "'wake'",
    "'agent'", "'ok'", "'err'", "'merge'", "'respond'", "'run'", "'keep'", "'skip'", "'now'",
    "'next-heartbeat'", "'static'", "'fixed'", "200", "599", "600", "BUF", "BUF.subarray(2)",
    "new Uint8Array(new ArrayBuffer(8, { maxByteLength: 64 }))",
];

/// Property names the glue reads, and some with meaning to the engine.
#[rustfmt::skip]
const KEYS: &[&str] = &[
    "tag", "val", "kind", "text", "message", "mode", "wakeMode", "name", "agentId", "sessionKey",
    "sessionKeySource", "sessionMode", "deliver", "allowUnsafeExternalContent", "channel", "to",
    "model", "thinking", "timeoutSeconds", "status", "contentType", "body", "toJSON", "stack",
    "then", "constructor", "toString", "valueOf", "length", "__proto__",
];

const LEVELS: &[&str] = &["'debug'", "'info'", "'warn'", "'error'", "'loud'", "7"];

/// A JavaScript expression, nested at most `depth` deep.
fn value(rng: &mut Rng, depth: u32) -> String {
    if depth == 0 || rng.below(3) == 0 {
        return rng.pick(LEAVES).to_string();
    }
    let d = depth - 1;
    let key = rng.pick(KEYS);
    match rng.below(12) {
        0 => format!(
            "{{ {key}: {}, {}: {} }}",
            value(rng, d),
            rng.pick(KEYS),
            value(rng, d)
        ),
        1 => format!("[{}, {}]", value(rng, d), value(rng, d)),
        2 => format!(
            "{{ get {key}() {{ {} return {}; }} }}",
            stmt(rng, d),
            value(rng, d)
        ),
        3 => format!(
            "{{ toJSON() {{ {} return {}; }} }}",
            stmt(rng, d),
            value(rng, d)
        ),
        4 => format!("{{ toJSON() {{ throw {}; }} }}", value(rng, d)),
        5 => format!(
            "new Proxy({}, {{ get(t, k) {{ {} return {}; }}, ownKeys() {{ {} return {}; }}, \
             getOwnPropertyDescriptor(t, k) {{ {} return Reflect.getOwnPropertyDescriptor(t, k); }} }})",
            object(rng, d),
            stmt(rng, d),
            value(rng, d),
            stmt(rng, d),
            rng.pick(&[
                "[]",
                "['tag', 'val']",
                "['tag', 'tag']",
                "Reflect.ownKeys(t)",
                "[1]"
            ]),
            stmt(rng, d),
        ),
        6 => format!(
            "Object.defineProperty(new Error('x'), '{}', {{ get() {{ {} return {}; }} }})",
            rng.pick(&["message", "stack", "name"]),
            stmt(rng, d),
            value(rng, d)
        ),
        7 => "(() => { const o = { tag: 'ok' }; o.val = o; return o; })()".to_string(),
        8 => format!(
            "{{ then(res, rej) {{ {} rej({}); }} }}",
            stmt(rng, d),
            value(rng, d)
        ),
        9 => format!("Promise.reject({})", value(rng, d)),
        10 => outcome(rng, d),
        _ => object(rng, d),
    }
}

/// An object literal with a few fields the glue reads.
fn object(rng: &mut Rng, depth: u32) -> String {
    let mut fields = String::new();
    for _ in 0..rng.below(4) {
        let _ = write!(fields, "{}: {}, ", rng.pick(KEYS), value(rng, depth));
    }
    format!("{{ {fields} }}")
}

/// An object shaped as the adapter's results once were, `{ tag, val }`, with hostile values
/// inside.
fn outcome(rng: &mut Rng, depth: u32) -> String {
    let tag = rng.pick(&["keep", "skip", "run", "respond", "merge", "bogus"]);
    let inner = match tag {
        "run" => format!(
            "{{ tag: '{}', val: {} }}",
            rng.pick(&["wake", "agent", "other"]),
            object(rng, depth)
        ),
        _ => object(rng, depth),
    };
    format!("{{ tag: 'ok', val: {{ tag: '{tag}', val: {inner} }} }}")
}

/// One statement.
fn stmt(rng: &mut Rng, depth: u32) -> String {
    if rng.below(4) == 0 {
        return tamper(rng, depth);
    }
    let v = value(rng, depth);
    match rng.below(14) {
        0 | 1 => format!("Promise.reject({v});"),
        2 => format!("Promise.reject({v}).catch(() => {{}});"),
        3 => format!(
            "{{ const p = Promise.reject({v}); queueMicrotask(() => p.catch(() => {{}})); }}"
        ),
        4 => format!(
            "console.{}({v}, {});",
            rng.pick(&["log", "warn", "error", "debug", "dir", "count", "table"]),
            value(rng, depth)
        ),
        5 => format!("console.assert(false, {v});"),
        6 => format!("try {{ JSON.stringify({v}); }} catch {{}}"),
        7 => format!(
            "queueMicrotask(() => {{ {} }});",
            stmt(rng, depth.saturating_sub(1))
        ),
        8 => format!("new Promise((_, reject) => reject({v}));"),
        9 => format!(
            "(async () => {{ {} throw {v}; }})();",
            stmt(rng, depth.saturating_sub(1))
        ),
        10 => format!("Object.prototype.{} = {v};", rng.pick(KEYS)),
        11 => format!("HOST.log({}, {v});", rng.pick(LEVELS)),
        // Only the transform's own body is async; nested statements are in plain functions.
        12 if depth >= 3 => format!("await {v};"),
        _ => format!(
            "if ({}) throw {v};",
            rng.pick(&["true", "Math.random() < 0.5"])
        ),
    }
}

/// A statement that changes what the glue relies on: the prototypes it reads through, hooks that
/// run JavaScript inside the engine's own work, buffers it copies from.
fn tamper(rng: &mut Rng, depth: u32) -> String {
    let d = depth.saturating_sub(1);
    let key = rng.pick(KEYS);
    match rng.below(8) {
        0 => format!(
            "Object.defineProperty(Object.prototype, '{key}', {{ get() {{ {} return {}; }}, \
             set(v) {{ {} }}, configurable: true }});",
            stmt(rng, d),
            value(rng, d),
            stmt(rng, d)
        ),
        // No statement inside either: QuickJS calls it while an error unwinds, its own interrupt
        // included, so statements there can outrun the interrupt as above.
        1 => format!(
            "Error.prepareStackTrace = (e, frames) => ({});",
            value(rng, d)
        ),
        2 => "try { BUF.buffer.transfer(); } catch {}".to_string(),
        // No statement inside: one that iterates an array (`new Map([[1, 2]])`, a console call)
        // recurses through the iterator, and with the catches of the prelude's console that is
        // work growing exponentially, which QuickJS's interrupt does not end (the epoch
        // deadline of a real call does). The same goes for `prepareStackTrace` below.
        3 => format!(
            "Array.prototype[Symbol.iterator] = function* () {{ yield {}; }};",
            value(rng, d)
        ),
        4 => format!(
            "{{ const then = Promise.prototype.then; Promise.prototype.then = function (a, b) {{ \
             {} return then.call(this, a, b); }}; }}",
            stmt(rng, d)
        ),
        5 => format!("Array.prototype[{}] = {};", rng.below(3), value(rng, d)),
        6 => format!(
            "Object.defineProperty(globalThis, '{}', {{ get() {{ {} return {}; }}, \
             configurable: true }});",
            rng.pick(&["console", "TextEncoder", "TextDecoder", "JSON", "URL"]),
            stmt(rng, d),
            value(rng, d)
        ),
        _ => format!(
            "Object.setPrototypeOf(Object.prototype, {});",
            value(rng, d)
        ),
    }
}

fn statements(rng: &mut Rng) -> String {
    let mut body = String::new();
    for _ in 0..1 + rng.below(5) {
        body.push_str(&stmt(rng, 3));
        body.push('\n');
    }
    body
}

/// A bundle: the SDK's adapter around a generated transform, async or plain (what a plain one
/// returns is read at once unless it is a promise or a thenable or jobs are queued; what it
/// throws reaches the runtime as is), returning hostile values of every shape the outcome is read
/// from.
fn bundle(rng: &mut Rng) -> String {
    const HOST: &str = "const HOST = globalThis[Symbol.for('hookgate:transform/host@0.2.0')];\n\
                        const BUF = new Uint8Array(16);\n";
    let body = statements(rng);
    let result = match rng.below(3) {
        0 => outcome(rng, 3),
        1 => object(rng, 3),
        _ => value(rng, 3),
    };
    let (kind, body) = if rng.below(2) == 0 {
        ("", body.replace("await ", "void "))
    } else {
        ("async ", body)
    };
    let adapter = include_str!("../../js-sdk/adapter.js")
        .replace(
            "import { log } from 'hookgate:transform/host@0.2.0';",
            "const { log } = HOST;",
        )
        .replace(
            "import * as userModule from 'user-module';",
            &format!(
                "const userModule = {{ {kind}default(input, ctx) {{\n{body}return {result};\n}} }};"
            ),
        );
    format!("{HOST}{adapter}")
}

fn request(rng: &mut Rng) -> Request {
    Request {
        name: "fuzz".into(),
        url: "/hooks/fuzz?x=1".into(),
        headers: vec![("x-a".into(), "1".into()), ("X-A".into(), "2".into())],
        query: vec![("x".into(), "1".into())],
        body: rng
            .pick(&[
                "{}",
                "",
                "[1]",
                "{\"__proto__\": {\"to\": \"x\"}}",
                "\u{feff}{\"a\":1}",
                "nope",
            ])
            .into(),
        mapping_id: "fuzz".into(),
        config: Some(rng.pick(&["{}", "{\"mode\":1}", "null"]).into()),
        export_name: None,
    }
}

/// Loads `source` and calls it twice; whatever happens must not be a panic. A program that fails
/// to load is fine too (a top level that throws fails the build).
fn run_case(source: &str, rng: &mut Rng, tally: &mut Tally) {
    let loaded = match crate::load(source.to_string()) {
        Ok(loaded) => loaded,
        Err(reason) => {
            tally.unloaded += 1;
            tally.last_unloaded = reason;
            return;
        }
    };
    // A program may never end (a `then` that calls `then` queues jobs for ever): in hookgate the
    // call's time limit stops it, here the engine's interrupt, after `CALL_TIME`. One that runs on
    // regardless would stall the run: it ends it instead, naming itself.
    let deadline = Rc::new(Cell::new(Instant::now() + CALL_TIME));
    let until = Rc::clone(&deadline);
    loaded
        ._runtime
        .set_interrupt_handler(Some(Box::new(move || {
            if Instant::now() > until.get() + STALLED {
                eprintln!(
                    "js-runtime fuzz: a program ran {STALLED:?} past its interrupt; it is the \
                       last one written to target/js-fuzz-case-*.js"
                );
                std::process::abort();
            }
            Instant::now() > until.get()
        })));
    for _ in 0..2 {
        deadline.set(Instant::now() + CALL_TIME);
        match crate::call(&loaded, request(rng)) {
            Ok(_) => tally.succeeded += 1,
            Err(_) => tally.failed += 1,
        }
        tally.interrupted += u64::from(Instant::now() > deadline.get());
    }
    tally.logged += crate::NATIVE_LOG.with(|lines| lines.borrow().len());
    // What the last description rejected again is dropped with the engine, after its handles:
    // a handle outliving its runtime would be freed into nothing.
    deadline.set(Instant::now() + CALL_TIME);
    loaded
        .context
        .with(|ctx| drop(crate::rejections::take(&ctx)));
    drop(loaded);
    crate::NATIVE_LOG.with(|lines| lines.borrow_mut().clear());
}

/// What the programs did, so that a run that only exercised the parser shows as such.
#[derive(Debug, Default)]
struct Tally {
    unloaded: u64,
    last_unloaded: String,
    succeeded: u64,
    failed: u64,
    /// Calls stopped by the interrupt: programs that would run for ever.
    interrupted: u64,
    logged: usize,
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn hostile_programs_never_panic_the_glue() {
    if let Ok(path) = std::env::var("HOOKGATE_JS_FUZZ_REPLAY") {
        let source = std::fs::read_to_string(&path).unwrap();
        let mut tally = Tally::default();
        run_case(&source, &mut Rng(0), &mut tally);
        println!("js-runtime fuzz: replayed {path}: {tally:?}");
        return;
    }
    let seed = env("HOOKGATE_JS_FUZZ_SEED").unwrap_or(0);
    let deadline = env("HOOKGATE_JS_FUZZ_SECONDS").map(|s| Instant::now() + Duration::from_secs(s));
    let cases =
        env("HOOKGATE_JS_FUZZ_CASES").unwrap_or(if deadline.is_some() { u64::MAX } else { 300 });
    let case_file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("target/js-fuzz-case-{seed}.js"));
    let _ = std::fs::create_dir_all(case_file.parent().unwrap());
    let mut ran = 0;
    let mut tally = Tally::default();
    for case in seed..seed.saturating_add(cases) {
        if deadline.is_some_and(|d| Instant::now() > d) {
            break;
        }
        let mut rng = Rng(case);
        let source = bundle(&mut rng);
        std::fs::write(&case_file, format!("// seed {case}\n{source}")).unwrap();
        if catch_unwind(AssertUnwindSafe(|| run_case(&source, &mut rng, &mut tally))).is_err() {
            panic!("seed {case} panicked; its program:\n{source}");
        }
        ran += 1;
        if ran % 20_000 == 0 {
            println!("js-runtime fuzz: {ran} programs, up to seed {case}: {tally:?}");
        }
    }
    println!("js-runtime fuzz: {ran} programs from seed {seed} without a panic: {tally:?}");
}
