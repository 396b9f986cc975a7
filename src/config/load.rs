//! Reading the configuration file: JSON5 text, `${NAME}` substitution from the environment, and the
//! typed document with unknown keys reported by their path.

use std::path::Path;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use std::collections::HashMap;

use super::ConfigError;
use super::model::FileConfig;
use super::openclaw::ConfigNotice;
use super::suggest::closest;

/// A configuration file read as far as it could be.
#[derive(Debug)]
pub struct Document {
    /// The typed document, with every key that could not be understood left out (so that the
    /// validation that follows still finds the problems of the rest).
    pub config: FileConfig,
    /// Every problem of the file's shape and `${ENV}` references, each naming its key.
    pub problems: Vec<ConfigError>,
    /// OpenClaw keys taken in hookgate's own form, or left out, and why.
    pub notices: Vec<ConfigNotice>,
}

/// How many shape problems one file reports before the rest are left for the next run.
const MAX_SHAPE_PROBLEMS: usize = 100;

/// Where the `${NAME}` references of a document take their values.
#[derive(Clone, Copy)]
pub enum EnvLookup<'a> {
    /// From this lookup (the process environment, for the file in force), then, for a name it
    /// lacks, from the document's own `env.vars`, as in the OpenClaw gateway.
    Process(&'a dyn Fn(&str) -> Option<String>),
    /// From the document's own `env.vars` only; any other name reads as `[env NAME]` and is
    /// never missing. A candidate configuration sent to the API is read so: its answer may
    /// show what its strings hold, and the server's environment is not its to read.
    Sealed,
}

/// Parses JSON5 `text` as [`parse_document_with`] does, `${NAME}` read from `env`, then from
/// the document's `env.vars`.
///
/// `env` is a parameter rather than `std::env::var` so that loading stays a function of its inputs.
pub fn parse_document(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Document, Vec<ConfigError>> {
    parse_document_with(text, EnvLookup::Process(env))
}

/// Parses JSON5 `text`, substitutes `${NAME}` in every string as `lookup` says, and
/// deserialises the result, collecting every problem rather than stopping at the first: a key
/// that does not fit is reported, left out, and the document deserialised again.
///
/// `$${` is an escaped, literal `${`. Only a syntax error, or a problem that leaving keys out
/// cannot mend (at the top level, or past [`MAX_SHAPE_PROBLEMS`]), ends the reading early.
pub fn parse_document_with(
    text: &str,
    lookup: EnvLookup<'_>,
) -> Result<Document, Vec<ConfigError>> {
    let mut value: Value = json5::from_str(text).map_err(|e| vec![syntax_error(e)])?;
    let mut problems = Vec::new();
    let (vars, mut notices) = env_section(&mut value);
    notices.extend(super::openclaw::adopt(&mut value, &mut problems));
    let env = |name: &str| match lookup {
        EnvLookup::Process(env) => env(name).or_else(|| vars.get(name).cloned()),
        EnvLookup::Sealed => Some(
            vars.get(name)
                .cloned()
                .unwrap_or_else(|| format!("[env {name}]")),
        ),
    };
    substitute_env(&mut value, &mut String::new(), &env, &mut problems);
    loop {
        match serde_path_to_error::deserialize::<_, FileConfig>(&value) {
            Ok(config) => {
                return Ok(Document {
                    config,
                    problems,
                    notices,
                });
            }
            Err(err) => {
                let mended =
                    problems.len() < MAX_SHAPE_PROBLEMS && leave_out(&mut value, err.path());
                problems.push(describe_shape_error(err));
                if !mended {
                    return Err(problems);
                }
            }
        }
    }
}

/// Takes OpenClaw's `env` section out of the document: its `vars` (text values by name) and a
/// notice for the rest (`shellEnv`: hookgate reads no login shell).
fn env_section(value: &mut Value) -> (HashMap<String, String>, Vec<ConfigNotice>) {
    let mut notices = Vec::new();
    let Some(Value::Object(mut env)) = value.as_object_mut().and_then(|m| m.shift_remove("env"))
    else {
        return (HashMap::new(), notices);
    };
    let vars = match env.shift_remove("vars") {
        Some(Value::Object(vars)) => vars
            .into_iter()
            .filter_map(|(name, value)| Some((name, value.as_str()?.to_string())))
            .collect(),
        _ => HashMap::new(),
    };
    for key in env.keys() {
        notices.push(ConfigNotice {
            key: format!("env.{key}"),
            message: "ignored: hookgate reads the process environment and env.vars only".into(),
        });
    }
    (vars, notices)
}

/// Removes the key at `path` (or, for an element of a list, the list) from `value`; `false` when
/// there is nothing to remove there, as for a missing key.
fn leave_out(value: &mut Value, path: &serde_path_to_error::Path) -> bool {
    use serde_path_to_error::Segment;
    // The path down to the last key of an object: an element of a list goes with its list,
    // since removing it would renumber the elements after it.
    let segments: Vec<&Segment> = path.iter().collect();
    let Some(last_key) = segments
        .iter()
        .rposition(|segment| matches!(segment, Segment::Map { .. }))
    else {
        return false;
    };
    let mut node = value;
    for segment in &segments[..last_key] {
        node = match (segment, node) {
            (Segment::Map { key }, Value::Object(map)) => match map.get_mut(key) {
                Some(child) => child,
                None => return false,
            },
            (Segment::Seq { index }, Value::Array(items)) => match items.get_mut(*index) {
                Some(child) => child,
                None => return false,
            },
            _ => return false,
        };
    }
    match (segments[last_key], node) {
        (Segment::Map { key }, Value::Object(map)) => map.shift_remove(key).is_some(),
        _ => false,
    }
}

/// Where the syntax error is and what kind it is, never the source text: that may hold a
/// secret, and the message goes to the log and to `GET /api/config`. (json5 counts lines and
/// columns from 0; editors, and this message, from 1.)
fn syntax_error(err: json5::Error) -> ConfigError {
    let what = err.code().map_or_else(
        || "unexpected structure".to_string(),
        |code| code.to_string(),
    );
    ConfigError::Syntax(match err.position() {
        Some(at) => format!("at line {} column {}: {what}", at.line + 1, at.column + 1),
        None => what,
    })
}

/// The SHA-256 of a configuration file's bytes: what the reload watcher compares.
pub type Digest = [u8; 32];

/// Reads the file at `path` and parses it with the process environment; also returns the digest
/// of exactly the bytes parsed, so that a change made while loading is not mistaken for seen.
pub fn read_document(path: &Path) -> Result<(Document, Digest), Vec<ConfigError>> {
    let bytes = std::fs::read(path).map_err(|e| {
        vec![ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        }]
    })?;
    let digest = Sha256::digest(&bytes).into();
    let text = String::from_utf8(bytes).map_err(|_| {
        vec![ConfigError::Read {
            path: path.display().to_string(),
            reason: "not UTF-8 text".into(),
        }]
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

/// Expands `${NAME}` in every string of `value`. A string that cannot be expanded is reported
/// and its key left out (with its list, for an element of one), so that the rest is still read.
/// Returns whether `value` itself must be left out.
fn substitute_env(
    value: &mut Value,
    path: &mut String,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<ConfigError>,
) -> bool {
    match value {
        Value::String(s) if s.contains('$') => match expand(s, path, env) {
            Ok(expanded) => *s = expanded,
            Err(problem) => {
                problems.push(problem);
                return true;
            }
        },
        Value::Array(items) => {
            let mut failed = false;
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                failed |= substitute_env(item, path, env, problems);
                path.truncate(len);
            }
            return failed;
        }
        Value::Object(map) => {
            let mut failed = Vec::new();
            for (key, item) in map.iter_mut() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                if substitute_env(item, path, env, problems) {
                    failed.push(key.clone());
                }
                path.truncate(len);
            }
            for key in failed {
                map.shift_remove(&key);
            }
        }
        _ => {}
    }
    false
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
            // Neither message repeats the reference: it is part of the value, and a value with
            // `${` in it may be a secret that merely looks like one.
            if !is_env_name(name) {
                return Err(ConfigError::Invalid {
                    key: path.to_string(),
                    message: "holds a ${...} that is not an environment variable reference (names are letters, digits and _; write $${ for a literal ${)".into(),
                });
            }
            let value = env(name).ok_or_else(|| ConfigError::Invalid {
                key: path.to_string(),
                message: "refers to an environment variable that is not set".into(),
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
/// so "unknown field `x`, expected one of ..." becomes `a.b.x: unknown field`, followed by
/// `; did you mean `y`?` when one of the expected keys is close to `x`.
fn describe_shape_error(err: serde_path_to_error::Error<serde_json::Error>) -> ConfigError {
    let key = err.path().to_string();
    let serde = err.inner().to_string();
    let mut message = shape_message(&serde);
    if serde.starts_with("unknown field") {
        let unknown = key.rsplit(['.', ']']).next().unwrap_or(&key);
        let known = known_beside(err.path());
        let known: Vec<&str> = known.iter().map(String::as_str).collect();
        if let Some(known) = closest(unknown, &known) {
            message = format!("unknown field; did you mean `{known}`?");
        }
    }
    ConfigError::Invalid { key, message }
}

/// The keys the object holding the last key of `path` reads, from the types' schema.
fn known_beside(path: &serde_path_to_error::Path) -> Vec<String> {
    use serde_path_to_error::Segment;
    let mut segments: Vec<String> = path
        .iter()
        .map(|segment| match segment {
            Segment::Map { key } => key.clone(),
            Segment::Seq { .. } => "[]".into(),
            _ => String::new(),
        })
        .collect();
    segments.pop();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    super::schema::keys_at(&segments)
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
    // itself holds those words is still cut off). A section is a Rust struct to serde; to
    // whoever writes the file it is an object.
    let expected = rest.rsplit_once(", expected ").map(|(_, e)| {
        if e.starts_with("struct ") {
            "an object"
        } else {
            e
        }
    });
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

    #[test]
    fn a_section_is_expected_as_an_object_not_as_a_rust_type() {
        assert_eq!(
            shape_message("invalid type: string \"x\", expected struct BotConfig"),
            "expected an object, not a string"
        );
        assert_eq!(
            shape_message("invalid type: integer `5`, expected a string"),
            "expected a string, not an integer"
        );
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_syntax_error_names_its_place_and_never_the_text() {
        let text = "{ hooks: {\n  token: 'hunter2-secret' oops } }";
        let Err(problems) = parse_document(text, &no_env) else {
            panic!("parsed");
        };
        let message = problems[0].to_string();
        assert!(
            message.starts_with("invalid JSON5: at line 2 column "),
            "{message}"
        );
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn unknown_key_is_reported_with_its_path() {
        let text = "{ hooks: { mappings: [{}, {}, { chanel: 'x' }] } }";
        let problems = parse_document(text, &no_env).unwrap().problems;
        assert_eq!(
            problems[0].to_string(),
            "hooks.mappings[2].chanel: unknown field; did you mean `channel`?"
        );
    }

    #[test]
    fn unknown_top_level_key_is_reported() {
        let problems = parse_document("{ hoks: {} }", &no_env).unwrap().problems;
        assert_eq!(
            problems[0].to_string(),
            "hoks: unknown field; did you mean `hooks`?"
        );
    }

    #[test]
    fn env_reference_is_substituted() {
        let env = |name: &str| (name == "TOKEN").then(|| "s3cret".to_string());
        let doc = parse_document("{ hooks: { path: 'a-${TOKEN}-b' } }", &env).unwrap();
        assert_eq!(doc.config.hooks.path.as_deref(), Some("a-s3cret-b"));
    }

    #[test]
    fn unset_env_reference_names_the_variable_and_key() {
        let doc = parse_document("{ hooks: { path: '${NOPE}' } }", &no_env).unwrap();
        assert_eq!(
            doc.problems[0].to_string(),
            "hooks.path: refers to an environment variable that is not set"
        );
        assert_eq!(doc.config.hooks.path, None, "left out");
    }

    #[test]
    fn a_sealed_document_reads_its_own_vars_and_never_the_environment() {
        // `PATH` is set in every test's environment.
        let text = "{ env: { vars: { OWN: 'own' } }, hooks: { path: '${OWN}-${PATH}' } }";
        let doc = parse_document_with(text, EnvLookup::Sealed).unwrap();
        assert!(doc.problems.is_empty(), "{:?}", doc.problems);
        assert_eq!(doc.config.hooks.path.as_deref(), Some("own-[env PATH]"));
    }

    #[test]
    fn escaped_dollar_brace_is_literal() {
        let doc = parse_document("{ hooks: { path: '$${X}' } }", &no_env).unwrap();
        assert_eq!(doc.config.hooks.path.as_deref(), Some("${X}"));
    }

    #[test]
    fn json5_syntax_error_gives_the_place_but_not_the_line() {
        let err = parse_document("{\n hooks: { token: 's3cret' \n", &no_env).unwrap_err();
        let message = err[0].to_string();
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
        let err = parse_document(text, &no_env).unwrap().problems[0].to_string();
        assert!(!err.contains("s3cr3t"), "{err}");
        assert!(err.starts_with("gateway.port: expected u16"), "{err}");
    }

    #[test]
    fn every_problem_is_reported_in_one_run() {
        let text = "{ gateway: { port: 'x', bnd: 'y' }, hooks: { enabeld: true, token: '${A}', \
                    mappings: [{ match: { path: 'p' }, action: 3 }] }, agnets: {} }";
        let doc = parse_document(text, &no_env).unwrap();
        let problems: Vec<String> = doc.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "hooks.token: refers to an environment variable that is not set",
                "gateway.port: expected u16, not a string",
                "gateway.bnd: unknown field; did you mean `bind`?",
                "hooks.enabeld: unknown field; did you mean `enabled`?",
                "hooks.mappings[0].action: expected a string, not an integer",
                "agnets: unknown field; did you mean `agents`?",
            ]
        );
    }

    #[test]
    fn an_object_missing_a_key_is_reported_and_left_out() {
        let text = "{ gateway: { store: { url: 'nats://x' } }, hoks: {} }";
        let doc = parse_document(text, &no_env).unwrap();
        let problems: Vec<String> = doc.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "gateway.store: missing field `kind`",
                "hoks: unknown field; did you mean `hooks`?"
            ]
        );
        assert!(doc.config.gateway.store.is_none());
    }

    #[test]
    fn channel_problems_are_told_as_any_others() {
        let problems = |text: &str| -> Vec<String> {
            let doc = parse_document(text, &no_env).unwrap();
            doc.problems.iter().map(ToString::to_string).collect()
        };
        assert_eq!(
            problems("{ channels: 's3cr3t' }"),
            ["channels: must be an object"]
        );
        assert_eq!(
            problems("{ channels: { telegrm: {}, slack: { botToken: 'x', apiBse: 'y' } } }"),
            [
                "channels.telegrm: unknown field; did you mean `telegram`?",
                "channels.slack.apiBse: unknown field; did you mean `apiBase`?",
            ]
        );
        assert_eq!(
            problems("{ channels: { msteams: {}, retry: { attempts: -1 } } }"),
            [
                "channels.msteams: missing field `webhookUrl`",
                "channels.retry.attempts: expected u32, not an integer",
            ]
        );
    }
}
