//! Where a browser may be sent back to after logging in (the login form's `next`): a path on
//! this server, never another origin. One type, [`LocalPath`], made only by [`LocalPath::parse`],
//! is what the guard puts in its redirect to the login form, what the form carries and what the
//! login's `Location` says, so no other text can reach a redirect.
//!
//! Browsers read more into a `Location` than its bytes say: they drop tabs and line breaks
//! (`/\t/evil.example` is `//evil.example`), take `\` for `/` and `//host` for another origin.
//! So a local path is plain visible ASCII (no space, control character or other byte), starts
//! with exactly one `/` (not `//`, not `/\`), holds no `\`, and says none of these once its
//! percent escapes are decoded either (it is decoded once, as a browser or a server might); it
//! is at most [`MAX_BYTES`] long.

use axum::http::HeaderValue;

/// The longest `next` followed; a longer one is not a path this server's pages link to.
pub const MAX_BYTES: usize = 2048;

/// A path on this server, safe to send a browser to (see the module's rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPath {
    text: String,
    header: HeaderValue,
}

impl LocalPath {
    /// `text` when it is a local path, else `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let raw = text.as_bytes();
        if raw.len() > MAX_BYTES || !raw.iter().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        let decoded = String::from_utf8(percent_decoded(raw)).ok()?;
        for form in [text, decoded.as_str()] {
            let single_slash = form.starts_with('/') && !form[1..].starts_with(['/', '\\']);
            if !single_slash || form.contains('\\') || form.chars().any(char::is_control) {
                return None;
            }
        }
        let header = HeaderValue::from_str(text).ok()?;
        Some(Self {
            text: text.to_string(),
            header,
        })
    }

    /// The inbox, `/`.
    pub fn root() -> Self {
        Self {
            text: "/".into(),
            header: HeaderValue::from_static("/"),
        }
    }

    /// The path as text (for the login form's hidden field, escaped there as any value).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The path as a `Location` header's value.
    pub fn header(&self) -> HeaderValue {
        self.header.clone()
    }
}

/// `bytes` with each `%XX` escape decoded once (a `%` not followed by two hex digits is kept).
fn percent_decoded(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| Some((hex(*bytes.get(i + 1)?)?, hex(*bytes.get(i + 2)?)?)))
            .flatten();
        match escaped {
            Some((high, low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_this_server_are_local() {
        for path in [
            "/",
            "/rounds/abc",
            "/executions/e-1?tab=events#top",
            "/rounds/caf%C3%A9",
            "/a%2Fb",
            "/@evil.example",
        ] {
            assert_eq!(
                LocalPath::parse(path).map(|p| p.as_str().to_string()),
                Some(path.to_string())
            );
        }
        let longest = format!("/{}", "x".repeat(MAX_BYTES - 1));
        assert!(LocalPath::parse(&longest).is_some());
        assert_eq!(LocalPath::root().header(), "/");
    }

    #[test]
    fn anything_that_could_leave_the_origin_is_not_local() {
        for outside in [
            "",
            "x",
            "rounds/abc",
            "//evil.example",
            "//evil.example/",
            "/\\evil.example",
            "\\\\evil.example",
            "/x\\y",
            "https://evil.example/",
            "http:/evil.example",
            "javascript:alert(1)",
            "/\t/evil.example",
            "/%09/evil.example",
            "/\r\nSet-Cookie: x=1",
            "/%0D%0ALocation: //evil.example",
            "/%0a",
            "/%7f",
            "/%C2%85",
            "/%2F/evil.example",
            "/%2f%2fevil.example",
            "/%5Cevil.example",
            "/%5cevil.example",
            "/ /evil.example",
            "/rounds/caf\u{e9}",
            "/%ff",
            "/\u{0}",
        ] {
            assert_eq!(LocalPath::parse(outside), None, "{outside:?}");
        }
        let too_long = format!("/{}", "x".repeat(MAX_BYTES));
        assert_eq!(LocalPath::parse(&too_long), None);
    }

    #[test]
    fn escapes_are_decoded_once() {
        assert_eq!(percent_decoded(b"/%41%2f%zz%4"), b"/A/%zz%4");
        assert_eq!(percent_decoded(b"%252F"), b"%2F");
    }
}
