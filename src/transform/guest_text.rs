//! Text a guest makes the host write (its error strings, `log` lines, stdout and stderr), made
//! safe for a log: control characters escaped, so that a guest cannot forge whole log lines with
//! newlines or recolour a terminal with ESC, and the length bounded.

use std::fmt::Write;

/// The most bytes of a guest's error string that reach the log and the failure.
pub const MAX_ERROR_BYTES: usize = 1024;

/// `text` with every control character escaped (`\n`, `\u{1b}`, ...) and cut to about
/// `max_bytes`, saying how much was cut.
pub fn guest_text(text: &str, max_bytes: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_bytes) + 16);
    for (at, c) in text.char_indices() {
        if out.len() >= max_bytes {
            let _ = write!(out, "… [{} more bytes]", text.len() - at);
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_length_bounded() {
        assert_eq!(
            guest_text("ok\n2026-01-01 ERROR forged\u{1b}[31m", 100),
            "ok\\n2026-01-01 ERROR forged\\u{1b}[31m"
        );
        let long = "x".repeat(5000);
        let cut = guest_text(&long, 1024);
        assert!(cut.starts_with(&"x".repeat(1024)));
        assert!(cut.ends_with("… [3976 more bytes]"), "{cut}");
        assert_eq!(guest_text("tab\there", 100), "tab\\there");
    }
}
