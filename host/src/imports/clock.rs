//! The `clock` import: the instance's clock, in UTC.

use crate::api::clock::Clock;
use crate::component::bindings::m3::managed_input::{clock, types};
use std::sync::Arc;

/// What the `clock` import reaches: the store's clock, nothing else.
pub struct ClockContext {
    clock: Arc<dyn Clock>,
}

impl ClockContext {
    /// A context telling `clock`'s time.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock }
    }
}

impl types::Host for ClockContext {}

impl clock::Host for ClockContext {
    fn now(&mut self) -> wasmtime::Result<types::Timestamp> {
        let now = self.clock.now();
        Ok(types::Timestamp {
            seconds: now.timestamp(),
            nanoseconds: now.timestamp_subsec_nanos().min(999_999_999),
        })
    }
}
