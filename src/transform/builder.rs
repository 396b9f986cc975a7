//! Which JavaScript SDK built a component, read from its bytes (docs/transforms.md, "JavaScript
//! components built by an older SDK"). A JavaScript component carries the adapter and runtime of
//! the SDK that built it for good: a fix to either reaches it only when it is rebuilt. Since
//! adapter revision 1, `transforms/js-sdk/build.mjs` records its revision in the custom section
//! `hookgate-js-sdk` (`{"adapter":1}`); a JavaScript component without it was built before.

use std::sync::LazyLock;

use regex::bytes::Regex;

/// The custom section in which the JavaScript SDK records its adapter revision.
pub const JS_SDK_SECTION: &str = "hookgate-js-sdk";

/// The revision of the JavaScript SDK's adapter and runtime this hookgate carries
/// (`ADAPTER_REVISION` of `transforms/js-sdk/build.mjs`, the same number): a JavaScript
/// component of an earlier one, or of none, is outdated.
pub const JS_ADAPTER_REVISION: u32 = 1;

/// A message of hookgate's QuickJS runtime, in every JavaScript component built on it (from
/// 2026-11-23 on) whether or not it records its revision: how one built before the section is
/// told from a component in another language.
static QUICKJS_RUNTIME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"cannot start QuickJS: ").expect("constant pattern"));

/// What built a component, as far as its bytes (and the name its mapping gives it) tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builder {
    /// Not the JavaScript SDK, as far as anything tells (a Rust component, say).
    Other,
    /// The JavaScript SDK, with the adapter revision it recorded: `None` when it recorded none,
    /// as SDKs did before revision 1.
    JavaScript { adapter: Option<u32> },
}

impl Builder {
    /// What built the component `bytes`. `javascript_source`: its mapping names the JavaScript
    /// or TypeScript module it was built from, which makes it JavaScript whatever its bytes say
    /// (the first SDK's components, on another engine, have no mark hookgate knows).
    pub fn of(bytes: &[u8], javascript_source: bool) -> Builder {
        if let Some(section) = custom_section(bytes, JS_SDK_SECTION) {
            return Builder::JavaScript {
                adapter: adapter_revision(section),
            };
        }
        if javascript_source || QUICKJS_RUNTIME.is_match(bytes) {
            Builder::JavaScript { adapter: None }
        } else {
            Builder::Other
        }
    }

    /// Whether this is a JavaScript component whose adapter is older than this hookgate's.
    pub fn is_outdated(self) -> bool {
        match self {
            Builder::Other => false,
            Builder::JavaScript { adapter } => {
                adapter.is_none_or(|revision| revision < JS_ADAPTER_REVISION)
            }
        }
    }
}

/// The `adapter` of a `hookgate-js-sdk` section's JSON; `None` when it has none that reads.
fn adapter_revision(section: &[u8]) -> Option<u32> {
    #[derive(serde::Deserialize)]
    struct Recorded {
        adapter: u32,
    }
    serde_json::from_slice::<Recorded>(section)
        .ok()
        .map(|recorded| recorded.adapter)
}

/// The content of the first top-level custom section named `name` of the WebAssembly binary
/// `bytes`: its sections are walked by their sizes, none read. `None` when there is none, or
/// when the binary ends inside a section or a size.
fn custom_section<'a>(bytes: &'a [u8], name: &str) -> Option<&'a [u8]> {
    // The magic number and the version (a component's layer with it).
    let mut rest = bytes.get(8..)?;
    while let Some((&id, after_id)) = rest.split_first() {
        let (size, after_size) = leb128(after_id)?;
        let body = after_size.get(..size)?;
        rest = &after_size[size..];
        if id != 0 {
            continue;
        }
        let (name_len, after_len) = leb128(body)?;
        if after_len.get(..name_len)? == name.as_bytes() {
            return Some(&after_len[name_len..]);
        }
    }
    None
}

/// An unsigned LEB128 of at most 32 bits at the start of `bytes`, and what follows it.
fn leb128(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let mut value: u32 = 0;
    for (i, &byte) in bytes.iter().enumerate().take(5) {
        value |= u32::from(byte & 0x7f).checked_shl(7 * i as u32)?;
        if byte & 0x80 == 0 {
            return Some((usize::try_from(value).ok()?, &bytes[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component header followed by `sections` (id, name for a custom one, content).
    fn binary(sections: &[(u8, &str, &[u8])]) -> Vec<u8> {
        let mut out = b"\0asm\x0d\0\x01\0".to_vec();
        for (id, name, content) in sections {
            let mut body = Vec::new();
            if *id == 0 {
                body.push(u8::try_from(name.len()).unwrap());
                body.extend_from_slice(name.as_bytes());
            }
            body.extend_from_slice(content);
            out.push(*id);
            // Sizes past 127 in two bytes, as LEB128 writes them.
            let size = body.len();
            if size < 0x80 {
                out.push(u8::try_from(size).unwrap());
            } else {
                out.push(u8::try_from(size & 0x7f).unwrap() | 0x80);
                out.push(u8::try_from(size >> 7).unwrap());
            }
            out.extend_from_slice(&body);
        }
        out
    }

    #[test]
    fn the_recorded_revision_is_read_past_other_sections() {
        let filler = [7u8; 300];
        let current = binary(&[
            (1, "", &filler),
            (0, "producers", b"x"),
            (0, JS_SDK_SECTION, br#"{"adapter":1}"#),
        ]);
        assert_eq!(
            Builder::of(&current, false),
            Builder::JavaScript { adapter: Some(1) }
        );
        assert!(!Builder::of(&current, true).is_outdated());
        let older = binary(&[(0, JS_SDK_SECTION, br#"{"adapter":0}"#)]);
        assert!(Builder::of(&older, false).is_outdated());
        let unreadable = binary(&[(0, JS_SDK_SECTION, b"one")]);
        assert_eq!(
            Builder::of(&unreadable, false),
            Builder::JavaScript { adapter: None }
        );
    }

    #[test]
    fn a_javascript_component_without_a_revision_is_outdated() {
        let quickjs = binary(&[(1, "", b"..cannot start QuickJS: {}..")]);
        assert_eq!(
            Builder::of(&quickjs, false),
            Builder::JavaScript { adapter: None }
        );
        assert!(Builder::of(&quickjs, false).is_outdated());
        let rust = binary(&[(1, "", b"no engine here")]);
        assert_eq!(Builder::of(&rust, false), Builder::Other);
        assert!(!Builder::of(&rust, false).is_outdated());
        assert!(
            Builder::of(&rust, true).is_outdated(),
            "named by its source"
        );
    }

    #[test]
    fn a_truncated_binary_has_no_section() {
        let whole = binary(&[(0, JS_SDK_SECTION, br#"{"adapter":1}"#)]);
        for end in 0..whole.len() {
            assert_eq!(custom_section(&whole[..end], JS_SDK_SECTION), None, "{end}");
        }
        assert_eq!(leb128(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]), None);
        assert_eq!(leb128(&[0xe5, 0x8e, 0x26, 9]), Some((624_485, &[9u8][..])));
    }
}
