//! A mapping's conditions on a request's headers and payload, `match.headers` and
//! `match.payload` (docs/hooks.md#conditions): built once at load, checked per request after
//! authentication and before any transform. Header names and JSON pointers are parsed at
//! load, so that checking a request allocates nothing and re-parses nothing.

use std::fmt;

use http::HeaderName;
use serde_json::Value;

/// What conditions need of a request's headers; the HTTP layer implements it over its header map.
pub trait HeaderValues {
    /// Whether some value of header `name` is exactly one of `values`, byte for byte. Expected
    /// to look `name` up once, whatever the number of values, and to allocate nothing (the
    /// header map's does both), as [`Conditions::check`] promises.
    fn has_any(&self, name: &HeaderName, values: &[String]) -> bool;
}

/// Every condition of one mapping. None (the default) leaves the mapping's path and source to
/// decide alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conditions {
    headers: Vec<HeaderCondition>,
    payload: Vec<PayloadCondition>,
}

/// A header that must carry one of the values.
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderCondition {
    /// Lower-case, as [`HeaderName`] always is: names are compared without regard to case.
    name: HeaderName,
    /// Any of them; never empty.
    values: Vec<String>,
}

/// A test of the payload at a JSON pointer (RFC 6901).
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadCondition {
    pointer: Pointer,
    test: PayloadTest,
}

/// A JSON pointer (RFC 6901) parsed once: its text, to name it, and its tokens unescaped, to
/// walk a payload with.
#[derive(Debug, Clone, PartialEq)]
pub struct Pointer {
    text: String,
    tokens: Vec<Token>,
}

/// One reference token of a [`Pointer`].
#[derive(Debug, Clone, PartialEq)]
struct Token {
    /// The member name it selects in an object, `~1` and `~0` unescaped.
    name: String,
    /// The element it selects in an array, when it is an index as `serde_json` reads one:
    /// decimal digits with no sign and no leading zero (`-` selects nothing).
    index: Option<usize>,
}

/// What the payload must have at a pointer.
#[derive(Debug, Clone, PartialEq)]
pub enum PayloadTest {
    /// A value equal to one of these (never empty); `1` and `1.0` are the same number.
    AnyOf(Vec<Value>),
    /// Something, whatever it is, `null` included (true); nothing (false).
    Exists(bool),
}

/// The first condition of a mapping that a request did not meet, as the request log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmet<'a> {
    /// The header, lower-case.
    Header(&'a str),
    /// The JSON pointer.
    Payload(&'a str),
}

impl fmt::Display for Unmet<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmet::Header(name) => write!(f, "header {name}"),
            Unmet::Payload(pointer) => write!(f, "payload {pointer}"),
        }
    }
}

impl Conditions {
    pub fn new(headers: Vec<HeaderCondition>, payload: Vec<PayloadCondition>) -> Conditions {
        Conditions { headers, payload }
    }

    /// Whether there are none: then every request the path and source match is the mapping's.
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.payload.is_empty()
    }

    /// `Ok` when every condition holds, else the first that does not (headers before the
    /// payload, each in the order given: the configuration's is by name). Allocates nothing;
    /// up to the first unmet condition, reads for each header condition the header's values
    /// (one lookup in `headers`), compared byte for byte with each listed value, and for each
    /// payload condition the value at its pointer (one member lookup or array index per token),
    /// compared whole with each listed value.
    pub fn check(&self, headers: &impl HeaderValues, payload: &Value) -> Result<(), Unmet<'_>> {
        if let Some(unmet) = self.headers.iter().find(|c| !c.holds(headers)) {
            return Err(Unmet::Header(unmet.name.as_str()));
        }
        if let Some(unmet) = self.payload.iter().find(|c| !c.holds(payload)) {
            return Err(Unmet::Payload(unmet.pointer.as_str()));
        }
        Ok(())
    }
}

impl HeaderCondition {
    /// Header `name` with one of `values`; `None` for no values (a condition no request meets
    /// is refused at load instead).
    pub fn new(name: HeaderName, values: Vec<String>) -> Option<HeaderCondition> {
        (!values.is_empty()).then_some(HeaderCondition { name, values })
    }

    fn holds(&self, headers: &impl HeaderValues) -> bool {
        headers.has_any(&self.name, &self.values)
    }
}

impl PayloadCondition {
    /// `test` at `pointer`; `None` when the pointer is not one ([`is_pointer`]) or the test
    /// lists no value.
    pub fn new(pointer: &str, test: PayloadTest) -> Option<PayloadCondition> {
        let listed = !matches!(&test, PayloadTest::AnyOf(values) if values.is_empty());
        let pointer = Pointer::parse(pointer)?;
        listed.then_some(PayloadCondition { pointer, test })
    }

    fn holds(&self, payload: &Value) -> bool {
        let found = self.pointer.find(payload);
        match &self.test {
            PayloadTest::Exists(wanted) => found.is_some() == *wanted,
            PayloadTest::AnyOf(values) => found.is_some_and(|f| values.iter().any(|v| same(f, v))),
        }
    }
}

impl Pointer {
    /// `text` parsed, `None` when it is not a pointer ([`is_pointer`]).
    pub fn parse(text: &str) -> Option<Pointer> {
        is_pointer(text).then(|| Pointer {
            text: text.to_string(),
            tokens: text.split('/').skip(1).map(Token::new).collect(),
        })
    }

    /// The pointer as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its reference tokens, unescaped, each with the array index it also is, if any.
    pub fn tokens(&self) -> impl Iterator<Item = (&str, Option<usize>)> {
        self.tokens.iter().map(|t| (t.name.as_str(), t.index))
    }

    /// The value `self` points at in `value`, as [`Value::pointer`] finds it, but with no
    /// parsing or allocation: one member lookup (hashing its name) or array index per token.
    pub fn find<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        self.tokens
            .iter()
            .try_fold(value, |target, token| match target {
                Value::Object(members) => members.get(token.name.as_str()),
                Value::Array(elements) => token.index.and_then(|i| elements.get(i)),
                _ => None,
            })
    }
}

impl Token {
    /// An escaped token of a valid pointer: `~1` before `~0`, as RFC 6901 orders it, so that
    /// `~01` is the name `~1`.
    fn new(escaped: &str) -> Token {
        let name = escaped.replace("~1", "/").replace("~0", "~");
        let index = index(&name);
        Token { name, index }
    }
}

/// The array index a token is, read as `serde_json` reads it in [`Value::pointer`].
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// Whether `text` is a JSON pointer (RFC 6901): empty (the whole payload), or `/`-separated
/// tokens in which `~` only escapes `~` (`~0`) and `/` (`~1`).
pub fn is_pointer(text: &str) -> bool {
    if !(text.is_empty() || text.starts_with('/')) {
        return false;
    }
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return false;
        }
    }
    true
}

/// JSON equality in which numbers are compared by value, at any depth: a sender's `1.0` is the
/// configuration's `1`.
fn same(found: &Value, wanted: &Value) -> bool {
    match (found, wanted) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || ((x.is_f64() || y.is_f64()) && x.as_f64() == y.as_f64())
        }
        (Value::Array(xs), Value::Array(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same(x, y))
        }
        (Value::Object(xs), Value::Object(ys)) => {
            xs.len() == ys.len()
                && xs
                    .iter()
                    .all(|(key, x)| ys.get(key).is_some_and(|y| same(x, y)))
        }
        _ => found == wanted,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Headers as pairs, names lower-case.
    struct Pairs(&'static [(&'static str, &'static str)]);

    impl HeaderValues for Pairs {
        fn has_any(&self, name: &HeaderName, values: &[String]) -> bool {
            self.0
                .iter()
                .any(|(n, v)| *n == name.as_str() && values.iter().any(|w| w == v))
        }
    }

    fn header(name: &str, values: &[&str]) -> HeaderCondition {
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
        HeaderCondition::new(name, values.iter().map(|v| v.to_string()).collect()).unwrap()
    }

    fn payload(pointer: &str, test: PayloadTest) -> PayloadCondition {
        PayloadCondition::new(pointer, test).unwrap()
    }

    fn any_of(values: Value) -> PayloadTest {
        PayloadTest::AnyOf(values.as_array().unwrap().clone())
    }

    #[test]
    fn a_header_condition_takes_any_listed_value_of_any_instance() {
        let conditions = Conditions::new(
            vec![header("X-GitHub-Event", &["issues", "pull_request"])],
            vec![],
        );
        let check = |pairs| conditions.check(&Pairs(pairs), &json!({}));
        assert_eq!(check(&[("x-github-event", "issues")]), Ok(()));
        assert_eq!(
            check(&[("x-other", "a"), ("x-github-event", "pull_request")]),
            Ok(())
        );
        assert_eq!(
            check(&[("x-github-event", "Issues")]),
            Err(Unmet::Header("x-github-event")),
            "values are compared exactly"
        );
        assert_eq!(check(&[]), Err(Unmet::Header("x-github-event")));
    }

    #[test]
    fn a_payload_condition_compares_json_values() {
        let conditions = Conditions::new(
            vec![],
            vec![
                payload("/action", any_of(json!(["opened", "reopened"]))),
                payload("/issue/number", any_of(json!([7]))),
            ],
        );
        let check = |body: Value| conditions.check(&Pairs(&[]), &body);
        assert_eq!(
            check(json!({"action": "reopened", "issue": {"number": 7.0}})),
            Ok(())
        );
        assert_eq!(
            check(json!({"action": "closed", "issue": {"number": 7}})),
            Err(Unmet::Payload("/action"))
        );
        assert_eq!(
            check(json!({"action": "opened", "issue": {"number": "7"}})),
            Err(Unmet::Payload("/issue/number"))
        );
        assert_eq!(
            check(json!({"action": "opened"})),
            Err(Unmet::Payload("/issue/number"))
        );
        assert_eq!(check(json!(["opened"])), Err(Unmet::Payload("/action")));
    }

    #[test]
    fn a_listed_list_or_object_is_compared_whole() {
        let labels = payload("/labels", any_of(json!([["bug", 1], {"a": [2.0]}])));
        let conditions = Conditions::new(vec![], vec![labels]);
        let holds = |body: Value| conditions.check(&Pairs(&[]), &body).is_ok();
        assert!(holds(json!({"labels": ["bug", 1.0]})));
        assert!(holds(json!({"labels": {"a": [2]}})));
        assert!(!holds(json!({"labels": ["bug"]})));
        assert!(!holds(json!({"labels": "bug"})));
        assert!(!holds(json!({"labels": {"a": [2], "b": 1}})));
    }

    #[test]
    fn exists_tells_present_from_absent_null_included() {
        let present = Conditions::new(vec![], vec![payload("/pusher", PayloadTest::Exists(true))]);
        let absent = Conditions::new(
            vec![],
            vec![payload("/a~1b/~0c", PayloadTest::Exists(false))],
        );
        let none = Pairs(&[]);
        assert_eq!(present.check(&none, &json!({"pusher": null})), Ok(()));
        assert_eq!(
            present.check(&none, &json!({})),
            Err(Unmet::Payload("/pusher"))
        );
        assert_eq!(absent.check(&none, &json!({"a/b": {}})), Ok(()));
        assert_eq!(
            absent.check(&none, &json!({"a/b": {"~c": 0}})),
            Err(Unmet::Payload("/a~1b/~0c"))
        );
    }

    #[test]
    fn headers_are_checked_before_the_payload_and_all_must_hold() {
        let conditions = Conditions::new(
            vec![header("x-a", &["1"])],
            vec![payload("/b", PayloadTest::Exists(true))],
        );
        assert_eq!(
            conditions.check(&Pairs(&[]), &json!({})),
            Err(Unmet::Header("x-a"))
        );
        assert_eq!(
            conditions.check(&Pairs(&[("x-a", "1")]), &json!({})),
            Err(Unmet::Payload("/b"))
        );
        assert_eq!(
            conditions.check(&Pairs(&[("x-a", "1")]), &json!({"b": 0})),
            Ok(())
        );
        assert!(
            Conditions::default()
                .check(&Pairs(&[]), &json!(null))
                .is_ok()
        );
    }

    #[test]
    fn pointers_follow_rfc_6901() {
        for good in ["", "/", "/a", "/a/0", "/a~0b", "/a~1b", "/~01"] {
            assert!(is_pointer(good), "{good}");
        }
        for bad in ["a", "a/b", "/a~", "/a~2", "/~b", "#/a"] {
            assert!(!is_pointer(bad), "{bad}");
        }
        assert!(PayloadCondition::new("action", PayloadTest::Exists(true)).is_none());
        assert!(PayloadCondition::new("/a", PayloadTest::AnyOf(vec![])).is_none());
        assert!(HeaderCondition::new(HeaderName::from_static("x"), vec![]).is_none());
    }

    /// The value `Value::pointer` finds, and the parsed pointer too.
    fn at<'v>(text: &str, value: &'v Value) -> Option<&'v Value> {
        let found = Pointer::parse(text).unwrap().find(value);
        assert_eq!(found, value.pointer(text), "{text}");
        found
    }

    #[test]
    fn a_pointer_unescapes_tilde_one_then_tilde_zero() {
        let body = json!({"a/b": 1, "m~n": 2, "~1": 3, "/": 4, "": {"": 5}, "c": {"d/e~f": 6}});
        assert_eq!(at("/a~1b", &body), Some(&json!(1)));
        assert_eq!(at("/m~0n", &body), Some(&json!(2)));
        assert_eq!(at("/~01", &body), Some(&json!(3)), "~01 names ~1, not /");
        assert_eq!(at("/~1", &body), Some(&json!(4)));
        assert_eq!(at("//", &body), Some(&json!(5)));
        assert_eq!(at("/c/d~1e~0f", &body), Some(&json!(6)));
        assert_eq!(at("", &body), Some(&body));
        assert_eq!(at("/a/b", &body), None);
        assert_eq!(Pointer::parse("/~01").unwrap().as_str(), "/~01");
    }

    #[test]
    fn a_pointer_indexes_arrays_as_serde_json_does() {
        let body = json!({"list": [10, [20, 21], 12], "map": {"0": "zero", "01": "one"}});
        assert_eq!(at("/list/0", &body), Some(&json!(10)));
        assert_eq!(at("/list/1/1", &body), Some(&json!(21)));
        assert_eq!(at("/list/2", &body), Some(&json!(12)));
        for nothing in [
            "/list/3", "/list/01", "/list/+1", "/list/-", "/list/-1", "/list/",
        ] {
            assert_eq!(at(nothing, &body), None);
        }
        assert_eq!(at("/list/99999999999999999999999", &body), None);
        assert_eq!(
            at("/map/0", &body),
            Some(&json!("zero")),
            "in an object, a name"
        );
        assert_eq!(at("/map/01", &body), Some(&json!("one")));
        assert_eq!(at("/list/0/x", &body), None);
    }

    #[test]
    fn an_unmet_condition_names_what_it_tested() {
        assert_eq!(
            Unmet::Header("x-github-event").to_string(),
            "header x-github-event"
        );
        assert_eq!(Unmet::Payload("/action").to_string(), "payload /action");
    }
}
