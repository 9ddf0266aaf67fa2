//! What the host gives the component: the per-instance state and the `clock` and `store`
//! imports. Pure I/O: the host reads and writes rows and tells the time; it decides nothing.

use crate::bindings::m3::managed_input::store::{
    self, ExecutionRow, HostTransaction, RoundFilter, RoundRow, StoreError, TransactionMode,
};
use crate::bindings::m3::managed_input::{clock, types};
use crate::clock::Clock;
use crate::sqlite::database::Database;
use crate::sqlite::transaction::Transaction;
use std::sync::Arc;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::random::WasiRandomCtx;

/// Memory limiter of one instance; remembers whether it refused a growth.
pub struct GuestLimiter {
    /// Most bytes of linear memory.
    pub max_memory: usize,
    /// Set when a growth past the limit was refused (and trapped).
    pub refused: bool,
}

impl wasmtime::ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_memory {
            self.refused = true;
            wasmtime::bail!("guest memory limit of {} bytes exceeded", self.max_memory);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// The state of one component instance.
pub struct HostState {
    /// Resources handed to the component (open transactions).
    pub table: ResourceTable,
    /// `wasi:random`.
    pub random: WasiRandomCtx,
    /// Memory limits.
    pub limiter: GuestLimiter,
    /// The store's clock.
    pub clock: Arc<dyn Clock>,
    /// The store's database (`None` for policy-only use: every transaction fails).
    pub db: Option<Arc<Database>>,
    /// An m3 import ran since the component's budget was last refilled: the component's fuel
    /// is refilled as the host returns to it (only m3 imports refill it: a loop on a runtime
    /// library call or `wasi:random` never does).
    pub host_returned: bool,
    /// The most fuel used between two refills since the host last reset it (diagnostics).
    pub fuel_peak: u64,
    /// The forbidden import the component called (`interface#function`), if it called one: its
    /// trap is then a `ForbiddenImport`, told by this, not by the trap's message.
    pub forbidden_import: Option<String>,
    /// The execution's child process and events (`None` outside `run-execution`: the
    /// `process` import then refuses and `events.next` only times out).
    pub process: crate::worker::io::ProcessContext,
}

impl HostState {
    /// State for a new instance.
    pub fn new(clock: Arc<dyn Clock>, db: Option<Arc<Database>>, max_memory: usize) -> Self {
        Self {
            table: ResourceTable::new(),
            random: WasiRandomCtx::default(),
            limiter: GuestLimiter {
                max_memory,
                refused: false,
            },
            clock,
            db,
            host_returned: false,
            fuel_peak: 0,
            forbidden_import: None,
            process: crate::worker::io::ProcessContext::default(),
        }
    }

    /// The state as the `clock` and `store` imports see it. Every m3 import is reached through
    /// a projection like this one, which marks that the host is about to return to the
    /// component (the call hook then refills its compute budget): the one place that happens.
    pub(crate) fn for_import(&mut self) -> &mut Self {
        self.host_returned = true;
        self
    }

    /// The `process` and `events` capabilities, marked the same way.
    pub(crate) fn for_process(&mut self) -> &mut crate::worker::io::ProcessContext {
        self.host_returned = true;
        &mut self.process
    }
}

impl types::Host for HostState {}

impl clock::Host for HostState {
    fn now(&mut self) -> wasmtime::Result<types::Timestamp> {
        let now = self.clock.now();
        Ok(types::Timestamp {
            seconds: now.timestamp(),
            nanoseconds: now.timestamp_subsec_nanos().min(999_999_999),
        })
    }
}

impl store::Host for HostState {}

impl HostTransaction for HostState {
    fn begin(
        &mut self,
        mode: TransactionMode,
    ) -> wasmtime::Result<Result<Resource<Transaction>, StoreError>> {
        let opened = match &self.db {
            Some(db) => Transaction::begin(db, mode),
            None => Err(StoreError::Failure("this instance has no database".into())),
        };
        let result = match opened {
            Ok(tx) => Ok(self.table.push(tx)?),
            Err(e) => Err(e),
        };
        Ok(result)
    }

    fn get(
        &mut self,
        tx: Resource<Transaction>,
        round_id: String,
    ) -> wasmtime::Result<Result<Option<RoundRow>, StoreError>> {
        let result = self.table.get(&tx)?.get(&round_id);
        Ok(result)
    }

    fn list(
        &mut self,
        tx: Resource<Transaction>,
        filter: RoundFilter,
    ) -> wasmtime::Result<Result<Vec<RoundRow>, StoreError>> {
        let result = self.table.get(&tx)?.list(&filter);
        Ok(result)
    }

    fn insert(
        &mut self,
        tx: Resource<Transaction>,
        row: RoundRow,
    ) -> wasmtime::Result<Result<bool, StoreError>> {
        let result = self.table.get(&tx)?.insert(&row);
        Ok(result)
    }

    fn compare_and_set(
        &mut self,
        tx: Resource<Transaction>,
        row: RoundRow,
        expected_version: u64,
    ) -> wasmtime::Result<Result<bool, StoreError>> {
        let result = self.table.get(&tx)?.compare_and_set(&row, expected_version);
        Ok(result)
    }

    fn get_execution(
        &mut self,
        tx: Resource<Transaction>,
        execution_id: String,
    ) -> wasmtime::Result<Result<Option<ExecutionRow>, StoreError>> {
        let result = self.table.get(&tx)?.get_execution(&execution_id);
        Ok(result)
    }

    fn list_executions(
        &mut self,
        tx: Resource<Transaction>,
        status: Option<types::ExecutionStatus>,
        limit: Option<u32>,
        after: Option<types::Cursor>,
    ) -> wasmtime::Result<Result<Vec<ExecutionRow>, StoreError>> {
        let result = self
            .table
            .get(&tx)?
            .list_executions(status, limit, after.as_ref());
        Ok(result)
    }

    fn insert_execution(
        &mut self,
        tx: Resource<Transaction>,
        row: ExecutionRow,
    ) -> wasmtime::Result<Result<bool, StoreError>> {
        let result = self.table.get(&tx)?.insert_execution(&row);
        Ok(result)
    }

    fn compare_and_set_execution(
        &mut self,
        tx: Resource<Transaction>,
        row: ExecutionRow,
        expected_version: u64,
    ) -> wasmtime::Result<Result<bool, StoreError>> {
        let result = self
            .table
            .get(&tx)?
            .compare_and_set_execution(&row, expected_version);
        Ok(result)
    }

    fn commit(&mut self, tx: Resource<Transaction>) -> wasmtime::Result<Result<(), StoreError>> {
        crate::fault::hit("commit.before");
        let result = self.table.get_mut(&tx)?.commit();
        crate::fault::hit("commit.after");
        Ok(result)
    }

    fn drop(&mut self, tx: Resource<Transaction>) -> wasmtime::Result<()> {
        // Dropping the connection rolls back anything not committed.
        self.table.delete(tx)?;
        Ok(())
    }
}
