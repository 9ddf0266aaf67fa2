//! A store clock given as a Python callable (`clock=`): called with the GIL for each reading.
//! It must return a timezone-aware `datetime`; one that returns a naive one is refused when the
//! store is made, and a later bad reading is reported by the call that made it.

use chrono::{DateTime, FixedOffset, Utc};
use pyo3::prelude::*;
use std::sync::Mutex;

/// A Python callable as an m3 [`m3::Clock`].
pub(crate) struct PythonClock {
    callable: Py<PyAny>,
    /// The last good reading: what a failed reading falls back to (time does not move).
    last: Mutex<DateTime<Utc>>,
    /// The first failed reading since the last call of the store, reported by that call.
    failed: Mutex<Option<String>>,
}

impl PythonClock {
    /// Wraps `callable` after one reading, which must be a timezone-aware `datetime`.
    pub(crate) fn new(py: Python<'_>, callable: Py<PyAny>) -> PyResult<Self> {
        let first = read(callable.bind(py)).map_err(pyo3::exceptions::PyValueError::new_err)?;
        Ok(Self {
            callable,
            last: Mutex::new(first),
            failed: Mutex::new(None),
        })
    }

    /// The failure of a reading since the last call, if one failed.
    pub(crate) fn take_failure(&self) -> Option<String> {
        self.failed.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// One reading of the clock, or why it is not a time m3 can use.
fn read(callable: &Bound<'_, PyAny>) -> Result<DateTime<Utc>, String> {
    let value = callable.call0().map_err(|e| {
        format!(
            "clock= raised {}",
            e.get_type(callable.py())
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        )
    })?;
    let naive = value
        .getattr("tzinfo")
        .map(|tz| tz.is_none())
        .map_err(|_| "clock= must return a datetime".to_string())?;
    if naive {
        return Err(
            "clock= returned a naive datetime (tzinfo is None): a store clock must return \
             timezone-aware datetimes, e.g. datetime.now(timezone.utc)"
                .into(),
        );
    }
    value
        .extract::<DateTime<FixedOffset>>()
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| "clock= must return a timezone-aware datetime".to_string())
}

impl m3::Clock for PythonClock {
    fn now(&self) -> DateTime<Utc> {
        let reading = Python::attach(|py| read(self.callable.bind(py)));
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match reading {
            Ok(now) => {
                *last = now;
                now
            }
            Err(why) => {
                self.failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(why);
                *last
            }
        }
    }
}
