//! Input shapes shared by the fuzz targets, and the signature property every scheme's target checks.
//!
//! Inputs are plain bytes in text-like shapes rather than `arbitrary` tuples: the committed seeds
//! are then real requests and documents a reader can open and edit, and libFuzzer's mutations stay
//! close to what a client can actually send.

use hookgate::hook::signature::{DEFAULT_TOLERANCE, Scheme, SignatureRule, verify};

/// A request as the signature check sees it: `name: value` header lines, a blank line, the body.
#[derive(Debug)]
pub struct Request<'a> {
    /// Names lower-cased, values trimmed, in input order.
    pub headers: Vec<(String, String)>,
    pub body: &'a [u8],
}

impl<'a> Request<'a> {
    /// Splits `data` at its first blank line; lines without a `:` are skipped. Header values
    /// never hold a line break, as in HTTP, so nothing a client can send is out of reach.
    pub fn parse(data: &'a [u8]) -> Self {
        let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
            Some(at) => (&data[..at], &data[at + 2..]),
            None => (data, &[][..]),
        };
        Request {
            headers: header_lines(&String::from_utf8_lossy(head)),
            body,
        }
    }

    /// The first value of `name` (lower case), as the HTTP layer's `HeaderMap::get` gives it.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    }

    /// The clock of the check: the pseudo-header `x-fuzz-now` (Unix seconds), else 0.
    pub fn now(&self) -> i64 {
        self.header("x-fuzz-now")
            .and_then(|now| now.parse().ok())
            .unwrap_or(0)
    }
}

/// `name: value` lines, names lower-cased and both sides trimmed; other lines are skipped.
pub fn header_lines(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect()
}

/// `data` as `N` NUL-separated fields (lossy UTF-8): missing fields are empty, and the last field
/// keeps any further NULs, so every byte of the input reaches some field.
pub fn fields<const N: usize>(data: &[u8]) -> [String; N] {
    let mut parts = data.splitn(N, |b| *b == 0);
    std::array::from_fn(|_| String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned())
}

/// Verifies the request in `data` with `scheme` under the key `fuzz-key` and again under
/// `other-key`. Whatever the input: an answer, never a panic, and never an acceptance under both
/// keys. A MAC cannot match under two keys, so a request both accept would be one that no key
/// was needed for (an empty signature list taken as a match, say).
pub fn check_signature(scheme: Scheme, data: &[u8]) {
    let request = Request::parse(data);
    let accepted = |key: &[u8]| {
        let rule = SignatureRule {
            scheme: scheme.clone(),
            secrets: vec![key.to_vec()],
            tolerance: DEFAULT_TOLERANCE,
            token_accepted: true,
        };
        verify(
            &rule,
            "fuzz",
            &|name| request.header(name),
            request.body,
            request.now(),
        )
        .is_ok()
    };
    assert!(
        !(accepted(b"fuzz-key") && accepted(b"other-key")),
        "accepted under two different keys"
    );
}
