//! The `store` import: rows and transactions over the instance's database. Pure I/O: the host
//! runs the transactions it is asked to and decides nothing.

use crate::component::bindings::m3::managed_input::store::{
    self, ExecutionRow, HostTransaction, LeaseExpiry, RoundFilter, RoundRow, StoreError,
    TransactionMode,
};
use crate::component::bindings::m3::managed_input::types;
use crate::component::store_rows as rows;
use crate::store::{Backend, Transaction};
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
            Some(db) => Transaction::begin(db, rows::mode(mode)).map_err(rows::store_error),
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
        let result = self
            .table
            .get(&tx)?
            .get(&round_id)
            .map_err(rows::store_error)
            .and_then(|row| row.map(rows::round_row_back).transpose());
        Ok(result)
    }

    fn list(
        &mut self,
        tx: Resource<Transaction>,
        filter: RoundFilter,
    ) -> wasmtime::Result<Result<Vec<RoundRow>, StoreError>> {
        let result = self
            .table
            .get(&tx)?
            .list(&rows::round_filter(&filter))
            .map_err(rows::store_error)
            .and_then(|found| found.into_iter().map(rows::round_row_back).collect());
        Ok(result)
    }

    fn insert(
        &mut self,
        tx: Resource<Transaction>,
        row: RoundRow,
    ) -> wasmtime::Result<Result<bool, StoreError>> {
        let result = self
            .table
            .get(&tx)?
            .insert(rows::round_row(row))
            .map_err(rows::store_error);
        Ok(result)
    }

    fn compare_and_set(
        &mut self,
        tx: Resource<Transaction>,
        row: RoundRow,
        expected_version: u64,
    ) -> wasmtime::Result<Result<bool, StoreError>> {
        let result = self
            .table
            .get(&tx)?
            .compare_and_set(rows::round_row(row), expected_version)
            .map_err(rows::store_error);
        Ok(result)
    }

    fn set_lease_expiries(
        &mut self,
        tx: Resource<Transaction>,
        execution: LeaseExpiry,
        round: Option<LeaseExpiry>,
        updated_at: types::Timestamp,
    ) -> wasmtime::Result<Result<bool, StoreError>> {
        let result = self
            .table
            .get(&tx)?
            .set_lease_expiries(
                &rows::lease_expiry(&execution),
                round.as_ref().map(rows::lease_expiry).as_ref(),
                rows::to_ns(&updated_at),
            )
            .map_err(rows::store_error);
        Ok(result)
    }

    fn get_execution(
        &mut self,
        tx: Resource<Transaction>,
        execution_id: String,
    ) -> wasmtime::Result<Result<Option<ExecutionRow>, StoreError>> {
        let result = self
            .table
            .get(&tx)?
            .get_execution(&execution_id)
            .map_err(rows::store_error)
            .and_then(|row| row.map(rows::execution_row_back).transpose());
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
            .list_executions(
                status.map(rows::execution_status_text),
                limit,
                after.as_ref().map(rows::cursor).as_ref(),
            )
            .map_err(rows::store_error)
            .and_then(|found| found.into_iter().map(rows::execution_row_back).collect());
        Ok(result)
    }

    fn insert_execution(
        &mut self,
        tx: Resource<Transaction>,
        row: ExecutionRow,
    ) -> wasmtime::Result<Result<bool, StoreError>> {
        let result = self
            .table
            .get(&tx)?
            .insert_execution(rows::execution_row(row))
            .map_err(rows::store_error);
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
            .compare_and_set_execution(rows::execution_row(row), expected_version)
            .map_err(rows::store_error);
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
            .append_execution_item(&execution_id, &kind, document)
            .map_err(rows::store_error);
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
            .list_execution_items(&execution_id, &kind)
            .map_err(rows::store_error);
        Ok(result)
    }

    fn wake_execution(
        &mut self,
        tx: Resource<Transaction>,
        execution_id: String,
    ) -> wasmtime::Result<Result<(), StoreError>> {
        let result = self
            .table
            .get_mut(&tx)?
            .wake_execution(&execution_id)
            .map_err(rows::store_error);
        Ok(result)
    }

    fn commit(&mut self, tx: Resource<Transaction>) -> wasmtime::Result<Result<(), StoreError>> {
        crate::checks::fault::hit("commit.before");
        let result = self.table.get_mut(&tx)?.commit().map_err(rows::store_error);
        crate::checks::fault::hit("commit.after");
        Ok(result)
    }

    fn drop(&mut self, tx: Resource<Transaction>) -> wasmtime::Result<()> {
        // Dropping the connection rolls back anything not committed.
        self.table.delete(tx)?;
        Ok(())
    }
}
