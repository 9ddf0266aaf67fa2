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

/// `t` in RFC 3339 (UTC, `Z`), with as many fractional digits as it needs (none, 3, 6 or 9),
/// the way the host prints timestamps. Days to a civil date: Howard Hinnant's algorithm.
pub fn rfc3339(t: &Timestamp) -> String {
    let days = t.seconds.div_euclid(86_400);
    let secs = t.seconds.rem_euclid(86_400);
    let (hour, minute, second) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let fraction = match t.nanoseconds {
        0 => String::new(),
        n if n % 1_000_000 == 0 => format!(".{:03}", n / 1_000_000),
        n if n % 1_000 == 0 => format!(".{:06}", n / 1_000),
        n => format!(".{n:09}"),
    };
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}{fraction}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_prints_civil_dates_and_only_the_fraction_needed() {
        let at = |seconds, nanoseconds| {
            rfc3339(&Timestamp {
                seconds,
                nanoseconds,
            })
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(at(1_800_000_005, 0), "2027-01-15T08:00:05Z");
        assert_eq!(at(951_782_400, 5_000_000), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_709_164_799, 120_000), "2024-02-28T23:59:59.000120Z");
        assert_eq!(at(4_102_444_800, 1), "2100-01-01T00:00:00.000000001Z");
        assert_eq!(at(-1, 0), "1969-12-31T23:59:59Z");
    }

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
