//! A secret as the file writes it: the value itself, or `{ "file": "path" }`. Reading the file
//! is the building's (`config::secret`).

use serde::Deserialize;

/// A secret: either the value itself or `{ "file": "path" }`, whose trimmed contents are the value.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
#[schemars(extend("x-leaf" = true))]
pub enum SecretValue {
    Inline(String),
    File(SecretFile),
}

/// The `{ "file": ... }` form of a secret.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretFile {
    /// The file, relative to the config dir.
    pub file: String,
}
