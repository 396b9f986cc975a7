//! A secret as the file gives it: the value itself (after `${ENV}`), or `{ "file": "path" }`, read
//! relative to the configuration's directory.

use std::path::Path;

use super::ConfigError;
use super::model::SecretValue;

/// The secret at `key`, trimmed of a file's surrounding whitespace; `None` when absent or blank,
/// a problem when its file cannot be read.
pub(super) fn secret(
    value: Option<SecretValue>,
    key: &str,
    config_dir: &Path,
    problems: &mut Vec<ConfigError>,
) -> Option<String> {
    let value = match value? {
        SecretValue::Inline(value) => value,
        SecretValue::File(file) => {
            let path = config_dir.join(&file.file);
            match std::fs::read_to_string(&path) {
                Ok(contents) => contents.trim().to_string(),
                Err(err) => {
                    problems.push(ConfigError::invalid(
                        key,
                        format!("cannot read secret file {}: {err}", path.display()),
                    ));
                    return None;
                }
            }
        }
    };
    (!value.trim().is_empty()).then_some(value)
}
