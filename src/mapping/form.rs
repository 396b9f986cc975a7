//! A form mapping's way in without the hook token (docs/hooks.md#website-forms): a browser on
//! one of the operator's sites posting a form to the mapping's own path. This is no
//! authentication (any client can send an `Origin` header); it lets a page post to one mapping
//! without the hook token, which opens every hook, ever being in the page (SECURITY.md).

use crate::hook::form::{BodyFormat, FORM};

/// The scheme `AdmittingSignature` names for a request a form rule admitted, as the request
/// record's `signature.scheme` shows it.
pub const FORM_SCHEME: &str = "form-origin";

/// A mapping's `form`: the origins (`https://host[:port]`, lower-case) whose pages may post to
/// it without the hook token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormRule {
    pub origins: Vec<String>,
}

/// Why a request without the hook token was not admitted by a form rule: the request record's
/// reason (the client is told `Unauthorized`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FormRefusal {
    #[error("no Origin header (a browser posting a form sends one)")]
    NoOrigin,
    #[error("its Origin is not one of the mapping's form.origins")]
    OtherOrigin,
    #[error("not a form body: its Content-Type is not {FORM}")]
    NotForm,
}

impl FormRule {
    /// Whether a request with `origin` and `content_type` headers is a form posted from one of
    /// the rule's origins. Compared as bytes, case ignored: browsers send the origin
    /// serialised (`https://example.com`, no path, no trailing `/`).
    pub fn admits(
        &self,
        origin: Option<&[u8]>,
        content_type: Option<&[u8]>,
    ) -> Result<(), FormRefusal> {
        let origin = origin.ok_or(FormRefusal::NoOrigin)?;
        if !self
            .origins
            .iter()
            .any(|allowed| allowed.as_bytes().eq_ignore_ascii_case(origin))
        {
            return Err(FormRefusal::OtherOrigin);
        }
        // The body is not read yet: only its type is known, the one a browser's form sends.
        match BodyFormat::of(content_type, b"") {
            BodyFormat::Form => Ok(()),
            _ => Err(FormRefusal::NotForm),
        }
    }
}

/// An origin as a browser serialises it, lower-cased: `http` or `https`, a host, an optional
/// port, nothing else. `None` for anything else.
pub fn origin(text: &str) -> Option<String> {
    let text = text.trim().to_ascii_lowercase();
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"))?;
    let host = match rest.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            port.parse::<u16>().ok()?;
            host
        }
        _ => rest,
    };
    // An IPv6 literal is bracketed, and only it holds colons.
    let ipv6 = host.starts_with('[') && host.ends_with(']');
    let host_ok = !host.is_empty()
        && host.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'.' | b'-')
                || (ipv6 && matches!(b, b'[' | b']' | b':'))
        });
    host_ok.then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_a_scheme_a_host_and_a_port_only() {
        assert_eq!(
            origin("HTTPS://Example.com").as_deref(),
            Some("https://example.com")
        );
        assert!(origin("http://localhost:8080").is_some());
        assert!(origin("http://[::1]:8080").is_some());
        for bad in [
            "example.com",
            "https://",
            "https://example.com/",
            "https://example.com/contact",
            "https://example.com?a",
            "https://example.com:x",
            "*",
            "ftp://example.com",
        ] {
            assert_eq!(origin(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_form_from_a_listed_origin_is_admitted_and_nothing_else() {
        let rule = FormRule {
            origins: vec!["https://example.com".into()],
        };
        let form = Some(&b"application/x-www-form-urlencoded"[..]);
        assert_eq!(rule.admits(Some(b"https://EXAMPLE.com"), form), Ok(()));
        assert_eq!(rule.admits(None, form), Err(FormRefusal::NoOrigin));
        assert_eq!(
            rule.admits(Some(b"https://evil.example"), form),
            Err(FormRefusal::OtherOrigin)
        );
        let json = Some(&b"application/json"[..]);
        assert_eq!(
            rule.admits(Some(b"https://example.com"), json),
            Err(FormRefusal::NotForm)
        );
    }
}
