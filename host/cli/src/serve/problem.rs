//! A failed API call: the CLI's `--json` error object (`{"error": {"type", "code",
//! "message"}}`, from `error_report.rs`) plus the `request_key` and `field` it is about (null
//! when it names none), with the HTTP status its type and code mean.

use crate::error_report::{Reported, classify, location};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error as an API call reports it.
#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    reported: Reported,
    /// The request key and content field the error is about, where the component named them
    /// (a page shows the error next to that field).
    location: (Option<String>, Option<String>),
}

impl Problem {
    /// A missing or wrong token (the token is never quoted).
    pub fn unauthorized() -> Self {
        Self::refused(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this server needs its token (`Authorization: Bearer TOKEN`, or log in at /login); \
             nothing was done (unauthorized)",
        )
    }

    /// A state-changing request from a browser without the CSRF value or from another origin.
    pub fn csrf_refused() -> Self {
        Self::refused(
            StatusCode::FORBIDDEN,
            "csrf_refused",
            "a state-changing request from a browser needs this server's `X-M3-CSRF` value and \
             must come from its own pages; nothing was done (csrf_refused)",
        )
    }

    /// A request whose `Host` is not a loopback name, to a server without a token.
    pub fn host_refused() -> Self {
        Self::refused(
            StatusCode::FORBIDDEN,
            "host_refused",
            "this server has no token and answers only requests addressed to a loopback name \
             (localhost, 127.0.0.1, [::1]); nothing was done (host_refused)",
        )
    }

    /// A path no route has (`GET /api/nothing`; a browser's `GET` of a page path gets
    /// `page::not_found` instead).
    pub fn route_not_found() -> Self {
        Self::refused(
            StatusCode::NOT_FOUND,
            "route_not_found",
            "this server has no call at this path (the API's are under /api/rounds, \
             /api/executions, /api/events/stream and /api/session); nothing was done \
             (route_not_found)",
        )
    }

    /// A path whose calls take other methods (they are in the `Allow` header).
    pub fn method_not_allowed() -> Self {
        Self::refused(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this path does not take the request's method (the `Allow` header lists the ones \
             it takes); nothing was done (method_not_allowed)",
        )
    }

    /// A path parameter (an id) that is not text once its percent escapes are decoded (it is
    /// not quoted).
    pub fn invalid_path() -> Self {
        Self::refused(
            StatusCode::BAD_REQUEST,
            "invalid_path",
            "an id in the request's path is not UTF-8 text once its percent escapes are \
             decoded; nothing was done (invalid_path)",
        )
    }

    /// A query string that cannot be read: a parameter given twice, or a value not of its
    /// kind (it is not quoted).
    pub fn invalid_query() -> Self {
        Self::refused(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            "the request's query cannot be read: a parameter is given more than once, or a \
             value is not of its kind; nothing was done (invalid_query)",
        )
    }

    /// A refusal with `status`, `code` and `message`.
    fn refused(status: StatusCode, code: &str, message: &str) -> Self {
        Self {
            status,
            reported: Reported {
                type_name: "ManagedInputValidationError",
                code: Some(code.into()),
                message: message.into(),
            },
            location: (None, None),
        }
    }

    /// A request body over the limit.
    pub fn too_large(limit: u64) -> Self {
        Self {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            reported: Reported {
                type_name: "ManagedInputValidationError",
                code: Some("payload_too_large".into()),
                message: format!(
                    "the request body is larger than {} MiB; nothing was done \
                     (payload_too_large)",
                    limit >> 20
                ),
            },
            location: (None, None),
        }
    }

    /// A request body that did not arrive in time.
    pub fn too_slow(timeout: std::time::Duration) -> Self {
        Self {
            status: StatusCode::REQUEST_TIMEOUT,
            reported: Reported {
                type_name: "ManagedInputValidationError",
                code: Some("request_timeout".into()),
                message: format!(
                    "the request body did not arrive within {} s; nothing was done \
                     (request_timeout)",
                    timeout.as_secs_f64()
                ),
            },
            location: (None, None),
        }
    }
}

/// The HTTP status of a typed error.
fn status_of(reported: &Reported) -> StatusCode {
    match (reported.type_name, reported.code.as_deref()) {
        (_, Some("round_not_found" | "execution_not_found")) => StatusCode::NOT_FOUND,
        // Ended, or its worker is gone: an answer can never be delivered.
        (
            _,
            Some(
                "round_terminal"
                | "delivered_then_failed"
                | "delivery_unconfirmed"
                | "recovery_unavailable",
            ),
        ) => StatusCode::GONE,
        // The database is locked by another writer for longer than the busy timeout, or does
        // not exist yet (the server waits for it).
        (_, Some("storage_busy" | "database_waiting")) => StatusCode::SERVICE_UNAVAILABLE,
        ("ManagedInputValidationError" | "ModelValidationError", _) => StatusCode::BAD_REQUEST,
        ("ManagedInputConflict" | "ManagedInputStateError" | "ManagedInputRecoveryError", _) => {
            StatusCode::CONFLICT
        }
        ("OperationTimeout", _) => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<anyhow::Error> for Problem {
    fn from(error: anyhow::Error) -> Self {
        let reported = classify(&error);
        Self {
            status: status_of(&reported),
            reported,
            location: location(&error),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut body = self.reported.json();
        let (request_key, field) = self.location;
        body["error"]["request_key"] = request_key.into();
        body["error"]["field"] = field.into();
        (self.status, axum::Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_errors_map_to_their_statuses() {
        let status = |text: &str| Problem::from(anyhow::anyhow!("{text}")).status;
        assert_eq!(
            status("ManagedInputValidationError: bad (malformed_json)"),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            status("ManagedInputConflict: no (idempotency_conflict)"),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status("ManagedInputStateError: over (round_terminal)"),
            StatusCode::GONE
        );
        for code in ["delivered_then_failed", "delivery_unconfirmed"] {
            assert_eq!(
                status(&format!("ManagedInputStateError: over ({code})")),
                StatusCode::GONE
            );
        }
        assert_eq!(
            status("ManagedInputStateError: x (round_not_found)"),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status("ManagedInputRecoveryError: gone (recovery_unavailable)"),
            StatusCode::GONE
        );
        assert_eq!(
            status("StorageError: locked (storage_busy)"),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status("StorageError: disk"),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(status("odd"), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
