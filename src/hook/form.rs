//! Website forms (docs/hooks.md#website-forms): how a mapped hook's body is read, by its
//! `Content-Type`, and an `application/x-www-form-urlencoded` body read as an object of strings.
//! A key given more than once (checkboxes, a multiple select) is an array of its values, in
//! order: no value a visitor sent is dropped.

use serde_json::{Map, Value};

/// The media type of a form a browser posts without a file.
pub const FORM: &str = "application/x-www-form-urlencoded";

/// What a refused form body is answered with (HTTP 400).
pub const NOT_UTF8: &str = "form body is not UTF-8 once percent-decoded";

/// What a multipart body is answered with (HTTP 415).
pub const MULTIPART_REFUSED: &str =
    "multipart/form-data is not accepted: send application/x-www-form-urlencoded or JSON";

/// How a mapped hook's body is read, from its `Content-Type`'s media type (parameters such as
/// `charset` ignored, case ignored). Anything but a form or multipart is read as JSON, as every
/// body was before forms were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    Json,
    Form,
    /// `multipart/form-data`: refused (a file upload is no webhook).
    Multipart,
}

impl BodyFormat {
    /// The format of a body sent with `content_type`. A form whose body is a JSON object or
    /// array (`curl -d '{"a":1}'` sends JSON under the form's type) is read as JSON.
    pub fn of(content_type: Option<&[u8]>, body: &[u8]) -> BodyFormat {
        let Some(value) = content_type else {
            return BodyFormat::Json;
        };
        let media = value.split(|b| *b == b';').next().unwrap_or_default();
        let media = media.trim_ascii();
        if media.eq_ignore_ascii_case(FORM.as_bytes()) {
            let first = body.iter().find(|b| !b.is_ascii_whitespace());
            match first {
                Some(b'{' | b'[') => BodyFormat::Json,
                _ => BodyFormat::Form,
            }
        } else if media.eq_ignore_ascii_case(b"multipart/form-data") {
            BodyFormat::Multipart
        } else {
            BodyFormat::Json
        }
    }
}

/// The payload of a form body: an object whose values are strings, or arrays of strings for a
/// key given more than once. `+` is a space; a `%` not followed by two hex digits is kept as
/// written (as browsers read it); a pair without `=` has the empty value; an empty pair is
/// skipped. Refused when a name or value is not UTF-8 once decoded.
pub fn parse(body: &[u8]) -> Result<Value, &'static str> {
    let mut fields = Map::new();
    for (name, value) in pairs(body) {
        let (name, value) = (decode(name)?, Value::String(decode(value)?));
        match fields.get_mut(&name) {
            None => {
                fields.insert(name, value);
            }
            Some(Value::Array(values)) => values.push(value),
            Some(first) => *first = Value::Array(vec![first.take(), value]),
        }
    }
    Ok(Value::Object(fields))
}

/// A form body's name and value pairs, still encoded: a pair without `=` has the empty value,
/// an empty pair is skipped.
pub fn pairs(body: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    body.split(|b| *b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.iter().position(|b| *b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &[][..]),
        })
}

/// One name or value, percent-decoded.
pub fn decode(part: &[u8]) -> Result<String, &'static str> {
    let mut out = Vec::with_capacity(part.len());
    let mut i = 0;
    while i < part.len() {
        let byte = match part[i] {
            b'+' => b' ',
            b'%' => match (part.get(i + 1), part.get(i + 2)) {
                (Some(high), Some(low)) if high.is_ascii_hexdigit() && low.is_ascii_hexdigit() => {
                    i += 2;
                    (hex(*high) << 4) | hex(*low)
                }
                _ => b'%',
            },
            other => other,
        };
        out.push(byte);
        i += 1;
    }
    String::from_utf8(out).map_err(|_| NOT_UTF8)
}

fn hex(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_form_is_an_object_of_strings_and_a_repeated_key_an_array() {
        let body = b"name=Ana+Lima&email=ana%40example.com&topic=a&topic=b&topic=c&empty=&flag&&";
        assert_eq!(
            parse(body).unwrap(),
            json!({"name": "Ana Lima", "email": "ana@example.com", "topic": ["a", "b", "c"],
                   "empty": "", "flag": ""})
        );
        assert_eq!(parse(b"").unwrap(), json!({}));
        assert_eq!(
            parse(b"a=100%&b=%zz%4").unwrap(),
            json!({"a": "100%", "b": "%zz%4"})
        );
        assert_eq!(parse(b"caf%C3%A9=%E2%9C%93").unwrap(), json!({"café": "✓"}));
    }

    #[test]
    fn a_form_that_is_not_utf8_once_decoded_is_refused() {
        assert_eq!(parse(b"a=%FF"), Err(NOT_UTF8));
        assert_eq!(parse(b"a=\xff"), Err(NOT_UTF8));
    }

    #[test]
    fn the_format_follows_the_media_type_and_a_json_body_stays_json() {
        let form = Some(&b"Application/X-WWW-Form-Urlencoded; charset=UTF-8"[..]);
        assert_eq!(BodyFormat::of(form, b"a=1"), BodyFormat::Form);
        assert_eq!(BodyFormat::of(form, b"  {\"a\":1}"), BodyFormat::Json);
        assert_eq!(BodyFormat::of(form, b"[1]"), BodyFormat::Json);
        let multipart = Some(&b"multipart/form-data; boundary=x"[..]);
        assert_eq!(BodyFormat::of(multipart, b"--x"), BodyFormat::Multipart);
        assert_eq!(BodyFormat::of(None, b"a=1"), BodyFormat::Json);
        let text = Some(&b"text/plain"[..]);
        assert_eq!(BodyFormat::of(text, b"{}"), BodyFormat::Json);
    }
}
