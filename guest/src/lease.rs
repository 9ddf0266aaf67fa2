//! Worker leases: who may advance a round, and until when.
//!
//! A lease is `(owner-id, lease-token, expires-at)`. Every worker write presents it; the write is
//! accepted only while the stored lease has the same owner and token and has not expired. Tokens
//! are 128 random bits from `wasi:random`.

use crate::errors::{Outcome, conflict, validation};
use crate::m3::managed_input::types::{ErrorCode, Lease, ManagedInputRecord, Timestamp};
use crate::time;

/// Longest lease a caller may ask for: one day.
pub const MAX_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// Checks a requested lease duration.
pub fn check_ttl(ttl_ms: u64) -> Outcome<()> {
    if ttl_ms == 0 || ttl_ms > MAX_TTL_MS {
        return Err(validation(
            ErrorCode::InvalidLease,
            format!("lease duration must be 1 to {MAX_TTL_MS} ms"),
        ));
    }
    Ok(())
}

/// A fresh lease for `owner_id`.
pub fn grant(owner_id: &str, ttl_ms: u64, now: &Timestamp) -> Outcome<Lease> {
    check_ttl(ttl_ms)?;
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|_| {
        crate::errors::storage(ErrorCode::StorageFailure, "no randomness for a lease token")
    })?;
    Ok(Lease {
        owner_id: owner_id.to_string(),
        lease_token: hex::encode(bytes),
        expires_at: time::add_millis(now, ttl_ms),
    })
}

/// Whether a stored lease is still live at `now`.
pub fn is_live(lease: &Lease, now: &Timestamp) -> bool {
    !time::at_or_after(now, &lease.expires_at)
}

/// Accepts a worker write only from the current, live lease holder.
pub fn authorize(record: &ManagedInputRecord, presented: &Lease, now: &Timestamp) -> Outcome<()> {
    if crate::mutation::broken(crate::mutation::Rule::LeaseFencing) {
        return Ok(());
    }
    let round = &record.pending.round_id;
    let Some(held) = &record.lease else {
        return Err(conflict(
            ErrorCode::LeaseMismatch,
            format!("round {round} has no worker lease"),
        ));
    };
    if held.owner_id != presented.owner_id {
        return Err(conflict(
            ErrorCode::LeaseMismatch,
            format!("round {round} is owned by another worker"),
        ));
    }
    if !constant_time_eq(
        held.lease_token.as_bytes(),
        presented.lease_token.as_bytes(),
    ) {
        return Err(conflict(
            ErrorCode::LeaseMismatch,
            format!("round {round}: the lease token is not the current one"),
        ));
    }
    if !is_live(held, now) {
        return Err(conflict(
            ErrorCode::LeaseExpired,
            format!("round {round}: the lease has expired"),
        ));
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
