//! The two arguments a JavaScript transform's function is called with, as the runtime builds them
//! (transforms/js-runtime/src/arguments.rs), through a real component on a kept instance: the
//! input's and `ctx`'s own properties in order, `url` a lazily built accessor that an input kept
//! from an earlier call still answers for, and the mapping's configuration or its absence.

use serde_json::{Value, json};

use super::js_limits;
use super::received::install_module;
use crate::harness::*;

/// Answers with what it observed of its arguments; keeps every input it was given.
const OBSERVER: &str = r#"
const kept = [];
const own = (object) => Object.getOwnPropertyNames(object).map((name) => {
  const d = Object.getOwnPropertyDescriptor(object, name);
  return [name, 'get' in d ? 'accessor' : 'data', d.enumerable, d.configurable, d.writable ?? null];
});
export default function observe(input, ctx) {
  kept.push(input);
  const url = input.url;
  const seen = {
    input: own(input),
    ctx: own(ctx),
    json: Object.keys(JSON.parse(JSON.stringify(input))),
    jsonUrl: JSON.parse(JSON.stringify(input)).url,
    href: url.href,
    kept: url === input.url,
    spread: { ...input }.url === url,
    elsewhere: Object.getOwnPropertyDescriptor(input, 'url').get.call({}) === url,
    first: kept[0].url.href,
    config: 'config' in ctx ? (ctx.config === undefined ? 'undefined' : ctx.config) : 'absent',
    mappingId: ctx.mappingId,
    body: ctx.body.length,
    log: typeof ctx.log,
  };
  if (input.payload.set) {
    input.url = 'set';
    seen.set = input.url;
  }
  return { kind: 'respond', body: seen };
}
"#;

fn mapping(id: &str, config: Option<Value>) -> Value {
    let mut transform = json!({"module": "arguments.wasm", "reuse": 10, "limits": js_limits(2000)});
    if let Some(config) = config {
        transform["config"] = config;
    }
    json!({"id": id, "match": {"path": id}, "transform": transform})
}

/// The input and `ctx` a real request gives: their names in order with their attributes, the
/// same URL however `url` is read, an earlier call's input still giving its own URL, a set value
/// read back, and the configuration given or absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_is_called_with_the_input_and_ctx_it_always_had() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            mapping("args", Some(json!({"a": [1]}))),
            mapping("bare", None)
        ]),
    );
    let dir = ConfigDir::new(&config);
    install_module(&dir, "arguments", OBSERVER);
    let server = Hookgate::start_in(&dir);
    let observe = |target: &str, body: Value| {
        let request = server.hook(target).json(&body).send();
        async move { json_of(request.await.unwrap()).await }
    };

    let (status, first) = observe("/hooks/args?call=1", json!({})).await;
    assert_eq!(status, 200, "{first}");
    let data = |name: &str| json!([name, "data", true, true, true]);
    assert_eq!(
        first["input"],
        json!([
            data("payload"),
            data("headers"),
            ["url", "accessor", true, true, null],
            data("path")
        ]),
        "{first}"
    );
    assert_eq!(
        first["ctx"],
        json!([data("mappingId"), data("config"), data("body"), data("log")]),
        "{first}"
    );
    assert_eq!(first["json"], json!(["payload", "headers", "url", "path"]));
    for url in ["jsonUrl", "href", "first"] {
        assert_eq!(
            first[url], "http://localhost/hooks/args?call=1",
            "{url}: {first}"
        );
    }
    for same in ["kept", "spread", "elsewhere"] {
        assert_eq!(first[same], true, "{same}: {first}");
    }
    assert_eq!(first["config"], json!({"a": [1]}));
    assert_eq!(first["mappingId"], "args");
    assert_eq!(first["body"], 2);
    assert_eq!(first["log"], "function");

    let (status, second) = observe("/hooks/args?call=2", json!({"set": true})).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["href"], "http://localhost/hooks/args?call=2");
    assert_eq!(
        second["first"], "http://localhost/hooks/args?call=1",
        "the input kept from the first call gives its own URL: {second}"
    );
    assert_eq!(second["set"], "set", "{second}");

    let (status, bare) = observe("/hooks/bare", json!({})).await;
    assert_eq!(status, 200, "{bare}");
    assert_eq!(bare["config"], "undefined", "own, and undefined: {bare}");
}

/// Each element of a `forEach` list is a call of its own (its payload the list of that element), and every call gets the request's
/// headers and target, the last one included (it takes them where the others get copies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_element_of_a_for_each_list_gets_the_headers_and_the_target() {
    let mut config = base_config();
    let transform = json!({"module": "each.wasm", "reuse": 10, "limits": js_limits(2000)});
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "each", "match": {"path": "each"}, "forEach": "items",
                "action": "wake", "textTemplate": "unused", "transform": transform}]),
    );
    let dir = ConfigDir::new(&config);
    install_module(
        &dir,
        "each",
        "export default ({ payload, headers, url }) => \
         ({ text: `${payload.items[0].name} ${headers['x-tag']} ${url.pathname}${url.search}` });",
    );
    let server = Hookgate::start_in(&dir);
    let items = json!({"items": [{"name": "a"}, {"name": "b"}, {"name": "c"}]});
    let response = server
        .hook("/hooks/each?q=1")
        .header("x-tag", "t")
        .json(&items)
        .send()
        .await
        .unwrap();
    let (status, reply) = json_of(response).await;
    assert_eq!(status, 200, "{reply}");
    let expected = [
        "a t /hooks/each?q=1",
        "b t /hooks/each?q=1",
        "c t /hooks/each?q=1",
    ];
    eventually("the three wakes", async || {
        server.wake_texts().await.len() >= 3
    })
    .await;
    assert_eq!(server.wake_texts().await, expected);
}
