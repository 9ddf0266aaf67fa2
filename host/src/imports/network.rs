//! `wasi:http` for one execution: the component may send requests to its server's origin and
//! nowhere else. The host adds the binding's headers (secrets, like a stdio server's
//! environment) to every request it lets through; the component never sees their values, and
//! no other destination ever receives them. Redirects are the component's to follow, and each
//! hop is checked here again, so a server that redirects elsewhere gets a refusal
//! (`HttpRequestDenied`), never a request.

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

    /// Requests to `url`'s origin, each with `headers` added.
    pub fn to_server(url: &str, headers: &[(String, String)]) -> Result<Self, GrantError> {
        let origin = server_origin(url)?;
        let mut checked = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            checked.push(header(name, value)?);
        }
        Ok(Self {
            origin: Some(origin),
            headers: checked,
        })
    }

    /// The origin granted, if any.
    pub fn origin(&self) -> Option<&str> {
        self.origin.as_deref()
    }

    fn allows(&self, uri: &http::Uri) -> bool {
        match (self.origin.as_deref(), origin_of(uri)) {
            (Some(granted), Some(asked)) => granted == asked,
            _ => false,
        }
    }
}

/// A header the host adds: a valid name that is not one the transport owns, and a valid value.
pub fn header(
    name: &str,
    value: &str,
) -> Result<(http::HeaderName, http::HeaderValue), GrantError> {
    let parsed = http::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| GrantError(format!("`{}` is not an HTTP header name", bounded(name))))?;
    if wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS.contains(&parsed)
        || TRANSPORT_HEADERS.contains(&parsed.as_str())
    {
        return Err(GrantError(format!(
            "the header `{parsed}` is set by the MCP transport itself and cannot be given"
        )));
    }
    // The value is never named: it may be a secret.
    let value = http::HeaderValue::from_str(value).map_err(|_| {
        GrantError(format!(
            "the value of the header `{parsed}` holds characters an HTTP header cannot carry"
        ))
    })?;
    let mut value = value;
    value.set_sensitive(true);
    Ok((parsed, value))
}

/// Headers the Streamable HTTP transport sets on its own requests.
const TRANSPORT_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

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

fn bounded(text: &str) -> String {
    let mut out: String = text.chars().take(200).collect();
    if out.len() < text.len() {
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
        for (name, value) in &self.headers {
            request.headers_mut().insert(name.clone(), value.clone());
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
        assert!(header("mcp-session-id", "x").is_err());
        assert!(header("host", "x").is_err());
        assert!(header("bad name", "x").is_err());
        let grant =
            NetworkGrant::to_server("http://h/", &[("Authorization".into(), "Bearer s3".into())])
                .unwrap();
        assert!(!format!("{grant:?}").contains("s3"));
    }
}
