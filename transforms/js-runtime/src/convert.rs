//! The WIT request as the transform's function receives it (what the transform returns is read
//! by `outcome.rs`; the two objects it is called with are built by `arguments.rs`).
//!
//! Strings arrive as strings, `option` as the value or `undefined`, `list<u8>` as a
//! `Uint8Array`, the shapes jco gives JavaScript. Two parts of the request arrive as the transform
//! sees them, which Rust makes for a fraction of what the adapter's JavaScript spent on them per
//! call: `headers` as the transform's object (names in lower case, a repeated header's values
//! joined), and the body also as the transform's `payload`, parsed straight from its bytes as
//! `JSON.parse` parses the text `TextDecoder` decodes from them. `query` is not passed: the
//! transform reads the query from `url`.

use std::collections::BTreeMap;

use rquickjs::{ArrayBuffer, Ctx, qjs};

use crate::arguments::{self, Made, Owned};
use crate::hookgate::transform::types::Request;

/// Past this many headers, repeated names are found through an index rather than by comparing
/// each name with those before it.
const HEADERS_SCANNED: usize = 32;

/// A call of the transform's function: its input, built here ([`arguments::input`]), and what
/// its `ctx` is built from ([`arguments::context`]) once the function is found.
pub struct Call<'js> {
    pub input: Owned<'js>,
    /// A `Uint8Array` of the body.
    pub body: Owned<'js>,
    pub mapping_id: String,
    pub config: Option<String>,
    pub export_name: Option<String>,
}

/// `req` as the call of the transform's function.
pub fn request<'js>(ctx: &Ctx<'js>, made: &Made, req: Request) -> rquickjs::Result<Call<'js>> {
    let mut body = req.body;
    let payload = payload(ctx, &mut body)?;
    let headers = headers(ctx, req.headers)?;
    let input = arguments::input(ctx, made, req.name, req.url, headers, payload)?;
    Ok(Call {
        input,
        body: bytes(ctx, body)?,
        mapping_id: req.mapping_id,
        config: req.config,
        export_name: req.export_name,
    })
}

/// A `Uint8Array` over `body`'s bytes, as rquickjs's `TypedArray::new` makes it (an
/// `ArrayBuffer` that takes the vector, and a view of all of it), with no rquickjs `Value` around
/// the view.
fn bytes<'js>(ctx: &Ctx<'js>, body: Vec<u8>) -> rquickjs::Result<Owned<'js>> {
    let buffer = ArrayBuffer::new(ctx.clone(), body)?;
    let mut args = [
        buffer.as_value().as_raw(),
        qjs::JS_UNDEFINED,
        qjs::JS_UNDEFINED,
    ];
    // SAFETY: the context and the buffer are live (QuickJS takes its own reference to the
    // buffer); the view returned is owned.
    let view = unsafe {
        qjs::JS_NewTypedArray(
            ctx.as_raw().as_ptr(),
            args.len() as _,
            args.as_mut_ptr(),
            qjs::JSTypedArrayEnum_JS_TYPED_ARRAY_UINT8,
        )
    };
    Owned::new(ctx, view)
}

/// The body as OpenClaw hands it to a transform: a JSON object or array as parsed, `{}` for a
/// blank body or another JSON value, and `null` for a body that is not JSON (hookgate answers
/// one with 400 before any transform; only `hookgate transform run` can pass one). The text is
/// what `TextDecoder` decodes (a byte-order mark dropped, invalid bytes as U+FFFD); valid UTF-8,
/// the common case, is parsed in place, with no JavaScript string made of it. `body` is left as
/// it came.
pub fn payload<'js>(ctx: &Ctx<'js>, body: &mut Vec<u8>) -> rquickjs::Result<Owned<'js>> {
    let start = if body.starts_with(&[0xEF, 0xBB, 0xBF]) {
        3
    } else {
        0
    };
    let parsed = if std::str::from_utf8(&body[start..]).is_ok() {
        let len = body.len() - start;
        // QuickJS's parser needs a NUL after the text; taken off again before the body is used.
        body.push(0);
        let parsed = parse_json(ctx, &body[start..], len);
        body.pop();
        parsed.ok_or_else(|| is_blank(std::str::from_utf8(&body[start..]).unwrap_or("")))
    } else {
        let mut text = String::from_utf8_lossy(&body[start..]).into_owned();
        let len = text.len();
        text.push('\0');
        parse_json(ctx, text.as_bytes(), len).ok_or_else(|| is_blank(&text[..len]))
    };
    match parsed {
        // SAFETY: only the tag is read.
        Ok(value) if unsafe { qjs::JS_IsObject(value.as_raw()) } => Ok(value),
        Ok(_) | Err(true) => arguments::object(ctx),
        Err(false) => Owned::new(ctx, qjs::JS_NULL),
    }
}

/// `text[..len]` parsed as `JSON.parse` parses it, or `None` (its exception cleared) when it is
/// not JSON. `text[len]` must be NUL.
fn parse_json<'js>(ctx: &Ctx<'js>, text: &[u8], len: usize) -> Option<Owned<'js>> {
    debug_assert_eq!(text.get(len), Some(&0));
    // SAFETY: the context is live, and `text` holds `len` bytes followed by the NUL QuickJS's
    // parser stops at; the value returned is owned and handed to `Owned`.
    let value = unsafe {
        qjs::JS_ParseJSON(
            ctx.as_raw().as_ptr(),
            text.as_ptr().cast(),
            len as _,
            c"<payload>".as_ptr(),
        )
    };
    // `value` is the owned result of the call above.
    let Ok(value) = Owned::new(ctx, value) else {
        // The SyntaxError is not the call's: the payload is `null` or `{}` instead.
        ctx.catch();
        return None;
    };
    Some(value)
}

/// Whether `text.trim()` is empty in JavaScript: its white space and line terminators, which
/// include U+FEFF and not U+0085, unlike Rust's `char::is_whitespace`.
fn is_blank(text: &str) -> bool {
    text.chars().all(|c| {
        matches!(
            c,
            '\t' | '\n' | '\u{B}' | '\u{C}' | '\r' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
                ..='\u{200A}'
                    | '\u{2028}'
                    | '\u{2029}'
                    | '\u{202F}'
                    | '\u{205F}'
                    | '\u{3000}'
                    | '\u{FEFF}'
        )
    })
}

/// The transform's `headers`: names in lower case, a repeated header's values joined with `, ` in
/// their order, in the order of each name's first appearance, each an own data property (so a
/// header named `__proto__` stays a plain entry, as `Object.fromEntries` would define it). Names
/// arrive from hookgate in lower case already: one is lowered in place, without a new string, when
/// it is ASCII.
fn headers<'js>(ctx: &Ctx<'js>, list: Vec<(String, String)>) -> rquickjs::Result<Owned<'js>> {
    let mut joined: Vec<(String, String)> = Vec::with_capacity(list.len());
    // Only for many headers; a BTreeMap rather than a HashMap: no random keys to draw, which a
    // fresh instance would draw from the host on every call.
    let mut index: Option<BTreeMap<String, usize>> =
        (list.len() > HEADERS_SCANNED).then(BTreeMap::new);
    for (mut name, value) in list {
        if name.is_ascii() {
            name.make_ascii_lowercase();
        } else {
            name = name.to_lowercase();
        }
        let seen = match &index {
            Some(index) => index.get(&name).copied(),
            None => joined.iter().position(|(seen, _)| *seen == name),
        };
        match seen {
            Some(at) => {
                let joined = &mut joined[at].1;
                joined.push_str(", ");
                joined.push_str(&value);
            }
            None => {
                if let Some(index) = &mut index {
                    index.insert(name.clone(), joined.len());
                }
                joined.push((name, value));
            }
        }
    }
    let object = arguments::object(ctx)?;
    for (name, value) in joined {
        // The atom of the name's UTF-8 bytes, as rquickjs's `Atom::from_str` made it.
        let atom = arguments::atom(ctx, &name)?;
        let value = arguments::string(ctx, &value);
        let defined = arguments::define_owned(ctx, &object, atom, value);
        // SAFETY: the atom was made above, and is freed once.
        unsafe { qjs::JS_FreeAtom(ctx.as_raw().as_ptr(), atom) };
        defined?;
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use rquickjs::{Array, Context, Function, Runtime, Value};

    use super::*;

    /// What the adapter made of a body before the runtime parsed it: `JSON.parse` of the text
    /// `TextDecoder` decodes, `{}` for a blank one or a JSON non-object, `null` for one that is
    /// not JSON.
    const PARSED_IN_JAVASCRIPT: &str = "(text) => {
        let value;
        try { value = JSON.parse(text); } catch { return text.trim() === '' ? {} : null; }
        return typeof value === 'object' && value !== null ? value : {};
    }";

    fn bodies() -> Vec<Vec<u8>> {
        let mut bodies: Vec<Vec<u8>> = [
            "",
            " ",
            "\n\t\r ",
            "\u{B}\u{C}",
            "\u{A0}\u{1680}\u{2000}\u{200A}\u{202F}\u{205F}",
            "\u{3000}\u{2028}\u{2029}",
            "\u{FEFF}",
            "\u{FEFF}\u{FEFF}",
            "\u{FEFF} ",
            "\u{85}",
            "\u{180E}",
            "null",
            "1",
            "-0",
            "1e400",
            "\"text\"",
            "true",
            "false",
            "[]",
            "[1, [2]]",
            "{}",
            "{\"a\": 1, \"b\": [true, null]}",
            " {\"a\": 1} ",
            "{\"__proto__\": {\"x\": 1}}",
            "{\"a\": \"\\ud800\"}",
            "{\"a\": 1}\u{0}",
            "\u{0}",
            "{\"a\": \"x\u{0}y\"}",
            "{",
            "}",
            "not json",
            "{\"a\": 1,}",
            "[1] [2]",
            "{\"é\": \"ü\"}",
        ]
        .iter()
        .map(|text| text.as_bytes().to_vec())
        .collect();
        bodies.extend([
            b"\xEF\xBB\xBF{\"bom\": 1}".to_vec(),
            b"\xEF\xBB\xBF".to_vec(),
            b"\xEF\xBB\xBF\xEF\xBB\xBF{}".to_vec(),
            b"\xEF\xBB".to_vec(),
            b"\xFF".to_vec(),
            b"{\"a\": \"\xFF\xFE\"}".to_vec(),
            b"\xEF\xBB\xBF{\"a\": \"\xC3\"}".to_vec(),
            b"\xFF \xFE".to_vec(),
            format!("{}{}", "[".repeat(5000), "]".repeat(5000)).into_bytes(),
        ]);
        bodies
    }

    /// A value's kind, whether it is an array, and its JSON.
    fn describe<'js>(
        ctx: &Ctx<'js>,
        is_array: &Function<'js>,
        value: Value<'js>,
    ) -> (&'static str, bool, Option<String>) {
        let array: bool = is_array.call((value.clone(),)).unwrap();
        // Too deep a value throws a RangeError from `JSON.stringify` as well.
        let json = match ctx.json_stringify(value.clone()) {
            Ok(json) => json.map(|json| json.to_string().unwrap()),
            Err(_) => Some(format!("threw {:?}", describe_thrown(ctx))),
        };
        (value.type_name(), array, json)
    }

    fn describe_thrown(ctx: &Ctx<'_>) -> Option<String> {
        ctx.catch().as_exception().and_then(|e| e.message())
    }

    /// Every body gives the payload the adapter's JavaScript gave: the same kind of value and
    /// the same JSON, and `body` keeps its bytes.
    #[test]
    fn a_payload_parsed_from_the_bytes_is_what_json_parse_of_the_text_gave() {
        let runtime = Runtime::new().unwrap();
        let context = Context::full(&runtime).unwrap();
        context.with(|ctx| {
            let old: Function = ctx.eval(PARSED_IN_JAVASCRIPT).unwrap();
            let is_array: Function = ctx.eval("Array.isArray").unwrap();
            for body in bodies() {
                let text = crate::globals::utf8_text(&body, false).into_owned();
                let expected = describe(&ctx, &is_array, old.call((text,)).unwrap());
                let mut bytes = body.clone();
                let payload = payload(&ctx, &mut bytes).unwrap();
                assert_eq!(
                    describe(&ctx, &is_array, payload.into_value(&ctx)),
                    expected,
                    "body {body:?}"
                );
                assert_eq!(bytes, body, "the body's bytes");
                assert!(!ctx.has_exception(), "body {body:?} left an exception");
            }
        });
    }

    /// Names lowered (ASCII in place, others as Unicode lowers them), repeats joined in order,
    /// first appearances in order, the same through the scan and through the index.
    #[test]
    fn headers_are_lowered_and_joined_in_order_however_many() {
        let runtime = Runtime::new().unwrap();
        let context = Context::full(&runtime).unwrap();
        context.with(|ctx| {
            for filler in [0, HEADERS_SCANNED + 5] {
                let mut list: Vec<(String, String)> = vec![
                    ("X-A".into(), "1".into()),
                    ("B".into(), "b".into()),
                    ("x-a".into(), "2".into()),
                    ("ÄRGER".into(), "u".into()),
                    ("__proto__".into(), "p".into()),
                ];
                list.extend((0..filler).map(|i| (format!("F-{i}"), i.to_string())));
                list.push(("äRger".into(), "v".into()));
                list.push(("X-a".into(), "3".into()));
                let object = headers(&ctx, list).unwrap();
                let entries: Function = ctx.eval("(o) => Object.entries(o)").unwrap();
                let entries: Array = entries.call((object.into_value(&ctx),)).unwrap();
                let entries: Vec<(String, String)> = entries
                    .iter::<Array>()
                    .map(|pair| {
                        let pair = pair.unwrap();
                        (pair.get(0).unwrap(), pair.get(1).unwrap())
                    })
                    .collect();
                let mut expected: Vec<(String, String)> = vec![
                    ("x-a".into(), "1, 2, 3".into()),
                    ("b".into(), "b".into()),
                    ("ärger".into(), "u, v".into()),
                    ("__proto__".into(), "p".into()),
                ];
                expected.extend((0..filler).map(|i| (format!("f-{i}"), i.to_string())));
                assert_eq!(entries, expected, "{filler} more headers");
            }
        });
    }
}
