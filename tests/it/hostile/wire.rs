//! Hostile framing: huge and numerous headers, HTTP versions other than 1.1, pipelines,
//! Content-Length lies both ways, chunked bodies that break or outgrow the limit, `Expect`
//! (docs/http-contract.md for the body limits); and, against a server with short timeouts, clients too
//! slow to finish.

use std::time::Duration;

use super::case::*;
use super::raw::Pace;
use crate::harness::*;

const WAKE: &[u8] = br#"{"text":"x"}"#;

fn too_large() -> Want {
    error(413, "payload too large")
}

fn unreadable() -> Want {
    error(400, "request body could not be read")
}

/// A wake with this `Content-Length`, whatever the body really is.
fn lying(length: &str, extra: &str, body: &[u8], close: bool) -> Vec<u8> {
    let close = if close { "connection: close\r\n" } else { "" };
    let head = format!(
        "POST /hooks/wake HTTP/1.1\r\nhost: hookgate.test\r\nauthorization: Bearer {HOOK_TOKEN}\r\ncontent-length: {length}\r\n{close}{extra}\r\n"
    );
    [head.as_bytes(), body].concat()
}

/// A chunked wake whose body is `chunks` as written (sizes, extensions, the end: all up to the
/// caller).
fn chunked(chunks: impl AsRef<[u8]>) -> Vec<u8> {
    let head = format!(
        "POST /hooks/wake HTTP/1.1\r\nhost: hookgate.test\r\nauthorization: Bearer {HOOK_TOKEN}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    [head.as_bytes(), chunks.as_ref()].concat()
}

/// A chunked wake with this `Transfer-Encoding` value.
fn te(value: &str) -> Vec<u8> {
    let head = format!(
        "POST /hooks/wake HTTP/1.1\r\nhost: hookgate.test\r\nauthorization: Bearer {HOOK_TOKEN}\r\ntransfer-encoding: {value}\r\nconnection: close\r\n\r\n"
    );
    [head.as_bytes(), &in_chunks(WAKE, 5)].concat()
}

/// `data` as a chunked body of `size`-byte chunks, ended properly.
fn in_chunks(data: &[u8], size: usize) -> Vec<u8> {
    let mut body = Vec::new();
    for chunk in data.chunks(size) {
        body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        body.extend_from_slice(chunk);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    body
}

/// A wake padded with spaces to `length` bytes.
fn padded(length: usize) -> Vec<u8> {
    let mut body = WAKE.to_vec();
    body.resize(length, b' ');
    body
}

/// `bytes` with its request line's version replaced.
fn version(bytes: Vec<u8>, version: &str) -> Vec<u8> {
    let text = String::from_utf8(bytes).unwrap();
    text.replacen(" HTTP/1.1\r\n", &format!(" {version}\r\n"), 1)
        .into_bytes()
}

fn headers(count: usize) -> String {
    (0..count).map(|i| format!("x-h{i}: v\r\n")).collect()
}

pub fn framing(max_body: usize) -> Theme {
    let post = |extra: &str| raw(wire("POST", "/hooks/wake", extra, WAKE));
    let livez = anonymous_wire("GET", "/livez", "", b"");
    let open_livez = open_wire("GET", "/livez", "", b"");
    let big = format!("x-big: {}\r\n", "a".repeat(1 << 20));
    let tls_hello = [
        &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[..],
        &[0u8; 40][..],
    ]
    .concat();
    let cases = vec![
        case("a header of 1 MiB", post(&big), Want::Refused(431)).heavy(),
        case(
            "a header of 1 MiB to /livez",
            raw(anonymous_wire("GET", "/livez", &big, b"")),
            Want::Refused(431),
        )
        .heavy(),
        case("10 000 headers", post(&headers(10_000)), Want::Refused(431)).heavy(),
        case(
            "1 MiB of headers in 20 fields",
            post(&(0..20).map(|i| format!("x-b{i}: {}\r\n", "b".repeat(50_000))).collect::<String>()),
            Want::Refused(431),
        )
        .heavy(),
        case("101 headers", post(&headers(101)), Want::Refused(431)),
        case("90 headers", post(&headers(90)), NOW),
        case(
            "a header name of 70 000 bytes",
            post(&format!("x{}: 1\r\n", "n".repeat(70_000))),
            Want::Refused(431),
        ),
        case(
            "a header value of 64 KiB",
            post(&format!("x-v: {}\r\n", "v".repeat(64 * 1024))),
            NOW,
        )
        .heavy(),
        case(
            "a header value that is not UTF-8",
            raw(wire("POST", "/hooks/wake", b"x-v: \xff\xfe\xc0\xae\r\n", WAKE)),
            NOW,
        ),
        case("a NUL in a header value", post("x-v: a\0b\r\n"), Want::Refused(400)),
        case("a bare CR in a header value", post("x-v: a\rb\r\n"), Want::Refused(400)),
        case("a space before the colon", post("x-v : 1\r\n"), Want::Refused(400)),
        case("a header line without a colon", post("x-v\r\n"), Want::Refused(400)),
        case("a folded header", post("x-v: a\r\n b\r\n"), Want::Refused(400)),
        // Versions other than HTTP/1.1.
        case("HTTP/1.0", raw(version(wire_post("/hooks/wake", WAKE), "HTTP/1.0")), NOW),
        case(
            "HTTP/1.0 without a length: no body",
            raw(format!(
                "POST /hooks/wake HTTP/1.0\r\nauthorization: Bearer {HOOK_TOKEN}\r\n\r\n"
            )),
            error(400, "text required"),
        ),
        case(
            "HTTP/1.0 with a chunked body",
            raw(version(chunked(in_chunks(WAKE, 4)), "HTTP/1.0")),
            Want::Refused(400),
        ),
        case("HTTP/1.0 GET /livez", raw("GET /livez HTTP/1.0\r\n\r\n"), alive()),
        case("HTTP/0.9", raw("GET /livez\r\n\r\n"), Want::Refused(400)),
        case(
            "HTTP/2.0 in a request line",
            raw(version(wire_post("/hooks/wake", WAKE), "HTTP/2.0")),
            Want::Refused(400),
        ),
        case(
            "HTTP/1.2",
            raw(version(wire_post("/hooks/wake", WAKE), "HTTP/1.2")),
            Want::Refused(400),
        ),
        case(
            "a lower-case version",
            raw(version(wire_post("/hooks/wake", WAKE), "http/1.1")),
            Want::Refused(400),
        ),
        // hyper recognises the HTTP/2 preface and hangs up: this server speaks HTTP/1 only.
        case("the HTTP/2 preface", raw("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Want::Closed),
        case("a TLS ClientHello", raw(tls_hello), Want::Refused(400)),
        case("nothing at all", raw("").paced(Pace::ThenShut), Want::Closed),
        case(
            "blank lines before the request line",
            raw([&b"\r\n\r\n"[..], wire_post("/hooks/wake", WAKE).as_slice()].concat()),
            NOW,
        ),
        case(
            "bare LF line endings",
            raw(String::from_utf8(wire_post("/hooks/wake", WAKE))
                .unwrap()
                .replace("\r\n", "\n")),
            NOW,
        ),
        // Pipelines: answers in order, each request on its own.
        case(
            "three wakes and /livez, pipelined",
            raw([
                open_wire("POST", "/hooks/wake", "", WAKE),
                open_wire("POST", "/hooks/wake", "", WAKE),
                open_wire("POST", "/hooks/wake", "", WAKE),
                livez.clone(),
            ]
            .concat()),
            Want::Sequence(vec![NOW, NOW, NOW, alive()]),
        ),
        case(
            "bad JSON, then good, pipelined",
            raw([open_wire("POST", "/hooks/wake", "", b"{"), wire_post("/hooks/wake", WAKE)].concat()),
            Want::Sequence(vec![unparsable(b"{"), NOW]),
        ),
        case(
            "a wrong token between two wakes, pipelined",
            raw([
                open_wire("POST", "/hooks/wake", "", WAKE),
                b"POST /hooks/wake HTTP/1.1\r\nhost: x\r\nauthorization: Bearer wrong\r\ncontent-length: 0\r\n\r\n".to_vec(),
                wire_post("/hooks/wake", WAKE),
            ]
            .concat()),
            Want::Sequence(vec![NOW, UNAUTHORIZED, NOW]),
        ),
        case(
            "100 requests for /livez, pipelined",
            raw([open_livez.repeat(99), livez].concat()),
            Want::Sequence(vec![alive(); 100]),
        )
        .heavy(),
        // Content-Length lies.
        case(
            "Content-Length shorter than the body, the rest a request without a token",
            raw(lying(
                "12",
                "",
                b"{\"text\":\"x\"}GET /api/config HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
                false,
            )),
            Want::Sequence(vec![NOW, super::paths::api_unauthorized()]),
        ),
        case(
            "Content-Length shorter than the body, the rest garbage",
            raw(lying("5", "", b"{\"text\":\"hi\"}\r\n\r\n", false)),
            Want::Sequence(vec![unparsable(b"{\"tex"), Want::Refused(400)]),
        ),
        case(
            "Content-Length longer than the body, then the client stops sending",
            raw(lying("100", "", WAKE, true)).paced(Pace::ThenShut),
            unreadable(),
        ),
        case("Content-Length of -1", raw(lying("-1", "", WAKE, true)), Want::Refused(400)),
        case("Content-Length of +12", raw(lying("+12", "", WAKE, true)), Want::Refused(400)),
        case("Content-Length of \"12, 12\"", raw(lying("12, 12", "", WAKE, true)), Want::Refused(400)),
        case("Content-Length of letters", raw(lying("twelve", "", WAKE, true)), Want::Refused(400)),
        case(
            "two different Content-Lengths",
            post("content-length: 13\r\n"),
            Want::Refused(400),
        ),
        // No `100 Continue` wanted: the server waits (at most 2 s) for a body to discard before
        // it answers, so that its answer is not lost to a reset.
        case(
            "Content-Length of 10^18 and no body",
            raw(lying("1000000000000000000", "", b"", true)),
            too_large(),
        ),
        case(
            "Content-Length of 1 GB, expecting 100-continue",
            raw(lying("1000000000", "expect: 100-continue\r\n", b"", true)),
            too_large(),
        ),
        case(
            "a body one byte over the limit",
            raw(wire_post("/hooks/wake", &padded(max_body + 1))),
            too_large(),
        )
        .heavy(),
        case(
            "a body exactly at the limit",
            raw(wire_post("/hooks/wake", &padded(max_body))),
            NOW,
        )
        .heavy(),
        // Chunked bodies.
        case(
            "a chunked body growing past the limit",
            raw(chunked(in_chunks(&padded(max_body + 50_000), 1000))),
            too_large(),
        )
        .heavy(),
        case(
            "a chunked body of 10 000 one-byte chunks",
            raw(chunked(in_chunks(&padded(10_000), 1))),
            NOW,
        )
        .heavy(),
        case(
            "chunk extensions and trailers",
            raw(chunked(b"c;name=value\r\n{\"text\":\"x\"}\r\n0\r\nx-trailer: 1\r\n\r\n")),
            NOW,
        ),
        // hyper bounds chunk extensions and trailers; what it will not read is a broken body.
        case(
            "a chunk extension of 1 MiB",
            raw(chunked([&b"c;x="[..], &vec![b'e'; 1 << 20], b"\r\n{\"text\":\"x\"}\r\n0\r\n\r\n"].concat())),
            unreadable(),
        )
        .heavy(),
        case(
            "a chunk extension of 20 000 bytes",
            raw(chunked(format!("c;x={}\r\n{{\"text\":\"x\"}}\r\n0\r\n\r\n", "e".repeat(20_000)))),
            unreadable(),
        ),
        case(
            "a trailer of 1 MiB",
            raw(chunked(format!("c\r\n{{\"text\":\"x\"}}\r\n0\r\nx-t: {}\r\n\r\n", "t".repeat(1 << 20)))),
            unreadable(),
        )
        .heavy(),
        case(
            "10 000 trailers",
            raw(chunked(format!("c\r\n{{\"text\":\"x\"}}\r\n0\r\n{}\r\n", headers(10_000)))),
            unreadable(),
        ),
        case("a chunk size that is not hex", raw(chunked(b"zz\r\n{}\r\n0\r\n\r\n")), unreadable()),
        case(
            "a chunk size beyond 64 bits",
            raw(chunked(b"fffffffffffffffffff\r\n{}\r\n0\r\n\r\n")),
            unreadable(),
        ),
        case(
            "a chunk longer than its size",
            raw(chunked(b"5\r\n{\"text\":\"x\"}\r\n0\r\n\r\n")),
            unreadable(),
        ),
        case(
            "a chunked body cut off, then the client stops sending",
            raw(chunked(b"c\r\n{\"text\":\"x\"}\r\n")).paced(Pace::ThenShut),
            unreadable(),
        ),
        case(
            "chunked and a Content-Length",
            raw(
                String::from_utf8(chunked(in_chunks(WAKE, 5)))
                    .unwrap()
                    .replacen("\r\n\r\n", "\r\ncontent-length: 3\r\n\r\n", 1),
            ),
            NOW,
        ),
        case("Transfer-Encoding gzip", post("transfer-encoding: gzip\r\n"), Want::Refused(400)),
        case(
            "Transfer-Encoding identity",
            post("transfer-encoding: identity\r\n"),
            Want::Refused(400),
        ),
        // Request smuggling probes: only a final `chunked` frames a body; anything else is refused.
        case(
            "Transfer-Encoding chunked, identity",
            raw(te("chunked, identity")),
            Want::Refused(400),
        ),
        case("Transfer-Encoding xchunked", raw(te("xchunked")), Want::Refused(400)),
        case("Transfer-Encoding CHUNKED", raw(te("CHUNKED")), NOW),
        case("Transfer-Encoding after a tab", raw(te("\tchunked")), NOW),
        case(
            "Transfer-Encoding identity, then chunked",
            raw(te("identity\r\ntransfer-encoding: chunked")),
            NOW,
        ),
        case(
            "two equal Content-Lengths",
            post("content-length: 12\r\n"),
            NOW,
        ),
        case("Content-Length of 0012", raw(lying("0012", "", WAKE, true)), NOW),
        case(
            "a method of 64 KiB",
            raw(wire(&"M".repeat(64 * 1024), "/hooks/wake", "", b"")),
            Want::NotPost,
        ),
        case(
            "a version with a tail",
            raw(version(wire_post("/hooks/wake", WAKE), "HTTP/1.1x")),
            Want::Refused(400),
        ),
        case(
            "a header line that starts with a space",
            raw(
                String::from_utf8(wire_post("/hooks/wake", WAKE))
                    .unwrap()
                    .replacen("\r\nhost", "\r\n host", 1),
            ),
            Want::Refused(400),
        ),
        case(
            "Expect: 100-continue",
            raw(lying("12", "expect: 100-continue\r\n", WAKE, true)),
            NOW,
        ),
        // RFC 9110 lets a server answer an unknown expectation with 417; hookgate ignores it.
        case(
            "Expect: something else",
            raw(lying("12", "expect: the-unexpected\r\n", WAKE, true)),
            NOW,
        ),
    ];
    Theme {
        name: "framing",
        cases,
    }
}

/// Where hookgate's answer is not what a correct server gives, and cannot be made so without
/// replacing hyper's HTTP/1 parser, or is a leniency that harms nothing: each case names the right
/// answer, and asserts the present one (never a 5xx), so that a change is seen.
pub fn deviations() -> Theme {
    let post = |extra: &str| raw(wire("POST", "/hooks/wake", extra, WAKE));
    let cases = vec![
        // docs/http-contract.md and RFC 9110 §8.6 (a recipient must cope with large lengths): 413.
        // hyper fails to parse a length beyond 64 bits and refuses the request before any route
        // sees it.
        case(
            "Content-Length of twenty nines (right: 413)",
            raw(lying("99999999999999999999", "", WAKE, true)),
            Want::Refused(400),
        ),
        // Likewise; hyper's largest length is 2^64 - 3 and it answers 431 above it.
        case(
            "Content-Length of 2^64 - 1 (right: 413)",
            raw(lying("18446744073709551615", "", WAKE, true)),
            Want::Refused(431),
        ),
        // RFC 9112 §3.2: 400 for an HTTP/1.1 request without exactly one Host. hookgate never
        // reads Host, so serving it anyway misroutes nothing.
        case(
            "HTTP/1.1 without Host (right: 400)",
            raw(format!(
                "POST /hooks/wake HTTP/1.1\r\nauthorization: Bearer {HOOK_TOKEN}\r\ncontent-length: 12\r\nconnection: close\r\n\r\n{{\"text\":\"x\"}}"
            )),
            NOW,
        ),
        // RFC 9112 §6.1: a transfer coding the server does not understand SHOULD get 501;
        // hookgate undoes the chunking and reads the bytes as they are (a gzipped body would be
        // a 400 for invalid JSON).
        case(
            "Transfer-Encoding gzip, chunked (right: 501)",
            raw(te("gzip, chunked")),
            NOW,
        ),
        case(
            "two Host fields (right: 400)",
            post("host: elsewhere.test\r\n"),
            NOW,
        ),
    ];
    Theme {
        name: "known deviations",
        cases,
    }
}

/// Against a server whose body and header timeouts are 2 s: every case ends, one way or the
/// other, well within the bound the runner gives it.
pub fn slow_clients() -> Theme {
    let every = Duration::from_secs(1);
    let trickle = |bytes: Vec<u8>| {
        let head = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        raw(bytes).paced(Pace::Trickle { head, every })
    };
    let body = format!(r#"{{"text":"{}"}}"#, "x".repeat(100)).into_bytes();
    let timeout = || error(408, "request body timeout");
    let cases = vec![
        case(
            "a body trickling one byte a second",
            trickle(wire_post("/hooks/wake", &body)),
            timeout(),
        ),
        case(
            "a body for /hooks/agent trickling one byte a second",
            trickle(wire_post("/hooks/agent", &body)),
            timeout(),
        ),
        case(
            "a body for a mapped hook trickling one byte a second",
            trickle(wire_post("/hooks/deploy", &body)),
            timeout(),
        ),
        case(
            "a chunked body trickling one byte a second",
            trickle(chunked(in_chunks(&body, 10))),
            timeout(),
        ),
        case(
            "Content-Length longer than the body, the connection held open",
            raw(lying("100", "", WAKE, true)),
            timeout(),
        ),
        case(
            "a chunked body that never ends",
            raw(chunked(b"c\r\n{\"text\":\"x\"}\r\n")),
            timeout(),
        ),
        case(
            "Expect: 100-continue, then no body",
            raw(lying("12", "expect: 100-continue\r\n", b"", true)),
            timeout(),
        ),
        case(
            "a wrong token, the body never sent: refused before the body",
            raw(
                "POST /hooks/wake HTTP/1.1\r\nhost: x\r\nauthorization: Bearer wrong\r\ncontent-length: 100\r\n\r\n",
            ),
            UNAUTHORIZED,
        ),
        // Headers too slow: hyper hangs up without an answer once the header timeout passes.
        case(
            "headers trickling one byte a second",
            raw(wire_post("/hooks/wake", WAKE)).paced(Pace::Trickle { head: 0, every }),
            Want::Closed,
        ),
        case(
            "half a request line, then silence",
            raw("POST /hooks/wa"),
            Want::Closed,
        ),
        case(
            "an idle connection after one request",
            raw(open_wire("POST", "/hooks/wake", "", WAKE)),
            Want::Sequence(vec![NOW]),
        ),
    ];
    Theme {
        name: "slow clients",
        cases,
    }
}
