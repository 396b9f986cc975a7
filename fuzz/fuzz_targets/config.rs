//! Configuration text → validated `Settings`, the path `hookgate` takes at start and on reload,
//! without the file read. Whatever the text: an answer, never a panic; a syntax error names only
//! a place, never a piece of the text (which may hold a secret); and accepted settings keep the
//! documented normal form of `hooks.path` and a positive `hooks.maxBodyBytes`.
//!
//! `${NAME}` resolves to `value-of-NAME`, except names starting `UNSET` (not set) and `EMPTY`
//! (empty). Documents holding a `{ file: ... }` secret are skipped: those read from the disk,
//! which is not under test here (and `/dev/zero` would never end). The configuration directory
//! does not exist, so transform paths resolve lexically.
#![no_main]

use std::path::Path;

use hookgate::config::{ConfigError, Settings, parse_document};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let document = match parse_document(text, &env) {
        Ok(document) if document.problems.is_empty() => document.config,
        Ok(_) => return,
        Err(problems) => {
            if let [ConfigError::Syntax(place)] = problems.as_slice() {
                assert_names_a_place(place);
            }
            return;
        }
    };
    if names_a_secret_file(text) {
        return;
    }
    let Ok(settings) = Settings::build(document, Path::new("/nonexistent/hookgate-fuzz")) else {
        return;
    };
    if let Some(hooks) = &settings.hooks {
        let path = &hooks.path;
        assert!(
            path.starts_with('/') && !path.ends_with('/'),
            "hooks.path {path:?}"
        );
        assert!(hooks.max_body_bytes > 0);
    }
});

fn env(name: &str) -> Option<String> {
    if name.starts_with("UNSET") {
        None
    } else if name.starts_with("EMPTY") {
        Some(String::new())
    } else {
        Some(format!("value-of-{name}"))
    }
}

fn assert_names_a_place(place: &str) {
    let shape = place
        .strip_prefix("at line ")
        .and_then(|rest| rest.split_once(" column "));
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    assert!(
        place == "unexpected end or structure"
            || shape.is_some_and(|(l, c)| numeric(l) && numeric(c)),
        "syntax error quotes the text: {place:?}"
    );
}

/// Whether any object in the document has a `file` key: the shape of a secret read from disk.
fn names_a_secret_file(text: &str) -> bool {
    fn walk(value: &Value) -> bool {
        match value {
            Value::Object(map) => map.contains_key("file") || map.values().any(walk),
            Value::Array(items) => items.iter().any(walk),
            _ => false,
        }
    }
    json5::from_str::<Value>(text).map_or(true, |value| walk(&value))
}
