//! `wasi:http` for one execution: the component may send requests to its server's origin and
//! nowhere else. The host adds the binding's headers (secrets, like a stdio server's
//! environment) to every request it lets through; the component never sees their values, and
//! no other destination ever receives them. Redirects are the component's to follow, and each
//! hop is checked here again, so a server that redirects elsewhere gets a refusal
//! (`HttpRequestDenied`), never a request.

use crate::api::server::{HeaderError, HttpServer};
use std::future::Future;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// What an execution may reach over HTTP: its server's origin (`scheme://host[:port]`,
/// normalised as the component normalises it), with the headers added to each request.
#[derive(Default, Clone)]
pub struct NetworkGrant {
    origin: Option<String>,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

impl std::fmt::Debug for NetworkGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may be secrets: only their names are shown.
        f.debug_struct("NetworkGrant")
            .field("origin", &self.origin)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Why a server URL or header cannot be granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GrantError(pub String);

impl NetworkGrant {
    /// Nothing: every request is refused.
    pub fn none() -> Self {
        Self::default()
    }

    /// Requests to `url`'s origin, each with `headers` added (each one checked, and all of them
    /// within the bounds of [`HttpServer`]).
    pub fn to_server(url: &str, headers: &[(String, String)]) -> Result<Self, GrantError> {
        let origin = server_origin(url)?;
        let refused = |e: HeaderError| GrantError(e.to_string());
        // How many first (30,000 headers are refused without looking at each), then each one,
        // then their size together.
        HttpServer::check_header_totals(headers.len(), 0).map_err(refused)?;
        let mut checked = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            checked.push(header(name, value).map_err(refused)?);
        }
        HttpServer::check_header_totals(
            headers.len(),
            headers.iter().map(|(k, v)| k.len() + v.len()).sum(),
        )
        .map_err(refused)?;
        Ok(Self {
            origin: Some(origin),
            headers: checked,
        })
    }

    /// The origin granted, if any (read by tests and the benchmarks' internals only).
    #[cfg(any(test, feature = "internals"))]
    pub fn origin(&self) -> Option<&str> {
        self.origin.as_deref()
    }

    /// Adds the grant's headers to a request's, replacing any of the same name. Bounded at
    /// submission ([`HttpServer::MAX_HEADERS`]), but never trusted to fit: a map that cannot
    /// take another header fails the request, never the host (`HeaderMap::insert` panics).
    fn add_headers(&self, map: &mut http::HeaderMap) -> Result<(), http::header::MaxSizeReached> {
        for (name, value) in &self.headers {
            map.try_insert(name.clone(), value.clone())?;
        }
        Ok(())
    }

    fn allows(&self, uri: &http::Uri) -> bool {
        match (self.origin.as_deref(), origin_of(uri)) {
            (Some(granted), Some(asked)) => granted == asked,
            _ => false,
        }
    }
}

/// A header the host adds, checked by [`HttpServer::check_header`] (a valid name the transport
/// does not own, a valid value, each within its bound), parsed.
pub fn header(
    name: &str,
    value: &str,
) -> Result<(http::HeaderName, http::HeaderValue), HeaderError> {
    HttpServer::check_header(name, value)?;
    let parsed =
        http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| HeaderError::BadName {
            what: "a character".into(),
            at: 1,
        })?;
    if wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS.contains(&parsed) {
        return Err(HeaderError::Reserved {
            name: parsed.to_string(),
        });
    }
    // The value is never named: it may be a secret.
    let mut value = http::HeaderValue::from_str(value).map_err(|_| HeaderError::BadValue {
        name: parsed.to_string(),
        what: "a character".into(),
        at: 1,
    })?;
    value.set_sensitive(true);
    Ok((parsed, value))
}

/// The normalised origin of a server URL (`http` or `https`, host lowercased, default port
/// dropped), or why it is not one.
pub fn server_origin(url: &str) -> Result<String, GrantError> {
    let uri: http::Uri = url.parse().map_err(|_| {
        GrantError(format!(
            "`{}` is not an http:// or https:// URL",
            bounded(url)
        ))
    })?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(GrantError(format!(
                "`{}` must be an http:// or https:// URL",
                bounded(url)
            )));
        }
    }
    if url.contains('@') && uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(GrantError(
            "the server URL must not carry user information (give credentials as headers)".into(),
        ));
    }
    origin_of(&uri).ok_or_else(|| GrantError(format!("`{}` names no host", bounded(url))))
}

/// `scheme://host[:port]` of an absolute URI, normalised; `None` without a scheme or host.
fn origin_of(uri: &http::Uri) -> Option<String> {
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let authority = uri.authority()?;
    let host = authority.host().to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    let default = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    Some(match authority.port_u16() {
        Some(port) if port != default => format!("{scheme}://{host}:{port}"),
        _ => format!("{scheme}://{host}"),
    })
}

/// At most 200 characters of `text`, control characters escaped (a URL that is not one may
/// hold a line break; it must not reach a terminal or a log raw).
fn bounded(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().take(200) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if text.chars().nth(200).is_some() {
        out.push('…');
    }
    out
}

type SendFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl WasiHttpHooks for NetworkGrant {
    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> SendFuture {
        drop(fut);
        if !self.allows(request.uri()) {
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        if self.add_headers(request.headers_mut()).is_err() {
            return Box::new(async {
                Err(HttpError::InternalError(Some(
                    "the host could not add the binding's headers to the request: it would hold \
                     more headers than an HTTP request may"
                        .into(),
                )))
            });
        }
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) =
                match wasmtime_wasi_http::default_send_request(request, options).await {
                    Ok(sent) => sent,
                    // Said as what it is: the connection ended before a response (hyper's
                    // error would reach the component as "not valid HTTP").
                    Err(HttpError::Hyper(e)) if e.is_incomplete_message() => {
                        return Err(HttpError::HttpResponseIncomplete);
                    }
                    Err(HttpError::Hyper(e)) if was_reset(std::error::Error::source(&e)) => {
                        return Err(HttpError::ConnectionTerminated);
                    }
                    Err(e) => return Err(e),
                };
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = Result<(), HttpError>> + Send>,
            ))
        })
    }
}

/// Whether an error's cause is the connection reset or aborted by the other end.
fn was_reset(cause: Option<&(dyn std::error::Error + 'static)>) -> bool {
    use std::io::ErrorKind;
    cause
        .and_then(|c| c.downcast_ref::<std::io::Error>())
        .is_some_and(|e| {
            matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_server_origin_is_allowed() {
        let grant = NetworkGrant::to_server("http://LOCALHOST:80/mcp", &[]).unwrap();
        assert_eq!(grant.origin(), Some("http://localhost"));
        for (uri, allowed) in [
            ("http://localhost/other", true),
            ("http://localhost:80/", true),
            ("http://localhost:81/mcp", false),
            ("https://localhost/mcp", false),
            ("http://127.0.0.1/mcp", false),
            ("/mcp", false),
        ] {
            let uri: http::Uri = uri.parse().unwrap();
            assert_eq!(grant.allows(&uri), allowed, "{uri}");
        }
        assert!(!NetworkGrant::none().allows(&"http://localhost/".parse().unwrap()));
    }

    #[test]
    fn bad_urls_and_headers_are_refused_without_their_values() {
        for url in ["ftp://h/", "mcp", "http://u:p@h/", "http:///"] {
            assert!(server_origin(url).is_err(), "{url}");
        }
        let err = NetworkGrant::to_server("http://h/", &[("x-key".into(), "a\nsecret".into())])
            .unwrap_err();
        assert!(!err.0.contains("secret"), "{err}");
        // A name that is not one is never echoed (it may be a line split in the wrong place).
        for (name, what) in [
            ("Authorization: Bearer secret", "`:` at byte 14"),
            ("x-a\r\nsecret", "a line break at byte 4"),
            ("API_KEY=secret", "`=` at byte 8"),
            ("", "empty"),
        ] {
            let err =
                NetworkGrant::to_server("http://h/", &[(name.into(), "v".into())]).unwrap_err();
            assert!(!err.0.contains("secret"), "{err}");
            assert!(err.0.contains(what), "{what:?} in {err}");
            assert!(err.0.ends_with("(invalid_header)"), "{err}");
        }
        let err = server_origin("http://h\r\n/").unwrap_err();
        assert!(!err.0.contains(['\r', '\n']), "{err}");
        assert!(header("mcp-session-id", "x").is_err());
        assert!(header("host", "x").is_err());
        assert!(header("bad name", "x").is_err());
        let grant =
            NetworkGrant::to_server("http://h/", &[("Authorization".into(), "Bearer s3".into())])
                .unwrap();
        assert!(!format!("{grant:?}").contains("s3"));
    }

    #[test]
    fn every_header_wasi_http_forbids_is_refused_at_submission() {
        for name in &wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS {
            assert!(
                crate::api::server::RESERVED_HEADERS.contains(&name.as_str()),
                "{name}"
            );
        }
    }

    #[test]
    fn a_request_that_cannot_take_the_grant_s_headers_fails_without_a_panic() {
        let grant = NetworkGrant::to_server(
            "http://h/",
            &[("x-a".into(), "1".into()), ("x-b".into(), "2".into())],
        )
        .unwrap();
        let mut small = http::HeaderMap::new();
        grant.add_headers(&mut small).unwrap();
        assert_eq!(small.len(), 2);
        // A map as full as `http` allows (a component's own headers could make it so).
        let mut full = http::HeaderMap::new();
        let mut n = 0u32;
        while full
            .try_insert(
                http::HeaderName::from_bytes(format!("x-{n}").as_bytes()).unwrap(),
                http::HeaderValue::from_static("v"),
            )
            .is_ok()
        {
            n += 1;
        }
        assert!(grant.add_headers(&mut full).is_err());
    }
}
