//! The `ManagedInputStore` protocol and its SQLite implementation.
//!
//! Each method is one call into the component, which validates, decides and runs one SQLite
//! transaction through the host's `store` import. This module only converts types and enforces
//! size limits at the edge.

use crate::api::clock::{Clock, SystemClock, TimeSource};
use crate::api::error::{ErrorCode, ManagedInputError, OpenError};
use crate::api::record::{FailureCode, ManagedInputLease, ManagedInputRecord, RoundFilter};
use crate::api::response::{ElicitationResponse, RedactedResponse};
use crate::api::round::{NewRound, OwnerClaim};
use crate::component::bindings;
use crate::component::convert;
use crate::component::engine::ComponentRuntime;
use crate::component::instance::{GuestLimits, InstancePool};
use crate::store::Backend;
use crate::store::id_prefix::{IdMatches, IdTable};
use crate::store::sqlite::database::Synchronous;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Records per call into the component when listing.
const LIST_PAGE: u32 = 200;

/// A store import's error read outside the component, as the store's typed storage error.
pub(crate) fn store_failure(e: crate::store::StoreError) -> ManagedInputError {
    let (code, message) = match e {
        crate::store::StoreError::Busy(m) => (ErrorCode::StorageBusy, m),
        crate::store::StoreError::Failure(m) => (ErrorCode::StorageFailure, m),
    };
    ManagedInputError::Storage(crate::api::error::StorageError {
        detail: crate::api::error::ErrorDetail {
            code,
            message,
            request_key: None,
            field: None,
        },
    })
}

/// Result of a store operation.
pub type StoreResult<T> = Result<T, ManagedInputError>;

/// The managed-input store protocol of the specification. Storage and worker coordination:
/// application code answers through an execution handle, so that the worker is woken.
pub trait ManagedInputStore: Send + Sync {
    /// Persists a new `pending` round (validating every request and schema).
    fn create_round(&self, round: &NewRound) -> StoreResult<ManagedInputRecord>;
    /// The record of a round, if it exists.
    fn get_round(&self, round_id: &str) -> StoreResult<Option<ManagedInputRecord>>;
    /// Records matching `filter`, oldest first.
    fn list_rounds(&self, filter: &RoundFilter) -> StoreResult<Vec<ManagedInputRecord>>;
    /// Takes the lease of an unowned round, or rotates the caller's own live lease.
    fn claim_round(&self, round_id: &str, claim: &OwnerClaim) -> StoreResult<ManagedInputLease>;
    /// Extends the caller's live lease by `lease_ttl` from now.
    fn renew(
        &self,
        round_id: &str,
        lease: &ManagedInputLease,
        lease_ttl: Duration,
    ) -> StoreResult<ManagedInputLease>;
    /// Validates and stores answers given as JSON text (an object of request key ->
    /// `{"action", "content"?}`): `pending` -> `response_validated`.
    fn submit_responses_json(
        &self,
        round_id: &str,
        responses: &str,
        idempotency_key: &str,
    ) -> StoreResult<ManagedInputRecord>;
    /// Validates and stores answers: `pending` -> `response_validated`. The same key with the same
    /// answers returns the stored record; the same key with other answers is a conflict.
    fn submit_responses(
        &self,
        round_id: &str,
        responses: &BTreeMap<String, ElicitationResponse>,
        idempotency_key: &str,
    ) -> StoreResult<ManagedInputRecord> {
        let text = serde_json::to_string(responses).map_err(|_| {
            ManagedInputError::edge_validation(
                ErrorCode::InvalidResponse,
                "responses could not be encoded as JSON".into(),
            )
        })?;
        self.submit_responses_json(round_id, &text, idempotency_key)
    }
    /// `response_validated` -> `delivery_started`, committed before the answer is sent.
    fn start_delivery(
        &self,
        round_id: &str,
        lease: &ManagedInputLease,
        delivery_idempotency_key: &str,
    ) -> StoreResult<ManagedInputRecord>;
    /// `delivery_started` -> `delivered`.
    fn mark_delivered(
        &self,
        round_id: &str,
        lease: &ManagedInputLease,
    ) -> StoreResult<ManagedInputRecord>;
    /// `delivered` -> `resolved`.
    fn resolve(&self, round_id: &str, lease: &ManagedInputLease)
    -> StoreResult<ManagedInputRecord>;
    /// Any non-terminal status -> `failed` with `code`.
    fn fail(
        &self,
        round_id: &str,
        lease: &ManagedInputLease,
        code: FailureCode,
        message: &str,
    ) -> StoreResult<ManagedInputRecord>;
    /// Fails a round whose worker is gone with `recovery_unavailable`.
    fn fail_recovery(
        &self,
        round_id: &str,
        lease: Option<&ManagedInputLease>,
        message: &str,
    ) -> StoreResult<ManagedInputRecord>;
    /// The diagnostic projection of a round's answers (`None` before any answer).
    fn redacted_responses(&self, round_id: &str) -> StoreResult<Option<Vec<RedactedResponse>>>;
}

/// Options of [`SqliteManagedInputStore::open`] and [`PostgresManagedInputStore::open`].
#[derive(Clone)]
pub struct StoreOptions {
    /// How long a write waits for a locked database (default 5000 ms); on PostgreSQL, for the
    /// locks of the executions it writes, and the longest a connection takes to open.
    pub busy_timeout_ms: u64,
    /// Commit durability (default FULL); SQLite only (a PostgreSQL server's own settings
    /// decide there).
    pub synchronous: Synchronous,
    /// The clock (default: system UTC time).
    pub clock: Arc<dyn Clock>,
    /// Whether `clock` is read as it is or corrected to the database server's time (default:
    /// the backend's; see [`TimeSource`]).
    pub time: TimeSource,
    /// Limits of each component instance.
    pub guest_limits: GuestLimits,
    /// Largest response map accepted, in bytes of JSON; larger ones are refused before they reach
    /// the component (default 1 MiB).
    pub max_responses_bytes: usize,
    /// Largest new round accepted (schemas, messages and context), in bytes (default 4 MiB).
    pub max_round_bytes: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            busy_timeout_ms: 5000,
            synchronous: Synchronous::Full,
            clock: Arc::new(SystemClock),
            time: TimeSource::Default,
            guest_limits: GuestLimits::default(),
            max_responses_bytes: 1024 * 1024,
            max_round_bytes: 4 * 1024 * 1024,
        }
    }
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("busy_timeout_ms", &self.busy_timeout_ms)
            .field("synchronous", &self.synchronous)
            .field("time", &self.time)
            .field("guest_limits", &self.guest_limits)
            .field("max_responses_bytes", &self.max_responses_bytes)
            .field("max_round_bytes", &self.max_round_bytes)
            .finish_non_exhaustive()
    }
}

/// The SQLite implementation of [`ManagedInputStore`]. One connection per operation; there is no
/// `close()`: drop it. Any number of store objects, in any number of processes, may share a file.
/// Everything but opening is [`DatabaseStore`]'s (through `Deref`).
#[derive(Debug)]
pub struct SqliteManagedInputStore(DatabaseStore);

impl SqliteManagedInputStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: impl AsRef<Path>, options: StoreOptions) -> Result<Self, OpenError> {
        Self::open_with_runtime(path, options, ComponentRuntime::shared()?)
    }

    /// Opens the store with an explicit component runtime (benchmarks, embedders).
    pub(crate) fn open_with_runtime(
        path: impl AsRef<Path>,
        options: StoreOptions,
        runtime: Arc<ComponentRuntime>,
    ) -> Result<Self, OpenError> {
        if options.time == TimeSource::DatabaseServer {
            return Err(OpenError::Incompatible(
                "a SQLite store reads its clock as it is: the database server's time is \
                 PostgreSQL's"
                    .into(),
            ));
        }
        let db = crate::store::sqlite::database::Database::open(
            path.as_ref(),
            Duration::from_millis(options.busy_timeout_ms),
            options.synchronous,
        )
        .map_err(OpenError::from_store)?;
        Ok(Self(DatabaseStore::on(
            Arc::new(Backend::Sqlite(db)),
            options,
            runtime,
        )))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        match self.0.backend() {
            Backend::Sqlite(db) => db.path(),
            Backend::Postgres(_) => unreachable!("a SQLite store holds a SQLite database"),
        }
    }

    /// The store, whichever backend it has (what [`crate::Executions`] keeps).
    pub fn into_inner(self) -> DatabaseStore {
        self.0
    }
}

/// The PostgreSQL implementation of [`ManagedInputStore`]: the same component and operations
/// as [`SqliteManagedInputStore`], on a database that workers and answerers on many machines
/// share. Connections are opened per operation (an idle one is reused within a second); there is
/// no `close()`: drop it. Everything but opening is [`DatabaseStore`]'s (through `Deref`).
#[derive(Debug)]
pub struct PostgresManagedInputStore(DatabaseStore);

impl PostgresManagedInputStore {
    /// Opens the store at `url` (`postgres://user@host/database`), creating its tables on
    /// first use (versioned like SQLite's); a database holding another application's tables,
    /// or a newer schema, is refused and left as it is.
    pub fn open(url: &str, options: StoreOptions) -> Result<Self, OpenError> {
        let db = crate::store::postgres::database::Database::open(
            url,
            Duration::from_millis(options.busy_timeout_ms),
        )
        .map_err(OpenError::from_store)?;
        let db = Arc::new(Backend::Postgres(Box::new(db)));
        let mut options = options;
        if options.time != TimeSource::Clock {
            let corrected =
                crate::api::server_clock::ServerClock::new(options.clock.clone(), db.clone())
                    .map_err(|e| {
                        OpenError::Postgres(format!(
                            "the server's time could not be read: {}",
                            crate::store::postgres::store_error::describe(&e)
                        ))
                    })?;
            options.clock = Arc::new(corrected);
        }
        Ok(Self(DatabaseStore::on(
            db,
            options,
            ComponentRuntime::shared()?,
        )))
    }

    /// The database's URL, without its password.
    pub fn url(&self) -> &str {
        match self.0.backend() {
            Backend::Postgres(db) => db.url(),
            Backend::Sqlite(_) => unreachable!("a PostgreSQL store holds a PostgreSQL database"),
        }
    }

    /// The store, whichever backend it has (what [`crate::Executions`] keeps).
    pub fn into_inner(self) -> DatabaseStore {
        self.0
    }
}

impl std::ops::Deref for SqliteManagedInputStore {
    type Target = DatabaseStore;

    fn deref(&self) -> &DatabaseStore {
        &self.0
    }
}

impl std::ops::Deref for PostgresManagedInputStore {
    type Target = DatabaseStore;

    fn deref(&self) -> &DatabaseStore {
        &self.0
    }
}

/// The managed-input store on a database of either backend: what [`SqliteManagedInputStore`]
/// and [`PostgresManagedInputStore`] are once open.
#[derive(Debug)]
pub struct DatabaseStore {
    db: Arc<Backend>,
    pool: InstancePool,
    options: StoreOptions,
}

impl DatabaseStore {
    /// Opens the store the name names: a `postgres://` URL, else a SQLite file's path.
    pub fn open(name: &str, options: StoreOptions) -> Result<Self, OpenError> {
        if crate::store::postgres::database::is_url(name) {
            Ok(PostgresManagedInputStore::open(name, options)?.into_inner())
        } else {
            Ok(SqliteManagedInputStore::open(name, options)?.into_inner())
        }
    }

    fn on(db: Arc<Backend>, options: StoreOptions, runtime: Arc<ComponentRuntime>) -> Self {
        let pool = InstancePool::new(
            runtime,
            options.clock.clone(),
            Some(db.clone()),
            options.guest_limits,
        );
        Self { db, pool, options }
    }

    /// The database, as it may be shown: a SQLite file's path, or a PostgreSQL URL without its
    /// password.
    pub fn database_name(&self) -> String {
        match self.backend() {
            Backend::Sqlite(db) => db.path().display().to_string(),
            Backend::Postgres(db) => db.url().to_string(),
        }
    }

    pub(crate) fn backend(&self) -> &Backend {
        &self.db
    }

    /// Like [`ManagedInputStore::list_rounds`], but one record that cannot be read does not
    /// fail the listing: it is reported (its id and the typed error) and the others are listed.
    /// Used by listings for people (`m3 rounds`, `pending`, `status`) and `m3 doctor`.
    #[allow(clippy::type_complexity)]
    pub fn list_rounds_reporting(
        &self,
        filter: &RoundFilter,
    ) -> StoreResult<(Vec<ManagedInputRecord>, Vec<(String, ManagedInputError)>)> {
        match self.list_rounds(filter) {
            Ok(records) => return Ok((records, Vec::new())),
            // An unreadable record is a storage error; any other error is the listing's.
            Err(ManagedInputError::Storage(_)) => {}
            Err(e) => return Err(e),
        }
        let mut records = Vec::new();
        let mut unreadable = Vec::new();
        for round_id in self.round_ids(filter)? {
            match self.get_round(&round_id) {
                Ok(Some(record)) => records.push(record),
                Ok(None) => {}
                Err(e) => unreadable.push((round_id, e)),
            }
        }
        Ok((records, unreadable))
    }

    /// The ids of the rounds `filter` selects, oldest first, read without decoding the rows.
    fn round_ids(&self, filter: &RoundFilter) -> StoreResult<Vec<String>> {
        self.db
            .round_ids(
                filter.execution_id.as_deref(),
                filter.status.map(|s| s.as_str()),
                filter.limit,
            )
            .map_err(store_failure)
    }

    /// The rounds whose id starts with `prefix` (at most `limit` of them, and how many in all),
    /// read with one indexed range query: `%` and `_` are ordinary characters, and a full id is
    /// a point lookup. For commands that take an id a person may shorten.
    pub fn round_ids_with_prefix(&self, prefix: &str, limit: u32) -> StoreResult<IdMatches> {
        self.backend()
            .ids_with_prefix(IdTable::Rounds, prefix, limit)
            .map_err(store_failure)
    }

    /// The edge limit on a response map's size, checked before it reaches the component.
    pub(crate) fn check_responses_size(&self, responses: &str) -> StoreResult<()> {
        if responses.len() > self.options.max_responses_bytes {
            return Err(ManagedInputError::edge_validation(
                ErrorCode::PayloadTooLarge,
                format!(
                    "responses are {} bytes; the limit is {}",
                    responses.len(),
                    self.options.max_responses_bytes
                ),
            ));
        }
        Ok(())
    }

    /// The instances that serve this store's synchronous calls.
    pub(crate) fn pool(&self) -> &InstancePool {
        &self.pool
    }

    /// The database.
    pub(crate) fn database(&self) -> &Arc<Backend> {
        &self.db
    }

    /// The options it was opened with.
    pub(crate) fn options(&self) -> &StoreOptions {
        &self.options
    }

    fn call<T, W>(
        &self,
        point: &'static str,
        f: impl FnOnce(
            &bindings::Engine,
            &mut wasmtime::Store<crate::imports::HostState>,
        ) -> wasmtime::Result<
            Result<W, bindings::m3::managed_input::types::ManagedInputError>,
        >,
        back: impl FnOnce(W) -> StoreResult<T>,
    ) -> StoreResult<T> {
        match self.pool.call(f)? {
            Ok(value) => {
                crate::checks::fault::hit(point);
                back(value)
            }
            Err(e) => Err(convert::error_back(&e)),
        }
    }

    fn record(
        &self,
        point: &'static str,
        f: impl FnOnce(
            &bindings::exports::m3::managed_input::managed_input::Guest,
            &mut wasmtime::Store<crate::imports::HostState>,
        ) -> wasmtime::Result<
            Result<
                bindings::m3::managed_input::types::ManagedInputRecord,
                bindings::m3::managed_input::types::ManagedInputError,
            >,
        >,
    ) -> StoreResult<ManagedInputRecord> {
        self.call(
            point,
            |b, s| f(b.m3_managed_input_managed_input(), s),
            convert::record_back,
        )
    }

    fn round_size(round: &NewRound) -> usize {
        let mut size = round.round_id.len()
            + round.execution_id.len()
            + round.server.len()
            + round.operation_name.len();
        size += round.request_state.as_ref().map_or(0, String::len);
        size += serde_json::to_string(&round.requests).map_or(usize::MAX, |s| s.len());
        size += serde_json::to_string(&round.operation_parameters).map_or(usize::MAX, |s| s.len());
        size
    }
}

/// The trait on the two backend-named stores: each is its [`DatabaseStore`].
macro_rules! delegate_store {
    ($store:ty) => {
        impl ManagedInputStore for $store {
            fn create_round(&self, round: &NewRound) -> StoreResult<ManagedInputRecord> {
                self.0.create_round(round)
            }
            fn get_round(&self, round_id: &str) -> StoreResult<Option<ManagedInputRecord>> {
                self.0.get_round(round_id)
            }
            fn list_rounds(&self, filter: &RoundFilter) -> StoreResult<Vec<ManagedInputRecord>> {
                self.0.list_rounds(filter)
            }
            fn claim_round(
                &self,
                round_id: &str,
                claim: &OwnerClaim,
            ) -> StoreResult<ManagedInputLease> {
                self.0.claim_round(round_id, claim)
            }
            fn renew(
                &self,
                round_id: &str,
                lease: &ManagedInputLease,
                lease_ttl: Duration,
            ) -> StoreResult<ManagedInputLease> {
                self.0.renew(round_id, lease, lease_ttl)
            }
            fn submit_responses_json(
                &self,
                round_id: &str,
                responses: &str,
                idempotency_key: &str,
            ) -> StoreResult<ManagedInputRecord> {
                self.0
                    .submit_responses_json(round_id, responses, idempotency_key)
            }
            fn start_delivery(
                &self,
                round_id: &str,
                lease: &ManagedInputLease,
                delivery_idempotency_key: &str,
            ) -> StoreResult<ManagedInputRecord> {
                self.0
                    .start_delivery(round_id, lease, delivery_idempotency_key)
            }
            fn mark_delivered(
                &self,
                round_id: &str,
                lease: &ManagedInputLease,
            ) -> StoreResult<ManagedInputRecord> {
                self.0.mark_delivered(round_id, lease)
            }
            fn resolve(
                &self,
                round_id: &str,
                lease: &ManagedInputLease,
            ) -> StoreResult<ManagedInputRecord> {
                self.0.resolve(round_id, lease)
            }
            fn fail(
                &self,
                round_id: &str,
                lease: &ManagedInputLease,
                code: FailureCode,
                message: &str,
            ) -> StoreResult<ManagedInputRecord> {
                self.0.fail(round_id, lease, code, message)
            }
            fn fail_recovery(
                &self,
                round_id: &str,
                lease: Option<&ManagedInputLease>,
                message: &str,
            ) -> StoreResult<ManagedInputRecord> {
                self.0.fail_recovery(round_id, lease, message)
            }
            fn redacted_responses(
                &self,
                round_id: &str,
            ) -> StoreResult<Option<Vec<RedactedResponse>>> {
                self.0.redacted_responses(round_id)
            }
        }
    };
}

delegate_store!(SqliteManagedInputStore);
delegate_store!(PostgresManagedInputStore);

impl ManagedInputStore for DatabaseStore {
    fn create_round(&self, round: &NewRound) -> StoreResult<ManagedInputRecord> {
        let size = Self::round_size(round);
        if size > self.options.max_round_bytes {
            return Err(ManagedInputError::edge_validation(
                ErrorCode::PayloadTooLarge,
                format!(
                    "the round is {size} bytes; the limit is {}",
                    self.options.max_round_bytes
                ),
            ));
        }
        let wit_round = convert::new_round(round);
        self.record("create_round.returned", |g, s| {
            g.call_create_round(s, &wit_round)
        })
    }

    fn get_round(&self, round_id: &str) -> StoreResult<Option<ManagedInputRecord>> {
        self.call(
            "get_round.returned",
            |b, s| {
                b.m3_managed_input_managed_input()
                    .call_get_round(s, round_id)
            },
            |r| r.map(convert::record_back).transpose(),
        )
    }

    fn list_rounds(&self, filter: &RoundFilter) -> StoreResult<Vec<ManagedInputRecord>> {
        // Page through the component (each call bounded in memory and CPU), continuing after
        // the last record of the previous page.
        let mut records: Vec<ManagedInputRecord> = Vec::new();
        let mut wit_filter = convert::filter(filter);
        loop {
            let wanted = filter.limit.map_or(LIST_PAGE, |l| {
                l.saturating_sub(records.len() as u32).min(LIST_PAGE)
            });
            if wanted == 0 {
                return Ok(records);
            }
            wit_filter.limit = Some(wanted);
            let page: Vec<ManagedInputRecord> = self.call(
                "list_rounds.returned",
                |b, s| {
                    b.m3_managed_input_managed_input()
                        .call_list_rounds(s, &wit_filter)
                },
                |rows| rows.into_iter().map(convert::record_back).collect(),
            )?;
            let full = page.len() as u32 == wanted;
            wit_filter.after = page
                .last()
                .map(|r| convert::cursor(r.pending.created_at, &r.pending.round_id));
            records.extend(page);
            if !full {
                return Ok(records);
            }
        }
    }

    fn claim_round(&self, round_id: &str, claim: &OwnerClaim) -> StoreResult<ManagedInputLease> {
        let wit_claim = convert::owner_claim(claim);
        self.call(
            "claim_round.returned",
            |b, s| {
                b.m3_managed_input_managed_input()
                    .call_claim_round(s, round_id, &wit_claim)
            },
            convert::lease_back,
        )
    }

    fn renew(
        &self,
        round_id: &str,
        lease: &ManagedInputLease,
        lease_ttl: Duration,
    ) -> StoreResult<ManagedInputLease> {
        let wit_lease = convert::lease(lease);
        let ttl = convert::duration_ms(lease_ttl);
        self.call(
            "renew.returned",
            |b, s| {
                b.m3_managed_input_managed_input()
                    .call_renew(s, round_id, &wit_lease, ttl)
            },
            convert::lease_back,
        )
    }

    fn submit_responses_json(
        &self,
        round_id: &str,
        responses: &str,
        idempotency_key: &str,
    ) -> StoreResult<ManagedInputRecord> {
        self.check_responses_size(responses)?;
        self.record("submit_responses.returned", |g, s| {
            g.call_submit_responses(s, round_id, &responses.to_owned(), idempotency_key)
        })
    }

    fn start_delivery(
        &self,
        round_id: &str,
        lease: &ManagedInputLease,
        delivery_idempotency_key: &str,
    ) -> StoreResult<ManagedInputRecord> {
        let wit_lease = convert::lease(lease);
        self.record("start_delivery.returned", |g, s| {
            g.call_start_delivery(s, round_id, &wit_lease, delivery_idempotency_key)
        })
    }

    fn mark_delivered(
        &self,
        round_id: &str,
        lease: &ManagedInputLease,
    ) -> StoreResult<ManagedInputRecord> {
        let wit_lease = convert::lease(lease);
        self.record("mark_delivered.returned", |g, s| {
            g.call_mark_delivered(s, round_id, &wit_lease)
        })
    }

    fn resolve(
        &self,
        round_id: &str,
        lease: &ManagedInputLease,
    ) -> StoreResult<ManagedInputRecord> {
        let wit_lease = convert::lease(lease);
        self.record("resolve.returned", |g, s| {
            g.call_resolve(s, round_id, &wit_lease)
        })
    }

    fn fail(
        &self,
        round_id: &str,
        lease: &ManagedInputLease,
        code: FailureCode,
        message: &str,
    ) -> StoreResult<ManagedInputRecord> {
        let wit_lease = convert::lease(lease);
        let wit_code = convert::failure_code(code);
        self.record("fail.returned", |g, s| {
            g.call_fail(s, round_id, &wit_lease, wit_code, message)
        })
    }

    fn fail_recovery(
        &self,
        round_id: &str,
        lease: Option<&ManagedInputLease>,
        message: &str,
    ) -> StoreResult<ManagedInputRecord> {
        let wit_lease = lease.map(convert::lease);
        self.record("fail_recovery.returned", |g, s| {
            g.call_fail_recovery(s, round_id, wit_lease.as_ref(), message)
        })
    }

    fn redacted_responses(&self, round_id: &str) -> StoreResult<Option<Vec<RedactedResponse>>> {
        self.call(
            "redacted_responses.returned",
            |b, s| {
                b.m3_managed_input_managed_input()
                    .call_redacted_responses(s, round_id)
            },
            |r| Ok(r.map(|list| list.iter().map(convert::redacted_back).collect())),
        )
    }
}
