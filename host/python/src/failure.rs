//! Errors of the m3 crate -> the Python exception classes of `m3.errors`, each with the Rust
//! error's code. Messages are the Rust errors' own, which never carry an answer, a lease token
//! or an idempotency key.

use m3::{
    EngineError, ExecutionError, ExecutionStoreError, ManagedInputError, ModelValidationError,
    OpenError, OperationTimeout,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Why a call failed, carried out of the GIL-free part of a call and raised once the GIL is
/// held again.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A managed-input store error.
    ManagedInput(ManagedInputError),
    /// An execution API error.
    Execution(ExecutionError),
    /// A store that could not be opened.
    Open(OpenError),
    /// An execution store error.
    ExecutionStore(ExecutionStoreError),
    /// A value the binding could not convert (a Python type the API does not take).
    Validation {
        /// The Rust error code it stands for.
        code: &'static str,
        /// What is wrong, without the value.
        message: String,
    },
    /// A store that cannot do what was asked (`storage_failure`).
    Storage(String),
    /// A submission the binding could not convert.
    ModelValidation(String),
    /// A Python error raised while the call ran (a clock that failed, Ctrl-C).
    Python(PyErr),
}

impl From<ManagedInputError> for Failure {
    fn from(e: ManagedInputError) -> Self {
        Self::ManagedInput(e)
    }
}

impl From<ExecutionError> for Failure {
    fn from(e: ExecutionError) -> Self {
        Self::Execution(e)
    }
}

impl From<OpenError> for Failure {
    fn from(e: OpenError) -> Self {
        Self::Open(e)
    }
}

impl From<ExecutionStoreError> for Failure {
    fn from(e: ExecutionStoreError) -> Self {
        Self::ExecutionStore(e)
    }
}

impl From<ModelValidationError> for Failure {
    fn from(e: ModelValidationError) -> Self {
        Self::ModelValidation(e.message)
    }
}

impl From<PyErr> for Failure {
    fn from(e: PyErr) -> Self {
        Self::Python(e)
    }
}

/// The result of a call of the binding.
pub(crate) type Outcome<T> = Result<T, Failure>;

/// One exception to raise: the class's name in `m3.errors`, its message and keywords.
struct Raise {
    class: &'static str,
    message: String,
    code: Option<String>,
    request_key: Option<String>,
    field: Option<String>,
    timeout: Option<OperationTimeout>,
}

impl Raise {
    fn new(class: &'static str, message: impl Into<String>, code: Option<&str>) -> Self {
        Self {
            class,
            message: message.into(),
            code: code.map(str::to_string),
            request_key: None,
            field: None,
            timeout: None,
        }
    }
}

fn managed_input(e: ManagedInputError) -> Raise {
    let detail = match &e {
        ManagedInputError::Validation(e) => Some(&e.detail),
        ManagedInputError::Conflict(e) => Some(&e.detail),
        ManagedInputError::State(e) => Some(&e.detail),
        ManagedInputError::Recovery(e) => Some(&e.detail),
        ManagedInputError::Storage(e) => Some(&e.detail),
        ManagedInputError::Engine(_) => None,
    };
    match detail {
        Some(detail) => Raise {
            class: e.kind_name(),
            message: detail.to_string(),
            code: Some(detail.code.as_str().to_string()),
            request_key: detail.request_key.clone(),
            field: detail.field.clone(),
            timeout: None,
        },
        None => Raise::new("EngineError", e.to_string(), None),
    }
}

fn engine(e: &EngineError) -> Raise {
    Raise::new("EngineError", e.to_string(), None)
}

fn open(e: OpenError) -> Raise {
    let code = e.code();
    match e {
        OpenError::Engine(e) => engine(&e),
        OpenError::InvalidPath(_) | OpenError::InvalidUrl(_) => {
            Raise::new("ManagedInputValidationError", e.to_string(), code)
        }
        _ => Raise::new("StorageError", e.to_string(), code),
    }
}

fn execution_store(e: ExecutionStoreError) -> Raise {
    match e {
        ExecutionStoreError::Open(e) => open(e),
        other => Raise::new("StorageError", other.to_string(), Some("storage_failure")),
    }
}

fn execution(e: ExecutionError) -> Raise {
    match e {
        ExecutionError::ModelValidation(e) => Raise::new("ModelValidationError", e.message, None),
        ExecutionError::ManagedInput(e) => managed_input(e),
        ExecutionError::OperationTimeout(timeout) => Raise {
            class: "OperationTimeout",
            message: timeout.to_string(),
            code: None,
            request_key: None,
            field: None,
            timeout: Some(timeout),
        },
        ExecutionError::Store(e) => execution_store(e),
        ExecutionError::Runtime(message) => Raise::new("EngineError", message, None),
    }
}

impl Failure {
    /// The Python exception (needs the GIL: the classes live in `m3.errors`).
    pub(crate) fn into_pyerr(self, py: Python<'_>) -> PyErr {
        let raise = match self {
            Self::Python(e) => return e,
            Self::ManagedInput(e) => managed_input(e),
            Self::Execution(e) => execution(e),
            Self::Open(e) => open(e),
            Self::ExecutionStore(e) => execution_store(e),
            Self::Validation { code, message } => {
                Raise::new("ManagedInputValidationError", message, Some(code))
            }
            Self::ModelValidation(message) => Raise::new("ModelValidationError", message, None),
            Self::Storage(message) => Raise::new("StorageError", message, Some("storage_failure")),
        };
        build(py, raise).unwrap_or_else(|e| e)
    }
}

fn build(py: Python<'_>, raise: Raise) -> PyResult<PyErr> {
    let errors = py.import("m3.errors")?;
    let class = errors.getattr(raise.class)?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("code", raise.code)?;
    if raise.class.starts_with("ManagedInput") || raise.class == "StorageError" {
        kwargs.set_item("request_key", raise.request_key)?;
        kwargs.set_item("field", raise.field)?;
    }
    if let Some(timeout) = raise.timeout {
        kwargs.set_item("execution_id", &timeout.execution_id)?;
        let result = match timeout.result {
            Some(result) => {
                let text = serde_json::to_string(&*result).map_err(|e| {
                    pyo3::exceptions::PyRuntimeError::new_err(format!(
                        "a result could not be encoded: {e}"
                    ))
                })?;
                let value = py.import("json")?.call_method1("loads", (text,))?;
                Some(py.import("m3.types")?.call_method1("_result", (value,))?)
            }
            None => None,
        };
        kwargs.set_item("result", result)?;
    }
    let value = class.call((raise.message,), Some(&kwargs))?;
    Ok(PyErr::from_value(value))
}

/// `Outcome` -> `PyResult`, raising the typed exception.
pub(crate) fn raise<T>(py: Python<'_>, outcome: Outcome<T>) -> PyResult<T> {
    outcome.map_err(|f| f.into_pyerr(py))
}

/// A value the binding was given that does not convert: `ManagedInputValidationError`.
pub(crate) fn invalid(code: &'static str, message: impl Into<String>) -> Failure {
    Failure::Validation {
        code,
        message: message.into(),
    }
}
