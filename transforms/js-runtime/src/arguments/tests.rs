//! The arguments built natively against the adapter's former object literals, side by side in
//! one engine, and what the `url` accessor keeps; run through [`crate::load`] and
//! [`crate::call`] with the SDK's adapter, as the component runs them.

use crate::exports::hookgate::transform::handler::{Outcome, Request};

/// The adapter's `inputOf` and `contextOf` before the runtime built the arguments, verbatim but
/// for `ctxLog`, which the module reads from its own `ctx`.
const FORMER: &str = "
function inputOf(name, target, headers, payload) {
  let url;
  return {
    payload,
    headers,
    get url() {
      return (url ??= new URL(target, 'http://localhost'));
    },
    set url(value) {
      url = value;
    },
    path: name,
  };
}

function contextOf(mappingId, config, body, ctxLog) {
  return {
    mappingId,
    config: config === undefined ? undefined : JSON.parse(config),
    body,
    log: ctxLog,
  };
}
";

/// What a transform can see of an object: its prototype, each own property's name, kind,
/// attributes and value (a function's name and length), `Object.keys`, its JSON and a spread
/// copy's names and attributes.
const REPORT: &str = "
function report(o) {
  const own = Object.getOwnPropertyNames(o).map((k) => {
    const p = Object.getOwnPropertyDescriptor(o, k);
    const fn = (f) => (typeof f === 'function' ? [f.name, f.length, Object.getOwnPropertyNames(f)] : typeof f);
    const value = 'value' in p
      ? ['data', typeof p.value === 'function' ? fn(p.value) : JSON.stringify(p.value), p.writable]
      : ['accessor', fn(p.get), fn(p.set)];
    return [k, value, p.enumerable, p.configurable];
  });
  const spread = { ...o };
  return JSON.stringify({
    proto: Object.getPrototypeOf(o) === Object.prototype,
    own,
    symbols: Object.getOwnPropertySymbols(o).length,
    keys: Object.keys(o),
    json: JSON.stringify(o),
    spread: Object.entries(Object.getOwnPropertyDescriptors(spread)).map(([k, p]) => [k, 'value' in p, p.writable]),
    spreadUrl: typeof spread.url === 'object' ? spread.url.href : typeof spread.url,
    extensible: Object.isExtensible(o),
  });
}
";

/// The SDK's adapter around `module`, the source of an object `userModule` with the exports.
pub fn bundle(module: &str) -> String {
    include_str!("../../../js-sdk/adapter.js")
        .replace(
            "import { log } from 'hookgate:transform/host@0.2.0';",
            "const { log } = globalThis[Symbol.for('hookgate:transform/host@0.2.0')];",
        )
        .replace("import * as userModule from 'user-module';", module)
}

fn request(url: &str, config: Option<&str>) -> Request {
    Request {
        name: "shape".into(),
        url: url.into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("X-Twice".into(), "1".into()),
            ("x-twice".into(), "2".into()),
        ],
        query: Vec::new(),
        body: br#"{"title":"deploy","n":[1,2]}"#.to_vec(),
        mapping_id: "shape-mapping".into(),
        config: config.map(str::to_string),
        export_name: None,
    }
}

/// The text of a wake the call returned, or its error.
fn text(outcome: Result<Outcome, String>) -> String {
    match outcome {
        Ok(Outcome::Merge(overrides)) => overrides.text.expect("a text"),
        Ok(_) => panic!("not a merge"),
        Err(err) => format!("error: {err}"),
    }
}

/// The input and `ctx` have the own properties the adapter's literals had, in their order, with
/// the same attributes and values, the same JSON, keys and spread copy, with and without a
/// configuration; `url` is the same URL, and `ctx.log` the one function of every call.
#[test]
fn the_arguments_are_what_the_adapters_literals_made() {
    let module = format!(
        "{FORMER}{REPORT}
        let firstLog;
        const userModule = {{ default(input, ctx) {{
          firstLog ??= ctx.log;
          const config = ctx.config === undefined ? undefined : JSON.stringify(ctx.config);
          const former = [
            inputOf(input.path, '/hooks/shape?page=2&q=a%20b', input.headers, input.payload),
            contextOf(ctx.mappingId, config, ctx.body, ctx.log),
          ];
          const native = report(input) + report(ctx);
          const expected = report(former[0]) + report(former[1]);
          if (native !== expected) return {{ kind: 'wake', text: `differs: ${{native}} against ${{expected}}` }};
          return {{ kind: 'wake', text: [native, `config=${{JSON.stringify(ctx.config)}}`,
            'config' in ctx, ctx.log === firstLog,
            input.url instanceof URL, input.url === input.url].join(' ') }};
        }} }};"
    );
    let loaded = crate::load(bundle(&module)).unwrap();
    for config in [None, Some(r#"{"a":[1,{"b":null}],"c":"é"}"#), Some("7")] {
        let text = text(crate::call(
            &loaded,
            request("/hooks/shape?page=2&q=a%20b", config),
        ));
        assert!(!text.starts_with("differs"), "{config:?}: {text}");
        assert!(text.ends_with(" true true true true"), "{config:?}: {text}");
        // The configuration parsed, not handed over as its text: `7` would be `"7"`.
        let parsed = format!(" config={} ", config.unwrap_or("undefined"));
        assert!(text.contains(&parsed), "{config:?}: {parsed} in {text}");
        for part in [
            r#"["url",["accessor",["get url",0,["length","name"]],["set url",1,["length","name"]]],true,true]"#,
            r#"\"url\":\"http://localhost/hooks/shape?page=2&q=a%20b\""#,
            r#"\"headers\":{\"content-type\":\"application/json\",\"x-twice\":\"1, 2\"}"#,
            r#""keys":["payload","headers","url","path"]"#,
            r#""keys":["mappingId","config","body","log"]"#,
        ] {
            assert!(text.contains(part), "{config:?}: {part} in {text}");
        }
    }
}

/// `url` is built when first read, not before: a target that is no URL fails only the reads, each
/// again (`??=` keeps nothing that threw). A value set is what every later read gives, through the
/// property and through the getter however it is called, until `undefined` is set, after which the
/// URL is built again. An input kept from an earlier call keeps its own URL. The `URL` is the one
/// the prelude defined, whatever the module's top level put in the global.
#[test]
fn url_is_built_lazily_once_kept_and_settable() {
    let module = "
        const Loaded = URL;
        globalThis.URL = function Replaced() { throw new Error('the replaced URL was called'); };
        const kept = [];
        const userModule = { default(input) {
          kept.push(input);
          const get = Object.getOwnPropertyDescriptor(input, 'url').get;
          const set = Object.getOwnPropertyDescriptor(input, 'url').set;
          if (input.path === 'lazy') {
            const reads = [];
            for (let i = 0; i < 2; i++) {
              try { reads.push(String(input.url)); } catch (e) { reads.push(`${e.name}: ${e.message}`); }
            }
            return { kind: 'wake', text: reads.join(' | ') };
          }
          const first = input.url;
          const parts = [first instanceof Loaded, first === input.url, get.call({}) === first,
            get.call(undefined) === first, { ...input }.url === first, get.length, set.length];
          if (kept.length === 2) {
            parts.push(kept[0].url.href, Object.getOwnPropertyDescriptor(kept[0], 'url').get.call(null).href);
          }
          set.call({}, 'set through the setter');
          parts.push(input.url, get.call(7));
          input.url = 'set';
          parts.push(input.url, get());
          input.url = undefined;
          const again = input.url;
          parts.push(again instanceof Loaded, again !== first, again.href);
          return { kind: 'wake', text: parts.join(' ') };
        } };";
    let loaded = crate::load(bundle(module)).unwrap();
    let mut first = request("/hooks/first?n=1", None);
    first.name = "first".into();
    assert_eq!(
        text(crate::call(&loaded, first)),
        "true true true true true 0 1 set through the setter set through the setter set set \
         true true http://localhost/hooks/first?n=1"
    );
    let mut second = request("/hooks/second?n=2", None);
    second.name = "second".into();
    assert_eq!(
        text(crate::call(&loaded, second)),
        "true true true true true 0 1 http://localhost/hooks/first?n=1 \
         http://localhost/hooks/first?n=1 set through the setter set through the setter set set \
         true true http://localhost/hooks/second?n=2"
    );
    let mut lazy = request("http://[", None);
    lazy.name = "lazy".into();
    assert_eq!(
        text(crate::call(&loaded, lazy)),
        "TypeError: Invalid URL: http://[ | TypeError: Invalid URL: http://["
    );
}

/// A configuration that is not JSON fails the call with `JSON.parse`'s message, as the
/// adapter's `JSON.parse` failed it.
#[test]
fn a_configuration_that_is_not_json_is_the_calls_error() {
    let module = "const userModule = { default() { return { kind: 'wake', text: 'ran' }; } };";
    let loaded = crate::load(bundle(module)).unwrap();
    let expected = loaded.context.with(|ctx| {
        ctx.eval::<String, _>("try { JSON.parse('{\"a\": }'); '' } catch (e) { e.message }")
            .unwrap()
    });
    assert!(!expected.is_empty());
    assert_eq!(
        text(crate::call(
            &loaded,
            request("/hooks/shape", Some("{\"a\": }"))
        )),
        format!("error: {expected}")
    );
    assert_eq!(
        text(crate::call(&loaded, request("/hooks/shape", Some("{}")))),
        "ran"
    );
}

/// An export's name is looked up as the string it is: `é` (UTF-8 C3 A9) does not find an export
/// named `Ã©`, whose Latin-1 bytes are the same, and finds its own.
#[test]
fn an_export_name_outside_ascii_finds_only_its_own_export() {
    let module = "const userModule = {
        'Ã©': () => ({ kind: 'wake', text: 'the Latin-1 look-alike' }),
        'ü': () => ({ kind: 'wake', text: 'its own' }),
    };";
    let loaded = crate::load(bundle(module)).unwrap();
    let named = |name: &str| {
        let mut request = request("/hooks/shape", None);
        request.export_name = Some(name.into());
        crate::call(&loaded, request)
    };
    let missing = named("é").expect_err("no export named é");
    assert!(missing.contains("no function export \"é\""), "{missing}");
    assert_eq!(text(named("ü")), "its own");
}
