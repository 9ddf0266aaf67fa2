//! Order statistics, timing, and how the benchmarks format times and rates.

use m3::Synchronous;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Order statistics of a sample (any unit); quantiles interpolate linearly between the closest
/// ranks ([`quantile`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// The sample's size.
    pub n: usize,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// The arithmetic mean.
    pub mean: f64,
    /// The 10th percentile.
    pub p10: f64,
    /// The median.
    pub p50: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 95th percentile.
    pub p95: f64,
    /// The 99th percentile.
    pub p99: f64,
}

impl Stats {
    /// The statistics of `samples`, none for an empty sample.
    pub fn of(samples: &[f64]) -> Option<Self> {
        let sorted = sorted(samples);
        let pick = |q| quantile_of_sorted(&sorted, q);
        Some(Self {
            n: sorted.len(),
            min: *sorted.first()?,
            max: *sorted.last()?,
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p10: pick(0.1)?,
            p50: pick(0.5)?,
            p90: pick(0.9)?,
            p95: pick(0.95)?,
            p99: pick(0.99)?,
        })
    }

    /// [`Stats::of`] for a sample that cannot be empty (panics on an empty one).
    pub fn of_nonempty(samples: &[f64]) -> Self {
        Self::of(samples).expect("no samples")
    }

    /// Latency form: `unit, n, p50, p90, p95, p99, min, max, mean`.
    pub fn to_json(self, unit: &str) -> Value {
        json!({
            "unit": unit,
            "n": self.n,
            "p50": self.p50,
            "p90": self.p90,
            "p95": self.p95,
            "p99": self.p99,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
        })
    }

    /// Spread form: `unit, n, median, min, max, p10, p90`.
    pub fn spread_json(self, unit: &str) -> Value {
        json!({
            "unit": unit,
            "n": self.n,
            "median": self.p50,
            "min": self.min,
            "max": self.max,
            "p10": self.p10,
            "p90": self.p90,
        })
    }
}

/// [`Stats::to_json`], or `null` for no sample.
pub fn stats_json(stats: Option<Stats>, unit: &str) -> Value {
    stats.map_or(Value::Null, |s| s.to_json(unit))
}

/// `median (min..max)` with `digits` decimals, or `-` for no sample.
pub fn spread_text(stats: Option<&Stats>, digits: usize) -> String {
    stats.map_or_else(
        || "-".into(),
        |s| {
            format!(
                "{:.digits$} ({:.digits$}..{:.digits$})",
                s.p50, s.min, s.max
            )
        },
    )
}

/// `p50 1.2 ms, p95 3.4 ms, max 5.6 ms` (in `unit`, one decimal), or `-` for no sample.
pub fn latency_text(stats: Option<&Stats>, unit: &str) -> String {
    stats.map_or_else(
        || "-".into(),
        |s| {
            format!(
                "p50 {:.1} {unit}, p95 {:.1} {unit}, max {:.1} {unit}",
                s.p50, s.p95, s.max
            )
        },
    )
}

/// The `q` quantile (0 to 1) of `samples`, linear between the closest ranks; none for an
/// empty sample.
pub fn quantile(samples: &[f64], q: f64) -> Option<f64> {
    quantile_of_sorted(&sorted(samples), q)
}

fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

fn quantile_of_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    let rank = q.clamp(0.0, 1.0) * sorted.len().checked_sub(1)? as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64))
}

/// How long `f` took, in seconds, and what it returned.
pub fn timed<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let started = Instant::now();
    let value = f();
    (secs(started.elapsed()), value)
}

/// Seconds as `f64`.
pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A time in seconds with the unit that suits it (`1.23 ms`).
pub fn fmt_time(s: f64) -> String {
    if s < 0.0 {
        format!("-{}", fmt_time(-s))
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else if s >= 1e-6 {
        format!("{:.2} µs", s * 1e6)
    } else {
        format!("{:.0} ns", s * 1e9)
    }
}

/// A rate per second (`12.3k/s`).
pub fn fmt_rate(r: f64) -> String {
    if r >= 10_000.0 {
        format!("{:.1}k/s", r / 1e3)
    } else {
        format!("{r:.0}/s")
    }
}

/// SQLite's name for a `synchronous` level.
pub fn sync_name(sync: Synchronous) -> &'static str {
    match sync {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_the_closest_ranks() {
        let stats = Stats::of(&[4.0, 1.0, 3.0, 2.0, 5.0]).expect("a sample");
        assert_eq!((stats.n, stats.min, stats.max), (5, 1.0, 5.0));
        assert_eq!(stats.p50, 3.0);
        assert_eq!(stats.mean, 3.0);
        assert!((stats.p10 - 1.4).abs() < 1e-12);
        assert!((stats.p95 - 4.8).abs() < 1e-12);
        assert_eq!(quantile(&[10.0, 20.0], 0.5), Some(15.0));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(Stats::of(&[]), None);
    }

    #[test]
    fn times_and_rates_take_the_unit_that_suits_them() {
        assert_eq!(fmt_time(1.5), "1.50 s");
        assert_eq!(fmt_time(0.00123), "1.23 ms");
        assert_eq!(fmt_time(4.5e-6), "4.50 µs");
        assert_eq!(fmt_time(-0.002), "-2.00 ms");
        assert_eq!(fmt_rate(12_345.0), "12.3k/s");
        assert_eq!(fmt_rate(658.4), "658/s");
        let stats = Stats::of(&[1.0, 2.0, 3.0]);
        assert_eq!(spread_text(stats.as_ref(), 1), "2.0 (1.0..3.0)");
        assert_eq!(spread_text(None, 1), "-");
        assert_eq!(
            latency_text(stats.as_ref(), "ms"),
            "p50 2.0 ms, p95 2.9 ms, max 3.0 ms"
        );
    }
}
