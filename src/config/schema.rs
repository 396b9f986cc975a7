//! The configuration described once, by its types: the JSON Schema that `schemars` derives from
//! the file's structs (each key's doc, default, range and reload class written on its field),
//! and everything read from it: the schema `hookgate config schema` prints, the key reference
//! of docs/configuration.md (`hookgate config reference`), the keys each section reads (for
//! unknown-key suggestions and the OpenClaw import) and the keys only a restart applies.
//!
//! A field's attributes: its doc comment is the key's meaning; `extend("default" = ..)` its
//! default, written with the constant the code applies; `extend("x-default" = "..")` a default
//! that is no value (`half of maxConnections`); `range(..)` and `extend("exclusiveMinimum" = 0)`
//! its bounds; `extend("x-reload" = ..)` one of [`RESTART`], [`RESTART_ON_NATS`],
//! [`RESTART_IF_LARGER`] when a change needs a restart (the keys under it inherit it), or
//! [`LIVE`] on a key under such a one that a reload does apply; a key that says nothing takes
//! the class of the key it is under, and at the top, effect on reload.

use std::collections::HashMap;
use std::sync::LazyLock;

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

use super::model::FileConfig;
pub use super::model::{LIVE, RESTART, RESTART_IF_LARGER, RESTART_ON_NATS};

/// The generator every schema here comes from: draft-07, which editors read.
pub(super) fn generator() -> schemars::SchemaGenerator {
    SchemaSettings::draft07().into_generator()
}

static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    let mut root = generator().into_root_schema_for::<FileConfig>().to_value();
    root["title"] = "hookgate configuration".into();
    // An editor's hint, which the loader takes out before reading: named so that the schema
    // does not refuse the key that names it.
    let hint = serde_json::json!({
        "description": "The JSON Schema of this file, for editors; ignored by hookgate.",
        "type": "string",
    });
    if let Some(Value::Object(properties)) = root.get_mut("properties") {
        let mut with_hint = Map::new();
        with_hint.insert("$schema".into(), hint);
        with_hint.append(properties);
        *properties = with_hint;
    }
    root
});

/// The JSON Schema of the configuration file (`hookgate config schema`).
pub fn schema() -> &'static Value {
    &SCHEMA
}

/// One key of the file, as the types describe it.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// Its path: `gateway.port`; `[]` stands for any element of a list, `<name>` for any key of
    /// a map (`models.providers.<name>.apiKey`).
    pub path: String,
    /// What it means: its field's doc, else its type's.
    pub meaning: String,
    /// Its default as the file would write it, or what its absence means; `None`: nothing.
    pub default: Option<String>,
    /// The values it takes, when bounded (`> 0, ≤ 3600`).
    pub range: Option<String>,
    /// [`LIVE`], or the restart class of this key or of the key it is under.
    pub reload: &'static str,
    /// Whether the restart class is this key's own, not inherited.
    pub own_reload: bool,
}

/// Every key, and where each section type sits in the file (by its schema's name).
struct Walked {
    keys: Vec<Key>,
    sections: HashMap<String, Vec<String>>,
}

static WALKED: LazyLock<Walked> = LazyLock::new(|| {
    let mut walked = Walked {
        keys: Vec::new(),
        sections: HashMap::new(),
    };
    let root = <FileConfig as schemars::JsonSchema>::schema_name();
    walked
        .sections
        .insert(root.into_owned(), vec![String::new()]);
    walk(schema(), "", LIVE, &mut walked);
    walked.keys.retain(|key| key.path != "$schema");
    walked
});

/// Every key of the file, in the order the types declare them, sections before their keys.
pub fn keys() -> &'static [Key] {
    &WALKED.keys
}

/// The key of `field` (as Rust names it) of the section type `T`, as the file spells it:
/// `gateway.maxConnections`; `index` numbers the element of the list the section is in
/// (`hooks.mappings[2].sessionMode`). An empty `field` is the section itself. Call it through
/// `config::key!`, which has the compiler check that the field exists.
///
/// A type that sits in several places of the file (`TransformLimitsConfig`) has no one key:
/// its checks are given their place by their caller.
pub fn key_of<T: schemars::JsonSchema>(index: Option<usize>, field: &str) -> String {
    let name = T::schema_name();
    let places = WALKED.sections.get(name.as_ref());
    debug_assert!(
        places.is_some_and(|p| p.len() == 1),
        "{name} is in {places:?}, not in one place of the file"
    );
    let section = places.and_then(|p| p.first()).map_or("", String::as_str);
    let mut key = match index {
        Some(i) => section.replacen("[]", &format!("[{i}]"), 1),
        None => section.to_string(),
    };
    if !field.is_empty() {
        let field = camel_case(field);
        debug_assert!(
            keys_at(&segments(section)).contains(&field),
            "{section} has no key {field}: a field serde renames is named by its own section"
        );
        key = join(&key, &field);
    }
    key
}

/// `hooks.mappings[].transform` as [`keys_at`] takes it: `hooks`, `mappings`, `[]`, `transform`.
fn segments(path: &str) -> Vec<&str> {
    path.split('.')
        .filter(|s| !s.is_empty())
        .flat_map(|s| match s.strip_suffix("[]") {
            Some(name) => vec![name, "[]"],
            None => vec![s],
        })
        .collect()
}

/// `max_connections` as serde's `rename_all = "camelCase"` spells it: `maxConnections`.
fn camel_case(field: &str) -> String {
    let mut parts = field.split('_');
    let first = parts.next().unwrap_or_default().to_string();
    parts.fold(first, |mut out, part| {
        let mut chars = part.chars();
        if let Some(c) = chars.next() {
            out.extend(c.to_uppercase());
            out.push_str(chars.as_str());
        }
        out
    })
}

/// The keys whose own field says that a change needs a restart, with the class it says.
pub fn restart_only() -> impl Iterator<Item = &'static Key> {
    keys()
        .iter()
        .filter(|key| key.own_reload && key.reload != LIVE)
}

/// The keys the object at `path` reads (segments as in [`Key::path`]; a map's key may be given
/// as itself), in declaration order; none when `path` is no object of the file.
pub fn keys_at(path: &[&str]) -> Vec<String> {
    let root = schema();
    let mut nodes = objects(root, root);
    for segment in path {
        nodes = nodes
            .into_iter()
            .filter_map(|node| child(node, segment))
            .flat_map(|node| objects(node, root))
            .collect();
    }
    let mut names: Vec<String> = Vec::new();
    for node in nodes {
        for name in node
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if !names.contains(name.0) {
                names.push(name.0.clone());
            }
        }
    }
    names.retain(|name| name != "$schema");
    names
}

/// The node under `node` at `segment`: a property, else a map's value (`<name>` or any key
/// the map does not declare), or a list's element for `[]`.
fn child<'a>(node: &'a Value, segment: &str) -> Option<&'a Value> {
    if segment == "[]" {
        return node.get("items");
    }
    if let Some(property) = node.get("properties").and_then(|p| p.get(segment)) {
        return Some(property);
    }
    node.get("additionalProperties").filter(|v| v.is_object())
}

/// The schemas `node` stands for once its references are followed and its alternatives
/// (an `Option`, an untagged enum) taken apart; none for a value whose keys are no keys of the
/// file (`x-leaf`: a secret's `{ file }` form).
fn objects<'a>(node: &'a Value, root: &'a Value) -> Vec<&'a Value> {
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let name = reference.rsplit('/').next().unwrap_or_default();
        return root
            .get("definitions")
            .and_then(|d| d.get(name))
            .map(|target| objects(target, root))
            .unwrap_or_default();
    }
    if node.get("x-leaf").is_some() {
        return Vec::new();
    }
    let alternatives = ["allOf", "anyOf", "oneOf"]
        .iter()
        .find_map(|k| node.get(*k).and_then(Value::as_array));
    match alternatives {
        Some(alternatives) => alternatives.iter().flat_map(|a| objects(a, root)).collect(),
        None => vec![node],
    }
}

/// Adds the keys under `node` (at `path`) to `out`, depth first, and the sections it names.
fn walk(node: &Value, path: &str, reload: &'static str, out: &mut Walked) {
    for name in references(node) {
        let places = out.sections.entry(name.to_string()).or_default();
        if !places.iter().any(|p| p == path) {
            places.push(path.to_string());
        }
    }
    for object in objects(node, schema()) {
        let properties = object.get("properties").and_then(Value::as_object);
        for (name, property) in properties.into_iter().flatten() {
            let key = describe(property, join(path, name), reload);
            let reload = key.reload;
            let at = key.path.clone();
            out.keys.push(key);
            walk(property, &at, reload, out);
        }
        if let Some(element) = object.get("items").filter(|v| v.is_object()) {
            walk(element, &format!("{path}[]"), reload, out);
        }
        if let Some(value) = object.get("additionalProperties").filter(|v| v.is_object()) {
            walk(value, &join(path, "<name>"), reload, out);
        }
    }
}

/// The definitions `node` names itself or through its alternatives: the section types it is.
fn references(node: &Value) -> Vec<&str> {
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        return reference.rsplit('/').next().into_iter().collect();
    }
    ["allOf", "anyOf", "oneOf"]
        .iter()
        .filter_map(|k| node.get(*k).and_then(Value::as_array))
        .flatten()
        .flat_map(references)
        .collect()
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// The key at `path` whose schema is `property`, under a key of class `inherited`.
fn describe(property: &Value, path: String, inherited: &'static str) -> Key {
    let root = schema();
    let text = |v: &Value| {
        v.get("description")
            .and_then(Value::as_str)
            .map(String::from)
    };
    let meaning = text(property)
        .or_else(|| objects(property, root).into_iter().find_map(text))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let own = property.get("x-reload").and_then(Value::as_str);
    let own = [LIVE, RESTART, RESTART_ON_NATS, RESTART_IF_LARGER]
        .into_iter()
        .find(|class| Some(*class) == own);
    Key {
        path,
        meaning,
        default: default_of(property),
        range: range_of(property),
        reload: own.unwrap_or(inherited),
        own_reload: own.is_some(),
    }
}

fn default_of(property: &Value) -> Option<String> {
    if let Some(text) = property.get("x-default").and_then(Value::as_str) {
        return Some(text.to_string());
    }
    match property.get("default")? {
        Value::String(text) => Some(format!("`{text}`")),
        value => Some(format!("`{value}`")),
    }
}

fn range_of(property: &Value) -> Option<String> {
    if let Some(Value::Array(values)) = property.get("enum") {
        let values: Vec<String> = values
            .iter()
            .filter_map(Value::as_str)
            .map(|v| format!("`{v}`"))
            .collect();
        return Some(values.join(", "));
    }
    let bound = |name: &str| property.get(name).and_then(Value::as_f64);
    let number = |n: f64| format!("{n}");
    let low = match (bound("exclusiveMinimum"), bound("minimum")) {
        (Some(n), _) => Some(format!("> {}", number(n))),
        (None, Some(n)) if n > 0.0 => Some(format!("≥ {}", number(n))),
        _ => None,
    };
    let high = bound("maximum").map(|n| format!("≤ {}", number(n)));
    match (low, high) {
        (None, None) => None,
        (low, high) => Some(low.into_iter().chain(high).collect::<Vec<_>>().join(", ")),
    }
}

/// The markers around the generated key reference in docs/configuration.md.
pub const REFERENCE_BEGIN: &str = "<!-- generated by `hookgate config reference`: do not edit -->";
pub const REFERENCE_END: &str = "<!-- end of generated reference -->";

/// The key reference of docs/configuration.md (`hookgate config reference`): one row per key,
/// as [`keys`] describes it.
pub fn reference() -> String {
    let cell = |text: &str| text.replace('|', "\\|");
    let mut out =
        String::from("| Key | Default | Values | Reload | Meaning |\n|---|---|---|---|---|\n");
    for key in keys() {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            key.path,
            cell(key.default.as_deref().unwrap_or("")),
            cell(key.range.as_deref().unwrap_or("")),
            key.reload,
            cell(&key.meaning),
        ));
    }
    out
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
