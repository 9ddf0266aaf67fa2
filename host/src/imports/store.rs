//! The `store` import: rows and transactions over the instance's database. Pure I/O: the host
//! runs the transactions it is asked to and decides nothing.

use crate::backend::{Backend, Transaction};
use crate::component::bindings::m3::managed_input::store::{
    self, ExecutionRow, HostTransaction, LeaseExpiry, RoundFilter, RoundRow, StoreError,
    TransactionMode,
};
use crate::component::bindings::m3::managed_input::types;
use std::sync::Arc;
use wasmtime::component::{Resource, ResourceTable};

/// What the `store` import reaches: the open transactions handed to the component and the
/// database they run on.
pub struct StoreContext {
    /// Resources handed to the component (open transactions).
    table: ResourceTable,
    /// The database (`None` for policy-only use: every transaction fails).
    db: Option<Arc<Backend>>,
}

impl StoreContext {
    /// A context on `db`.
    pub fn new(db: Option<Arc<Backend>>) -> Self {
        Self {
            table: ResourceTable::new(),
            db,
        }
    }
}

impl store::Host for StoreContext {}

impl HostTransaction for StoreContext {
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

    fn set_lease_expiries(
        &mut self,
        tx: Resource<Transaction>,
        execution: LeaseExpiry,
        round: Option<LeaseExpiry>,
        updated_at: types::Timestamp,
    ) -> wasmtime::Result<Result<bool, StoreError>> {
        let result =
            self.table
                .get(&tx)?
                .set_lease_expiries(&execution, round.as_ref(), &updated_at);
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

    fn append_execution_item(
        &mut self,
        tx: Resource<Transaction>,
        execution_id: String,
        kind: String,
        document: String,
    ) -> wasmtime::Result<Result<u64, StoreError>> {
        let result = self
            .table
            .get(&tx)?
            .append_execution_item(&execution_id, &kind, &document);
        Ok(result)
    }

    fn list_execution_items(
        &mut self,
        tx: Resource<Transaction>,
        execution_id: String,
        kind: String,
    ) -> wasmtime::Result<Result<Vec<String>, StoreError>> {
        let result = self
            .table
            .get(&tx)?
            .list_execution_items(&execution_id, &kind);
        Ok(result)
    }

    fn wake_execution(
        &mut self,
        tx: Resource<Transaction>,
        execution_id: String,
    ) -> wasmtime::Result<Result<(), StoreError>> {
        let result = self.table.get_mut(&tx)?.wake_execution(&execution_id);
        Ok(result)
    }

    fn commit(&mut self, tx: Resource<Transaction>) -> wasmtime::Result<Result<(), StoreError>> {
        crate::checks::fault::hit("commit.before");
        let result = self.table.get_mut(&tx)?.commit();
        crate::checks::fault::hit("commit.after");
        Ok(result)
    }

    fn drop(&mut self, tx: Resource<Transaction>) -> wasmtime::Result<()> {
        // Dropping the connection rolls back anything not committed.
        self.table.delete(tx)?;
        Ok(())
    }
}
