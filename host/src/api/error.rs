//! The typed errors of the specification, as Rust types a caller can `match` on.
//!
//! Messages come from the component and name ids, request keys, field names, lengths and hashes
//! only: never answer content, lease tokens or idempotency keys.

use std::fmt;

macro_rules! error_codes {
    ($($variant:ident => $text:literal,)*) => {
        /// The machine-readable reason of an error (the WIT `error-code`); see the rejection table
        /// in ARCHITECTURE.md for which rule raises which.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[allow(missing_docs)]
        pub enum ErrorCode {
            $($variant,)*
        }

        impl ErrorCode {
            /// Every code.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as written in JSON and logs (`snake_case`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)*
                }
            }
        }
    };
}

error_codes! {
    EmptyRoundId => "empty_round_id",
    EmptyIdempotencyKey => "empty_idempotency_key",
    InvalidId => "invalid_id",
    MalformedJson => "malformed_json",
    PayloadTooLarge => "payload_too_large",
    ResponseKeysMismatch => "response_keys_mismatch",
    InvalidResponse => "invalid_response",
    InvalidAction => "invalid_action",
    ContentNotAllowed => "content_not_allowed",
    ContentRequired => "content_required",
    SchemaViolation => "schema_violation",
    UnsupportedSchema => "unsupported_schema",
    InvalidRound => "invalid_round",
    RoundIndexOutOfRange => "round_index_out_of_range",
    InvalidDeadline => "invalid_deadline",
    InvalidFailure => "invalid_failure",
    InvalidLease => "invalid_lease",
    IdempotencyConflict => "idempotency_conflict",
    LeaseHeld => "lease_held",
    LeaseMismatch => "lease_mismatch",
    LeaseExpired => "lease_expired",
    RoundExists => "round_exists",
    ConcurrentUpdate => "concurrent_update",
    RoundNotFound => "round_not_found",
    InvalidTransition => "invalid_transition",
    RoundTerminal => "round_terminal",
    DeliveredThenFailed => "delivered_then_failed",
    DeliveryUnconfirmed => "delivery_unconfirmed",
    DeadlineExceeded => "deadline_exceeded",
    ExecutionNotFound => "execution_not_found",
    ExecutionNotRunnable => "execution_not_runnable",
    AmbiguousPendingRound => "ambiguous_pending_round",
    RecoveryUnavailable => "recovery_unavailable",
    ReclaimUnsafe => "reclaim_unsafe",
    StorageBusy => "storage_busy",
    StorageFailure => "storage_failure",
    CorruptRecord => "corrupt_record",
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an error is about: its code, a safe message and, where there is one, the request key
/// and content field concerned.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ErrorDetail {
    /// The machine-readable reason.
    pub code: ErrorCode,
    /// A message that never carries answers or secrets.
    pub message: String,
    /// The request key concerned.
    pub request_key: Option<String>,
    /// The content field concerned.
    pub field: Option<String>,
}

impl fmt::Display for ErrorDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

macro_rules! spec_error {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
        #[error("{detail}")]
        pub struct $name {
            /// Code, message and location.
            pub detail: ErrorDetail,
        }

        impl $name {
            /// The machine-readable reason.
            pub fn code(&self) -> ErrorCode {
                self.detail.code
            }
        }
    };
}

spec_error!(
    /// Malformed ids, response maps, actions or schema content. Nothing was written.
    ManagedInputValidationError
);
spec_error!(
    /// Stale ownership, idempotency conflicts and concurrent updates. Nothing was written.
    ManagedInputConflict
);
spec_error!(
    /// A transition or response that is invalid for the round's current state. Nothing was written.
    ManagedInputStateError
);
spec_error!(
    /// The store cannot safely recover or reclaim the round. Nothing was written.
    ManagedInputRecoveryError
);
spec_error!(
    /// The database failed (locked past the busy timeout, I/O, corruption). Nothing was written.
    StorageError
);

/// A fault of the sandbox rather than of the request: the component trapped (CPU or memory
/// budget, or a bug) or could not be loaded. The instance involved was discarded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct EngineError {
    /// What went wrong.
    pub kind: EngineErrorKind,
    /// A description without payloads.
    pub message: String,
}

/// The kinds of [`EngineError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EngineErrorKind {
    /// The component computed past its compute budget (fuel) without returning to the host.
    #[error("guest compute budget exceeded")]
    ComputeBudgetExceeded,
    /// The component tried to grow its memory past the limit.
    #[error("guest memory limit exceeded")]
    MemoryLimitExceeded,
    /// The component touched an import the sandbox does not provide.
    #[error("guest used a forbidden import")]
    ForbiddenImport,
    /// Any other trap.
    #[error("guest trapped")]
    Trap,
    /// The component could not be compiled, loaded or instantiated.
    #[error("component could not be loaded")]
    Load,
}

/// Every error of the managed-input store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManagedInputError {
    /// See [`ManagedInputValidationError`].
    #[error("ManagedInputValidationError: {0}")]
    Validation(#[from] ManagedInputValidationError),
    /// See [`ManagedInputConflict`].
    #[error("ManagedInputConflict: {0}")]
    Conflict(#[from] ManagedInputConflict),
    /// See [`ManagedInputStateError`].
    #[error("ManagedInputStateError: {0}")]
    State(#[from] ManagedInputStateError),
    /// See [`ManagedInputRecoveryError`].
    #[error("ManagedInputRecoveryError: {0}")]
    Recovery(#[from] ManagedInputRecoveryError),
    /// See [`StorageError`].
    #[error("StorageError: {0}")]
    Storage(#[from] StorageError),
    /// See [`EngineError`].
    #[error("EngineError: {0}")]
    Engine(#[from] EngineError),
}

impl ManagedInputError {
    /// The machine-readable reason, for every kind but engine faults.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Validation(e) => Some(e.code()),
            Self::Conflict(e) => Some(e.code()),
            Self::State(e) => Some(e.code()),
            Self::Recovery(e) => Some(e.code()),
            Self::Storage(e) => Some(e.code()),
            Self::Engine(_) => None,
        }
    }

    /// The spec's name of the error kind (`ManagedInputValidationError`, ...).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::Validation(_) => "ManagedInputValidationError",
            Self::Conflict(_) => "ManagedInputConflict",
            Self::State(_) => "ManagedInputStateError",
            Self::Recovery(_) => "ManagedInputRecoveryError",
            Self::Storage(_) => "StorageError",
            Self::Engine(_) => "EngineError",
        }
    }

    /// A validation error raised at the host's edge (size limits), before the component runs.
    pub(crate) fn edge_validation(code: ErrorCode, message: String) -> Self {
        Self::Validation(ManagedInputValidationError {
            detail: ErrorDetail {
                code,
                message,
                request_key: None,
                field: None,
            },
        })
    }
}

/// Errors opening a store.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The path is not acceptable as a database file (a symbolic link, a directory, a URI, a
    /// missing directory, ...).
    #[error("ManagedInputValidationError: invalid database path: {0}")]
    InvalidPath(String),
    /// SQLite could not open or prepare the file (locked past the busy timeout, I/O).
    #[error("StorageError: cannot open database: {message}")]
    Sqlite {
        /// SQLite's own words.
        message: String,
        /// Whether the file stayed locked past the busy timeout (`storage_busy`).
        busy: bool,
    },
    /// The URL does not name a PostgreSQL database it can reach (`postgres://...`).
    #[error("ManagedInputValidationError: invalid database URL: {0}")]
    InvalidUrl(String),
    /// PostgreSQL could not be reached or refused to prepare the database (the text names the
    /// server, never a password).
    #[error("StorageError: cannot open database: {0}")]
    Postgres(String),
    /// The file is not an m3 database (not SQLite, another application's) or has a schema
    /// version this build does not know. It was left as it is.
    #[error("StorageError: incompatible database: {0}")]
    Incompatible(String),
    /// The component could not be loaded.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl OpenError {
    /// The store's failure to open as the caller's error.
    pub(crate) fn from_store(failure: crate::store::OpenFailure) -> Self {
        use crate::store::OpenFailure;
        match failure {
            OpenFailure::InvalidPath(message) => Self::InvalidPath(message),
            OpenFailure::Sqlite { message, busy } => Self::Sqlite { message, busy },
            OpenFailure::InvalidUrl(message) => Self::InvalidUrl(message),
            OpenFailure::Postgres(message) => Self::Postgres(message),
            OpenFailure::Incompatible(message) => Self::Incompatible(message),
        }
    }
}

impl OpenError {
    /// The machine-readable reason: `invalid_database_path`, `storage_busy` (the database
    /// stayed locked past the busy timeout, e.g. a migration waiting behind a writer),
    /// `storage_failure`, `incompatible_database`; `None` for a component that did not load.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            Self::InvalidPath(_) => Some("invalid_database_path"),
            Self::Sqlite { busy: true, .. } => Some(ErrorCode::StorageBusy.as_str()),
            Self::Sqlite { .. } | Self::Postgres(_) => Some("storage_failure"),
            Self::InvalidUrl(_) => Some("invalid_database_url"),
            Self::Incompatible(_) => Some("incompatible_database"),
            Self::Engine(_) => None,
        }
    }

    /// The specification's name of the error's kind: `ManagedInputValidationError` for a path
    /// or URL that cannot name a database, `EngineError` for a component that did not load,
    /// else `StorageError`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::InvalidPath(_) | Self::InvalidUrl(_) => "ManagedInputValidationError",
            Self::Engine(_) => "EngineError",
            Self::Sqlite { .. } | Self::Postgres(_) | Self::Incompatible(_) => "StorageError",
        }
    }
}
