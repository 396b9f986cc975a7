//! Hostile request lines and credentials: `token` in the query in odd spellings (docs/http-contract.md),
//! methods (§2.3), path tricks (§2.1, §2.5: the prefix is matched as written, never
//! percent-decoded or dot-normalised), mangled tokens (§2.4), and the operator API and health
//! endpoints with the same treatment.

use reqwest::Method;

use super::case::*;
use crate::harness::*;

const WAKE: &[u8] = br#"{"text":"x"}"#;

pub fn query_tokens() -> Theme {
    let mut cases = Vec::new();
    let real = format!("token={HOOK_TOKEN}");
    for query in [
        "token=x",
        "token",
        "token=",
        "a=1&token=x",
        "token=x&token=y",
        "&&&token",
        "%74oken=x",
        "to%6Ben=x",
        "%74%6F%6B%65%6E=x",
        "token=%00",
        "token=%ff%fe",
        real.as_str(),
    ] {
        cases.push(case(
            format!("?{query}"),
            raw(wire_post(format!("/hooks/wake?{query}"), WAKE)),
            QUERY_TOKEN,
        ));
    }
    // Names that are not `token` once decoded: not refused, the request goes on.
    for query in [
        "Token=x",
        "TOKEN=x",
        "tokens=x",
        "token%00=x",
        "+token=x",
        "token+=x",
        "tok%20en=x",
        "x=token",
        "=token",
        "%2574oken=x",
        ";token=x",
        "a=1;token=x",
        "token[]=x",
        "%EF%BD%94%EF%BD%8F%EF%BD%8B%EF%BD%85%EF%BD%8E=x",
        "t%C3%B6ken=x",
        "%ff=1",
        "%",
        "",
    ] {
        cases.push(case(
            format!("?{query} is not a token parameter"),
            raw(wire_post(format!("/hooks/wake?{query}"), WAKE)),
            NOW,
        ));
    }
    let anonymous = |target: &str| raw(anonymous_wire("POST", target, "", WAKE));
    cases.extend([
        case(
            "?token= on a GET: refused before the method",
            raw(wire("GET", "/hooks/wake?token=x", "", b"")),
            QUERY_TOKEN,
        ),
        case(
            "?token= on the bare prefix",
            raw(wire_post("/hooks?token=x", WAKE)),
            QUERY_TOKEN,
        ),
        case(
            "?token= on an unknown hook",
            raw(wire_post("/hooks/nothing?token=x", WAKE)),
            QUERY_TOKEN,
        ),
        case(
            "?token= without a header token: refused before authentication",
            anonymous(&format!("/hooks/wake?token={HOOK_TOKEN}")),
            QUERY_TOKEN,
        ),
        // A fragment never reaches the server's logic: it is no credential and no query.
        case(
            "the token in a fragment is no credential",
            anonymous(&format!("/hooks/wake#token={HOOK_TOKEN}")),
            UNAUTHORIZED,
        ),
        case(
            "?token= inside a fragment is no query",
            raw(wire_post("/hooks/wake#x?token=y", WAKE)),
            NOW,
        ),
        case(
            "?token= outside the prefix",
            raw(wire_post("/hooksx/wake?token=x", WAKE)),
            NOT_FOUND,
        ),
        case("?token= on /livez", get("/livez?token=x"), alive()),
        case(
            "the gateway token in the query opens no API",
            get(&format!("/api/config?token={GATEWAY_TOKEN}")),
            api_unauthorized(),
        ),
        case(
            "the gateway token in the query opens no metrics",
            get(&format!("/metrics?token={GATEWAY_TOKEN}")),
            UNAUTHORIZED,
        ),
    ]);
    Theme {
        name: "query tokens",
        cases,
    }
}

pub fn paths_and_methods() -> Theme {
    let mut cases = Vec::new();
    for method in [
        "GET", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO", "post",
    ] {
        cases.push(case(
            format!("{method} /hooks/wake"),
            raw(wire(method, "/hooks/wake", "", b"")),
            Want::NotPost,
        ));
    }
    cases.push(case(
        "HEAD /hooks/wake",
        raw(wire("HEAD", "/hooks/wake", "", b"")).bodiless(),
        Want::NoBody(405),
    ));
    cases.push(case(
        "GET of an unknown hook",
        raw(wire("GET", "/hooks/nothing", "", b"")),
        Want::NotPost,
    ));
    let climb = format!("/hooks/{}etc/passwd", "../".repeat(1000));
    for target in [
        "/hooks/%2e%2e/api/config",
        "/hooks/../api/config",
        "/hooks/%2e%2e%2fwake",
        "/hooks%2fwake",
        "//hooks/wake",
        "/hooks/./wake",
        "/hooks/wake/..",
        "/hooks\\wake",
        "/hooks/\\wake",
        "/hooks/%5cwake",
        "/hooks/%c0%ae%c0%ae/wake",
        "/hooks/%e0%80%ae/wake",
        "/hooks/%C3%BCn%C3%AFc%C3%B6d%C3%A9",
        "/hooks/%F0%9F%92%A3",
        "/hooks/%E2%80%AEekaw",
        "/hooks/wake%00",
        "/hooks/wake%20",
        "/Hooks/wake",
        "/HOOKS/WAKE",
        "/hooks/WAKE",
        "/hooks/wake;x=1",
        "/hooks/wake%3Ftoken=x",
        "/hooks/%C3%BCn%C3%AF",
        "/hooks/u%CC%88n%C3%AF",
        "/hooks/ünïcödé",
        climb.as_str(),
    ] {
        cases.push(case(target, raw(wire_post(target, WAKE)), NOT_FOUND));
    }
    // Not normalised: it is under /api, which answers nothing without the gateway token.
    cases.push(case(
        "/api/../hooks/wake",
        raw(wire_post("/api/../hooks/wake", WAKE)),
        api_unauthorized(),
    ));
    for target in [
        "/hooks//wake",
        "/hooks///wake",
        // One trailing slash is the same hook (docs/http-contract.md, step 5).
        "/hooks/wake/",
        "/hooks/wake?",
        "http://127.0.0.1/hooks/wake",
        "http://evil.example/hooks/wake",
    ] {
        cases.push(case(target, raw(wire_post(target, WAKE)), NOW));
    }
    let unparsable_targets: [(&str, &[u8]); 6] = [
        ("overlong UTF-8 bytes", b"/hooks/\xc0\xae\xc0\xae/wake"),
        ("a byte that is not UTF-8", b"/hooks/\xff"),
        ("a NUL", b"/hooks/wa\x00ke"),
        ("a space", b"/hooks/wa ke"),
        ("a tab", b"/hooks/wa\tke"),
        ("an escape sequence", b"/hooks/\x1b[31mred"),
    ];
    for (what, target) in unparsable_targets {
        cases.push(case(
            format!("a path with {what}"),
            raw(wire_post(target, WAKE)),
            Want::Refused(400),
        ));
    }
    cases.extend([
        case(
            "a hook name of 64 KiB",
            raw(wire_post(format!("/hooks/{}", "a".repeat(64 * 1024)), WAKE)),
            Want::Refused(414),
        )
        .heavy(),
        case(
            "a hook name of 60 000 bytes",
            raw(wire_post(format!("/hooks/{}", "a".repeat(60_000)), WAKE)),
            NOT_FOUND,
        )
        .heavy(),
        case(
            "a Unicode hook name of 64 KiB",
            raw(wire_post(
                format!("/hooks/{}", "%C3%BC".repeat(11_000)),
                WAKE,
            )),
            Want::Refused(414),
        ),
        case("OPTIONS *", raw(wire("OPTIONS", "*", "", b"")), NOT_FOUND),
        case(
            "CONNECT to an authority",
            raw(wire("CONNECT", "example.com:443", "", b"")),
            NOT_FOUND,
        ),
        case(
            "GET of the API through a hook path",
            raw(anonymous_wire(
                "GET",
                "/hooks/../api/config",
                format!("authorization: Bearer {GATEWAY_TOKEN}\r\n"),
                b"",
            )),
            Want::NotPost,
        ),
    ]);
    Theme {
        name: "paths and methods",
        cases,
    }
}

pub fn credentials() -> Theme {
    let wake = |token: &[u8]| post("/hooks/wake", WAKE).header("authorization", token.to_vec());
    let lookalike = format!("Bearer {}", HOOK_TOKEN.replace('o', "о")); // Cyrillic о
    let mut cases = vec![
        case(
            "no credentials",
            post("/hooks/wake", WAKE).anonymous(),
            UNAUTHORIZED,
        ),
        case("Bearer without a token", wake(b"Bearer"), UNAUTHORIZED),
        case("Bearer and blanks", wake(b"Bearer    "), UNAUTHORIZED),
        case(
            "the token and one more character",
            wake(format!("Bearer {HOOK_TOKEN}x").as_bytes()),
            UNAUTHORIZED,
        ),
        case(
            "the token twice",
            wake(format!("Bearer {HOOK_TOKEN} {HOOK_TOKEN}").as_bytes()),
            UNAUTHORIZED,
        ),
        case(
            "the token with a Cyrillic look-alike",
            wake(lookalike.as_bytes()),
            UNAUTHORIZED,
        ),
        case(
            "the token with a byte that is not UTF-8",
            wake(&[&b"Bearer "[..], HOOK_TOKEN.as_bytes(), &b"\xff"[..]].concat()),
            UNAUTHORIZED,
        ),
        case(
            "X-Service-Token with a byte that is not UTF-8",
            post("/hooks/wake", WAKE).anonymous().header(
                "x-service-token",
                [HOOK_TOKEN.as_bytes(), &b"\xff"[..]].concat(),
            ),
            UNAUTHORIZED,
        ),
        case(
            "a bearer token of 8 KiB",
            wake(format!("Bearer {}", "t".repeat(8192)).as_bytes()),
            UNAUTHORIZED,
        ),
        case(
            "an X-Service-Token of 64 KiB",
            post("/hooks/wake", WAKE)
                .anonymous()
                .header("x-service-token", "t".repeat(64 * 1024)),
            UNAUTHORIZED,
        )
        .heavy(),
        // Authorization is one field: the first one counts, a second cannot override it.
        case(
            "a wrong Authorization, then the right one",
            raw(anonymous_wire(
                "POST",
                "/hooks/wake",
                format!("authorization: Bearer wrong\r\nauthorization: Bearer {HOOK_TOKEN}\r\n"),
                WAKE,
            )),
            UNAUTHORIZED,
        ),
        case(
            "a NUL in Authorization",
            raw(anonymous_wire(
                "POST",
                "/hooks/wake",
                format!("authorization: Bearer {HOOK_TOKEN}\0\r\n"),
                WAKE,
            )),
            Want::Refused(400),
        ),
        case(
            "Authorization folded over two lines",
            raw(anonymous_wire(
                "POST",
                "/hooks/wake",
                format!("authorization: Bearer\r\n {HOOK_TOKEN}\r\n"),
                WAKE,
            )),
            Want::Refused(400),
        ),
        case(
            "X-Forwarded-For of garbage",
            post("/hooks/wake", WAKE)
                .header("x-forwarded-for", "ünï, 999.1.1.1, ::ffff:zz, \u{202e}"),
            NOW,
        ),
        case(
            "X-Forwarded-For of 1000 hops",
            post("/hooks/wake", WAKE).header(
                "x-forwarded-for",
                (0..1000)
                    .map(|i| format!("10.0.{}.{}", i / 256, i % 256))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            NOW,
        ),
        case(
            "a wrong token for a body of 1 GB that never comes: refused before the body",
            raw(
                "POST /hooks/wake HTTP/1.1\r\nhost: x\r\nauthorization: Bearer wrong\r\ncontent-length: 1000000000\r\n\r\n",
            ),
            UNAUTHORIZED,
        ),
    ];
    for path in [
        "/hooks/agent",
        "/hooks/github",
        "/hooks/deploy",
        "/hooks",
        "/hooks/nothing",
    ] {
        cases.push(case(
            format!("a wrong token for {path}"),
            post(path, WAKE).header("authorization", "Bearer wrong"),
            UNAUTHORIZED,
        ));
    }
    Theme {
        name: "credentials",
        cases,
    }
}

pub fn api_and_health() -> Theme {
    let run_not_found = || error(404, "run not found");
    let after = || error(400, "after must be an integer");
    let limit = || error(400, "limit must be an integer from 1 to 1000");
    let gateway = format!("authorization: Bearer {GATEWAY_TOKEN}\r\n");
    let mut cases = vec![
        case("a run id of a NUL", api("/api/runs/%00"), run_not_found()),
        case(
            "a run id climbing out",
            api("/api/runs/..%2f..%2fetc%2fpasswd"),
            run_not_found(),
        ),
        case(
            "a run id of SQL",
            api("/api/runs/'%20OR%20'1'='1"),
            run_not_found(),
        ),
        case(
            "a run id of 4000 characters",
            api(&format!("/api/runs/{}", "r".repeat(4000))),
            run_not_found(),
        ),
        // axum refuses a path parameter that decodes to bytes that are not UTF-8.
        case(
            "a run id that is not UTF-8",
            api("/api/runs/%ff"),
            Want::Status(400),
        ),
        case(
            "an empty run id",
            api("/api/runs/"),
            error(404, "endpoint not found"),
        ),
        case(
            "a run id with a slash",
            api("/api/runs/a/b"),
            error(404, "endpoint not found"),
        ),
        case(
            "a run id of 64 KiB",
            raw(anonymous_wire(
                "GET",
                format!("/api/runs/{}", "r".repeat(64 * 1024)),
                &gateway,
                b"",
            )),
            Want::Refused(414),
        )
        .heavy(),
        case(
            "runs of a status of SQL",
            api("/api/runs?status='%20OR%201=1%20--&limit=5"),
            unknown_status(),
        ),
        case(
            "runs of a status that is not UTF-8",
            api("/api/runs?status=%ff%fe"),
            unknown_status(),
        ),
        case(
            "runs with a limit of letters",
            api("/api/runs?limit=abc"),
            limit(),
        ),
        case(
            "events after -0",
            api("/api/sessions/main/events?after=-0"),
            Want::Status(200),
        ),
        case(
            "events after i64::MIN",
            api("/api/sessions/main/events?after=-9223372036854775808"),
            Want::Status(200),
        ),
        case(
            "events with a limit of %2B5 (+5)",
            api("/api/sessions/main/events?limit=%2B5"),
            Want::Status(200),
        ),
        case("the configuration", api("/api/config"), Want::Status(200)),
        case(
            "the configuration, posted",
            api("/api/config").method(Method::POST),
            error(405, "method not allowed"),
        ),
        case(
            "the configuration with the hook token",
            get("/api/config").header("authorization", format!("Bearer {HOOK_TOKEN}")),
            api_unauthorized(),
        ),
        case(
            "the configuration with a NUL in the token",
            raw(anonymous_wire(
                "GET",
                "/api/config",
                format!("authorization: Bearer {GATEWAY_TOKEN}\0\r\n"),
                b"",
            )),
            Want::Refused(400),
        ),
        case("metrics without a token", get("/metrics"), UNAUTHORIZED),
        case("metrics", api("/metrics"), Want::Status(200)),
        case(
            "HEAD /livez",
            raw(anonymous_wire("HEAD", "/livez", "", b"")).bodiless(),
            Want::NoBody(200),
        ),
        case(
            "POST /livez",
            raw(anonymous_wire("POST", "/livez", "", WAKE)),
            Want::NoBody(405),
        ),
        case(
            "POST /readyz",
            raw(anonymous_wire("POST", "/readyz", "", WAKE)),
            Want::NoBody(405),
        ),
        case("/livez/", get("/livez/"), NOT_FOUND),
        case("/LIVEZ", get("/LIVEZ"), NOT_FOUND),
        case(
            "/readyz with a query that is not UTF-8",
            get("/readyz?x=%ff"),
            alive(),
        ),
        case(
            "/livez with 90 headers",
            raw(anonymous_wire(
                "GET",
                "/livez",
                (0..90)
                    .map(|i| format!("x-h{i}: v\r\n"))
                    .collect::<String>(),
                b"",
            )),
            alive(),
        ),
        case(
            "/livez asking for a websocket",
            raw(anonymous_wire(
                "GET",
                "/livez",
                "upgrade: websocket\r\nsec-websocket-version: 13\r\n",
                b"",
            )),
            alive(),
        ),
    ];
    for value in ["1e309", "9223372036854775808", "%ff", "", "0x1", "1.5"] {
        cases.push(case(
            format!("events after {value:?}"),
            api(&format!("/api/sessions/main/events?after={value}")),
            after(),
        ));
    }
    // `+` in a query is a space: `+5` is " 5".
    for value in [
        "1e3",
        "0x10",
        "%00",
        "4294967296",
        "-0",
        "0",
        "1001",
        "",
        "+5",
    ] {
        cases.push(case(
            format!("events with a limit of {value:?}"),
            api(&format!("/api/sessions/main/events?limit={value}")),
            limit(),
        ));
    }
    Theme {
        name: "operator API and health",
        cases,
    }
}

/// The operator API's refusal of a missing or wrong gateway token (docs/operations.md).
pub fn api_unauthorized() -> Want {
    error(401, "unauthorized")
}

/// An unknown run status is refused with the list of known ones (docs/operations.md).
fn unknown_status() -> Want {
    Want::Error(
        400,
        "status must be one of: queued, batching, running, ok, error, timeout, forwarding, forwarded, forward_failed, held, cancelled".into(),
    )
}
