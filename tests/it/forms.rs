//! docs/hooks.md#website-forms: a mapped hook reads an `application/x-www-form-urlencoded` body
//! as an object of strings (a repeated key as an array), a signature still checks the exact
//! bytes, captures redact form fields, and a form mapping admits a browser's form from its
//! origins without the hook token; over HTTP against the real binary.

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::harness::*;
use crate::requests::recorded;

const FORM: &str = "application/x-www-form-urlencoded";

/// What a browser (or `curl --data-urlencode`) sends for a contact form with two topics ticked.
const CONTACT: &str =
    "name=Ana+Lima&email=ana%40example.com&message=Hello%2C+world%21&topic=billing&topic=api";

/// A wake mapping `contact` whose text renders the form's fields.
fn contact_config(extra: Value) -> Value {
    let mut mapping = json!({
        "id": "contact", "match": {"path": "contact"}, "action": "wake",
        "textTemplate": "{{name}} <{{email}}>: {{message}} [{{topic[0]}}, {{topic[1]}}]",
    });
    for (key, value) in extra.as_object().unwrap() {
        mapping[key] = value.clone();
    }
    let mut config = base_config();
    set(&mut config, "hooks.mappings", json!([mapping]));
    config
}

fn post_form(server: &Hookgate, path: &str, body: &str) -> reqwest::RequestBuilder {
    client()
        .post(server.url(path))
        .header("content-type", FORM)
        .body(body.to_string())
}

#[tokio::test]
async fn a_form_post_becomes_the_payload_and_its_fields_render() {
    let (server, _dir) = Hookgate::start(&contact_config(json!({})));
    let response = post_form(&server, "/hooks/contact", CONTACT)
        .bearer_auth(HOOK_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        server.wake_texts().await,
        ["Ana Lima <ana@example.com>: Hello, world! [billing, api]"]
    );
}

#[tokio::test]
async fn a_bad_form_or_multipart_answers_its_status_and_json_under_the_form_type_stays_json() {
    let (server, _dir) = Hookgate::start(&contact_config(json!({})));
    let (status, answer) = json_of(
        post_form(&server, "/hooks/contact", "name=%FF")
            .bearer_auth(HOOK_TOKEN)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, answer),
        (
            400,
            json!({"ok": false, "error": "form body is not UTF-8 once percent-decoded"})
        )
    );
    let (status, answer) = json_of(
        server
            .hook("/hooks/contact")
            .header("content-type", "multipart/form-data; boundary=x")
            .body("--x\r\ncontent-disposition: form-data; name=\"a\"\r\n\r\n1\r\n--x--\r\n")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 415, "{answer}");
    assert_eq!(
        answer["error"],
        "multipart/form-data is not accepted: send application/x-www-form-urlencoded or JSON"
    );
    // `curl -d '{...}'` sends JSON under the form's type: read as JSON, as before.
    let curl = r#"{"name":"Bo","email":"bo@example.com","message":"hi","topic":["x","y"]}"#;
    for path in ["/hooks/contact", "/hooks/wake"] {
        let body = if path == "/hooks/wake" {
            r#"{"text":"plain wake"}"#
        } else {
            curl
        };
        let response = post_form(&server, path, body)
            .bearer_auth(HOOK_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    assert_eq!(
        server.wake_texts().await,
        ["Bo <bo@example.com>: hi [x, y]", "plain wake"]
    );
}

#[tokio::test]
async fn a_signature_checks_the_forms_exact_bytes() {
    let signature = json!({"scheme": "hmac-sha256", "secret": "form-key", "header": "X-Sig"});
    let (server, _dir) = Hookgate::start(&contact_config(json!({"signature": signature})));
    let mut mac = Hmac::<Sha256>::new_from_slice(b"form-key").unwrap();
    mac.update(CONTACT.as_bytes());
    let sig = hex::encode(mac.finalize().into_bytes());
    let send = |body: &str| {
        post_form(&server, "/hooks/contact", body)
            .header("x-sig", sig.clone())
            .send()
    };
    assert_eq!(send(CONTACT).await.unwrap().status(), 200);
    // The same fields, encoded otherwise: other bytes, refused.
    let reencoded = CONTACT.replace('+', "%20");
    assert_eq!(send(&reencoded).await.unwrap().status(), 401);
    assert_eq!(server.wake_texts().await.len(), 1);
}

#[tokio::test]
async fn a_captured_form_has_its_redacted_fields_replaced() {
    let capture = json!({"enabled": true, "redact": ["/password"]});
    let (server, _dir) = Hookgate::start(&contact_config(json!({"capture": capture})));
    let response = post_form(
        &server,
        "/hooks/contact",
        &format!("{CONTACT}&password=hunter2"),
    )
    .bearer_auth(HOOK_TOKEN)
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let id = request_id(&response);
    recorded(&server, "", 1).await;
    let (_, record) = server.api_json(&format!("/api/requests/{id}")).await;
    let body = record["capture"]["body"].as_str().expect("a captured body");
    assert!(!body.contains("hunter2"), "{body}");
    assert!(body.ends_with("&password=%5Bredacted%5D"), "{body}");
    assert!(body.contains("topic=billing&topic=api"), "{body}");
}

#[tokio::test]
async fn a_form_mapping_admits_a_form_from_its_origins_without_the_token() {
    let form = json!({"origins": ["https://www.example.com"]});
    let (server, _dir) = Hookgate::start(&contact_config(json!({"form": form})));
    let from = |origin: Option<&str>, content_type: &str| {
        let mut request = client()
            .post(server.url("/hooks/contact"))
            .header("content-type", content_type)
            .body(CONTACT);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    let admitted = from(Some("https://www.example.com"), FORM).await.unwrap();
    assert_eq!(admitted.status(), 200);
    for (origin, content_type) in [
        (Some("https://evil.example"), FORM),
        (None, FORM),
        (Some("https://www.example.com"), "application/json"),
    ] {
        let refused = from(origin, content_type).await.unwrap();
        assert_eq!(refused.status(), 401, "{origin:?} {content_type}");
    }
    // Its admission opens no other hook.
    let wake = client()
        .post(server.url("/hooks/wake"))
        .header("content-type", FORM)
        .header("origin", "https://www.example.com")
        .body("text=hi")
        .send()
        .await
        .unwrap();
    assert_eq!(wake.status(), 401);
    let records = recorded(&server, "", 5).await;
    assert_eq!(
        records[4]["signature"],
        json!({"scheme": "form-origin", "verified": true}),
        "{:?}",
        records[4]
    );
    assert!(
        records[3]["reason"]
            .as_str()
            .unwrap()
            .contains("form rule refused it: its Origin is not one of the mapping's form.origins"),
        "{}",
        records[3]
    );
    assert_eq!(server.wake_texts().await.len(), 1);
}

#[test]
fn check_refuses_a_form_rule_it_cannot_apply() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "a", "match": {"path": "a"}, "messageTemplate": "m",
             "form": {"origins": ["https://ok.example", "https://example.com/contact-secret"]}},
            {"id": "b", "messageTemplate": "m", "form": {"origins": ["https://ok.example"]}},
            {"id": "c", "match": {"path": "c"}, "messageTemplate": "m", "form": {"origins": []}},
        ]),
    );
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "{output}");
    for expected in [
        "hooks.mappings[0].form.origins[1]: must be an origin",
        "hooks.mappings[1].form: needs the mapping's match.path",
        "hooks.mappings[2].form: origins needs at least one origin",
    ] {
        assert!(output.contains(expected), "{expected:?} not in {output}");
    }
    assert!(!output.contains("contact-secret"), "{output}");
}
