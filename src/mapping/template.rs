//! `{{ expr }}` templates over a hook request (docs/hooks.md): the roots `path`, `now`,
//! `headers.<name>`, `query.<name>` and `payload.<path>`, any other root being a payload path.

use std::borrow::Cow;

use serde_json::Value;

use super::js_text;

/// What a template can see of one request.
#[derive(Debug, Clone, Copy)]
pub struct TemplateContext<'a> {
    /// The hook name from the URL.
    pub name: &'a str,
    /// The time of the request, RFC 3339 UTC.
    pub now: &'a str,
    /// Header names lower-cased.
    pub headers: &'a [(String, String)],
    pub query: &'a [(String, String)],
    pub payload: &'a Value,
}

/// Keys that never resolve, wherever they appear in a path: templates written for the JavaScript
/// gateway must not reach object internals there, and must behave the same here.
const FORBIDDEN_KEYS: &[&str] = &["__proto__", "prototype", "constructor"];

/// The most bytes one request's templates render to, all the fields of all its actions (every
/// element of a `forEach` list) together: four times `hooks.maxBodyBytes`, and never less than
/// 1 MiB ([`RenderLimit::FLOOR`]). Without it a template of a few kilobytes repeating a large
/// payload field renders to gigabytes; with it a `forEach` list cannot multiply that by its
/// length. Derived once, when the configuration is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RenderLimit {
    bytes: usize,
}

impl RenderLimit {
    /// 1 MiB: what a transform's outcome may carry by default
    /// (`hooks.transformLimits.outputBytes`), four times the default `hooks.maxBodyBytes`.
    pub const FLOOR: RenderLimit = RenderLimit { bytes: 1024 * 1024 };
    /// Rendered bytes a request may ask for per byte of the largest body it may have.
    const PER_BODY_BYTE: u64 = 4;

    /// The bound for requests whose bodies are at most `max_body_bytes`: four times that, at
    /// least [`RenderLimit::FLOOR`], saturating where `usize` ends.
    pub fn for_body_limit(max_body_bytes: u64) -> RenderLimit {
        let scaled = max_body_bytes.saturating_mul(Self::PER_BODY_BYTE);
        let bytes = usize::try_from(scaled).unwrap_or(usize::MAX);
        RenderLimit {
            bytes: bytes.max(Self::FLOOR.bytes),
        }
    }

    /// The bound in bytes.
    pub fn bytes(self) -> usize {
        self.bytes
    }

    /// The smaller of this bound and `ceiling` (a candidate's, within the one in force).
    pub fn within(self, ceiling: RenderLimit) -> RenderLimit {
        self.min(ceiling)
    }
}

/// A rendering refused for passing its request's [`RenderLimit`] (`limit` bytes), found before
/// the bytes past it are allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("hook mapping templates render to more than {limit} bytes")]
pub struct TooLarge {
    pub limit: usize,
}

/// What is left of the bytes one request's templates may render to: made once per request and
/// passed to the rendering of each of its actions.
#[derive(Debug)]
pub struct RenderBudget {
    left: usize,
    limit: RenderLimit,
}

impl RenderBudget {
    /// All of `limit`, for one request.
    pub fn for_request(limit: RenderLimit) -> RenderBudget {
        RenderBudget {
            left: limit.bytes,
            limit,
        }
    }

    /// Appends `piece` to `out` when the budget has room for it.
    fn push(&mut self, out: &mut String, piece: &str) -> Result<(), TooLarge> {
        self.left = self.left.checked_sub(piece.len()).ok_or(TooLarge {
            limit: self.limit.bytes,
        })?;
        out.push_str(piece);
        Ok(())
    }
}

/// Renders `template`: each `{{ expr }}` is replaced by the value it names; a missing value or
/// `null` renders as the empty string, strings as they are, numbers and booleans as text, objects
/// and arrays as compact JSON. An unclosed `{{` is kept literally. Fails, having allocated at
/// most what `budget` has left and one value, when the result would not fit in `budget`.
pub fn render(
    template: &str,
    ctx: &TemplateContext<'_>,
    budget: &mut RenderBudget,
) -> Result<String, TooLarge> {
    let mut out = String::with_capacity(template.len().min(budget.left));
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        let Some(close) = rest[open + 2..].find("}}") else {
            break;
        };
        budget.push(&mut out, &rest[..open])?;
        let expr = rest[open + 2..open + 2 + close].trim();
        budget.push(&mut out, &resolve(expr, ctx))?;
        rest = &rest[open + 2 + close + 2..];
    }
    budget.push(&mut out, rest)?;
    Ok(out)
}

/// Renders and trims; `None` when the result is empty (for optional fields).
pub fn render_optional(
    template: Option<&str>,
    ctx: &TemplateContext<'_>,
    budget: &mut RenderBudget,
) -> Result<Option<String>, TooLarge> {
    let Some(template) = template else {
        return Ok(None);
    };
    let rendered = render(template, ctx, budget)?;
    let trimmed = rendered.trim();
    Ok((!trimmed.is_empty()).then(|| trimmed.to_string()))
}

fn resolve<'v>(expr: &str, ctx: &TemplateContext<'v>) -> Cow<'v, str> {
    let (root, rest) = match expr.find(['.', '[']) {
        Some(at) => (&expr[..at], &expr[at..]),
        None => (expr, ""),
    };
    match root {
        "path" if rest.is_empty() => Cow::Borrowed(ctx.name),
        "now" if rest.is_empty() => Cow::Borrowed(ctx.now),
        "headers" => Cow::Owned(lookup_pairs(ctx.headers, rest, true)),
        "query" => Cow::Owned(lookup_pairs(ctx.query, rest, false)),
        "payload" => text(walk(ctx.payload, rest)),
        _ => text(walk(ctx.payload, expr)),
    }
}

/// `.name` after `headers` or `query`. A header sent several times renders as its values joined
/// with `, ` (as HTTP folds them, and the OpenClaw gateway renders them); of a query parameter
/// given several times the last value wins.
fn lookup_pairs(pairs: &[(String, String)], rest: &str, header: bool) -> String {
    let Some(name) = rest.strip_prefix('.').filter(|n| !n.is_empty()) else {
        return String::new();
    };
    if header {
        let name = name.to_ascii_lowercase();
        let values: Vec<&str> = pairs
            .iter()
            .filter(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
            .collect();
        return values.join(", ");
    }
    pairs
        .iter()
        .rev()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.clone())
        .unwrap_or_default()
}

/// One step of a path.
#[derive(Debug, PartialEq, Eq)]
enum Step<'a> {
    Key(&'a str),
    Index(&'a str),
}

/// Splits `a.b[0]["c"]` into steps; `None` for a malformed path.
fn steps(path: &str) -> Option<Vec<Step<'_>>> {
    let mut steps = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inner = after[..end].trim();
            let inner = inner
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .or_else(|| inner.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
                .unwrap_or(inner);
            steps.push(Step::Index(inner));
            rest = &after[end + 1..];
        } else {
            let after = rest.strip_prefix('.').unwrap_or(rest);
            let end = after.find(['.', '[']).unwrap_or(after.len());
            if end == 0 {
                return None;
            }
            steps.push(Step::Key(&after[..end]));
            rest = &after[end..];
        }
    }
    Some(steps)
}

fn walk<'v>(root: &'v Value, path: &str) -> Option<&'v Value> {
    let steps = steps(path)?;
    let mut node = root;
    for step in steps {
        let key = match step {
            Step::Key(key) | Step::Index(key) => key,
        };
        if FORBIDDEN_KEYS.contains(&key) {
            return None;
        }
        node = match node {
            Value::Object(map) => map.get(key)?,
            Value::Array(items) => items.get(key.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(node)
}

/// A value as the OpenClaw gateway's templates print it ([`js_text`]); a string borrowed, not
/// copied, since a template may name a large one many times.
fn text(value: Option<&Value>) -> Cow<'_, str> {
    match value {
        None | Some(Value::Null) => Cow::Borrowed(""),
        Some(Value::String(s)) => Cow::Borrowed(s),
        Some(Value::Number(n)) => Cow::Owned(js_text::number(n)),
        Some(Value::Bool(b)) => Cow::Borrowed(if *b { "true" } else { "false" }),
        Some(other) => Cow::Owned(js_text::json(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn floor() -> RenderBudget {
        RenderBudget::for_request(RenderLimit::FLOOR)
    }

    fn with(payload: &Value, template: &str) -> String {
        let headers = vec![
            ("x-github-event".to_string(), "push".to_string()),
            ("x-multi".to_string(), "first".to_string()),
            ("x-multi".to_string(), "second".to_string()),
        ];
        let query = vec![
            ("a".to_string(), "1".to_string()),
            ("a".to_string(), "2".to_string()),
        ];
        let ctx = TemplateContext {
            name: "github",
            now: "2026-01-01T00:00:00.000Z",
            headers: &headers,
            query: &query,
            payload,
        };
        render(template, &ctx, &mut floor()).unwrap()
    }

    #[test]
    fn path_and_now_roots() {
        assert_eq!(
            with(&json!({}), "{{path}} at {{ now }}"),
            "github at 2026-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn header_root_is_case_insensitive_and_joins_repeated_values() {
        assert_eq!(with(&json!({}), "{{headers.X-GitHub-Event}}"), "push");
        assert_eq!(with(&json!({}), "{{headers.x-multi}}"), "first, second");
    }

    #[test]
    fn query_root_last_value_wins() {
        assert_eq!(with(&json!({}), "{{query.a}}"), "2");
        assert_eq!(with(&json!({}), "{{query.b}}"), "");
    }

    #[test]
    fn payload_root_and_bare_paths() {
        let p = json!({"repo": {"name": "hookgate"}, "items": [{"id": 7}]});
        assert_eq!(with(&p, "{{payload.repo.name}}"), "hookgate");
        assert_eq!(with(&p, "{{repo.name}}"), "hookgate");
        assert_eq!(with(&p, "{{items[0].id}}"), "7");
        assert_eq!(with(&p, "{{payload.items[0][\"id\"]}}"), "7");
    }

    #[test]
    fn missing_values_render_empty() {
        let p = json!({"a": null, "b": [1]});
        assert_eq!(
            with(&p, "[{{nope.x}}][{{a}}][{{b[5]}}][{{b.x}}]"),
            "[][][][]"
        );
    }

    #[test]
    fn scalars_as_text_and_containers_as_compact_json() {
        let p: Value = serde_json::from_str(
            r#"{"n": 42, "f": 1.5, "whole": 10.0, "t": true, "o": {"k": [1, "x"], "1": 2.0}}"#,
        )
        .unwrap();
        assert_eq!(
            with(&p, "{{n}} {{f}} {{whole}} {{t}} {{o}}"),
            r#"42 1.5 10 true {"1":2,"k":[1,"x"]}"#
        );
    }

    #[test]
    fn prototype_keys_yield_nothing_anywhere() {
        let p = json!({"__proto__": {"x": 1}, "a": {"constructor": "c", "prototype": "p"}});
        assert_eq!(
            with(&p, "{{__proto__.x}}|{{a.constructor}}|{{a[\"prototype\"]}}"),
            "||"
        );
    }

    #[test]
    fn unclosed_braces_are_literal() {
        assert_eq!(with(&json!({"a": 1}), "x {{a}} {{ b"), "x 1 {{ b");
    }

    #[test]
    fn render_optional_trims_and_drops_empty() {
        let ctx_payload = json!({"k": "  v  ", "e": " "});
        let ctx = TemplateContext {
            name: "n",
            now: "t",
            headers: &[],
            query: &[],
            payload: &ctx_payload,
        };
        let optional = |template| render_optional(template, &ctx, &mut floor()).unwrap();
        assert_eq!(optional(Some("{{k}}")).as_deref(), Some("v"));
        assert_eq!(optional(Some("{{e}}")), None);
        assert_eq!(optional(None), None);
    }

    #[test]
    fn a_rendering_past_the_budget_fails_and_the_budget_spans_templates() {
        let big = "x".repeat(64 * 1024);
        let payload = json!({ "big": big });
        let ctx = TemplateContext {
            name: "n",
            now: "t",
            headers: &[],
            query: &[],
            payload: &payload,
        };
        let limit = RenderLimit::FLOOR.bytes();
        let fits = "{{big}}".repeat(limit / big.len());
        let mut budget = floor();
        let rendered = render(&fits, &ctx, &mut budget).unwrap();
        assert_eq!(rendered.len(), limit);
        // The budget is spent: the next template of the same request gets nothing.
        let refused = TooLarge { limit };
        assert_eq!(render("a", &ctx, &mut budget), Err(refused));
        let over = "{{big}}".repeat(5000);
        assert_eq!(render(&over, &ctx, &mut floor()), Err(refused));
        assert_eq!(
            refused.to_string(),
            "hook mapping templates render to more than 1048576 bytes"
        );
    }

    #[test]
    fn the_bound_is_four_bodies_and_at_least_one_mebibyte() {
        let bytes = |body: u64| RenderLimit::for_body_limit(body).bytes();
        assert_eq!(bytes(1), 1024 * 1024);
        assert_eq!(bytes(256 * 1024), 1024 * 1024);
        assert_eq!(bytes(5 * 1024 * 1024), 20 * 1024 * 1024);
        assert_eq!(bytes(u64::MAX), usize::MAX);
        let wide = RenderLimit::for_body_limit(8 * 1024 * 1024);
        assert_eq!(wide.within(RenderLimit::FLOOR), RenderLimit::FLOOR);
        assert_eq!(RenderLimit::FLOOR.within(wide), RenderLimit::FLOOR);
    }
}
