//! m3: durable, sandboxed managed elicitation input for MCP agent tests.
//!
//! When an MCP server asks a human for input, m3 keeps the pending round in SQLite, lets any
//! caller read and answer it, validates the answer, and lets the worker deliver it back at most
//! once. Every validation rule and state-machine decision runs inside a WebAssembly component
//! (`guest/`); this crate is the native host: wasmtime, SQLite, the clock.
//!
//! Start with the kit ([`McpTestKit`], or [`AsyncMcpTestKit`]): submit an execution of an
//! agent against an MCP server, wait for the round its server opened, answer it, and take the
//! result. Here with the scripted harness (no model) and the bundled example server (the `m3`
//! binary's `example-server`; compiled, not run, as the server's path is the reader's):
//!
//! ```no_run
//! use m3::{AgentSpec, ElicitationResponse, ExecutionStatus, HumanInput, McpTestKit, Script,
//!          SqliteExecutionStore, StdioServer, Submission};
//! use serde_json::json;
//! use std::{collections::BTreeMap, sync::Arc, time::Duration};
//!
//! fn main() -> Result<(), m3::ExecutionError> {
//!     let store = Arc::new(SqliteExecutionStore::open("executions.sqlite")?);
//!     // The server's whole environment: nothing of this process's.
//!     let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
//!     let script = Script::call("shipping:book_shipment", json!({"item": "book"}));
//!     let agent = kit.agents([AgentSpec::scripted(script)])?.remove(0);
//!     let server = StdioServer::new("shipping", "target/debug/m3").args(["example-server"]);
//!     let handle = agent.submit(
//!         Submission::new("Ask for the delivery address, then book the shipment.", server)
//!             .tools(["shipping:book_shipment"])
//!             .human_input(HumanInput::Managed),
//!     )?;
//!     let pending = loop {
//!         if let Some(pending) = handle.pending_elicitation()? {
//!             break pending;
//!         }
//!         assert_ne!(handle.snapshot()?.lifecycle, ExecutionStatus::Finished);
//!         std::thread::sleep(Duration::from_millis(200));
//!     };
//!     let answer = ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"}));
//!     handle.respond_elicitation(
//!         &pending.round_id,
//!         BTreeMap::from([("shipping_address".to_string(), answer)]),
//!         &format!("address-{}", pending.round_id),
//!     )?;
//!     let result = handle.result(Some(Duration::from_secs(120)))?;
//!     println!("{}", result.outcome);
//!     store.close();
//!     Ok(())
//! }
//! ```
//!
//! Underneath is the store of rounds ([`SqliteManagedInputStore`], [`PostgresManagedInputStore`],
//! the [`ManagedInputStore`] trait), which a worker uses to persist the round it waits on and
//! any caller to answer it:
//!
//! ```
//! use m3::{ElicitationRequest, ElicitationResponse, ManagedInputStatus, ManagedInputStore,
//!          NewRound, OwnerClaim, SqliteManagedInputStore, StoreOptions};
//! use serde_json::json;
//! use std::collections::BTreeMap;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("m3-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! let store = SqliteManagedInputStore::open(dir.join("executions.sqlite"), StoreOptions::default())?;
//! let requests = BTreeMap::from([(
//!     "shipping_address".to_string(),
//!     ElicitationRequest::form("Where should we ship?", json!({
//!         "type": "object",
//!         "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
//!         "required": ["street", "city"]
//!     })),
//! )]);
//! // A worker persists the round it waits on, owning it with a lease.
//! let record = store.create_round(
//!     &NewRound::new("round-1", "exec-1", "shipping", "book_shipment", requests)
//!         .owned_by(OwnerClaim::new("worker-1")),
//! )?;
//! // Any caller answers; the same key with the same answer is safe to retry.
//! let answer = BTreeMap::from([(
//!     "shipping_address".to_string(),
//!     ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
//! )]);
//! store.submit_responses("round-1", &answer, "address-round-1")?;
//! // The worker delivers it once.
//! let lease = record.lease.expect("owned");
//! store.start_delivery("round-1", &lease, "delivery-1")?;
//! store.mark_delivered("round-1", &lease)?;
//! assert_eq!(store.resolve("round-1", &lease)?.status, ManagedInputStatus::Resolved);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
//!
//! # Files
//!
//! - `lib.rs`: the crate's documentation (its kit example a doctest compiled, its store example
//!   one run), its modules and the
//!   public re-exports. The folders show the design: `api/` the public types, `component/` the
//!   component plumbing, `imports/` what the host gives the component, `store/` the database
//!   (SQLite or PostgreSQL, in `store/sqlite/` and `store/postgres/`), `process/` the child
//!   processes, `kit/` and `worker/` executions, `checks/` the reliability checks' switches. The
//!   files read top-down: no two modules use each other, directly or through others
//!   (`tidy::host_modules_use_each_other_in_no_circle`; the generated bindings, whose resource type
//!   names `store/mod.rs`, aside), and `store/` uses no other folder but `checks/`
//!   (`tidy::host_folders_in_circles_are_only_the_known_ones`). **The API boundary**: every module is private; the API is the
//!   re-exports (the specification's names in plain Rust types), `health` and `embedding` (a
//!   documentation module holding EMBEDDING.md, whose Rust example is a doctest too; `readme`,
//!   hidden, holds README.md so that its Rust examples are compiled as printed). No generated
//!   binding type appears in a public signature (`tidy::no_generated_type_in_the_public_api`, with
//!   a planted-leak control); `lib.rs` denies `private_interfaces`, `private_bounds` and
//!   `unnameable_types` for the host's own internal types.
//! - `testing.rs`: `m3::testing`, hidden from the documentation and outside the API: hooks for m3's
//!   own tests and tools (an execution's stored state without a kit, a submission stored and never
//!   run, a second worker, the worker's change signal, the artifact cache, the child-process
//!   types), and, with the cargo feature `internals` (benchmarks only, `required-features`),
//!   `testing::internals`: the modules below the API that `benches/engine.rs` and
//!   `benches/peers_validation.rs` measure.

// Everything below the API is private to the crate: the generated bindings, the component
// plumbing, the imports, the SQLite backend and the processes. The API is the re-exports below
// (the specification's names in plain Rust types), `health` and `embedding`; `testing` is for
// m3's own tests and tools, outside the API. `tests/all/tidy.rs` keeps it so.
#![deny(private_interfaces, private_bounds, unnameable_types)]

mod api;
mod checks;
mod component;
#[doc = include_str!("../../EMBEDDING.md")]
pub mod embedding {}
// The README's Rust examples, compiled as doctests exactly as printed (hidden: the README is
// read on its own).
#[doc = include_str!("../../README.md")]
#[doc(hidden)]
pub mod readme {}
mod imports;
mod kit;
mod process;
mod store;
#[doc(hidden)]
pub mod testing;
mod worker;

/// The sandbox as an embedder of the components sees it: which import each of the engine's
/// imports is bound to, the probes `Policy::probe` runs, the default compute budget.
pub mod sandbox {
    pub use crate::component::instance::DEFAULT_COMPUTE_BUDGET;
    pub use crate::component::sandbox::{ImportBinding, ImportProvider, SandboxProbe};
}

/// Where the `codex` harness finds the user's Codex sign-in, and what it finds there (what
/// `m3 doctor` reports).
pub mod codex {
    pub use crate::kit::codex::{sign_in, user_codex_home};
}

/// Where the `claude-code` harness finds the user's Claude Code sign-in, what it finds there,
/// and the environment variables that carry a model key (what `m3 doctor` reports).
pub mod claude_code {
    pub use crate::kit::claude_code::{KEY_VARIABLES, sign_in, user_config_dir};
}

/// For operators' tools on a [`DatabaseStore`] (the `m3` command): ids by prefix, and the
/// notification ledger of `m3 serve --notify`.
pub mod operations {
    pub use crate::api::notifications::{
        ClaimedNotification, NotificationEvent, NotificationOutcome, NotificationTargetReport,
    };
    pub use crate::store::id_prefix::IdMatches;
}

pub use api::clock::{Clock, ManualClock, SystemClock, TimeSource};
pub use api::error::{
    EngineError, EngineErrorKind, ErrorCode, ErrorDetail, ManagedInputConflict, ManagedInputError,
    ManagedInputRecoveryError, ManagedInputStateError, ManagedInputValidationError, OpenError,
    StorageError,
};
pub use api::execution::{
    ExecutionDiagnostics, ExecutionEvent, ExecutionFailure, ExecutionOutcome, ExecutionResult,
    ExecutionState, ExecutionStatus, FailureKind, OperationTimeout, OutcomeKind, TimeoutCause,
    ToolResult,
};
pub use api::execution_store::{
    ExecutionStore, ExecutionStoreError, InMemoryExecutionStore, PostgresExecutionStore,
    SqliteExecutionStore,
};
pub use api::health;
pub use api::managed_input::{
    DatabaseStore, ManagedInputStore, PostgresManagedInputStore, SqliteManagedInputStore,
    StoreOptions, StoreResult,
};
pub use api::migrate::{MigrateError, MigratedTable, MigrationReport, migrate_sqlite_to_postgres};
pub use api::policy::{POLICY_COMPONENT, Policy, PreparedRound};
pub use api::record::{
    FailureCode, LifecycleTimestamps, ManagedInputLease, ManagedInputRecord, ManagedInputStatus,
    RoundFailure, RoundFilter,
};
pub use api::response::{ElicitationAction, ElicitationResponse, RedactedResponse};
pub use api::round::{
    Deadline, ElicitationRequest, FormElicitationRequest, HarnessMetadata, NewRound, OperationKind,
    OwnerClaim, PendingElicitationRound, RequestContext, UrlElicitationRequest,
};
pub use api::server::{
    HeaderError, HttpServer, McpEra, ProcessInputError, ServerBinding, StdioServer,
};
pub use api::submission::{HumanInput, ModelValidationError, Submission};
pub use component::instance::GuestLimits;
pub use kit::{
    Agent, AgentSpec, AsyncAgent, AsyncExecutionHandle, AsyncMcpTestKit, ClaudeCodeCredentials,
    ClaudeCodeOptions, ClaudeCodeSignIn, CodexCredentials, CodexOptions, CodexSignIn,
    ExecutionError, ExecutionHandle, Harness, KitOptions, McpTestKit, ModelProvider,
    PermissionPolicy, PlanEntry, PlanMatch, Script, ScriptStep,
};
pub use store::sqlite::synchronous::Synchronous;
pub use worker::{Executions, RecoveryReport};
