//! `{{ expr }}` templates over any template text, headers, query and JSON payload. The input is
//! four NUL-separated fields: the template, `name: value` header lines, a query string
//! (`a=1&b=2`, not percent-decoded), and the payload (JSON; other text is taken as a JSON string).
//!
//! Whatever the input: an answer, never a panic; a template without a closed `{{ ... }}` renders
//! as itself (fuzz inputs are far below the render bound); and an optional field is either absent
//! or trimmed and non-blank.
#![no_main]

use hookgate::mapping::template::{
    RenderBudget, RenderLimit, TemplateContext, render, render_optional,
};
use hookgate_fuzz::{fields, header_lines};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let [template, headers, query, payload] = fields(data);
    let headers = header_lines(&headers);
    let query: Vec<(String, String)> = query
        .split('&')
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let payload = serde_json::from_str(&payload).unwrap_or(Value::String(payload));
    let ctx = TemplateContext {
        name: "fuzz",
        now: "2026-01-01T00:00:00.000Z",
        headers: &headers,
        query: &query,
        payload: &payload,
    };
    let budget = || RenderBudget::for_request(RenderLimit::FLOOR);
    let Ok(rendered) = render(&template, &ctx, &mut budget()) else {
        return;
    };
    if !has_expression(&template) {
        assert_eq!(rendered, template);
    }
    let optional = render_optional(Some(&template), &ctx, &mut budget());
    if let Ok(Some(field)) = optional {
        assert!(!field.is_empty() && field.trim() == field, "{field:?}");
    }
});

/// Whether some `{{` is followed, later, by a `}}`.
fn has_expression(template: &str) -> bool {
    template
        .find("{{")
        .is_some_and(|open| template[open + 2..].contains("}}"))
}
