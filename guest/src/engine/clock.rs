//! Time in the engine: the host's `clock` import (the policy rules take time as an argument).

use crate::m3::managed_input::types::Timestamp;

/// The current UTC time from the host.
pub fn now() -> Timestamp {
    crate::m3::managed_input::clock::now()
}
