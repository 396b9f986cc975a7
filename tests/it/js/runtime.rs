//! hookgate's JavaScript runtime (transforms/js-runtime, docs/transforms.md#javascript-transforms):
//! the web globals a module finds, what a fresh instance starts with, a network that is not
//! there, and a module whose top level fails at build time.

use std::process::Command;

use serde_json::{Value, json};

use super::{js_transforms, start};
use crate::harness::*;

/// A mapping of the globals fixture. Named as `.wasm`, it gets the defaults that suit Rust
/// transforms (16 MiB, a fresh instance per call), in which the runtime works too; named as
/// `.mjs`, a JavaScript module's (instances kept).
fn globals(id: &str, module: &str, mode: &str, reuse: Option<u32>) -> Value {
    let mut transform = json!({"module": module, "config": {"mode": mode}});
    if let Some(calls) = reuse {
        transform["reuse"] = json!(calls);
    }
    json!({"id": id, "match": {"path": id}, "transform": transform})
}

/// URL, URLSearchParams, TextEncoder/TextDecoder, atob/btoa, crypto and console behave as the
/// web platform's, and console output reaches the server log tagged with the mapping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_globals_work_as_on_the_web() {
    let (server, _dir) = start(
        json!([globals("globals", "js-globals.wasm", "globals", None)]),
        &["js-globals"],
    );
    let r = server
        .hook("/hooks/globals?q=hello%20world")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        server.wake_texts().await,
        [[
            "http://example.com/b?x=1&y=two+words&z=%C3%A9+%26#top",
            "example.com",
            "/b",
            "two words",
            "false",
            "hello world",
            "one=1&two=zwei",
            "10",
            "héllo ✓",
            "\u{fffd}",
            "TypeError",
            "hi",
            "http://h/p?k=v+w&n=2",
            "aGkh",
            "hi!",
            "36",
            "true",
            "\u{fffd}cut",
            "function",
            "true",
        ]
        .join(" | ")]
    );
    let (_, log) = server.terminate();
    let line = log
        .lines()
        .find(|l| l.contains("console.log reaches the log"))
        .unwrap_or_else(|| panic!("console.log is not in the log:\n{log}"));
    assert!(
        line.contains("mapping=globals") && line.contains(r#"{"from":"console"}"#),
        "{line}"
    );
    let warned = log
        .lines()
        .find(|l| l.contains("console.warn warns"))
        .unwrap_or_else(|| panic!("console.warn is not in the log:\n{log}"));
    assert!(warned.contains("WARN"), "{warned}");
}

/// What `split` gives with a regular expression, line by line as V8 gives it: a plain separator
/// (captures, empty matches, a limit, the unicode, sticky and global flags, an empty string) goes
/// through the runtime's fast path, and a separator whose built-ins a program changed (`exec`, a
/// subclass, `flags`, each flag's getter, `Symbol.match`, `constructor`, RegExp[Symbol.species],
/// even from inside the string's `toString` or the limit's `valueOf`) through QuickJS's own, step
/// by step; neither touches the separator's `lastIndex`. A lone surrogate splits as UTF-16 code
/// units with the unicode flag too, and a limit given as a string is converted. A pattern whose
/// every match starts with `\s`, `\S` or one character (which the fast path searches for first,
/// by code unit) splits wide strings, white space outside ASCII and surrogate pairs as V8 does,
/// a lone low surrogate with the unicode flag included, which never splits a pair.
const SPLIT: &[&str] = &[
    r#"["a","b","c"]"#,
    r#"["","a","b",""]"#,
    r#"["a","b","c"]"#,
    r#"["a","b","c"]"#,
    r#"["a","1","b","2","c"]"#,
    r#"["a","1","~","b"]"#,
    r#"["a","b"]"#,
    r#"["a","1"]"#,
    r#"[]"#,
    r#"["a","b","c"]"#,
    r#"[""]"#,
    r#"[]"#,
    r#"[]"#,
    r#"["😀","😀"]"#,
    r#"["\ud83d","\ude00","\ud83d","\ude00"]"#,
    r#"["😀","😀"]"#,
    r#"["a","b","","c"]"#,
    r#"["a","b",""]"#,
    r#"["a","b","c"]"#,
    r#"["a","bc"]"#,
    r#"["ab"]"#,
    r#"["ab"]"#,
    r#"["a\n","b"]"#,
    r#"["a","b"]"#,
    r#"["","b"]"#,
    r#"["A","~","B","bold","/","B","and","~","CODE","coded","/","CODE",""]"#,
    r#"["","","",""]"#,
    r#"["","","",""]"#,
    r#"["a","b"]"#,
    r#"["\ud83d"]"#,
    r#"["a","b"]"#,
    r#"["😀"]"#,
    r#"["","\ude00"]"#,
    r#"["x","\ude00","\ud83d"]"#,
    r#"["a"]"#,
    r#"["a","b"]"#,
    r#"["x😀","a","b","c","d","e"]"#,
    r#"["","","",""]"#,
    r#"["a",""]"#,
    r#"[""," "," ",""]"#,
    r#"[""," ",""]"#,
    r#"["",""," ","",""]"#,
    r#"["é","ü","","😀",""]"#,
    r#"["a","b"]"#,
    r#"["a","b","c"]"#,
    r#"["aXb","x","c"]"#,
    r#"["😀"]"#,
    r#"["a","b"] exec 3"#,
    r#"["a","b"] exec 3"#,
    r#"["a","b"]"#,
    r#"["a","b"]"#,
    r#"["a","b"] exec 3"#,
    r#"["a","b"] exec 3"#,
    r#"["a","b"]"#,
    r#"["a","b"] lastIndex 5"#,
    r#"["a","b"] exec 3"#,
    r#"["a","b"] hasIndices read 1"#,
    r#"["a","b"] global read 1"#,
    r#"["a","b"] multiline read 1"#,
    r#"["a","b"] dotAll read 1"#,
    r#"["a","b"] unicode read 1"#,
    r#"["a","b"] unicodeSets read 1"#,
    r#"["a","b"] sticky read 1"#,
    r#"["a","b"] Symbol(Symbol.match) read 1"#,
    r#"["a","b"]"#,
    r#"["a","b"] exec 3"#,
    r#"["a","b"] constructor read 1"#,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_with_a_regular_expression_follows_the_specification() {
    let (server, _dir) = start(
        json!([
            globals("split", "js-globals.wasm", "split", None),
            globals("split-kept", "js-globals.mjs", "split", None),
        ]),
        &["js-globals"],
    );
    // The kept instance twice: what a call changed and put back must not stay changed.
    let texts = numbered_wakes(&server, &["split", "split-kept", "split-kept"]).await;
    assert_each_lists(&texts, SPLIT);
}

/// Checks that each of `texts`, the wakes of `numbered_wakes`, is `call <n>` and then `lines`.
fn assert_each_lists(texts: &[String], lines: &[&str]) {
    for (n, text) in texts.iter().enumerate() {
        let mut listed = text.split('\n');
        assert_eq!(listed.next(), Some(format!("call {n}").as_str()));
        assert_eq!(listed.collect::<Vec<_>>(), lines, "call {n}");
    }
}

/// What the shapes fixture lists after its `call <n>` line, as V8 gives it.
const SHAPES: &[&str] = &[
    r#"["kind","text","mode"] object"#,
    r#"["mode","kind","text"] object"#,
    r#"["a","c","b"] object"#,
    r#"{"a":1,"c":3,"b":4}"#,
    r#"["kind","text"] null"#,
    r#"["0","1","extra"]"#,
    r#"["kind"] object 1"#,
    r#"["kind","text"] other 1 ["kind","text"]"#,
    "za az za",
    "01ba",
];

/// Objects a kept instance makes alike in every call find the shapes QuickJS kept from the
/// calls before (docs/performance.md, "QuickJS's own costs"), and their keys, order and
/// prototypes stay as a fresh instance has them: four calls of one kept instance, in which the
/// kept shapes take over step by step, against a fresh instance's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_made_alike_in_every_call_keep_their_keys_and_prototypes() {
    let (server, _dir) = start(
        json!([
            globals("shapes", "js-globals.wasm", "shapes", None),
            globals("shapes-kept", "js-globals.mjs", "shapes", None),
        ]),
        &["js-globals"],
    );
    let paths = [
        "shapes",
        "shapes-kept",
        "shapes-kept",
        "shapes-kept",
        "shapes-kept",
    ];
    assert_each_lists(&numbered_wakes(&server, &paths).await, SHAPES);
}

/// Strings of every length up to 140 characters, of one byte or two each, copied by QuickJS
/// (sliced, concatenated, through JSON and a join) keep every character in its place, across the
/// runtime's copies made in place (up to 64 bytes) and `memory.copy` past them
/// (docs/performance.md, "QuickJS's own costs"): in a fresh instance and twice in a kept one.
/// The checks take tens of milliseconds: a second each, rather than the default 100 ms, keeps
/// a loaded machine from failing them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strings_copied_at_every_length_keep_every_character() {
    let mut mappings = json!([
        globals("copies", "js-globals.wasm", "copies", None),
        globals("copies-kept", "js-globals.mjs", "copies", None),
    ]);
    for mapping in mappings.as_array_mut().unwrap() {
        mapping["transform"]["limits"] = json!({"timeoutMs": 1000});
    }
    let (server, _dir) = start(mappings, &["js-globals"]);
    let texts = numbered_wakes(&server, &["copies", "copies-kept", "copies-kept"]).await;
    assert_each_lists(&texts, &["1526 strings checked, 0 wrong"]);
}

/// What the define fixture lists after its `call <n>` line, as V8 gives it.
const DEFINED: &[&str] = &[
    r#"{"a":3,"b":2}"#,
    r#"{"value":2,"writable":true,"enumerable":true,"configurable":true}"#,
    r#"{"a":3,"b":2}"#,
    "TypeError",
    "TypeError",
    r#"{"value":1,"writable":true,"enumerable":true,"configurable":true}"#,
    "x=1",
    "1 a",
    "TypeError",
    "TypeError",
    r#"named 0 {"value":"named","writable":false,"enumerable":false,"configurable":true}"#,
];

/// Defining a property (a literal's, JSON.parse's, a class field's) where the runtime's direct
/// path for a new property of an ordinary extensible object does not apply (docs/performance.md,
/// "QuickJS's own costs") gives what V8 gives: a key given twice, an accessor replaced, an object
/// not extensible, sealed or with the property already, a Proxy's trap, an array's index, a
/// String's `length`; in a fresh instance and twice in a kept one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn properties_defined_where_an_object_refuses_or_has_them_follow_the_specification() {
    let (server, _dir) = start(
        json!([
            globals("define", "js-globals.wasm", "define", None),
            globals("define-kept", "js-globals.mjs", "define", None),
        ]),
        &["js-globals"],
    );
    let texts = numbered_wakes(&server, &["define", "define-kept", "define-kept"]).await;
    assert_each_lists(&texts, DEFINED);
}

/// Posts `{"n": <index>}` to each of `paths` in turn (`n` keeps equal texts apart: equal wake
/// texts would be one pending event) and returns the texts of the wakes, one per path.
async fn numbered_wakes(server: &Hookgate, paths: &[&str]) -> Vec<String> {
    for (n, path) in paths.iter().enumerate() {
        let r = server
            .hook(&format!("/hooks/{path}"))
            .json(&json!({"n": n}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let texts = server.wake_texts().await;
    assert_eq!(texts.len(), paths.len(), "{texts:?}");
    texts
}

/// What the top level started finishes at build time; a reply can be a view into a larger
/// buffer; a promise nothing settles and a recursion without end fail their call alone; a
/// rejection nothing handles is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_work_replies_and_runaway_calls() {
    let (server, _dir) = start(
        json!([
            globals("queued", "js-globals.wasm", "queued", None),
            globals("respond", "js-globals.wasm", "respond", None),
            globals("pending", "js-globals.mjs", "pending", None),
            globals("recurse", "js-globals.mjs", "recurse", None),
            globals("floating", "js-globals.wasm", "floating", None),
        ]),
        &["js-globals"],
    );
    let post = |path: &'static str| {
        server
            .hook(&format!("/hooks/{path}"))
            .json(&json!({}))
            .send()
    };
    assert_eq!(post("queued").await.unwrap().status(), 200);
    assert_eq!(server.wake_texts().await, ["settled at build time"]);

    let reply = post("respond").await.unwrap();
    assert_eq!(reply.status(), 202);
    assert_eq!(reply.headers()["content-type"], "text/plain");
    assert_eq!(reply.text().await.unwrap(), "accepted");

    let failed = (500, json!({"ok": false, "error": "hook mapping failed"}));
    for path in ["pending", "recurse", "recurse"] {
        assert_eq!(json_of(post(path).await.unwrap()).await, failed, "{path}");
    }
    assert_eq!(
        post("queued").await.unwrap().status(),
        200,
        "the server serves on"
    );
    assert_eq!(post("floating").await.unwrap().status(), 200);
    let (_, log) = server.terminate();
    assert!(
        log.contains("the transform's promise never settles"),
        "{log}"
    );
    assert!(log.contains("mapping=recurse"), "{log}");
    let line = log
        .lines()
        .find(|l| l.contains("nothing handled it: nobody caught this"))
        .unwrap_or_else(|| panic!("the rejection is not logged:\n{log}"));
    assert!(
        line.contains("WARN") && line.contains("mapping=floating"),
        "{line}"
    );
}

/// The module's state is loaded once at build time and shared by every instance's start, but
/// what must differ does: each fresh instance draws its own random numbers. Module-level state
/// and properties set on the global object live as long as the instance: one call for a `.wasm`
/// mapping, the mapping's calls for a JavaScript module's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_instances_start_clean_and_draw_their_own_randomness() {
    let (server, _dir) = start(
        json!([
            globals("random", "js-globals.mjs", "random", Some(1)),
            globals("count-fresh", "js-globals.wasm", "count", None),
            globals("count-kept", "js-globals.mjs", "count", None),
        ]),
        &["js-globals"],
    );
    let paths = [
        "random",
        "random",
        "count-fresh",
        "count-fresh",
        "count-kept",
        "count-kept",
    ];
    let texts = numbered_wakes(&server, &paths).await;
    let draws: Vec<(&str, &str)> = texts[..2]
        .iter()
        .map(|t| t.split_once(' ').unwrap())
        .collect();
    assert_ne!(
        draws[0].0, draws[1].0,
        "Math.random repeats across instances"
    );
    assert_ne!(
        draws[0].1, draws[1].1,
        "randomUUID repeats across instances"
    );
    assert_eq!(
        texts[2..],
        [
            "count 1/1 (2)",
            "count 1/1 (3)",
            "count 1/1 (4)",
            "count 2/2 (5)"
        ],
        "a fresh instance saw what an earlier call left in the module or on the global object"
    );
}

/// `fetch()` exists only to say that there is no network; the request fails with that in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_says_there_is_no_network() {
    let (server, _dir) = start(
        json!([{"id": "f", "match": {"path": "f"}, "transform": {"module": "js-fetches.wasm"}}]),
        &["js-fetches"],
    );
    let r = server
        .hook("/hooks/f")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await,
        (500, json!({"ok": false, "error": "hook mapping failed"}))
    );
    let (_, log) = server.terminate();
    assert!(
        log.contains("fetch() is not available in hookgate transforms (no network)"),
        "{log}"
    );
}

/// Builds `source` as a module with the SDK: whether it built, and what the build printed.
fn build(source: &str) -> (bool, String) {
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms/js-sdk");
    js_transforms(); // installs the SDK's packages
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("top.mjs");
    std::fs::write(&module, source).unwrap();
    let output = Command::new("node")
        .arg(sdk.join("build.mjs"))
        .arg(&module)
        .arg("-o")
        .arg(dir.path().join("top.wasm"))
        .output()
        .unwrap();
    let built = dir.path().join("top.wasm").exists();
    assert_eq!(built, output.status.success());
    (built, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// A module's top level runs once, when it is built: an exception there (also in async work it
/// started), a random number drawn there (which every instance would share) or a `fetch` fails
/// the build with the reason, and what it logs is printed by the build.
#[test]
fn a_module_whose_top_level_fails_does_not_build() {
    for (source, reason) in [
        (
            "throw new Error('no config at load');\nexport default () => null;\n",
            "no config at load",
        ),
        (
            "const seed = Math.random();\nexport default () => ({ text: String(seed) });\n",
            "random numbers are not available at the top level",
        ),
        (
            "const id = crypto.randomUUID();\nexport default () => ({ text: id });\n",
            "random numbers are not available at the top level",
        ),
        (
            "await fetch('http://127.0.0.1:1/');\nexport default () => null;\n",
            "fetch() is not available in hookgate transforms (no network)",
        ),
        (
            "(async () => { throw new Error('late failure'); })();\nexport default () => null;\n",
            "rejected and nothing handled it: late failure",
        ),
        (
            "const down = (n) => down(n + 1) + 1;\ndown(0);\nexport default () => null;\n",
            "the runtime trapped: call stack exhausted",
        ),
    ] {
        let (built, stderr) = build(source);
        assert!(!built, "{stderr}");
        assert!(
            stderr.contains("failed while loading") && stderr.contains(reason),
            "{stderr}"
        );
        assert!(
            !stderr.contains("wizer.initialize"),
            "wizer's noise: {stderr}"
        );
    }
    let (built, stderr) = build("console.log('loaded at build');\nexport default () => null;\n");
    assert!(built, "{stderr}");
    assert!(stderr.contains("loaded at build"), "{stderr}");
}
