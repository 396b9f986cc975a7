//! Reading the configuration file: JSON5 text, `${NAME}` substitution from the environment, and the
//! typed document with unknown keys reported by their path.

use std::path::Path;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::ConfigError;
use super::model::FileConfig;

/// Parses JSON5 `text`, substitutes `${NAME}` in every string from `env`, and deserialises the result.
///
/// `env` is a parameter rather than `std::env::var` so that loading stays a function of its inputs.
/// `$${` is an escaped, literal `${`.
pub fn parse_document(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<FileConfig, ConfigError> {
    let mut value: Value = json5::from_str(text).map_err(syntax_error)?;
    substitute_env(&mut value, &mut String::new(), env)?;
    serde_path_to_error::deserialize(&value).map_err(describe_shape_error)
}

/// Where the syntax error is, without the parser's message: that quotes the offending source
/// line, which may hold a secret, and the message goes to the log and to `GET /api/config`.
fn syntax_error(err: json5::Error) -> ConfigError {
    let json5::Error::Message { location, .. } = err;
    ConfigError::Syntax(match location {
        Some(at) => format!("at line {} column {}", at.line, at.column),
        None => "unexpected end or structure".into(),
    })
}

/// The SHA-256 of a configuration file's bytes: what the reload watcher compares.
pub type Digest = [u8; 32];

/// Reads the file at `path` and parses it with the process environment; also returns the digest
/// of exactly the bytes parsed, so that a change made while loading is not mistaken for seen.
pub fn read_document(path: &Path) -> Result<(FileConfig, Digest), ConfigError> {
    let bytes = std::fs::read(path).map_err(|e| ConfigError::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let digest = Sha256::digest(&bytes).into();
    let text = String::from_utf8(bytes).map_err(|_| ConfigError::Read {
        path: path.display().to_string(),
        reason: "not UTF-8 text".into(),
    })?;
    Ok((
        parse_document(&text, &|name| std::env::var(name).ok())?,
        digest,
    ))
}

/// The digest of the file as it is now, if it can be read.
pub fn file_digest(path: &Path) -> Option<Digest> {
    std::fs::read(path)
        .ok()
        .map(|bytes| Sha256::digest(bytes).into())
}

fn substitute_env(
    value: &mut Value,
    path: &mut String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    match value {
        Value::String(s) if s.contains('$') => *s = expand(s, path, env)?,
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                substitute_env(item, path, env)?;
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                substitute_env(item, path, env)?;
                path.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

fn expand(
    input: &str,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after.find('}').ok_or_else(|| ConfigError::Invalid {
                key: path.to_string(),
                message: "unterminated ${ in value".into(),
            })?;
            let name = &after[..end];
            if !is_env_name(name) {
                return Err(ConfigError::Invalid {
                    key: path.to_string(),
                    message: format!("'${{{name}}}' is not a valid environment variable reference"),
                });
            }
            let value = env(name).ok_or_else(|| ConfigError::Invalid {
                key: path.to_string(),
                message: format!("environment variable {name} is not set"),
            })?;
            out.push_str(&value);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Reports a shape error at its key; serde_path_to_error's path already ends with an unknown key,
/// so "unknown field `x`, expected one of ..." becomes `a.b.x: unknown field`.
fn describe_shape_error(err: serde_path_to_error::Error<serde_json::Error>) -> ConfigError {
    let key = err.path().to_string();
    let message = shape_message(&err.inner().to_string());
    ConfigError::Invalid { key, message }
}

/// A serde message without the value it quotes: the value may be a secret (after `${ENV}`
/// expansion) and the message reaches the log and `GET /api/config`. `invalid type: string
/// "s3cr3t", expected a boolean` becomes `expected a boolean, not a string`; an unknown variant
/// keeps the variants expected. Keys (`unknown field`, `missing field`) are no values.
pub(crate) fn shape_message(serde: &str) -> String {
    if serde.starts_with("unknown field") {
        return "unknown field".into();
    }
    let value_first = ["invalid type: ", "invalid value: ", "unknown variant "];
    let Some(rest) = value_first.iter().find_map(|p| serde.strip_prefix(p)) else {
        return serde.to_string();
    };
    // The value comes first; what is expected is after the last ", expected " (a value that
    // itself holds those words is still cut off).
    let expected = rest.rsplit_once(", expected ").map(|(_, e)| e);
    if serde.starts_with("unknown variant") {
        return match expected {
            Some(expected) => format!("unknown variant, expected {expected}"),
            None => "unknown variant".into(),
        };
    }
    let kind = rest
        .split(['"', '`'])
        .next()
        .unwrap_or("")
        .trim()
        .trim_end_matches(',');
    let article = match kind.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    };
    match (expected, kind.is_empty()) {
        (Some(expected), false) => format!("expected {expected}, not {article} {kind}"),
        (Some(expected), true) => format!("expected {expected}"),
        (None, _) => "invalid value".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn unknown_key_is_reported_with_its_path() {
        let text = "{ hooks: { mappings: [{}, {}, { chanel: 'x' }] } }";
        let err = parse_document(text, &no_env).unwrap_err();
        assert_eq!(err.to_string(), "hooks.mappings[2].chanel: unknown field");
    }

    #[test]
    fn unknown_top_level_key_is_reported() {
        let err = parse_document("{ hoks: {} }", &no_env).unwrap_err();
        assert_eq!(err.to_string(), "hoks: unknown field");
    }

    #[test]
    fn env_reference_is_substituted() {
        let env = |name: &str| (name == "TOKEN").then(|| "s3cret".to_string());
        let doc = parse_document("{ hooks: { path: 'a-${TOKEN}-b' } }", &env).unwrap();
        assert_eq!(doc.hooks.path.as_deref(), Some("a-s3cret-b"));
    }

    #[test]
    fn unset_env_reference_names_the_variable_and_key() {
        let err = parse_document("{ hooks: { path: '${NOPE}' } }", &no_env).unwrap_err();
        assert_eq!(
            err.to_string(),
            "hooks.path: environment variable NOPE is not set"
        );
    }

    #[test]
    fn escaped_dollar_brace_is_literal() {
        let doc = parse_document("{ hooks: { path: '$${X}' } }", &no_env).unwrap();
        assert_eq!(doc.hooks.path.as_deref(), Some("${X}"));
    }

    #[test]
    fn json5_syntax_error_gives_the_place_but_not_the_line() {
        let err = parse_document("{\n hooks: { token: 's3cret' \n", &no_env).unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("invalid JSON5"), "{message}");
        assert!(!message.contains("s3cret"), "{message}");
    }

    #[test]
    fn shape_errors_never_repeat_the_value() {
        let secret = "s3cr3t, expected nothing";
        let message = shape_message(&format!(
            "invalid type: string \"{secret}\", expected a boolean"
        ));
        assert_eq!(message, "expected a boolean, not a string");
        assert_eq!(
            shape_message("invalid value: integer `-5`, expected u64"),
            "expected u64, not an integer"
        );
        assert_eq!(
            shape_message("unknown variant `s3cr3t`, expected `a` or `b`"),
            "unknown variant, expected `a` or `b`"
        );
        assert_eq!(shape_message("missing field `url`"), "missing field `url`");
        let text = "{ gateway: { port: 's3cr3t-port' } }";
        let err = parse_document(text, &no_env).unwrap_err().to_string();
        assert!(!err.contains("s3cr3t"), "{err}");
        assert!(err.starts_with("gateway.port: expected u16"), "{err}");
    }
}
