//! A mapping's `match.headers` and `match.payload` as the file writes them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// `match.headers`: header name → the value it must have, or a list of values (any of them).
pub type HeadersConfig = BTreeMap<String, HeaderValuesConfig>;

/// `match.payload`: JSON pointer → what the payload must have there.
pub type PayloadConfig = BTreeMap<String, PayloadTestConfig>;

/// One header's wanted value, or several (any of them).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged, expecting = "a header value (a string) or a list of them")]
pub enum HeaderValuesConfig {
    One(String),
    AnyOf(Vec<String>),
}

/// What the payload must have at a pointer: `{ exists: true | false }`, a list of values (any
/// of them), or one value. Any other object is refused at load: an object here is the
/// `exists` form, so that a typo in it cannot become a value no payload has.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PayloadTestConfig {
    Exists(ExistsConfig),
    AnyOf(Vec<Value>),
    Equals(Value),
}

/// `{ exists: true | false }`: whether anything, `null` included, is at the pointer.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExistsConfig {
    /// Whether anything must be at the pointer.
    pub exists: bool,
}
