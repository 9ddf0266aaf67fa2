//! A failed API call: the CLI's `--json` error object (`{"error": {"type", "code",
//! "message"}}`, from `error_report.rs`) with the HTTP status its type and code mean.

use crate::error_report::{Reported, classify};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error as an API call reports it.
#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    reported: Reported,
}

impl Problem {
    /// A missing or wrong token (the token is never quoted).
    pub fn unauthorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            reported: Reported {
                type_name: "ManagedInputValidationError",
                code: Some("unauthorized".into()),
                message: "this server needs `Authorization: Bearer TOKEN` with its token; \
                          nothing was done (unauthorized)"
                    .into(),
            },
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
        }
    }
}

impl Problem {
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
        }
    }
}

/// The HTTP status of a typed error.
fn status_of(reported: &Reported) -> StatusCode {
    match (reported.type_name, reported.code.as_deref()) {
        (_, Some("round_not_found" | "execution_not_found")) => StatusCode::NOT_FOUND,
        // Ended, or its worker is gone: an answer can never be delivered.
        (_, Some("round_terminal" | "recovery_unavailable")) => StatusCode::GONE,
        // The database is locked by another writer for longer than the busy timeout.
        (_, Some("storage_busy")) => StatusCode::SERVICE_UNAVAILABLE,
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
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.reported.json())).into_response()
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
