//! The URL of a Streamable HTTP server: its scheme, authority and path, its origin, and the
//! targets of its redirects. The host checked and normalised the URL at submission; this parses
//! what it stored and resolves a `Location` against it.

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    /// The scheme as written in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// An absolute `http` or `https` URL without a fragment or user information.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The scheme.
    pub scheme: Scheme,
    /// `host` or `host:port` (an IPv6 host in brackets), lowercase.
    pub authority: String,
    /// The path and query, starting with `/`.
    pub path_and_query: String,
}

/// Why a URL is not an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointError(pub &'static str);

impl Endpoint {
    /// Parses an absolute `http://` or `https://` URL.
    pub fn parse(url: &str) -> Result<Self, EndpointError> {
        let (scheme, rest) = if let Some(rest) = strip_prefix_ignore_case(url, "http://") {
            (Scheme::Http, rest)
        } else if let Some(rest) = strip_prefix_ignore_case(url, "https://") {
            (Scheme::Https, rest)
        } else {
            return Err(EndpointError("the URL must start with http:// or https://"));
        };
        if url
            .bytes()
            .any(|b| b.is_ascii_control() || b == b' ' || b == b'\\')
        {
            return Err(EndpointError(
                "the URL holds spaces, backslashes or control characters",
            ));
        }
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.is_empty() {
            return Err(EndpointError("the URL has no host"));
        }
        if authority.contains('@') {
            return Err(EndpointError(
                "the URL must not carry user information (give credentials as headers)",
            ));
        }
        let authority = normalise_authority(scheme, authority)?;
        let path_and_query = match path.chars().next() {
            None => "/".to_string(),
            Some('?') => format!("/{path}"),
            Some(_) => path.to_string(),
        };
        Ok(Self {
            scheme,
            authority,
            path_and_query,
        })
    }

    /// `scheme://authority`: what the host grants the component.
    pub fn origin(&self) -> String {
        format!("{}://{}", self.scheme.as_str(), self.authority)
    }

    /// The whole URL.
    pub fn url(&self) -> String {
        format!("{}{}", self.origin(), self.path_and_query)
    }

    /// Where a redirect's `Location` points, resolved against this URL: an absolute URL, a
    /// network-path (`//host/path`), an absolute path, or a path relative to this one's
    /// directory. The origin is not checked here: the host refuses other origins.
    pub fn resolve(&self, location: &str) -> Result<Self, EndpointError> {
        let location = location.trim();
        if location.contains("://") {
            return Self::parse(location);
        }
        if let Some(rest) = location.strip_prefix("//") {
            return Self::parse(&format!("{}://{rest}", self.scheme.as_str()));
        }
        if location.starts_with('/') {
            return Self::parse(&format!("{}{location}", self.origin()));
        }
        let path = self
            .path_and_query
            .split('?')
            .next()
            .unwrap_or("/")
            .to_string();
        let directory = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        Self::parse(&format!("{}{directory}{location}", self.origin()))
    }
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// Lowercases the host and drops the scheme's default port, so that equal origins compare
/// equal.
fn normalise_authority(scheme: Scheme, authority: &str) -> Result<String, EndpointError> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err(EndpointError("the URL's IPv6 host has no closing bracket"));
        };
        let port = match after {
            "" => None,
            after => Some(
                after
                    .strip_prefix(':')
                    .ok_or(EndpointError("the URL's port is malformed"))?,
            ),
        };
        (format!("[{}]", host.to_ascii_lowercase()), port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_ascii_lowercase(), Some(port)),
            None => (authority.to_ascii_lowercase(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(EndpointError("the URL has no host"));
    }
    let default = match scheme {
        Scheme::Http => 80,
        Scheme::Https => 443,
    };
    match port {
        None | Some("") => Ok(host),
        Some(port) => {
            if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
                return Err(EndpointError("the URL's port is malformed"));
            }
            let number: u32 = port.parse().unwrap_or(u32::MAX);
            if number == 0 || number > 65_535 {
                return Err(EndpointError("the URL's port is out of range"));
            }
            if number == default {
                Ok(host)
            } else {
                Ok(format!("{host}:{number}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_and_normalised() {
        let e = Endpoint::parse("HTTP://LocalHost:8000/mcp?x=1#frag").unwrap();
        assert_eq!(e.scheme, Scheme::Http);
        assert_eq!(e.authority, "localhost:8000");
        assert_eq!(e.path_and_query, "/mcp?x=1");
        assert_eq!(e.origin(), "http://localhost:8000");
        assert_eq!(
            Endpoint::parse("https://example.com:443").unwrap().url(),
            "https://example.com/"
        );
        assert_eq!(
            Endpoint::parse("http://[::1]:9/a").unwrap().authority,
            "[::1]:9"
        );
        assert_eq!(Endpoint::parse("http://h?q").unwrap().path_and_query, "/?q");
    }

    #[test]
    fn what_is_not_an_http_url_is_refused() {
        for url in [
            "ftp://h/",
            "http://",
            "http:///x",
            "http://user:pw@h/",
            "http://h:0/",
            "http://h:99999/",
            "http://h:x/",
            "http://h/a b",
            "http://h/\n",
            "http://[::1/",
            "h/mcp",
        ] {
            assert!(Endpoint::parse(url).is_err(), "{url}");
        }
    }

    #[test]
    fn redirect_targets_resolve_against_the_endpoint() {
        let e = Endpoint::parse("http://127.0.0.1:8000/api/mcp?s=1").unwrap();
        assert_eq!(
            e.resolve("/mcp/").unwrap().url(),
            "http://127.0.0.1:8000/mcp/"
        );
        assert_eq!(
            e.resolve("next").unwrap().url(),
            "http://127.0.0.1:8000/api/next"
        );
        assert_eq!(
            e.resolve("//127.0.0.2:9/x").unwrap().url(),
            "http://127.0.0.2:9/x"
        );
        let elsewhere = e.resolve("https://other.example/mcp").unwrap();
        assert_ne!(elsewhere.origin(), e.origin());
    }
}
