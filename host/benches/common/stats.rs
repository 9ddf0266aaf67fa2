//! Order statistics and the small formatting helpers the benchmarks share.

use m3::Synchronous;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::Duration;

/// Order statistics of a sample (any unit); quantiles interpolate linearly between the closest
/// ranks.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Stats {
    pub n: usize,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Stats {
    /// The statistics of `samples`, none for an empty sample.
    pub fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let pick = |q: f64| {
            let rank = q * (sorted.len() - 1) as f64;
            let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
        };
        Some(Self {
            n: sorted.len(),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p10: pick(0.1),
            p50: pick(0.5),
            p90: pick(0.9),
            p99: pick(0.99),
        })
    }

    /// [`Stats::of`] for a sample that cannot be empty (panics on an empty one).
    pub fn of_nonempty(samples: &[f64]) -> Self {
        Self::of(samples).expect("no samples")
    }

    /// Latency form: `unit, n, p50, p90, p99, min, max, mean`.
    pub fn to_json(self, unit: &str) -> Value {
        json!({
            "unit": unit,
            "n": self.n,
            "p50": self.p50,
            "p90": self.p90,
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
