//! What an API call's path and query say, read into typed values. axum's own extractors refuse
//! a bad request with a `text/plain` body; these wrap them so that every refusal is the API's
//! typed JSON error (`problem.rs`): an id that is not UTF-8 once decoded (`GET
//! /api/rounds/%ff`) is `invalid_path`, a query with a parameter given twice
//! (`?execution=a&execution=b`) or a value not of its kind is `invalid_query`, each a 400 that quotes
//! nothing of the request. (An answer's body is read by `api.rs` itself: `malformed_json`.)

use super::problem::Problem;
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// The one id of a path such as `/api/rounds/{id}`.
#[derive(Debug)]
pub struct Id(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Id {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(id)) => Ok(Self(id)),
            Err(_) => Err(Problem::invalid_path()),
        }
    }
}

/// A query string read as `T` (a parameter `T` does not name is ignored, as before).
#[derive(Debug)]
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Params<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Self(value)),
            Err(_) => Err(Problem::invalid_query()),
        }
    }
}
