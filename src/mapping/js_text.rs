//! A JSON value as text the way the OpenClaw gateway's templates print it (JavaScript's
//! `String(number)` and `JSON.stringify`), so that a mapping renders the same text in both:
//! `10.0` prints `10`, `1e21` prints `1e+21`, and an object's integer-like keys come first, in
//! ascending order, as JavaScript orders an object's own properties.
//!
//! One deliberate difference: integers are kept exactly as sent (up to 2^64), where JavaScript
//! rounds those past 2^53 (`12345678901234567890` prints `12345678901234567000` there).

use std::fmt::Write as _;

use serde_json::{Number, Value};

/// A number as JavaScript's `Number.prototype.toString` writes it; integers that serde read
/// exactly are written exactly.
pub fn number(n: &Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let Some(f) = n.as_f64() else {
        return n.to_string();
    };
    float(f)
}

/// ECMAScript's Number::toString(10) for a finite `f` (JSON has no others): the shortest digits
/// that read back as `f`, laid out by the position of the decimal point.
fn float(f: f64) -> String {
    if f == 0.0 {
        return "0".into();
    }
    let sign = if f < 0.0 { "-" } else { "" };
    // `{:e}` gives the shortest round-tripping digits: `1.2345e3`.
    let scientific = format!("{:e}", f.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let k = digits.len() as i32;
    // The decimal point sits after `n` digits.
    let n = exponent + 1;
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let e = if e < 0 {
            format!("-{}", -e)
        } else {
            format!("+{e}")
        };
        match digits.split_at(1) {
            (first, "") => format!("{first}e{e}"),
            (first, rest) => format!("{first}.{rest}e{e}"),
        }
    };
    format!("{sign}{body}")
}

/// `JSON.stringify(value)`: compact, numbers as [`number`], object keys in JavaScript's order.
pub fn json(value: &Value) -> String {
    let mut out = String::new();
    write_json(value, &mut out);
    out
}

fn write_json(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            // Stable: the other keys keep the order they were sent in.
            keys.sort_by_key(|key| array_index(key).map_or((1, 0), |i| (0, i)));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_json(&map[key], out);
            }
            out.push('}');
        }
    }
}

/// A key JavaScript treats as an array index: the canonical decimal form of 0..2^32-2.
fn array_index(key: &str) -> Option<u32> {
    let index: u32 = key.parse().ok()?;
    (index < u32::MAX && index.to_string() == key).then_some(index)
}

fn write_string(s: &str, out: &mut String) {
    // serde_json escapes as JSON.stringify does (`"`, `\`, control characters; no `/`).
    let _ = write!(out, "{}", Value::String(s.to_string()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn num(text: &str) -> String {
        number(&serde_json::from_str::<Number>(text).unwrap())
    }

    #[test]
    fn numbers_print_as_javascript_prints_them() {
        assert_eq!(num("10.0"), "10");
        assert_eq!(num("1.5"), "1.5");
        assert_eq!(num("-0.0"), "0");
        assert_eq!(num("1e21"), "1e+21");
        assert_eq!(num("1e20"), "100000000000000000000");
        assert_eq!(num("1e-7"), "1e-7");
        assert_eq!(num("0.000001"), "0.000001");
        assert_eq!(num("123.456e5"), "12345600");
        assert_eq!(num("-2.5e-10"), "-2.5e-10");
        assert_eq!(num("0.1"), "0.1");
    }

    #[test]
    fn integers_keep_every_digit() {
        assert_eq!(num("12345678901234567890"), "12345678901234567890");
        assert_eq!(num("-9007199254740993"), "-9007199254740993");
    }

    #[test]
    fn objects_put_integer_like_keys_first() {
        let value: Value =
            serde_json::from_str(r#"{"b":1,"a":2.0,"10":"x","2":"y","-1":"z","01":"w"}"#).unwrap();
        assert_eq!(
            json(&value),
            r#"{"2":"y","10":"x","b":1,"a":2,"-1":"z","01":"w"}"#
        );
        assert_eq!(
            json(&json!([1, "two", null, {"k": true}])),
            r#"[1,"two",null,{"k":true}]"#
        );
        assert_eq!(json(&json!("a\"b\\c\n")), r#""a\"b\\c\n""#);
    }
}
