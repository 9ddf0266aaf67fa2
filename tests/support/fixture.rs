//! The stored-format fixture: what the public API reads back from a database, as JSON.

use m3::{ExecutionStore, RoundFilter, SqliteExecutionStore};
use serde_json::{Value, json};
use std::path::Path;

/// Every round (as `list_rounds` returns it) and every execution (its state) in `db`, keyed by
/// id, read without a kit (a kit would recover what it finds expired).
pub fn read_back(db: &Path) -> anyhow::Result<Value> {
    let store = SqliteExecutionStore::open(db)?;
    let managed = store
        .managed_input_store()?
        .ok_or_else(|| anyhow::anyhow!("no managed-input store"))?;
    let mut rounds = serde_json::Map::new();
    for record in managed.list_rounds(&RoundFilter::default())? {
        rounds.insert(
            record.pending.round_id.clone(),
            serde_json::to_value(&record)?,
        );
    }
    let mut executions = serde_json::Map::new();
    for state in m3::testing::execution_states(&store)? {
        executions.insert(state.execution_id.clone(), serde_json::to_value(&state)?);
    }
    Ok(json!({"rounds": rounds, "executions": executions}))
}
