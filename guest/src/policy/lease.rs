//! Worker leases: who may advance a round, and until when.
//!
//! A lease is `(owner-id, lease-token, expires-at)`. Every worker write presents it; the write is
//! accepted only while the stored lease has the same owner and token and has not expired. Tokens
//! are 128 random bits from `wasi:random`.

use crate::errors::{Result, conflict, validation};
use crate::m3::managed_input::types::{ErrorCode, Lease, ManagedInputRecord, Timestamp};
use crate::time;

/// Longest lease a caller may ask for: one day.
pub const MAX_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// Checks a requested lease duration.
pub fn check_ttl(ttl_ms: u64) -> Result<()> {
    if ttl_ms == 0 || ttl_ms > MAX_TTL_MS {
        return Err(validation(
            ErrorCode::InvalidLease,
            format!("lease duration must be 1 to {MAX_TTL_MS} ms"),
        ));
    }
    Ok(())
}

/// A fresh lease for `owner_id`.
pub fn grant(owner_id: &str, ttl_ms: u64, now: &Timestamp) -> Result<Lease> {
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

/// Accepts a worker write to a round only from the current, live lease holder.
pub fn authorize(record: &ManagedInputRecord, presented: &Lease, now: &Timestamp) -> Result<()> {
    authorize_held(
        &format!("round {}", record.pending.round_id),
        record.lease.as_ref(),
        presented,
        now,
    )
}

/// The one lease rule, for rounds and executions alike: a write is accepted only when
/// `subject` holds a lease (`held`) with the presented owner and token (compared in constant
/// time) that has not expired at `now`.
pub fn authorize_held(
    subject: &str,
    held: Option<&Lease>,
    presented: &Lease,
    now: &Timestamp,
) -> Result<()> {
    if crate::mutation::broken(crate::mutation::Rule::LeaseFencing) {
        return Ok(());
    }
    let Some(held) = held else {
        return Err(conflict(
            ErrorCode::LeaseMismatch,
            format!("{subject} has no worker lease"),
        ));
    };
    if held.owner_id != presented.owner_id {
        return Err(conflict(
            ErrorCode::LeaseMismatch,
            format!("{subject} is owned by another worker"),
        ));
    }
    if !constant_time_eq(
        held.lease_token.as_bytes(),
        presented.lease_token.as_bytes(),
    ) {
        return Err(conflict(
            ErrorCode::LeaseMismatch,
            format!("{subject}: the lease token is not the current one"),
        ));
    }
    if !is_live(held, now) {
        return Err(conflict(
            ErrorCode::LeaseExpired,
            format!("{subject}: the lease has expired"),
        ));
    }
    Ok(())
}

/// Whether `presented` names the holder of `held` (owner and token; the token compared in
/// constant time), whatever the expiry.
pub fn same_holder(held: &Lease, presented: &Lease) -> bool {
    held.owner_id == presented.owner_id
        && constant_time_eq(
            held.lease_token.as_bytes(),
            presented.lease_token.as_bytes(),
        )
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::m3::managed_input::types::ManagedInputError;

    fn at(seconds: i64) -> Timestamp {
        Timestamp {
            seconds,
            nanoseconds: 0,
        }
    }

    fn lease(owner: &str, token: &str, expires: i64) -> Lease {
        Lease {
            owner_id: owner.into(),
            lease_token: token.into(),
            expires_at: at(expires),
        }
    }

    fn code(result: Result<()>) -> Option<ErrorCode> {
        match result {
            Ok(()) => None,
            Err(ManagedInputError::Conflict(detail)) => Some(detail.code),
            Err(other) => panic!("not a conflict: {other:?}"),
        }
    }

    /// The one rule rounds and executions share: owner, token, then expiry; the presented
    /// expiry never matters (the stored one does).
    #[test]
    fn a_write_is_accepted_only_from_the_live_holder() {
        let held = lease("w", "0123456789abcdef", 10);
        let check = |presented: &Lease, now| {
            code(authorize_held(
                "execution e",
                Some(&held),
                presented,
                &at(now),
            ))
        };
        assert_eq!(check(&lease("w", "0123456789abcdef", 0), 9), None);
        assert_eq!(
            check(&lease("w", "0123456789abcdef", 99), 10),
            Some(ErrorCode::LeaseExpired)
        );
        assert_eq!(
            check(&lease("w", "0123456789abcdeX", 10), 9),
            Some(ErrorCode::LeaseMismatch)
        );
        assert_eq!(
            check(&lease("w", "0123", 10), 9),
            Some(ErrorCode::LeaseMismatch)
        );
        assert_eq!(
            check(&lease("x", "0123456789abcdef", 10), 9),
            Some(ErrorCode::LeaseMismatch)
        );
        assert_eq!(
            code(authorize_held("execution e", None, &held, &at(0))),
            Some(ErrorCode::LeaseMismatch)
        );
        assert!(same_holder(&held, &lease("w", "0123456789abcdef", 0)));
        assert!(!same_holder(&held, &lease("w", "0123456789abcde", 10)));
    }
}
