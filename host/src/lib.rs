//! m3: durable, sandboxed managed elicitation input for MCP agent tests.
//!
//! When an MCP server asks a human for input, m3 keeps the pending round in SQLite, lets any
//! caller read and answer it, validates the answer, and lets the worker deliver it back at most
//! once. Every validation rule and state-machine decision runs inside a WebAssembly component
//! (`guest/`); this crate is the native host: wasmtime, SQLite, the clock.
//!
//! Start with [`SqliteManagedInputStore`] and the [`ManagedInputStore`] trait.

pub mod bindings;
pub mod clock;
pub mod component_cache;
pub mod convert;
pub mod engine;
pub mod error;
pub mod fault;
pub mod guest_imports;
pub mod instance;
pub mod policy;
pub mod process;
pub mod record;
pub mod response;
pub mod round;
pub mod sandbox;
pub mod sqlite;
pub mod store;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{
    EngineError, EngineErrorKind, ErrorCode, ErrorDetail, ManagedInputConflict, ManagedInputError,
    ManagedInputRecoveryError, ManagedInputStateError, ManagedInputValidationError, OpenError,
    StorageError,
};
pub use instance::GuestLimits;
pub use policy::{Policy, PreparedRound};
pub use record::{
    FailureCode, HarnessMetadata, LifecycleTimestamps, ManagedInputLease, ManagedInputRecord,
    ManagedInputStatus, RoundFailure, RoundFilter,
};
pub use response::{ElicitationAction, ElicitationResponse, RedactedResponse};
pub use round::{
    Deadline, ElicitationRequest, FormElicitationRequest, NewRound, OperationKind, OwnerClaim,
    PendingElicitationRound, RequestContext, UrlElicitationRequest,
};
pub use sqlite::database::Synchronous;
pub use store::{ManagedInputStore, SqliteManagedInputStore, StoreOptions, StoreResult};
