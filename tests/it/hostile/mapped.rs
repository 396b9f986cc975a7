//! Hostile bodies for mapped hooks (docs/hooks.md): templates, `match.source`, the gmail preset,
//! the example transforms and a signed mapping.

use serde_json::json;

use super::bodies::{object, refused};
use super::case::*;

/// The signing secret of the `signed` mapping of the table's server.
pub const SIGNING_SECRET: &str = "hostile-signing-secret";

/// `sha256=<hex HMAC>` of `body` under [`SIGNING_SECRET`], as GitHub signs.
fn github_signature(body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SIGNING_SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

pub fn mapped_bodies() -> Theme {
    let mut cases = Vec::new();
    // `deploy`: a wake mapping with the text template `{{service}}`.
    for (what, value) in [
        ("a number", "5"),
        ("-0", "-0"),
        ("true", "true"),
        ("an array", "[1]"),
        ("an object", r#"{"a":null}"#),
        ("a template", r#""{{headers.authorization}}""#),
    ] {
        let body = object("service", value, "");
        cases.push(case(
            format!("template field is {what}"),
            post("/hooks/deploy", body),
            NOW,
        ));
    }
    for (what, body) in [
        ("null", r#"{"service":null}"#),
        ("blank", r#"{"service":" "}"#),
        ("missing", "{}"),
        ("in an array body", r#"[{"service":"x"}]"#),
    ] {
        cases.push(case(
            format!("template field is {what}"),
            post("/hooks/deploy", body),
            error(400, "hook mapping requires text"),
        ));
    }
    cases.push(refused(
        "template field is 1e309",
        "/hooks/deploy",
        r#"{"service":1e309}"#,
    ));

    // `ci`: an agent mapping, message `{{status}}`, model `{{model}}` (through the allowlist).
    let ci = "/hooks/ci";
    cases.extend([
        case(
            "agent template of nothing",
            post(ci, "{}"),
            error(400, "hook mapping requires message"),
        ),
        case(
            "agent template of a number",
            post(ci, r#"{"status":5}"#),
            Want::Queued,
        ),
        case(
            "model template of a number",
            post(ci, r#"{"status":"s","model":5}"#),
            error(400, "model not allowed: 5"),
        ),
        case(
            "model template of an array",
            post(ci, r#"{"status":"s","model":[]}"#),
            error(400, "model not allowed: []"),
        ),
        case(
            "model template of an object",
            post(ci, r#"{"status":"s","model":{"a":1}}"#),
            error(400, r#"model not allowed: {"a":1}"#),
        ),
        case(
            "model template of null",
            post(ci, r#"{"status":"s","model":null}"#),
            Want::Queued,
        ),
        case(
            "model template of blanks",
            post(ci, r#"{"status":"s","model":"  "}"#),
            Want::Queued,
        ),
        case(
            "model template of the alias",
            post(ci, r#"{"status":"s","model":"mini"}"#),
            Want::Queued,
        ),
    ]);

    // `ingest`: only `source: "ci"` matches.
    for source in [
        "5",
        "null",
        r#"["ci"]"#,
        r#""CI""#,
        r#"{"ci":true}"#,
        r#""ci\u0000""#,
    ] {
        cases.push(case(
            format!("match.source is {source}"),
            post("/hooks/ingest", object("source", source, "")),
            NOT_FOUND,
        ));
    }
    cases.push(case(
        "match.source is ci",
        post("/hooks/ingest", r#"{"source":"ci"}"#),
        NOW,
    ));

    // `ünï`: a mapping with a Unicode name. Names are compared as written, never
    // percent-decoded (docs/http-contract.md), so only the raw UTF-8 bytes reach it, which hyper accepts
    // in a request target although HTTP does not allow them; the percent-encoded name (what a
    // conforming client sends, in `paths`) and a decomposed `ü` do not.
    cases.extend([
        case(
            "a Unicode name, raw",
            raw(wire_post("/hooks/ünï", br#"{"x":"y"}"#)),
            NOW,
        ),
        case(
            "a Unicode name, decomposed",
            raw(wire_post("/hooks/u\u{308}nï", br#"{"x":"y"}"#)),
            NOT_FOUND,
        ),
        case(
            "a Unicode name, raw, template of nothing",
            raw(wire_post("/hooks/ünï", b"{}")),
            error(400, "hook mapping requires text"),
        ),
    ]);

    // The gmail preset makes one run per element of `messages`: none is a 204, before any
    // policy; an element's key comes from the payload, which this server does not allow.
    for messages in ["\"x\"", "null", "5", "[]"] {
        cases.push(case(
            format!("gmail messages is {messages}"),
            post("/hooks/gmail", object("messages", messages, "")),
            Want::NoBody(204),
        ));
    }
    cases.push(case(
        "gmail with an array body",
        post("/hooks/gmail", "[]"),
        Want::NoBody(204),
    ));
    cases.push(case(
        "gmail with a message of odd fields",
        post(
            "/hooks/gmail",
            object("messages", r#"[{"id":{},"from":[],"subject":null}]"#, ""),
        ),
        error(400, super::bodies::SESSION_KEY_DISABLED),
    ));

    // The example transforms.
    let github =
        |event: &str, body: &str| post("/hooks/github", body).header("x-github-event", event);
    let slack = |body: serde_json::Value| post("/hooks/slack", body.to_string());
    let stripe = |body: serde_json::Value| post("/hooks/stripe", body.to_string());
    let alerts = |body: serde_json::Value| post("/hooks/alerts", body.to_string());
    cases.extend([
        case("github push with commits a string", github("push", r#"{"commits":"x"}"#), Want::Queued),
        case("github push with an array body", github("push", "[]"), Want::Queued),
        case("github push with a scalar body", github("push", "5"), Want::Queued),
        case("github ping", github("ping", "{}"), Want::NoBody(204)),
        case("github event is a path", github("../../etc/passwd", "{}"), Want::NoBody(204)),
        case("github event of 8 KiB", github(&"p".repeat(8192), "{}"), Want::NoBody(204)),
        case(
            "github event that is not UTF-8",
            raw(wire("POST", "/hooks/github", b"x-github-event: \xff\xfe\r\n", b"{}")),
            Want::NoBody(204),
        ),
        // Not a GitHub delivery: the transform answers 400 itself rather than failing (a
        // failed transform would be docs/hooks.md's 500).
        case(
            "github without its event header",
            post("/hooks/github", "{}"),
            Want::Json(
                400,
                json!({"ok": false, "error": "missing X-GitHub-Event header"}),
            ),
        ),
        case(
            "slack challenge",
            slack(json!({"type": "url_verification", "challenge": "x"})),
            Want::Json(200, json!({"challenge": "x"})),
        ),
        case(
            "slack challenge of 200 KiB",
            slack(json!({"type": "url_verification", "challenge": "c".repeat(200 * 1024)})),
            Want::Json(200, json!({"challenge": "c".repeat(200 * 1024)})),
        ),
        case(
            "slack challenge is a number",
            slack(json!({"type": "url_verification", "challenge": 5})),
            Want::NoBody(204),
        ),
        case("slack type is an array", slack(json!({"type": []})), Want::NoBody(204)),
        case(
            "slack event is a string",
            slack(json!({"type": "event_callback", "event": "x"})),
            Want::NoBody(204),
        ),
        case(
            "slack message text is a number",
            slack(json!({"type": "event_callback", "event": {"type": "message", "text": 5, "channel": "C1"}})),
            Want::NoBody(204),
        ),
        case("stripe type is a number", stripe(json!({"type": 5})), Want::NoBody(204)),
        case("stripe with an array body", stripe(json!([])), Want::NoBody(204)),
        case(
            "stripe data is a string",
            stripe(json!({"type": "invoice.payment_failed", "data": "x"})),
            NOW,
        ),
        case(
            "stripe amount is i64::MIN",
            stripe(json!({"type": "invoice.payment_failed",
                "data": {"object": {"amount_due": i64::MIN, "currency": "usd"}}})),
            NOW,
        ),
        case(
            "stripe amount is 1e308",
            stripe(json!({"type": "invoice.payment_failed",
                "data": {"object": {"amount_due": 1e308, "currency": "usd"}}})),
            NOW,
        ),
        case("passthrough field is a number", alerts(json!({"alert": {"summary": 5}})), NOW),
        case("passthrough field is an object", alerts(json!({"alert": {"summary": {}}})), NOW),
        case("passthrough field is empty", alerts(json!({"alert": {"summary": ""}})), NOW),
    ]);

    // `signed`: a github-signed wake mapping; a signature stands in for the token.
    let body = br#"{"x":"hi"}"#;
    let signed = |signature: &str, body: &[u8]| {
        post("/hooks/signed", body.to_vec())
            .anonymous()
            .header("x-hub-signature-256", signature)
    };
    let huge = format!("sha256={}", "a".repeat(8192));
    let sha1 = github_signature(body).replace("sha256=", "sha1=");
    let wrong = format!("sha256={}", "0".repeat(64));
    for (what, signature) in [
        ("empty", "sha256="),
        ("not hex", "sha256=zz"),
        ("wrong", wrong.as_str()),
        ("under the wrong prefix", sha1.as_str()),
        ("of 8 KiB", huge.as_str()),
    ] {
        cases.push(case(
            format!("signature {what}"),
            signed(signature, body),
            UNAUTHORIZED,
        ));
    }
    let out_of_range = br#"{"x":1e309}"#;
    cases.extend([
        case(
            "a signature that is not UTF-8",
            raw(anonymous_wire(
                "POST",
                "/hooks/signed",
                b"x-hub-signature-256: sha256=\xff\xfe\r\n",
                body,
            )),
            UNAUTHORIZED,
        ),
        case(
            "signed, no signature",
            post("/hooks/signed", body.to_vec()).anonymous(),
            UNAUTHORIZED,
        ),
        case(
            "signed, valid signature",
            signed(&github_signature(body), body),
            NOW,
        ),
        case(
            "signed, valid signature over 1e309",
            signed(&github_signature(out_of_range), out_of_range),
            unparsable(out_of_range),
        ),
        case(
            "signed, valid signature over nothing to render",
            signed(&github_signature(b"{}"), b"{}"),
            error(400, "hook mapping requires text"),
        ),
        case(
            "signed, the hook token instead",
            post("/hooks/signed", body.to_vec()),
            NOW,
        ),
    ]);
    Theme {
        name: "mapped bodies",
        cases,
    }
}
