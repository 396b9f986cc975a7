//! A mapping's `match.headers` and `match.payload` as the file states them, built into its
//! [`Conditions`] (docs/hooks.md#conditions). A problem names its key, the header name or
//! the pointer included (`hooks.mappings[0].match.payload./action`), and never the value.

use serde_json::{Map, Value};

use super::ConfigError;
use super::model::MatchConfig;
use super::model::{HeaderValuesConfig, HeadersConfig, PayloadConfig, PayloadTestConfig};
use crate::mapping::conditions::{
    Conditions, HeaderCondition, PayloadCondition, PayloadTest, is_pointer,
};

/// The conditions of mapping `index` (0-based); each problem is added to `problems` and its
/// condition left out (the configuration is then refused whole).
pub(super) fn conditions(
    index: usize,
    headers: Option<&HeadersConfig>,
    tests: Option<&PayloadConfig>,
    problems: &mut Vec<ConfigError>,
) -> Conditions {
    let key = key!(MatchConfig[index]);
    let headers = headers
        .into_iter()
        .flatten()
        .filter_map(|(name, values)| header(&key, name, values, problems))
        .collect();
    let payload = tests
        .into_iter()
        .flatten()
        .filter_map(|(pointer, test)| payload(&key, pointer, test, problems))
        .collect();
    Conditions::new(headers, payload)
}

fn header(
    key: &str,
    name: &str,
    values: &HeaderValuesConfig,
    problems: &mut Vec<ConfigError>,
) -> Option<HeaderCondition> {
    let key = format!("{key}.headers.{name}");
    let Ok(name) = axum::http::HeaderName::from_bytes(name.as_bytes()) else {
        problems.push(ConfigError::invalid(key, "must be a header name"));
        return None;
    };
    let values = match values {
        HeaderValuesConfig::One(value) => std::slice::from_ref(value),
        HeaderValuesConfig::AnyOf(values) => values.as_slice(),
    };
    let mut valid = true;
    for (j, value) in values.iter().enumerate() {
        if axum::http::HeaderValue::from_str(value).is_err() {
            let at = match values.len() {
                1 => key.clone(),
                _ => format!("{key}[{j}]"),
            };
            problems.push(ConfigError::invalid(at, "cannot be a header's value"));
            valid = false;
        }
    }
    let condition = HeaderCondition::new(name, values.to_vec());
    if condition.is_none() {
        problems.push(ConfigError::invalid(key, "must list at least one value"));
    }
    condition.filter(|_| valid)
}

fn payload(
    key: &str,
    pointer: &str,
    test: &PayloadTestConfig,
    problems: &mut Vec<ConfigError>,
) -> Option<PayloadCondition> {
    let key = format!("{key}.payload.{pointer}");
    if !is_pointer(pointer) {
        problems.push(ConfigError::invalid(
            key,
            "must be a JSON pointer: empty, or starting with /, with ~ written ~0 and / in a name ~1",
        ));
        return None;
    }
    let test = match test {
        PayloadTestConfig::Exists(exists) => PayloadTest::Exists(exists.exists),
        PayloadTestConfig::AnyOf(values) if values.is_empty() => {
            problems.push(ConfigError::invalid(key, "must list at least one value"));
            return None;
        }
        PayloadTestConfig::AnyOf(values) => PayloadTest::AnyOf(values.clone()),
        PayloadTestConfig::Equals(Value::Object(object)) => {
            problems.push(not_exists(&key, object));
            return None;
        }
        PayloadTestConfig::Equals(value) => PayloadTest::AnyOf(vec![value.clone()]),
    };
    PayloadCondition::new(pointer, test)
}

/// Why an object is not `{ exists: true | false }`, at the key that is wrong in it.
fn not_exists(key: &str, object: &Map<String, Value>) -> ConfigError {
    match object.keys().find(|k| *k != "exists") {
        Some(unknown) => ConfigError::invalid(
            format!("{key}.{unknown}"),
            "unknown field, expected `exists`",
        ),
        None if object.is_empty() => ConfigError::invalid(
            key,
            "expected a value, a list of values or { exists: true | false }",
        ),
        None => ConfigError::invalid(format!("{key}.exists"), "expected true or false"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::model::MatchConfig;
    use crate::mapping::conditions::{HeaderValues, Unmet};

    fn built(rule: Value) -> (Conditions, Vec<ConfigError>) {
        let rule: MatchConfig = serde_json::from_value(rule).unwrap();
        let mut problems = Vec::new();
        let (headers, payload) = (rule.headers.as_ref(), rule.payload.as_ref());
        (conditions(2, headers, payload, &mut problems), problems)
    }

    fn problems(rule: Value) -> Vec<String> {
        built(rule).1.iter().map(ToString::to_string).collect()
    }

    struct NoHeaders;

    impl HeaderValues for NoHeaders {
        fn has_any(&self, _: &axum::http::HeaderName, _: &[String]) -> bool {
            false
        }
    }

    #[test]
    fn each_form_builds_its_test() {
        let (conditions, problems) = built(json!({
            "payload": {"/action": "opened", "/n": [1, 2], "/gone": {"exists": false}},
        }));
        assert!(problems.is_empty(), "{problems:?}");
        let check = |payload: Value| conditions.check(&NoHeaders, &payload);
        assert_eq!(check(json!({"action": "opened", "n": 2})), Ok(()));
        assert_eq!(
            check(json!({"action": "opened", "n": 3})),
            Err(Unmet::Payload("/n"))
        );
        assert_eq!(
            check(json!({"action": "opened", "n": 1, "gone": 0})),
            Err(Unmet::Payload("/gone"))
        );
    }

    #[test]
    fn a_bad_pointer_names_its_key_not_its_value() {
        assert_eq!(
            problems(json!({"payload": {"action": "s3cr3t"}})),
            [
                "hooks.mappings[2].match.payload.action: must be a JSON pointer: empty, or starting with /, with ~ written ~0 and / in a name ~1"
            ]
        );
        assert_eq!(problems(json!({"payload": {"/a~2": 1}})).len(), 1);
    }

    #[test]
    fn empty_lists_are_refused() {
        assert_eq!(
            problems(json!({"payload": {"/a": []}, "headers": {"x-a": []}})),
            [
                "hooks.mappings[2].match.headers.x-a: must list at least one value",
                "hooks.mappings[2].match.payload./a: must list at least one value",
            ]
        );
    }

    #[test]
    fn an_object_must_be_exactly_the_exists_form() {
        assert_eq!(
            problems(json!({"payload": {"/a": {"exist": true}}})),
            ["hooks.mappings[2].match.payload./a.exist: unknown field, expected `exists`"]
        );
        assert_eq!(
            problems(json!({"payload": {"/a": {"exists": true, "s3cr3t": 1}}})),
            ["hooks.mappings[2].match.payload./a.s3cr3t: unknown field, expected `exists`"]
        );
        assert_eq!(
            problems(json!({"payload": {"/a": {"exists": "s3cr3t"}}})),
            ["hooks.mappings[2].match.payload./a.exists: expected true or false"]
        );
        assert_eq!(
            problems(json!({"payload": {"/a": {}}})),
            [
                "hooks.mappings[2].match.payload./a: expected a value, a list of values or { exists: true | false }"
            ]
        );
    }

    #[test]
    fn header_names_and_values_must_be_possible() {
        assert_eq!(
            problems(
                json!({"headers": {"x a": "1", "x-b": ["ok", "s3cr3t\n"], "x-c": "s3cr3t\r"}})
            ),
            [
                "hooks.mappings[2].match.headers.x a: must be a header name",
                "hooks.mappings[2].match.headers.x-b[1]: cannot be a header's value",
                "hooks.mappings[2].match.headers.x-c: cannot be a header's value",
            ]
        );
    }

    #[test]
    fn a_header_value_that_is_not_text_is_a_shape_error() {
        let err = serde_json::from_value::<MatchConfig>(json!({"headers": {"x-a": 5}}))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "a header value (a string) or a list of them");
    }
}
