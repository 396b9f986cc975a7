//! The canonical ABI at a 0.2 transform's edge, through components written here in WAT: a merge
//! with every field set, each to a value no field of its type shares, is read where the
//! component put it, and the request's strings reach it, whether the component's strings are
//! UTF-8 (hookgate's own lowering and lifting, docs/performance.md, "The host's side of a call")
//! or UTF-16 (wasmtime's, which encodes them).

use serde_json::{Value, json};

use crate::harness::*;

/// Where the component writes its `result<outcome, string>`, and where its fixed strings go.
const RESULT_AT: usize = 256;
const STRINGS_AT: usize = 1024;

/// The strings the merge sets, in `overrides`' order, but for `text`, which is the request's
/// `name` as the component received it.
const STRINGS: [(&str, &str); 9] = [
    ("message", "méssage-2 ✓"),
    ("name", "ñame-3"),
    ("agentId", "agent-id-4"),
    ("sessionKey", "session-key-5"),
    ("sessionMode", "session-mode-6"),
    ("channel", "channel-7"),
    ("to", "to-8"),
    ("model", "model-9"),
    ("thinking", "thinking-10"),
];

/// The request's name, which comes back as the merge's `text`.
const NAME: &str = "Ünïcode näme ✓";

/// `overrides`' fields as the canonical ABI lays them out, walked from its rules (an option of
/// an enum or a bool is 2 bytes, aligned to 1; of a string, 12, aligned to 4, the string 4 bytes
/// in; of a u32, 8, aligned to 4), not from hookgate's or wasmtime's tables.
fn layout() -> Vec<(&'static str, usize)> {
    let fields: [(&str, usize, usize); 17] = [
        ("kind", 2, 1),
        ("text", 12, 4),
        ("mode", 2, 1),
        ("message", 12, 4),
        ("wakeMode", 2, 1),
        ("name", 12, 4),
        ("agentId", 12, 4),
        ("sessionKey", 12, 4),
        ("sessionKeySource", 2, 1),
        ("sessionMode", 12, 4),
        ("deliver", 2, 1),
        ("allowUnsafeExternalContent", 2, 1),
        ("channel", 12, 4),
        ("to", 12, 4),
        ("model", 12, 4),
        ("thinking", 12, 4),
        ("timeoutSeconds", 8, 4),
    ];
    let mut offset: usize = 0;
    fields
        .iter()
        .map(|&(name, size, align)| {
            offset = offset.next_multiple_of(align);
            let at = offset;
            offset += size;
            (name, at)
        })
        .collect()
}

/// A string in the component's encoding: its bytes and its length as the ABI counts it.
fn encoded(text: &str, utf16: bool) -> (Vec<u8>, u32) {
    if utf16 {
        let units: Vec<u16> = text.encode_utf16().collect();
        let bytes = units.iter().flat_map(|unit| unit.to_le_bytes()).collect();
        (bytes, units.len() as u32)
    } else {
        (text.as_bytes().to_vec(), text.len() as u32)
    }
}

/// The component: its `transform` returns `ok(merge(overrides))` with every field set, `text`
/// the pointer pair of the request's `name` (the record's first field).
fn component(utf16: bool) -> Vec<u8> {
    let layout = layout();
    let at = |field: &str| layout.iter().find(|(name, _)| *name == field).unwrap().1;
    // result: ok (0) at 0, the outcome at 4: merge (4) at 4, the overrides at 8.
    let mut result = vec![0u8; 8 + 148];
    result[4] = 4;
    let fields = &mut result[8..];
    let mut set = |field: &str, payload_at: usize, payload: &[u8]| {
        fields[at(field)] = 1;
        let from = at(field) + payload_at;
        fields[from..from + payload.len()].copy_from_slice(payload);
    };
    set("kind", 1, &[1]); // agent
    set("mode", 1, &[1]); // next-heartbeat
    set("wakeMode", 1, &[0]); // now
    set("sessionKeySource", 1, &[0]); // fixed
    set("deliver", 1, &[1]);
    set("allowUnsafeExternalContent", 1, &[0]);
    set("timeoutSeconds", 4, &1_234_567u32.to_le_bytes());
    set("text", 4, &[0; 8]); // the request's name, copied in by the call
    let mut strings = Vec::new();
    for (field, text) in STRINGS {
        let (bytes, len) = encoded(text, utf16);
        let ptr = (STRINGS_AT + strings.len()) as u32;
        strings.extend_from_slice(&bytes);
        while strings.len() % 2 != 0 {
            strings.push(0);
        }
        let mut pair = ptr.to_le_bytes().to_vec();
        pair.extend_from_slice(&len.to_le_bytes());
        set(field, 4, &pair);
    }
    let text_pair = RESULT_AT + 8 + at("text") + 4;
    let data = |bytes: &[u8]| {
        bytes
            .iter()
            .map(|b| format!("\\{b:02x}"))
            .collect::<String>()
    };
    let encoding = if utf16 { "utf16" } else { "utf8" };
    let wat = format!(
        r#"(component
  (core module $m
    (memory (export "memory") 2)
    (global $next (mut i32) (i32.const 8192))
    (func (export "realloc") (param $old i32) (param $old_size i32) (param i32 i32) (result i32)
      (local $at i32)
      ;; A shrink (wasmtime gives back what a string's transcoding did not use) stays put.
      (if (i32.and (i32.ne (local.get $old) (i32.const 0))
                   (i32.le_u (local.get 3) (local.get $old_size)))
        (then (return (local.get $old))))
      (local.set $at (i32.and
        (i32.add (global.get $next) (i32.sub (local.get 2) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get 2))))
      (global.set $next (i32.add (local.get $at) (local.get 3)))
      (if (i32.gt_u (global.get $next) (i32.shl (memory.size) (i32.const 16)))
        (then (drop (memory.grow (i32.add (i32.const 1) (i32.shr_u
          (i32.sub (global.get $next) (i32.shl (memory.size) (i32.const 16)))
          (i32.const 16)))))))
      (memory.copy (local.get $at) (local.get $old) (local.get $old_size))
      (local.get $at))
    (func (export "transform") (param $req i32) (result i32)
      (i64.store (i32.const {text_pair}) (i64.load (local.get $req)))
      (i32.const {RESULT_AT}))
    (data (i32.const {RESULT_AT}) "{result}")
    (data (i32.const {STRINGS_AT}) "{strings}"))
  (core instance $i (instantiate $m))
  (component $types
    (type $wm (enum "now" "next-heartbeat"))
    (export $wake-mode "wake-mode" (type $wm))
    (type $ak (enum "wake" "agent"))
    (export $action-kind "action-kind" (type $ak))
    (type $ks (enum "fixed" "external"))
    (export $key-source "key-source" (type $ks))
    (type $rq (record (field "name" string) (field "url" string)
      (field "headers" (list (tuple string string))) (field "query" (list (tuple string string)))
      (field "body" (list u8)) (field "mapping-id" string) (field "config" (option string))
      (field "export-name" (option string))))
    (export "request" (type $rq))
    (type $wk (record (field "text" string) (field "mode" (option $wake-mode))))
    (export $wake "wake" (type $wk))
    (type $ag (record (field "message" string) (field "name" (option string))
      (field "agent-id" (option string)) (field "session-key" (option string))
      (field "wake-mode" (option $wake-mode)) (field "deliver" (option bool))
      (field "channel" (option string)) (field "to" (option string))
      (field "model" (option string)) (field "thinking" (option string))
      (field "timeout-seconds" (option u32))))
    (export $agent "agent" (type $ag))
    (type $ac (variant (case "wake" $wake) (case "agent" $agent)))
    (export $action "action" (type $ac))
    (type $ov (record (field "kind" (option $action-kind)) (field "text" (option string))
      (field "mode" (option $wake-mode)) (field "message" (option string))
      (field "wake-mode" (option $wake-mode)) (field "name" (option string))
      (field "agent-id" (option string)) (field "session-key" (option string))
      (field "session-key-source" (option $key-source)) (field "session-mode" (option string))
      (field "deliver" (option bool)) (field "allow-unsafe-external-content" (option bool))
      (field "channel" (option string)) (field "to" (option string))
      (field "model" (option string)) (field "thinking" (option string))
      (field "timeout-seconds" (option u32))))
    (export $overrides "overrides" (type $ov))
    (type $rp (record (field "status" u16) (field "content-type" (option string))
      (field "body" (list u8))))
    (export $reply "reply" (type $rp))
    (type $oc (variant (case "run" $action) (case "keep") (case "skip")
      (case "respond" $reply) (case "merge" $overrides)))
    (export "outcome" (type $oc)))
  (instance $types-instance (instantiate $types))
  (export $types-export "hookgate:transform/types@0.2.0" (instance $types-instance))
  (alias export $types-export "request" (type $request))
  (alias export $types-export "outcome" (type $outcome))
  (func $transform (param "req" $request) (result (result $outcome (error string)))
    (canon lift (core func $i "transform") (memory $i "memory") (realloc (func $i "realloc"))
      string-encoding={encoding}))
  (instance $handler
    (export "request" (type $request))
    (export "outcome" (type $outcome))
    (export "transform" (func $transform)))
  (export "hookgate:transform/handler@0.2.0" (instance $handler)))"#,
        result = data(&result),
        strings = data(&strings),
    );
    wat::parse_str(&wat).unwrap_or_else(|err| panic!("{err}\n{wat}"))
}

/// What `hookgate transform run` prints for the component of `utf16`'s encoding.
fn run(utf16: bool) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("every-field.wasm");
    std::fs::write(&module, component(utf16)).unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(&body, "{}").unwrap();
    let out = std::process::Command::new(binary())
        .args(["transform", "run"])
        .arg(&module)
        .arg("--body")
        .arg(&body)
        .args(["--name", NAME])
        .env("XDG_CACHE_HOME", dir.path())
        .output()
        .unwrap();
    assert_succeeded(&out);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn expected() -> Value {
    let mut overrides = json!({
        "kind": "agent",
        "text": NAME,
        "mode": "next-heartbeat",
        "wakeMode": "now",
        "sessionKeySource": "static",
        "deliver": true,
        "allowUnsafeExternalContent": false,
        "timeoutSeconds": 1_234_567,
    });
    for (field, text) in STRINGS {
        overrides[field] = json!(text);
    }
    json!({"outcome": "merge", "overrides": overrides})
}

/// Field by field, so that a failure names the field read from the wrong place.
fn assert_every_field(outcome: &Value) {
    let expected = expected();
    assert_eq!(outcome["outcome"], "merge", "{outcome:#}");
    let got = outcome["overrides"].as_object().unwrap();
    for (field, value) in expected["overrides"].as_object().unwrap() {
        assert_eq!(got.get(field), Some(value), "{field} in {outcome:#}");
    }
    assert_eq!(got.len(), 17, "{outcome:#}");
}

#[test]
fn a_utf8_components_merge_is_read_field_by_field_where_it_put_each() {
    assert_every_field(&run(false));
}

#[test]
fn a_utf16_components_request_and_merge_cross_in_its_encoding() {
    assert_every_field(&run(true));
}
