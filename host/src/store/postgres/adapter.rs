//! PostgreSQL's adapter for the statements written once (`store/statements/`): each is prepared
//! once per connection (its `?N` placeholders as `$N`), and in a write transaction it runs after
//! the lock of the execution whose rows it touches, in the same flight (`transaction.rs`).

use super::connection::{Connection, Kind, Step};
use super::store_error::store_error;
use super::transaction::Transaction;
use crate::store::error::StoreError;
use crate::store::statements::{Cells, On, Sql, Value};

impl Cells for tokio_postgres::Row {
    fn int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        self.try_get(i).map_err(store_error)
    }

    fn text(&self, i: usize) -> Result<Option<String>, StoreError> {
        self.try_get(i).map_err(store_error)
    }
}

/// The rows of `rows`, each through `each`.
fn decoded<T>(
    rows: Vec<tokio_postgres::Row>,
    mut each: impl FnMut(&dyn Cells) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    rows.iter().map(|row| each(row)).collect()
}

/// A connection outside a transaction (ids read without decoding rows): no locks.
impl Sql for Connection {
    fn writable(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn execute(&self, _: On<'_>, sql: &str, args: Vec<Value>) -> Result<u64, StoreError> {
        let answer = self.flight(vec![Kind::Execute.step(sql, args)]);
        Ok(answer.map_err(store_error)?.pop().map_or(0, |a| a.count()))
    }

    fn query<T>(
        &self,
        _: On<'_>,
        sql: &str,
        args: Vec<Value>,
        each: impl FnMut(&dyn Cells) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let answer = self.flight(vec![Kind::Query.step(sql, args)]);
        let rows = answer.map_err(store_error)?.pop().map(|a| a.rows());
        decoded(rows.unwrap_or_default(), each)
    }

    fn batch(&self, _: On<'_>, sql: &str) -> Result<(), StoreError> {
        self.flight(vec![Step::Batch(sql)])
            .map(drop)
            .map_err(store_error)
    }
}

/// A transaction runs each statement under the locks its rows need (in a write).
impl Sql for Transaction {
    fn writable(&self) -> Result<(), StoreError> {
        Transaction::writable(self).map(drop)
    }

    fn execute(&self, on: On<'_>, sql: &str, args: Vec<Value>) -> Result<u64, StoreError> {
        Ok(self.run(on, Kind::Execute, sql, args)?.count())
    }

    fn query<T>(
        &self,
        on: On<'_>,
        sql: &str,
        args: Vec<Value>,
        each: impl FnMut(&dyn Cells) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        decoded(self.run(on, Kind::Query, sql, args)?.rows(), each)
    }

    fn batch(&self, on: On<'_>, sql: &str) -> Result<(), StoreError> {
        self.run(on, Kind::Batch, sql, Vec::new()).map(drop)
    }
}
