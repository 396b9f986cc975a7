//! docs/http-contract.md: the request pipeline, rule by rule, in order.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::*;

async fn text(response: reqwest::Response) -> (u16, String) {
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Sends raw bytes and reads until the server closes or `timeout` passes.
async fn raw(server: &Hookgate, request: &[u8]) -> String {
    let addr = server.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn disabled_hooks_are_not_served() {
    let mut config = base_config();
    set(&mut config, "hooks.enabled", json!(false));
    let (server, _dir) = Hookgate::start(&config);
    let r = server
        .hook("/hooks/wake")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(text(r).await, (404, "Not Found".into()));
}

#[tokio::test]
async fn only_the_prefix_and_paths_below_it_are_hooks() {
    let (server, _dir) = Hookgate::start(&base_config());
    for path in ["/hooksx/wake", "/Hooks/wake", "/other"] {
        let r = server
            .hook(path)
            .json(&json!({"text": "x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    // The prefix itself is a hook path: it gets past the prefix check to the empty-name 404,
    // but only after the method check (405 for GET proves it was treated as a hook path).
    let r = client().get(server.url("/hooks")).send().await.unwrap();
    assert_eq!(r.status(), 405);
}

#[tokio::test]
async fn custom_prefix_is_normalised() {
    let mut config = base_config();
    set(&mut config, "hooks.path", json!(" ingress/ "));
    let (server, _dir) = Hookgate::start(&config);
    let r = server
        .hook("/ingress/wake")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn token_in_query_is_refused_with_400_before_anything_else() {
    let (server, _dir) = Hookgate::start(&base_config());
    let expected = "Hook token must be provided via Authorization: Bearer <token> or X-Service-Token header (query parameters are not allowed).";
    // Any method, any value, with or without a valid header token.
    let r = client()
        .get(server.url("/hooks/wake?token=abc"))
        .send()
        .await
        .unwrap();
    assert_eq!(text(r).await, (400, expected.to_string()));
    let r = server.hook("/hooks/wake?x=1&token=").send().await.unwrap();
    assert_eq!(text(r).await, (400, expected.to_string()));
}

#[tokio::test]
async fn query_token_refusals_do_not_count_as_auth_failures() {
    let (server, _dir) = Hookgate::start(&base_config());
    for _ in 0..25 {
        let r = client()
            .post(server.url("/hooks/wake?token=x"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
    }
    let r = client()
        .post(server.url("/hooks/wake"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn non_post_methods_get_405_with_allow_post() {
    let (server, _dir) = Hookgate::start(&base_config());
    for method in [
        reqwest::Method::GET,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
    ] {
        let r = client()
            .request(method.clone(), server.url("/hooks/wake"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["allow"], "POST");
        assert_eq!(
            text(r).await,
            (405, "Method Not Allowed".into()),
            "{method}"
        );
    }
}

#[tokio::test]
async fn missing_or_wrong_token_is_401() {
    let (server, _dir) = Hookgate::start(&base_config());
    let r = client()
        .post(server.url("/hooks/wake"))
        .send()
        .await
        .unwrap();
    assert_eq!(text(r).await, (401, "Unauthorized".into()));
    let r = client()
        .post(server.url("/hooks/wake"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(text(r).await, (401, "Unauthorized".into()));
    let r = client()
        .post(server.url("/hooks/wake"))
        .header("authorization", format!("Basic {HOOK_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn token_headers_bearer_service_token_and_alias() {
    let (server, _dir) = Hookgate::start(&base_config());
    let body = json!({"text": "x"});
    for (name, value) in [
        ("authorization", format!("bearer   {HOOK_TOKEN}  ")),
        ("x-service-token", HOOK_TOKEN.to_string()),
        ("x-openclaw-token", HOOK_TOKEN.to_string()),
    ] {
        let r = client()
            .post(server.url("/hooks/wake"))
            .header(name, value)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{name}");
    }
}

#[tokio::test]
async fn bearer_wins_over_service_token() {
    let (server, _dir) = Hookgate::start(&base_config());
    let r = client()
        .post(server.url("/hooks/wake"))
        .bearer_auth("wrong")
        .header("x-service-token", HOOK_TOKEN)
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

async fn fail(server: &Hookgate, forwarded_for: Option<&str>) -> reqwest::Response {
    let mut request = client()
        .post(server.url("/hooks/wake"))
        .bearer_auth("wrong");
    if let Some(hop) = forwarded_for {
        request = request.header("x-forwarded-for", hop);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn twenty_failures_lock_the_client_out_with_retry_after() {
    let (server, _dir) = Hookgate::start(&base_config());
    for i in 0..20 {
        assert_eq!(fail(&server, None).await.status(), 401, "attempt {i}");
    }
    let r = fail(&server, None).await;
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(text(r).await, (429, "Too Many Requests".into()));
}

#[tokio::test]
async fn the_correct_token_clears_failures_but_a_lockout_refuses_it_too() {
    let (server, _dir) = Hookgate::start(&base_config());
    let wake = async || {
        let sent = server
            .hook("/hooks/wake")
            .json(&json!({"text": "x"}))
            .send();
        sent.await.unwrap().status()
    };
    // Before a lockout the correct token clears the count: 19 more failures lock nothing.
    for _ in 0..19 {
        fail(&server, None).await;
    }
    assert_eq!(wake().await, 200);
    for _ in 0..19 {
        assert_eq!(fail(&server, None).await.status(), 401);
    }
    // Locked out, the correct token gets 429 too: 429 versus 200 would confirm a guess.
    fail(&server, None).await;
    assert_eq!(fail(&server, None).await.status(), 429);
    assert_eq!(wake().await, 429);
}

#[tokio::test]
async fn forwarded_for_is_ignored_from_untrusted_peers() {
    let (server, _dir) = Hookgate::start(&base_config());
    for i in 0..20 {
        fail(&server, Some(&format!("198.51.100.{i}"))).await;
    }
    assert_eq!(fail(&server, Some("198.51.100.200")).await.status(), 429);
}

#[tokio::test]
async fn trusted_proxy_forwarded_for_identifies_the_client() {
    let mut config = base_config();
    set(&mut config, "gateway.trustedProxies", json!(["127.0.0.1"]));
    let (server, _dir) = Hookgate::start(&config);
    for _ in 0..20 {
        fail(&server, Some("198.51.100.1")).await;
    }
    assert_eq!(fail(&server, Some("198.51.100.1")).await.status(), 429);
    assert_eq!(fail(&server, Some("198.51.100.2")).await.status(), 401);
    // The right-most untrusted hop counts, not a spoofed left-most one.
    assert_eq!(
        fail(&server, Some("203.0.113.5, 198.51.100.1"))
            .await
            .status(),
        429
    );
}

#[tokio::test]
async fn forwarded_hops_with_ports_identify_their_clients() {
    let mut config = base_config();
    set(&mut config, "gateway.trustedProxies", json!(["127.0.0.1"]));
    let (server, _dir) = Hookgate::start(&config);
    for _ in 0..20 {
        fail(&server, Some("198.51.100.7:40001")).await;
    }
    assert_eq!(
        fail(&server, Some("198.51.100.7:40002")).await.status(),
        429
    );
    // Another client behind the same proxy is not locked out with it.
    assert_eq!(
        fail(&server, Some("198.51.100.8:40001")).await.status(),
        401
    );
    assert_eq!(fail(&server, Some("[2001:db8::8]:443")).await.status(), 401);
}

#[tokio::test]
async fn empty_hook_name_is_404() {
    let (server, _dir) = Hookgate::start(&base_config());
    for path in ["/hooks", "/hooks/", "/hooks///"] {
        let r = server.hook(path).json(&json!({})).send().await.unwrap();
        assert_eq!(text(r).await, (404, "Not Found".into()), "{path}");
    }
}

#[tokio::test]
async fn unknown_hook_name_is_404() {
    let (server, _dir) = Hookgate::start(&base_config());
    let r = server
        .hook("/hooks/nothing-here")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(text(r).await, (404, "Not Found".into()));
}

fn small_body_config() -> serde_json::Value {
    let mut config = base_config();
    set(&mut config, "hooks.maxBodyBytes", json!(1024));
    config
}

#[tokio::test]
async fn body_over_the_limit_by_content_length_is_413() {
    let (server, _dir) = Hookgate::start(&small_body_config());
    let body = format!("{{\"text\":\"{}\"}}", "a".repeat(2000));
    let r = server.hook("/hooks/wake").body(body).send().await.unwrap();
    let (status, body) = json_of(r).await;
    assert_eq!(
        (status, body),
        (413, json!({"ok": false, "error": "payload too large"}))
    );
}

#[tokio::test]
async fn chunked_body_growing_past_the_limit_is_413_and_delivered() {
    let (server, _dir) = Hookgate::start(&small_body_config());
    let chunk = "a".repeat(600);
    let mut request = format!(
        "POST /hooks/wake HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {HOOK_TOKEN}\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    for _ in 0..4 {
        request.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
    }
    request.push_str("0\r\n\r\n");
    let response = raw(&server, request.as_bytes()).await;
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(
        response.ends_with(r#"{"ok":false,"error":"payload too large"}"#),
        "{response}"
    );
}

#[tokio::test]
async fn body_not_complete_in_time_is_408() {
    let mut config = base_config();
    set(&mut config, "hooks.bodyTimeoutSeconds", json!(0.5));
    let (server, _dir) = Hookgate::start(&config);
    let request = format!(
        "POST /hooks/wake HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {HOOK_TOKEN}\r\ncontent-length: 100\r\n\r\n{{\"te"
    );
    let response = raw(&server, request.as_bytes()).await;
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(
        response.ends_with(r#"{"ok":false,"error":"request body timeout"}"#),
        "{response}"
    );
}

#[tokio::test]
async fn invalid_json_is_400_with_the_parser_message() {
    let (server, _dir) = Hookgate::start(&base_config());
    let r = server
        .hook("/hooks/wake")
        .body("{\"text\": ")
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(r).await;
    assert_eq!(status, 400);
    assert_eq!(body["ok"], false);
    assert!(body["error"].as_str().unwrap().contains("line 1"), "{body}");
}

#[tokio::test]
async fn empty_body_counts_as_empty_object() {
    let (server, _dir) = Hookgate::start(&base_config());
    for body in ["", "  \n "] {
        let r = server.hook("/hooks/wake").body(body).send().await.unwrap();
        let (status, body) = json_of(r).await;
        // `{}` reaches the wake rules, which ask for text: not a JSON parse error.
        assert_eq!(
            (status, body),
            (400, json!({"ok": false, "error": "text required"}))
        );
    }
}

#[tokio::test]
async fn content_type_is_ignored() {
    let (server, _dir) = Hookgate::start(&base_config());
    let r = server
        .hook("/hooks/wake")
        .header("content-type", "text/plain")
        .body(r#"{"text":"plain"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn every_response_carries_the_security_headers() {
    let (server, _dir) = Hookgate::start(&base_config());
    let responses = [
        server
            .hook("/hooks/wake")
            .json(&json!({"text": "x"}))
            .send()
            .await
            .unwrap(),
        client()
            .post(server.url("/hooks/wake"))
            .send()
            .await
            .unwrap(),
        client().get(server.url("/nowhere")).send().await.unwrap(),
        client().get(server.url("/livez")).send().await.unwrap(),
        server.api("/api/runs/none").send().await.unwrap(),
    ];
    for r in responses {
        assert_eq!(
            r.headers()["x-content-type-options"],
            "nosniff",
            "{}",
            r.url()
        );
        assert_eq!(r.headers()["referrer-policy"], "no-referrer", "{}", r.url());
    }
}

#[tokio::test]
async fn json_responses_are_application_json() {
    let (server, _dir) = Hookgate::start(&base_config());
    let r = server
        .hook("/hooks/wake")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
}

#[tokio::test]
async fn headers_not_complete_in_time_close_the_connection() {
    let mut config = base_config();
    set(&mut config, "gateway.headerTimeoutSeconds", json!(0.3));
    let (server, _dir) = Hookgate::start(&config);
    // Half a request line, then silence: the server hangs up without a response.
    let response = raw(&server, b"POST /hooks/wa").await;
    assert!(!response.starts_with("HTTP/1.1 2"), "{response}");
    let r = server
        .hook("/hooks/wake")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
