//! Hooks for m3's own tests and tools: reads and writes below the public API, for checks that
//! need them (a fixture read without a kit, a queued execution nobody runs). Not part of the API:
//! anything here may change in any release.

use crate::execution_store::ExecutionStore;
use crate::kit::{ExecutionError, ExecutionState};

/// The state of execution `execution_id` as stored, read without a kit (a kit recovers what it
/// finds expired; this reads only).
pub fn execution_state(
    store: &dyn ExecutionStore,
    execution_id: &str,
) -> Result<ExecutionState, ExecutionError> {
    let state = store.executions()?.snapshot(execution_id)?;
    Ok(crate::kit::execution::state_back(&state))
}

/// Every stored execution's state, oldest first, read without a kit.
pub fn execution_states(store: &dyn ExecutionStore) -> Result<Vec<ExecutionState>, ExecutionError> {
    let states = store.executions()?.list(None, None)?;
    Ok(states
        .iter()
        .map(crate::kit::execution::state_back)
        .collect())
}

/// Stores `submission` as a queued execution held by `agent`'s kit, without starting a worker
/// (what a submitter that dies right after submitting leaves behind). Returns its id.
pub fn submit_without_running(
    agent: &crate::kit::Agent,
    submission: crate::submission::Submission,
) -> Result<String, ExecutionError> {
    agent.store_only(submission)
}
