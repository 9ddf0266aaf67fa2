//! Durations given on the command line as seconds, checked against the range each flag allows
//! before anything is converted (a huge or odd number is a typed error, never a panic).

use std::time::Duration;

/// One day, in seconds.
pub const DAY: f64 = 86_400.0;

/// The allowed seconds of a flag.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

/// `--deadline`: a round's deadline, up to the store's 366 days.
pub const ROUND_DEADLINE: Range = Range {
    min: 0.001,
    max: 366.0 * DAY,
};
/// `--turn-deadline`: a Codex turn, up to 7 days.
pub const TURN_DEADLINE: Range = Range {
    min: 0.001,
    max: 7.0 * DAY,
};
/// `--lease`: a worker's lease, up to the store's one day.
pub const LEASE: Range = Range {
    min: 0.03,
    max: DAY,
};
/// `--server-delivery-timeout`: an answer's delivery over HTTP, up to an hour.
pub const DELIVERY_TIMEOUT: Range = Range {
    min: 0.001,
    max: 3_600.0,
};
/// `pending --wait`: up to 366 days.
pub const WAIT: Range = Range {
    min: 0.0,
    max: 366.0 * DAY,
};

/// `value` seconds of `flag`, or a message naming the allowed range.
pub fn seconds(flag: &str, value: f64, range: Range) -> Result<Duration, String> {
    let refused = || {
        format!(
            "{flag} takes a number of seconds from {} to {} ({} days)",
            range.min,
            range.max,
            range.max / DAY
        )
    };
    if !(value.is_finite() && value >= range.min && value <= range.max) {
        return Err(refused());
    }
    Duration::try_from_secs_f64(value).map_err(|_| refused())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_and_odd_numbers_are_refused_not_converted() {
        for bad in [
            1e19,
            1e300,
            18_446_744_073_709_551_615.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            0.0,
        ] {
            assert!(seconds("--deadline", bad, ROUND_DEADLINE).is_err(), "{bad}");
        }
        assert_eq!(
            seconds("--deadline", 1.5, ROUND_DEADLINE),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(seconds("--wait", 0.0, WAIT), Ok(Duration::ZERO));
        for bad in [0.0, 3_600.5, 1e19] {
            assert!(seconds("--server-delivery-timeout", bad, DELIVERY_TIMEOUT).is_err());
        }
        let message = seconds("--lease", 1e300, LEASE).unwrap_err();
        assert!(message.contains("0.03 to 86400"), "{message}");
    }
}
