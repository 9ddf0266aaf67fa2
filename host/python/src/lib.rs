//! The native module of the m3 Python package (`m3._native`): the m3 crate's public API for
//! the package's Python modules (`python/m3/`), which give it the specification's names.
//!
//! A thin binding: values cross as JSON text in the forms the crate serialises, and every
//! decision stays in the component. Every call that touches a store or waits runs with the GIL
//! released; blocking waits let Python handle signals (Ctrl-C); async calls settle asyncio
//! futures from the kit's own tokio runtime.

mod clock;
mod execution_store;
mod failure;
mod handle;
mod kit;
mod new_round;
mod store;
mod submission;
mod wait;

use pyo3::prelude::*;

/// The module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<execution_store::ExecutionStore>()?;
    module.add_class::<store::ManagedInputStore>()?;
    module.add_class::<kit::Kit>()?;
    module.add_class::<kit::Agent>()?;
    module.add_class::<handle::Handle>()?;
    Ok(())
}
