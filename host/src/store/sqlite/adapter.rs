//! SQLite's adapter for the statements written once (`store/statements/`): each runs as a
//! cached prepared statement on the connection (a read's own, or the write turn's), and needs
//! no lock of its own, as SQLite has one writer.

use super::store_error::store_error;
use super::transaction::Transaction;
use crate::store::error::StoreError;
use crate::store::statements::{Cells, On, Sql, Value};
use rusqlite::Connection;

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Self::Int(v) => v.to_sql(),
            Self::Text(v) => v.to_sql(),
        }
    }
}

impl Cells for rusqlite::Row<'_> {
    fn int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        self.get(i).map_err(store_error)
    }

    fn text(&self, i: usize) -> Result<Option<String>, StoreError> {
        self.get(i).map_err(store_error)
    }
}

impl Sql for Connection {
    fn writable(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn execute(&self, _: On<'_>, sql: &str, args: Vec<Value>) -> Result<u64, StoreError> {
        self.prepare_cached(sql)
            .and_then(|mut s| s.execute(rusqlite::params_from_iter(args)))
            .map(|changed| changed as u64)
            .map_err(store_error)
    }

    fn query<T>(
        &self,
        _: On<'_>,
        sql: &str,
        args: Vec<Value>,
        mut each: impl FnMut(&dyn Cells) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut statement = self.prepare_cached(sql).map_err(store_error)?;
        let mut rows = statement
            .query(rusqlite::params_from_iter(args))
            .map_err(store_error)?;
        let mut decoded = Vec::new();
        while let Some(row) = rows.next().map_err(store_error)? {
            decoded.push(each(row)?);
        }
        Ok(decoded)
    }

    fn batch(&self, _: On<'_>, sql: &str) -> Result<(), StoreError> {
        self.execute_batch(sql).map_err(store_error)
    }
}

/// A transaction runs the statements on its connection; a read transaction refuses writes.
impl Sql for Transaction {
    fn writable(&self) -> Result<(), StoreError> {
        Transaction::writable(self)
    }

    fn execute(&self, on: On<'_>, sql: &str, args: Vec<Value>) -> Result<u64, StoreError> {
        Sql::execute(self.connection()?, on, sql, args)
    }

    fn query<T>(
        &self,
        on: On<'_>,
        sql: &str,
        args: Vec<Value>,
        each: impl FnMut(&dyn Cells) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        Sql::query(self.connection()?, on, sql, args, each)
    }

    fn batch(&self, on: On<'_>, sql: &str) -> Result<(), StoreError> {
        Sql::batch(self.connection()?, on, sql)
    }
}
