//! Searching the request log (docs/operations.md#searching-the-request-log): the filters on
//! what a request carried ([`HeaderMatch`], [`BodyMatch`]) and on why it failed ([`ErrorText`]),
//! each parsed once at the edge, and the query that answers a [`RequestFilter`] a page at a time.
//!
//! Every filter is a SQL condition on the log's one b-tree, read in id order from the cursor on:
//! a page costs the rows scanned until it is full. The body's condition is a sieve, not the
//! answer: an RFC 6901 pointer cannot be written as one SQLite JSON path (a token of digits is
//! an index in an array and a member name in an object, so it is tried both ways), nor a
//! number's JSON text compared as SQLite keeps it, so SQLite's JSON parser lets through every
//! body that may match, and [`BodyMatch::matches`] decides on each (one more parse, of the
//! few it let through).

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, params_from_iter};
use serde_json::Value;

use super::{CAPTURE_AT, COLUMNS, ListOrder, RequestFilter, RequestRecord, first_id_at};
use crate::mapping::conditions::Pointer;

/// `header=name:value`: a captured header of that name (any case) with exactly that value
/// (the space around it, which HTTP never makes part of a value, left out). A request whose
/// headers were not captured has none to match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderMatch {
    /// Lower-case, as the log keeps names.
    name: String,
    value: String,
}

impl HeaderMatch {
    /// `name:value` parsed; `None` without a colon or with a name that is no header name.
    pub fn parse(text: &str) -> Option<HeaderMatch> {
        let (name, value) = text.split_once(':')?;
        let name = axum::http::HeaderName::from_bytes(name.as_bytes()).ok()?;
        Some(HeaderMatch {
            name: name.as_str().to_string(),
            value: value.trim_matches([' ', '\t']).to_string(),
        })
    }
}

/// `body=/pointer:value`: a captured JSON body whose value at the pointer (RFC 6901, up to the
/// first colon) is `value`: a string's text, any other value's JSON text (`42`, `true`,
/// `null`, `["a"]`). A body not captured, cut, or not JSON has no value to match.
#[derive(Debug, Clone, PartialEq)]
pub struct BodyMatch {
    pointer: Pointer,
    value: String,
}

impl BodyMatch {
    /// `pointer:value` parsed; `None` without a colon or with a pointer that is not one.
    pub fn parse(text: &str) -> Option<BodyMatch> {
        let (pointer, value) = text.split_once(':')?;
        Some(BodyMatch {
            pointer: Pointer::parse(pointer)?,
            value: value.to_string(),
        })
    }

    /// Whether `body` is JSON with the value at the pointer. Costs a parse of the whole body.
    pub fn matches(&self, body: &[u8]) -> bool {
        let Ok(json) = serde_json::from_slice::<Value>(body) else {
            return false;
        };
        match self.pointer.find(&json) {
            Some(Value::String(text)) => *text == self.value,
            Some(other) => serde_json::to_string(other).is_ok_and(|text| text == self.value),
            None => false,
        }
    }
}

/// The most tokens of digits (an index in an array, a member name in an object) that a body
/// filter's SQL condition spells out both ways: `2^n` paths.
const MAX_EITHER_WAY: usize = 3;

impl BodyMatch {
    /// The SQLite JSON paths the pointer may select: a token of digits both as an index and as
    /// a member name (RFC 6901 means the one the value has). `None` when a member name cannot
    /// be spelt in a path (a `"` or a `\` in it) or more than [`MAX_EITHER_WAY`] tokens are
    /// digits.
    fn paths(&self) -> Option<Vec<String>> {
        let mut paths = vec![String::from("$")];
        let mut either_way = 0;
        for (name, index) in self.pointer.tokens() {
            if name.contains(['"', '\\']) {
                return None;
            }
            let member = format!(".\"{name}\"");
            paths = match index {
                None => paths.into_iter().map(|path| path + &member).collect(),
                Some(i) => {
                    either_way += 1;
                    if either_way > MAX_EITHER_WAY {
                        return None;
                    }
                    let both = |path: String| [format!("{path}[{i}]"), path + &member];
                    paths.into_iter().flat_map(both).collect()
                }
            };
        }
        Some(paths)
    }

    /// A SQL condition that every body this matches meets, and few others: SQLite's JSON
    /// parser (C, and no tree built) sifts the bodies, and [`BodyMatch::matches`] decides on
    /// the few it lets through. At a path, a string of the text, or else a value of the text's
    /// JSON type (a number equal to it; `true`, `false`, `null`; any object or array).
    /// `None` when [`BodyMatch::paths`] is.
    fn condition(&self) -> Option<(String, Vec<SqlValue>)> {
        const EXTRACT: &str = "json_extract(CAST(body AS TEXT), ?) = ?";
        const TYPE: &str = "json_type(CAST(body AS TEXT), ?) = ?";
        let typed: Option<(&str, SqlValue)> = match serde_json::from_str::<Value>(&self.value) {
            Ok(Value::Number(n)) => Some((
                EXTRACT,
                n.as_i64()
                    .map_or_else(|| n.as_f64().unwrap_or(f64::NAN).into(), SqlValue::from),
            )),
            Ok(Value::Bool(b)) => Some((TYPE, b.to_string().into())),
            Ok(Value::Null) => Some((TYPE, "null".to_string().into())),
            Ok(Value::Object(_)) => Some((TYPE, "object".to_string().into())),
            Ok(Value::Array(_)) => Some((TYPE, "array".to_string().into())),
            Ok(Value::String(_)) | Err(_) => None,
        };
        let mut tests = Vec::new();
        let mut values = Vec::new();
        for path in self.paths()? {
            tests.push(EXTRACT);
            values.extend([path.clone().into(), self.value.clone().into()]);
            if let Some((test, value)) = &typed {
                tests.push(test);
                values.extend([path.into(), value.clone()]);
            }
        }
        let sql = format!(
            "CASE WHEN json_valid(CAST(body AS TEXT)) THEN ({}) END",
            tests.join(" OR ")
        );
        Some((sql, values))
    }
}

/// `error=text`: requests whose `error` or `reason` contains the text, ASCII letters in any
/// case (SQLite's `LIKE`); other characters compare exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorText(String);

impl ErrorText {
    /// The text to look for; `None` when empty (it would match every failure and no success,
    /// which `status` says better).
    pub fn new(text: &str) -> Option<ErrorText> {
        (!text.is_empty()).then(|| ErrorText(text.to_string()))
    }

    /// The `LIKE` pattern: the text anywhere, its own `%`, `_` and `\` taken literally.
    fn pattern(&self) -> String {
        let mut pattern = String::with_capacity(self.0.len() + 2);
        pattern.push('%');
        for c in self.0.chars() {
            if matches!(c, '%' | '_' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push('%');
        pattern
    }
}

/// A page of requests, in the filter's order: the rows the SQL conditions select, from the
/// cursor on, and of those, with a body filter, the ones whose body matches, until the page is
/// full or the log ends.
pub(super) fn select(
    conn: &Connection,
    filter: &RequestFilter,
) -> rusqlite::Result<Vec<RequestRecord>> {
    let (conditions, mut values) = conditions(filter);
    let order = match filter.order {
        ListOrder::NewestFirst => "DESC",
        ListOrder::OldestFirst => "ASC",
    };
    let Some(body) = &filter.body else {
        values.push(i64::from(filter.limit).into());
        let sql = format!(
            "SELECT {COLUMNS} FROM requests WHERE {conditions} ORDER BY id {order} LIMIT ?"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params_from_iter(values), RequestRecord::from_row)?;
        return rows.collect();
    };
    let sifted = match body.condition() {
        Some((sql, sift)) => {
            values.extend(sift);
            sql
        }
        None => "1 = 1".to_string(),
    };
    let sql = format!(
        "SELECT {COLUMNS}, body FROM requests WHERE {conditions} AND captured = 1
         AND body IS NOT NULL AND {sifted} ORDER BY id {order}"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params_from_iter(values))?;
    let mut page = Vec::new();
    while page.len() < filter.limit as usize {
        let Some(row) = rows.next()? else { break };
        // Only a matching row is read into a record: the body is looked at in place.
        if body.matches(row.get_ref(CAPTURE_AT)?.as_blob()?) {
            page.push(RequestRecord::from_row(row)?);
        }
    }
    Ok(page)
}

/// SQL conditions joined by `AND`, with their values in the order of their `?`.
struct Where {
    sql: String,
    values: Vec<SqlValue>,
}

impl Where {
    fn and<const N: usize>(&mut self, clause: &str, values: [SqlValue; N]) {
        self.sql.push_str(" AND ");
        self.sql.push_str(clause);
        self.values.extend(values);
    }
}

/// The SQL conditions of `filter` but its body's, and their values in order.
fn conditions(filter: &RequestFilter) -> (String, Vec<SqlValue>) {
    let mut w = Where {
        sql: String::from("1 = 1"),
        values: Vec::new(),
    };
    if let Some(hook) = &filter.hook {
        w.and("hook = ?", [hook.clone().into()]);
    }
    if let Some(mapping) = &filter.mapping_id {
        w.and("mapping_id = ?", [mapping.clone().into()]);
    }
    if let Some(id) = &filter.request_id {
        w.and("request_id = ?", [id.clone().into()]);
    }
    if let Some(class) = filter.status_class {
        w.and("status / 100 = ?", [i64::from(class).into()]);
    }
    if let Some(outcome) = filter.outcome {
        w.and("outcome = ?", [outcome.as_str().to_string().into()]);
    }
    // A UUIDv7 begins with its milliseconds: a time bound is an id bound, which the primary
    // key answers without a scan.
    if let Some(since) = filter.since_ms {
        w.and("id >= ?", [first_id_at(since).into()]);
    }
    if let Some(until) = filter.until_ms {
        w.and("id < ?", [first_id_at(until).into()]);
    }
    if let Some(cursor) = &filter.cursor {
        let past = match filter.order {
            ListOrder::NewestFirst => "id < ?",
            ListOrder::OldestFirst => "id > ?",
        };
        w.and(past, [cursor.clone().into()]);
    }
    if let Some(error) = &filter.error {
        let pattern = SqlValue::from(error.pattern());
        w.and(
            "(error LIKE ? ESCAPE '\\' OR reason LIKE ? ESCAPE '\\')",
            [pattern.clone(), pattern],
        );
    }
    if let Some(header) = &filter.header {
        // The capture keeps headers as `[[name, value], ...]`, names lower-case.
        w.and(
            "captured = 1 AND EXISTS (SELECT 1 FROM json_each(headers) AS h
               WHERE h.value ->> 0 = ? AND h.value ->> 1 = ?)",
            [header.name.clone().into(), header.value.clone().into()],
        );
    }
    (w.sql, w.values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_filter_is_a_header_name_a_colon_and_a_value() {
        let found = HeaderMatch::parse("X-GitHub-Event: issues").unwrap();
        assert_eq!(found.name, "x-github-event");
        assert_eq!(found.value, "issues");
        assert_eq!(HeaderMatch::parse("x-github-event").as_ref(), None);
        assert_eq!(HeaderMatch::parse("bad name:x").as_ref(), None);
        assert_eq!(HeaderMatch::parse(":x").as_ref(), None);
    }

    #[test]
    fn a_body_filter_compares_strings_by_text_and_the_rest_by_json_text() {
        let body = br#"{"action":"opened","number":42,"draft":false,"a/b":{"0":"x"},
            "labels":[{"name":"bug"}],"merged_by":null}"#;
        let matches = |filter: &str| BodyMatch::parse(filter).unwrap().matches(body);
        assert!(matches("/action:opened"));
        assert!(!matches("/action:\"opened\""));
        assert!(matches("/number:42"));
        assert!(matches("/draft:false"));
        assert!(matches("/merged_by:null"));
        assert!(matches("/a~1b/0:x"));
        assert!(matches("/labels/0/name:bug"));
        assert!(matches("/action:opened") && !matches("/action:closed"));
        assert!(matches("/labels/0:{\"name\":\"bug\"}"));
        assert!(!matches("/missing:"));
        assert!(
            !BodyMatch::parse("/action:opened")
                .unwrap()
                .matches(b"not json")
        );
    }

    #[test]
    fn a_bad_pointer_or_no_value_is_no_body_filter() {
        assert_eq!(BodyMatch::parse("action:opened"), None);
        assert_eq!(BodyMatch::parse("/a~2:x"), None);
        assert_eq!(BodyMatch::parse("/action"), None);
    }

    /// Whether the SQL condition of `filter` holds for `body`, in SQLite.
    fn sifted(filter: &BodyMatch, body: &str) -> bool {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute("CREATE TABLE requests (body BLOB)", [])
            .unwrap();
        conn.execute("INSERT INTO requests VALUES (?1)", [body.as_bytes()])
            .unwrap();
        let (condition, values) = filter.condition().unwrap();
        let sql = format!("SELECT count(*) FROM requests WHERE {condition}");
        let count: i64 = conn
            .query_row(&sql, params_from_iter(values), |row| row.get(0))
            .unwrap();
        count == 1
    }

    #[test]
    fn the_sql_sieve_lets_through_every_body_that_matches() {
        let bodies = [
            r#"{"action":"opened","number":42,"big":9007199254740993,"ratio":1.0,"draft":false,
               "labels":[{"name":"bug"}],"0":{"1":"key"},"merged_by":null,"text":"42",
               "a/b":{"~c":"x"}}"#,
            r#"[{"name":"first"},"second"]"#,
            "not json",
            r#"{"action":"opened""#,
        ];
        let filters = [
            "/action:opened",
            "/action:closed",
            "/number:42",
            "/number:42.0",
            "/big:9007199254740993",
            "/big:9007199254740992",
            "/ratio:1.0",
            "/ratio:1",
            "/draft:false",
            "/draft:0",
            "/labels/0/name:bug",
            "/labels/0:{\"name\":\"bug\"}",
            "/labels:[]",
            "/0/1:key",
            "/merged_by:null",
            "/text:42",
            "/a~1b/~0c:x",
            "/0/name:first",
            "/1:second",
            "/missing:",
        ];
        let mut matched = 0;
        for body in bodies {
            for filter in filters {
                let filter_match = BodyMatch::parse(filter).unwrap();
                let matches = filter_match.matches(body.as_bytes());
                let through = sifted(&filter_match, body);
                assert!(
                    through || !matches,
                    "{filter} on {body}: matches, not let through"
                );
                matched += usize::from(matches);
            }
        }
        assert_eq!(matched, 13);
        let sieved = |filter: &str, body: &str| sifted(&BodyMatch::parse(filter).unwrap(), body);
        assert!(
            !sieved("/action:closed", bodies[0]),
            "a string of other text"
        );
        assert!(!sieved("/number:43", bodies[0]), "another number");
        assert!(!sieved("/action:opened", bodies[2]), "not JSON");
    }

    #[test]
    fn a_pointer_a_path_cannot_spell_is_decided_in_rust_alone() {
        let quoted = BodyMatch::parse("/a\"b:x").unwrap();
        assert_eq!(quoted.condition(), None);
        assert!(quoted.matches(br#"{"a\"b":"x"}"#));
        let deep = BodyMatch::parse("/0/1/2/3:x").unwrap();
        assert_eq!(deep.condition(), None);
        let three = BodyMatch::parse("/0/1/2:x").unwrap();
        assert_eq!(three.paths().unwrap().len(), 8);
    }

    /// A captured record `n` of hook `hook`, with `body`, made `n` milliseconds into 2026.
    fn captured(n: i64, hook: &str, body: &str) -> RequestRecord {
        let at_ms = 1_767_225_600_000 + n;
        let id = format!("{}-{n:04}", first_id_at(at_ms));
        RequestRecord {
            request_id: id.clone(),
            id,
            at_ms,
            hook: Some(hook.into()),
            status: 200,
            captured: true,
            capture: Some(crate::hook::capture::Captured {
                headers: vec![("x-github-event".into(), hook.into())],
                query: None,
                body: Some(body.as_bytes().to_vec()),
                note: None,
            }),
            ..RequestRecord::default()
        }
    }

    #[tokio::test]
    async fn a_body_search_pages_in_either_order_past_its_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::gateway::requests::RequestLogStore::open(dir.path()).unwrap();
        let bodies = [
            r#"{"action":"opened"}"#,
            r#"{"action":"closed"}"#,
            r#"{"action":"opened"}"#,
            "not json",
            r#"{"action":"opened"}"#,
            r#"{"action":"opened"}"#,
        ];
        let records = bodies.iter().enumerate();
        let records = records.map(|(n, body)| captured(n as i64, ["a", "b"][n % 2], body));
        store.insert(records.collect()).await.unwrap();
        let page = async |order, cursor: Option<&RequestRecord>, hook: Option<&str>| {
            let filter = RequestFilter {
                body: BodyMatch::parse("/action:opened"),
                hook: hook.map(String::from),
                cursor: cursor.map(|r| r.id.clone()),
                order,
                limit: 2,
                ..RequestFilter::default()
            };
            let found = store.page(filter).await.unwrap();
            found.into_iter().map(|r| r.at_ms % 10).collect::<Vec<_>>()
        };
        let cursor_at = |n: i64| captured(n, "", "");
        assert_eq!(page(ListOrder::OldestFirst, None, None).await, [0, 2]);
        let past = Some(&cursor_at(2));
        assert_eq!(page(ListOrder::OldestFirst, past, None).await, [4, 5]);
        assert_eq!(page(ListOrder::NewestFirst, None, None).await, [5, 4]);
        let past = Some(&cursor_at(4));
        assert_eq!(page(ListOrder::NewestFirst, past, None).await, [2, 0]);
        assert_eq!(page(ListOrder::NewestFirst, None, Some("a")).await, [4, 2]);
        store.close();
    }

    #[test]
    fn an_error_text_is_taken_literally_in_its_pattern() {
        assert_eq!(
            ErrorText::new("50%_\\x").unwrap().pattern(),
            "%50\\%\\_\\\\x%"
        );
        assert_eq!(ErrorText::new(""), None);
    }
}
