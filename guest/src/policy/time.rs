//! Timestamp arithmetic. The only source of time is the host's `clock` import.

use crate::m3::managed_input::types::Timestamp;

const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// Nanoseconds since the Unix epoch.
pub fn to_nanos(t: &Timestamp) -> i128 {
    i128::from(t.seconds) * NANOS_PER_SECOND + i128::from(t.nanoseconds)
}

/// The timestamp for nanoseconds since the Unix epoch (saturating at the representable range).
pub fn from_nanos(nanos: i128) -> Timestamp {
    let seconds = nanos.div_euclid(NANOS_PER_SECOND);
    let nanoseconds = nanos.rem_euclid(NANOS_PER_SECOND) as u32;
    let seconds = seconds.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    Timestamp {
        seconds,
        nanoseconds,
    }
}

/// `t` plus `ms` milliseconds.
pub fn add_millis(t: &Timestamp, ms: u64) -> Timestamp {
    from_nanos(to_nanos(t) + i128::from(ms) * 1_000_000)
}

/// Whether `a` is at or after `b`.
pub fn at_or_after(a: &Timestamp, b: &Timestamp) -> bool {
    to_nanos(a) >= to_nanos(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanos_round_trip_including_negative_instants() {
        for n in [
            0i128,
            1,
            -1,
            999_999_999,
            -1_000_000_001,
            1_700_000_000_123_456_789,
        ] {
            assert_eq!(to_nanos(&from_nanos(n)), n);
        }
    }

    #[test]
    fn add_millis_carries_into_seconds() {
        let t = Timestamp {
            seconds: 10,
            nanoseconds: 999_000_000,
        };
        assert_eq!(
            add_millis(&t, 2),
            Timestamp {
                seconds: 11,
                nanoseconds: 1_000_000
            }
        );
    }
}
