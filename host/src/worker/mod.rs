//! Executions on one database: the component's `runtime` export, hosted.
//!
//! Submission, snapshots, cancel requests and recovery are short synchronous calls on the
//! store's instance pool. `run` drives one execution on its own instance whose `process` and
//! `events` imports are async: while the execution waits (for its server, an answer, a timer),
//! it is a suspended future on tokio, not a thread.
//!
//! # Files
//!
//! `mod.rs`: `Executions` (public: a database's stored executions without a kit: `snapshot`,
//! `states`, `pending_round`, `respond`, `request_cancel`, `recover` with its `RecoveryReport`;
//! inside the crate, `submit` and `run`, one async instance per execution; synchronous calls go
//! through the store's instance pool).
//!
//! - `changes.rs`: the wake-ups, one watcher per database and process (every 5 ms, on the keeper
//!   connection, while anyone waits): `PRAGMA data_version` says whether anything was committed;
//!   only then it reads the wake-up rows above the last number it saw
//!   (`host/src/store/sqlite/wakeups.rs`; on PostgreSQL the notifications' ids) and wakes those executions' waiters, no others; `register` (a
//!   worker, a handle's `result`) and `subscribe` (every commit, for `m3::testing`).
//! - `parking.rs`: the parked workers' held leases (no store: `host/src/imports/process.rs` parks,
//!   the renewer reads): which are due (one nearly due, within a quarter period, brings along all
//!   due within three quarters of a period, so renewals fall into step), the results kept for the
//!   workers to take back, and a worker woken only when it must look (`wake`: its cancel flag or
//!   its round; `timeout`: a renewal refused, failed, or a period late, after which it renews by
//!   itself).
//! - `renewals.rs`: the renewer, one task per `Executions` while any of its workers runs, renewing
//!   what is due with the component's `renew-held` (256 workers per transaction).

pub mod changes;
pub mod parking;
pub mod renewals;

use crate::api::error::{EngineError, EngineErrorKind, ManagedInputError};
use crate::api::execution::ExecutionState;
use crate::api::execution::state_back;
use crate::api::managed_input::{DatabaseStore, StoreResult};
use crate::api::round::PendingElicitationRound;
use crate::component::bindings::exports::m3::managed_input::runtime as wit;
use crate::component::convert;
use crate::component::instance::bounded_store;
use crate::imports::HostState;
use crate::imports::process::ExecutionIo;
use changes::DatabaseChanges;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Notify;

/// Why a submission was not stored.
#[derive(Debug)]
pub enum SubmitFailure {
    /// The component found the submission unusable (a `ModelValidationError`).
    Invalid(String),
    /// Storing it failed.
    Failed(ManagedInputError),
}

/// What a recovery pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct RecoveryReport {
    /// Rounds failed `recovery_unavailable` (their worker is gone).
    pub rounds_failed: u32,
    /// Executions finished failed (their worker, or their submitter, is gone).
    pub executions_failed: u32,
    /// Records that could not be read, counted and left as they are.
    pub records_unreadable: u32,
}

/// The stored executions of one database, without a kit: read them, cancel them, recover the
/// ones whose worker is gone. (Submitting and running is the kit's.)
#[derive(Debug)]
pub struct Executions {
    store: Arc<DatabaseStore>,
    changes: DatabaseChanges,
    renewals: Arc<renewals::Renewals>,
}

fn engine_error(e: &wasmtime::Error, kind: EngineErrorKind) -> ManagedInputError {
    ManagedInputError::Engine(EngineError {
        kind,
        message: format!("{e:#}"),
    })
}

impl Executions {
    /// Executions kept in `store`'s database.
    pub fn new(store: Arc<DatabaseStore>) -> Self {
        let changes = DatabaseChanges::new(store.database().clone());
        let renewals = Arc::new(renewals::Renewals::new(store.clone()));
        Self {
            store,
            changes,
            renewals,
        }
    }

    /// The store they live in.
    pub fn store(&self) -> &Arc<DatabaseStore> {
        &self.store
    }

    /// A signal of every commit to the database by another connection or process (while the
    /// subscription lives).
    pub(crate) fn changes(&self) -> changes::Subscription {
        self.changes.subscribe()
    }

    /// Wakes `notify` when a commit, in this process or another, concerns `execution_id` (an
    /// answer, a cancel request, a failed round, the end), while the guard lives. Read what you
    /// wait for after registering: nothing committed from then on is missed.
    pub(crate) fn register(&self, execution_id: &str, notify: &Arc<Notify>) -> changes::Waiting {
        self.changes.register(execution_id, notify)
    }

    /// Checks and stores a submission as a queued execution held by `owner_id` (the submitter,
    /// whose worker runs it) for one lease.
    pub(crate) fn submit(
        &self,
        spec: &wit::ExecutionSpec,
        owner_id: &str,
    ) -> Result<wit::ExecutionState, SubmitFailure> {
        let result = self
            .store
            .pool()
            .call(|b, s| b.m3_managed_input_runtime().call_submit(s, spec, owner_id))
            .map_err(|e| SubmitFailure::Failed(e.into()))?;
        result.map_err(|e| match e {
            wit::SubmitError::Invalid(message) => SubmitFailure::Invalid(message),
            wit::SubmitError::Failed(e) => SubmitFailure::Failed(convert::error_back(&e)),
        })
    }

    /// The executions whose id starts with `prefix` (at most `limit` of them, and how many in
    /// all), read with one indexed range query: `%` and `_` are ordinary characters, and a full
    /// id is a point lookup.
    pub fn execution_ids_with_prefix(
        &self,
        prefix: &str,
        limit: u32,
    ) -> StoreResult<crate::store::id_prefix::IdMatches> {
        self.store
            .database()
            .ids_with_prefix(crate::store::id_prefix::IdTable::Executions, prefix, limit)
            .map_err(crate::api::managed_input::store_failure)
    }

    /// A number that changes whenever another connection, in any process, commits to the
    /// database (`PRAGMA data_version`): a cheap "did anything change?" for pollers that run
    /// no async runtime (`m3 pending --watch`).
    pub fn data_version(&self) -> StoreResult<i64> {
        self.store
            .database()
            .data_version()
            .map_err(crate::api::managed_input::store_failure)
    }

    /// The execution's state.
    pub fn snapshot(&self, execution_id: &str) -> StoreResult<ExecutionState> {
        let state = self
            .store
            .pool()
            .call(|b, s| b.m3_managed_input_runtime().call_snapshot(s, execution_id))?
            .map_err(|e| convert::error_back(&e))?;
        Ok(state_back(&state))
    }

    /// The execution's diagnostics: its harness's events and stderr tail.
    pub fn diagnostics(
        &self,
        execution_id: &str,
    ) -> StoreResult<crate::api::execution::ExecutionDiagnostics> {
        let diagnostics = self
            .store
            .pool()
            .call(|b, s| {
                b.m3_managed_input_runtime()
                    .call_diagnostics(s, execution_id)
            })?
            .map_err(|e| convert::error_back(&e))?;
        Ok(crate::api::execution::diagnostics_back(&diagnostics))
    }

    /// Every execution, oldest first, at most `limit`.
    pub fn states(&self, limit: Option<u32>) -> StoreResult<Vec<ExecutionState>> {
        Ok(self.list(None, limit)?.iter().map(state_back).collect())
    }

    /// Every execution, oldest first, as [`Self::states`], except that an execution whose
    /// record cannot be read is reported (its id and why) instead of failing the listing, so
    /// one bad record never hides the others.
    #[allow(clippy::type_complexity)]
    pub fn states_reporting(
        &self,
    ) -> StoreResult<(Vec<ExecutionState>, Vec<(String, ManagedInputError)>)> {
        match self.states(None) {
            Ok(states) => return Ok((states, Vec::new())),
            // An unreadable record is a storage error; any other error is the listing's.
            Err(ManagedInputError::Storage(_)) => {}
            Err(e) => return Err(e),
        }
        let mut states = Vec::new();
        let mut unreadable = Vec::new();
        for execution_id in self.execution_ids()? {
            match self.snapshot(&execution_id) {
                Ok(state) => states.push(state),
                Err(e @ ManagedInputError::Storage(_)) => unreadable.push((execution_id, e)),
                // The component's word on that id (gone since the ids were read).
                Err(ManagedInputError::State(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok((states, unreadable))
    }

    /// The ids of every execution, oldest first, read without decoding the rows.
    fn execution_ids(&self) -> StoreResult<Vec<String>> {
        self.store
            .database()
            .execution_ids()
            .map_err(crate::api::managed_input::store_failure)
    }

    /// Executions with `status` (all when `None`), oldest first, at most `limit` (paged through
    /// the component, so a long listing never outgrows one call's budget).
    pub(crate) fn list(
        &self,
        status: Option<crate::component::bindings::m3::managed_input::types::ExecutionStatus>,
        limit: Option<u32>,
    ) -> StoreResult<Vec<wit::ExecutionState>> {
        const PAGE: u32 = 100;
        let mut states: Vec<wit::ExecutionState> = Vec::new();
        let mut after = None;
        loop {
            let wanted = limit.map_or(PAGE, |l| l.saturating_sub(states.len() as u32).min(PAGE));
            if wanted == 0 {
                return Ok(states);
            }
            let page = self
                .store
                .pool()
                .call(|b, s| {
                    b.m3_managed_input_runtime().call_list_executions(
                        s,
                        status,
                        Some(wanted),
                        after.as_ref(),
                    )
                })?
                .map_err(|e| convert::error_back(&e))?;
            let full = page.len() as u32 == wanted;
            after =
                page.last().map(
                    |s| crate::component::bindings::m3::managed_input::types::Cursor {
                        created_at: s.created_at,
                        id: s.execution_id.clone(),
                    },
                );
            states.extend(page);
            if !full {
                return Ok(states);
            }
        }
    }

    /// The execution's single pending round, or `None`.
    pub fn pending_round(
        &self,
        execution_id: &str,
    ) -> StoreResult<Option<PendingElicitationRound>> {
        let round = self
            .store
            .pool()
            .call(|b, s| {
                b.m3_managed_input_runtime()
                    .call_pending_elicitation(s, execution_id)
            })?
            .map_err(|e| convert::error_back(&e))?;
        round.map(convert::pending_round_back).transpose()
    }

    /// Validates and commits answers (a JSON response map) to a round of this execution.
    pub fn respond(
        &self,
        execution_id: &str,
        round_id: &str,
        responses: &str,
        idempotency_key: &str,
    ) -> StoreResult<()> {
        self.store.check_responses_size(responses)?;
        let responses = responses.to_owned();
        self.store
            .pool()
            .call(|b, s| {
                b.m3_managed_input_runtime().call_respond(
                    s,
                    execution_id,
                    round_id,
                    &responses,
                    idempotency_key,
                )
            })?
            .map_err(|e| convert::error_back(&e))
    }

    /// Asks for the execution to be cancelled: a queued one finishes `cancelled` at once, a
    /// running one's worker carries the cancel out.
    pub fn request_cancel(&self, execution_id: &str) -> StoreResult<ExecutionState> {
        let state = self
            .store
            .pool()
            .call(|b, s| {
                b.m3_managed_input_runtime()
                    .call_request_cancel(s, execution_id)
            })?
            .map_err(|e| convert::error_back(&e))?;
        Ok(state_back(&state))
    }

    /// Fails the rounds and executions whose workers are gone.
    /// Then ends what their dead workers left behind: the child process groups (when still
    /// the same) and the scratch directories.
    pub fn recover(&self) -> StoreResult<RecoveryReport> {
        let report = self
            .store
            .pool()
            .call(|b, s| b.m3_managed_input_runtime().call_recover(s))?
            .map_err(|e| convert::error_back(&e))?;
        for left in &report.left_behind {
            crate::process::child::end_left_behind(
                left.process_group,
                left.started_at,
                std::path::Path::new(&left.scratch),
            );
        }
        Ok(RecoveryReport {
            rounds_failed: report.rounds_failed,
            executions_failed: report.executions_failed,
            records_unreadable: report.records_unreadable,
        })
    }

    /// Drives the queued execution `execution_id` to its end as worker `owner_id`. Its child
    /// gets exactly `env` and the server binding's `server_env` (a harness that starts the
    /// server itself passes that on to the server alone); `wake` is notified when a commit, in this
    /// process or another, concerns the execution (`wake-execution`). The child is
    /// killed and reaped however the call ends.
    pub(crate) async fn run(
        &self,
        execution_id: &str,
        owner_id: &str,
        env: BTreeMap<String, String>,
        server_env: BTreeMap<String, String>,
        network: crate::imports::network::NetworkGrant,
        wake: Arc<Notify>,
    ) -> StoreResult<wit::ExecutionState> {
        let pool = self.store.pool();
        let runtime = pool.runtime().clone();
        // Before anything is read: a wake-up committed from here on reaches this worker.
        let waiting = self.changes.register(execution_id, &wake);
        let mut state = HostState::new(
            self.store.options().clock.clone(),
            Some(self.store.database().clone()),
            pool.limits().max_memory,
        );
        // While it runs, the renewer renews its leases whenever it is parked.
        let enlisted = self.renewals.enlist();
        let parking = self.renewals.parking().clone();
        state.process.io = Some(ExecutionIo::new(env, server_env, wake, parking));
        // Its HTTP requests may go to its server's origin alone (none for a stdio server).
        state.process.network = network;
        let mut store = bounded_store(&runtime.engine, state, pool.limits());
        let bindings = runtime
            .execution_pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| engine_error(&e, EngineErrorKind::Load))?;
        let result = bindings
            .m3_managed_input_runtime()
            .call_run_execution(&mut store, execution_id, owner_id)
            .await;
        if let Some(io) = store.data_mut().process.io.as_mut() {
            io.reap().await;
        }
        drop(waiting);
        drop(enlisted);
        match result {
            Ok(Ok(state)) => Ok(state),
            Ok(Err(e)) => Err(convert::error_back(&e)),
            Err(e) => {
                // The instance trapped: the worker's state (its server's pending request) died
                // with it. Its execution and open rounds are failed now, not left answerable
                // until its lease expires.
                let mut stopped = crate::component::instance::classify(&e, store.data());
                if let Err(failed) = self.abandon(execution_id, owner_id, &stopped.kind.to_string())
                {
                    stopped.message = format!(
                        "{}; failing its execution failed too (recovery fails it once its lease \
                         expires): {failed}",
                        stopped.message
                    );
                }
                Err(stopped.into())
            }
        }
    }

    /// Fails, in one transaction, the execution `execution_id` held by `owner_id` and every
    /// round that worker still owns (`recovery_unavailable`): its instance stopped.
    fn abandon(
        &self,
        execution_id: &str,
        owner_id: &str,
        reason: &str,
    ) -> StoreResult<wit::ExecutionState> {
        self.store
            .pool()
            .call(|b, s| {
                b.m3_managed_input_runtime()
                    .call_abandon(s, execution_id, owner_id, reason)
            })?
            .map_err(|e| convert::error_back(&e))
    }
}
