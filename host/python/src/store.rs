//! `m3._native.ManagedInputStore`: the twelve managed-input store operations of a SQLite or
//! PostgreSQL store (or of an execution store's resolved one), JSON in and out, each run with
//! the GIL released.

use crate::clock::PythonClock;
use crate::failure::{Failure, Outcome, invalid, raise};
use crate::new_round::{kind_only, lease_ttl, new_round};
use m3::{FailureCode, ManagedInputLease, ManagedInputStatus, RoundFilter, StoreOptions};
use pyo3::prelude::*;
use serde::Serialize;
use std::sync::Arc;

/// A managed-input store.
#[pyclass(frozen, module = "m3._native")]
pub(crate) struct ManagedInputStore {
    store: Arc<dyn m3::ManagedInputStore>,
    clock: Option<Arc<PythonClock>>,
    name: String,
}

impl ManagedInputStore {
    /// Wraps an execution store's managed-input store.
    pub(crate) fn resolved(store: Arc<dyn m3::ManagedInputStore>) -> Self {
        Self {
            store,
            clock: None,
            name: "resolved".into(),
        }
    }

    fn options(
        py: Python<'_>,
        busy_timeout_ms: u64,
        clock: Option<Py<PyAny>>,
    ) -> PyResult<(StoreOptions, Option<Arc<PythonClock>>)> {
        let mut options = StoreOptions {
            busy_timeout_ms,
            ..StoreOptions::default()
        };
        let clock = match clock {
            Some(callable) if !callable.is_none(py) => {
                let clock = Arc::new(PythonClock::new(py, callable)?);
                options.clock = clock.clone();
                Some(clock)
            }
            _ => None,
        };
        Ok((options, clock))
    }

    /// Runs `op` with the GIL released and converts its value to JSON text; a clock reading
    /// that failed meanwhile is raised after it.
    fn run<T: Serialize + Send>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(&dyn m3::ManagedInputStore) -> Outcome<T> + Send,
    ) -> PyResult<String> {
        let store = self.store.clone();
        let outcome = py.detach(|| op(&*store).and_then(|value| to_json(&value)));
        let failed_reading = self.clock.as_ref().and_then(|c| c.take_failure());
        let outcome = raise(py, outcome);
        match failed_reading {
            // The clock's failure is raised, with the call's own error (if any) as its cause.
            Some(why) => {
                let error = pyo3::exceptions::PyValueError::new_err(format!(
                    "{why}; the call used the clock's previous reading instead, and whatever it \
                     committed stays committed"
                ));
                error.set_cause(py, outcome.err());
                Err(error)
            }
            None => outcome,
        }
    }
}

fn to_json<T: Serialize>(value: &T) -> Outcome<String> {
    serde_json::to_string(value).map_err(|e| {
        Failure::Execution(m3::ExecutionError::Runtime(format!(
            "a record could not be encoded: {e}"
        )))
    })
}

fn lease(text: &str) -> Outcome<ManagedInputLease> {
    serde_json::from_str(text).map_err(|e| {
        invalid(
            "invalid_lease",
            format!("the lease does not convert: {}", kind_only(&e)),
        )
    })
}

fn status(text: &str) -> Outcome<ManagedInputStatus> {
    serde_json::from_value(serde_json::Value::String(text.to_string()))
        .map_err(|_| invalid("invalid_transition", "status is not a ManagedInputStatus"))
}

fn failure_code(text: &str) -> Outcome<FailureCode> {
    serde_json::from_value(serde_json::Value::String(text.to_string())).map_err(|_| {
        invalid(
            "invalid_failure",
            "code is not a failure code (cancelled, deadline_exceeded, round_limit_exceeded, \
             server_error, invalid_request_state, elicitation_unhandled, request_withdrawn)",
        )
    })
}

#[pymethods]
impl ManagedInputStore {
    /// A SQLite store on the database file `path`.
    #[staticmethod]
    #[pyo3(signature = (path, busy_timeout_ms, clock=None))]
    fn sqlite(
        py: Python<'_>,
        path: String,
        busy_timeout_ms: u64,
        clock: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let (options, clock) = Self::options(py, busy_timeout_ms, clock)?;
        let opened = py.detach(|| m3::SqliteManagedInputStore::open(&path, options));
        let store = raise(py, opened.map_err(Failure::from))?;
        Ok(Self {
            store: Arc::new(store),
            clock,
            name: path,
        })
    }

    /// A PostgreSQL store on `url`.
    #[staticmethod]
    #[pyo3(signature = (url, busy_timeout_ms, clock=None))]
    fn postgres(
        py: Python<'_>,
        url: String,
        busy_timeout_ms: u64,
        clock: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let (options, clock) = Self::options(py, busy_timeout_ms, clock)?;
        let opened = py.detach(|| m3::PostgresManagedInputStore::open(&url, options));
        let store = raise(py, opened.map_err(Failure::from))?;
        Ok(Self {
            store: Arc::new(store),
            clock,
            name: "postgres".into(),
        })
    }

    /// What the store is on (a SQLite path; never a URL, which may hold a password).
    fn name(&self) -> String {
        self.name.clone()
    }

    fn create_round(&self, py: Python<'_>, round: String) -> PyResult<String> {
        self.run(py, |s| Ok(s.create_round(&new_round(&round)?)?))
    }

    fn get_round(&self, py: Python<'_>, round_id: String) -> PyResult<Option<String>> {
        let text = self.run(py, |s| Ok(s.get_round(&round_id)?))?;
        Ok((text != "null").then_some(text))
    }

    #[pyo3(signature = (execution_id=None, status_name=None, limit=None))]
    fn list_rounds(
        &self,
        py: Python<'_>,
        execution_id: Option<String>,
        status_name: Option<String>,
        limit: Option<u32>,
    ) -> PyResult<String> {
        self.run(py, |s| {
            let filter = RoundFilter {
                execution_id,
                status: status_name.as_deref().map(status).transpose()?,
                limit,
            };
            Ok(s.list_rounds(&filter)?)
        })
    }

    fn claim_round(
        &self,
        py: Python<'_>,
        round_id: String,
        owner_id: String,
        lease_ttl_ms: f64,
    ) -> PyResult<String> {
        self.run(py, |s| {
            let claim = m3::OwnerClaim {
                owner_id,
                lease_ttl: lease_ttl(lease_ttl_ms)?,
            };
            Ok(s.claim_round(&round_id, &claim)?)
        })
    }

    fn renew(
        &self,
        py: Python<'_>,
        round_id: String,
        held: String,
        lease_ttl_ms: f64,
    ) -> PyResult<String> {
        self.run(py, |s| {
            Ok(s.renew(&round_id, &lease(&held)?, lease_ttl(lease_ttl_ms)?)?)
        })
    }

    fn submit_responses(
        &self,
        py: Python<'_>,
        round_id: String,
        responses: String,
        idempotency_key: String,
    ) -> PyResult<String> {
        self.run(py, |s| {
            Ok(s.submit_responses_json(&round_id, &responses, &idempotency_key)?)
        })
    }

    fn start_delivery(
        &self,
        py: Python<'_>,
        round_id: String,
        held: String,
        delivery_idempotency_key: String,
    ) -> PyResult<String> {
        self.run(py, |s| {
            Ok(s.start_delivery(&round_id, &lease(&held)?, &delivery_idempotency_key)?)
        })
    }

    fn mark_delivered(&self, py: Python<'_>, round_id: String, held: String) -> PyResult<String> {
        self.run(py, |s| Ok(s.mark_delivered(&round_id, &lease(&held)?)?))
    }

    fn resolve(&self, py: Python<'_>, round_id: String, held: String) -> PyResult<String> {
        self.run(py, |s| Ok(s.resolve(&round_id, &lease(&held)?)?))
    }

    fn fail(
        &self,
        py: Python<'_>,
        round_id: String,
        held: String,
        code: String,
        message: String,
    ) -> PyResult<String> {
        self.run(py, |s| {
            Ok(s.fail(&round_id, &lease(&held)?, failure_code(&code)?, &message)?)
        })
    }

    #[pyo3(signature = (round_id, held, message))]
    fn fail_recovery(
        &self,
        py: Python<'_>,
        round_id: String,
        held: Option<String>,
        message: String,
    ) -> PyResult<String> {
        self.run(py, |s| {
            let held = held.as_deref().map(lease).transpose()?;
            Ok(s.fail_recovery(&round_id, held.as_ref(), &message)?)
        })
    }

    fn redacted_responses(&self, py: Python<'_>, round_id: String) -> PyResult<Option<String>> {
        let text = self.run(py, |s| Ok(s.redacted_responses(&round_id)?))?;
        Ok((text != "null").then_some(text))
    }
}
