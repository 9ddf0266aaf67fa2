//! The bearer token of `m3 serve`: when set, every API call must carry
//! `Authorization: Bearer TOKEN`, compared in constant time. The token is never logged, printed
//! or quoted in an error.

use super::Shared;
use super::problem::Problem;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// A secret token (its `Debug` hides it).
pub struct Token(String);

impl Token {
    /// The token `text`.
    pub fn new(text: String) -> Self {
        Self(text)
    }

    /// Whether `given` is the token, in time independent of where they differ.
    fn matches(&self, given: &str) -> bool {
        self.0.as_bytes().ct_eq(given.as_bytes()).into()
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Refuses (401, nothing done) a request without the token, when one is set.
pub async fn require(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    if let Some(token) = &shared.token {
        let given = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|given| token.matches(given)) {
            return Problem::unauthorized().into_response();
        }
    }
    next.run(request).await
}
