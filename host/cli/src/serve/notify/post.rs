//! The one place shipped code connects out (`tidy::nothing_shipped_can_fetch_a_url` names
//! it): a POST of one notification to its target. A new connection each time (HTTP/1.1 over
//! TCP, with TLS for `https` against the Mozilla roots of `webpki-roots`), to the addresses the
//! target's host resolves to (only loopback ones for a plain-`http` loopback target, so a name
//! cannot be pointed elsewhere); the whole exchange within one timeout; a redirect is not
//! followed (it counts as a failure); at most [`RESPONSE_LIMIT`] bytes of the response read.

use super::target::{Target, is_loopback};
use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpStream;

/// How much of a response is read (the rest is dropped with the connection).
pub const RESPONSE_LIMIT: usize = 64 * 1024;

/// Why a POST failed, in words without the target's path or the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// No answer within the timeout.
    #[error("no response within {0:?}")]
    Timeout(Duration),
    /// The host did not resolve, or not to an address allowed.
    #[error("cannot resolve the host: {0}")]
    Resolve(String),
    /// No connection.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// TLS failed (certificate, handshake).
    #[error("TLS failed: {0}")]
    Tls(String),
    /// The exchange failed midway.
    #[error("HTTP failed: {0}")]
    Http(String),
    /// A redirect, not followed.
    #[error("answered {0} (a redirect, not followed)")]
    Redirect(u16),
    /// Any other status than 2xx.
    #[error("answered {0}")]
    Status(u16),
}

/// TLS settings, made once.
fn tls() -> Arc<tokio_rustls::rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<tokio_rustls::rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = tokio_rustls::rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            // ring is the provider `wasmtime-wasi-http` links already (aws-lc-rs, rustls's
            // post-quantum default, would add a C library's build); rustls 0.23.48 marks it
            // deprecated for lacking post-quantum key exchange, which webhooks do not need.
            #[allow(deprecated)]
            let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
            let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| b.with_root_certificates(roots).with_no_client_auth())
                .unwrap_or_else(|_| {
                    // The ring provider supports the default versions; never reached.
                    tokio_rustls::rustls::ClientConfig::builder()
                        .with_root_certificates(tokio_rustls::rustls::RootCertStore::empty())
                        .with_no_client_auth()
                });
            Arc::new(config)
        })
        .clone()
}

/// Posts `body` with `headers` to `target` within `timeout`; the response's status on 2xx.
pub async fn post(
    target: &Target,
    headers: &[(&'static str, String)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<u16, PostError> {
    tokio::time::timeout(timeout, exchange(target, headers, body))
        .await
        .unwrap_or(Err(PostError::Timeout(timeout)))
}

async fn exchange(
    target: &Target,
    headers: &[(&'static str, String)],
    body: Vec<u8>,
) -> Result<u16, PostError> {
    let resolved: Vec<_> = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(|e| PostError::Resolve(e.to_string()))?
        .filter(|a| target.https || !is_loopback(&target.host) || a.ip().is_loopback())
        .collect();
    if resolved.is_empty() {
        return Err(PostError::Resolve("no address allowed".into()));
    }
    let mut last = PostError::Connect("no address".into());
    let mut stream = None;
    for address in resolved {
        match TcpStream::connect(address).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = PostError::Connect(e.to_string()),
        }
    }
    let Some(stream) = stream else {
        return Err(last);
    };
    let _ = stream.set_nodelay(true);
    if target.https {
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(target.host.clone())
            .map_err(|e| PostError::Tls(e.to_string()))?;
        let tls = tokio_rustls::TlsConnector::from(tls())
            .connect(name, stream)
            .await
            .map_err(|e| PostError::Tls(e.to_string()))?;
        send(TokioIo::new(tls), target, headers, body).await
    } else {
        send(TokioIo::new(stream), target, headers, body).await
    }
}

async fn send<T>(
    io: TokioIo<T>,
    target: &Target,
    headers: &[(&'static str, String)],
    body: Vec<u8>,
) -> Result<u16, PostError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let failed = |e: hyper::Error| PostError::Http(e.to_string());
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(failed)?;
    let driver = tokio::spawn(connection);
    let mut request = hyper::Request::post(target.path.as_str())
        .header(hyper::header::HOST, target.authority())
        .header(hyper::header::CONTENT_LENGTH, body.len());
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| PostError::Http(e.to_string()))?;
    let outcome = async {
        let response = sender.send_request(request).await.map_err(failed)?;
        let status = response.status().as_u16();
        // Read a bounded part of the response (a receiver's words are not needed).
        let mut body = response.into_body();
        let mut read = 0usize;
        while read < RESPONSE_LIMIT {
            match body.frame().await {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, |d| d.len()),
                Some(Err(_)) | None => break,
            }
        }
        Ok(status)
    }
    .await;
    driver.abort();
    let status = outcome?;
    match status {
        200..=299 => Ok(status),
        300..=399 => Err(PostError::Redirect(status)),
        _ => Err(PostError::Status(status)),
    }
}
