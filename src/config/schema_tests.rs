//! The schema and the reference stay what the types generate, and every key is described and
//! classified.

use std::path::Path;

use super::*;

fn repo_file(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// Whether this run rewrites the generated files instead of comparing them.
fn bless() -> bool {
    std::env::var_os("HOOKGATE_BLESS").is_some()
}

#[test]
fn the_docs_key_reference_is_the_one_the_types_generate() {
    let path = repo_file("docs/configuration.md");
    let docs = std::fs::read_to_string(&path).unwrap();
    let (before, rest) = docs.split_once(REFERENCE_BEGIN).expect("begin marker");
    let (written, after) = rest.split_once(REFERENCE_END).expect("end marker");
    let generated = format!("\n{}", reference());
    if bless() {
        std::fs::write(
            &path,
            format!("{before}{REFERENCE_BEGIN}{generated}{REFERENCE_END}{after}"),
        )
        .unwrap();
        return;
    }
    assert!(
        written == generated,
        "docs/configuration.md's key reference differs from what the types generate; \
         regenerate it with `HOOKGATE_BLESS=1 cargo test --lib config::schema` (or paste \
         `hookgate config reference` between its markers)"
    );
}

#[test]
fn the_committed_schema_is_the_one_the_types_generate() {
    let path = repo_file("examples/hookgate.schema.json");
    let generated = format!("{}\n", serde_json::to_string_pretty(schema()).unwrap());
    if bless() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == generated,
        "examples/hookgate.schema.json differs from what the types generate; regenerate it \
         with `HOOKGATE_BLESS=1 cargo test --lib config::schema` (or `hookgate config schema`)"
    );
}

#[test]
fn every_key_is_described_and_classified() {
    assert!(keys().len() > 100, "{} keys", keys().len());
    for key in keys() {
        assert!(
            !key.meaning.is_empty(),
            "{} has no doc on its field",
            key.path
        );
        assert!(
            [LIVE, RESTART, RESTART_ON_NATS, RESTART_IF_LARGER].contains(&key.reload),
            "{}: {}",
            key.path,
            key.reload
        );
    }
    let restart: Vec<&str> = restart_only().map(|k| k.path.as_str()).collect();
    assert!(restart.contains(&"gateway.port"), "{restart:?}");
    let port = keys()
        .iter()
        .find(|k| k.path == "gateway.store.kind")
        .unwrap();
    assert_eq!((port.reload, port.own_reload), (RESTART, false));
}

/// An edge's routes and pull token are read per request: a reload applies them, while the
/// role and the queue's bounds, set up at start, need a restart.
#[test]
fn an_edges_routes_and_pull_token_are_live_under_a_restart_only_section() {
    let class = |path: &str| keys().iter().find(|k| k.path == path).unwrap().reload;
    assert_eq!(class("edge.serve"), RESTART);
    assert_eq!(class("edge.serve.maxPending"), RESTART);
    assert_eq!(class("edge.serve.routes"), LIVE);
    assert_eq!(class("edge.serve.pullToken"), LIVE);
    assert_eq!(class("edge.link.pullToken"), RESTART);
    let restart: Vec<&str> = restart_only().map(|k| k.path.as_str()).collect();
    assert!(!restart.contains(&"edge.serve.routes"), "{restart:?}");
}

#[test]
fn timeouts_carry_their_cap() {
    let key = keys()
        .iter()
        .find(|k| k.path == "gateway.headerTimeoutSeconds")
        .unwrap();
    assert_eq!(key.range.as_deref(), Some("> 0, ≤ 3600"));
    assert_eq!(key.default.as_deref(), Some("`10`"));
}

#[test]
fn keys_at_a_path_are_the_fields_of_its_type() {
    assert_eq!(
        keys_at(&["agents", "defaults", "heartbeat"]),
        ["every", "ackMaxChars"]
    );
    assert_eq!(
        keys_at(&["models", "providers", "openai"]),
        ["baseUrl", "apiKey", "api", "models"]
    );
    assert!(keys_at(&["hooks", "mappings", "[]"]).contains(&"forEach".to_string()));
    assert_eq!(keys_at(&["channels", "telegram"]), ["botToken", "apiBase"]);
    assert!(keys_at(&[]).contains(&"gateway".to_string()));
    assert!(!keys_at(&[]).contains(&"$schema".to_string()));
    assert!(keys_at(&["nowhere"]).is_empty());
}

#[test]
fn a_sections_field_is_spelled_as_the_file_spells_it() {
    use crate::config::model::{FileConfig, GatewayConfig, MappingConfig, TransformConfig};
    assert_eq!(
        key_of::<GatewayConfig>(None, "max_connections"),
        "gateway.maxConnections"
    );
    assert_eq!(key_of::<FileConfig>(None, "channels"), "channels");
    assert_eq!(
        key_of::<MappingConfig>(Some(2), "session_mode"),
        "hooks.mappings[2].sessionMode"
    );
    assert_eq!(
        key_of::<TransformConfig>(Some(0), "module"),
        "hooks.mappings[0].transform.module"
    );
    assert_eq!(key_of::<MappingConfig>(Some(1), ""), "hooks.mappings[1]");
}

/// Every `key!` of the validation names a section type that sits in one place of the file and
/// a field the schema spells as `key!` does (a field serde renames would not be): checked here
/// over the source, so that no message names a key the file does not have.
#[test]
fn every_key_macro_names_a_key_of_the_file() {
    let pattern = regex::Regex::new(r"key!\((\w+)(?:\[[^\]]*\])?(?:\.(\w+))?\)").unwrap();
    let dir = repo_file("src/config");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for found in pattern.captures_iter(&text) {
            let section = &found[1];
            let places = WALKED.sections.get(section);
            assert!(
                places.is_some_and(|p| p.len() == 1),
                "{}: {section} is in {places:?}",
                path.display()
            );
            if let Some(field) = found.get(2) {
                let place = &places.unwrap()[0];
                let field = camel_case(field.as_str());
                assert!(
                    keys_at(&segments(place)).contains(&field),
                    "{}: {section} has no key {field}",
                    path.display()
                );
            }
            seen += 1;
        }
    }
    assert!(seen > 40, "{seen} uses of key! found");
}
