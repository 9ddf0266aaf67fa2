//! Sealed `requestState` for the 2026-07-28 era.
//!
//! The state is `v1.<round>.<expiry ms since the epoch>.<tag>`, where the tag is a 128-bit keyed
//! hash over (tool name, canonical arguments, round, expiry) under a per-process random key (the
//! keys of a `std::collections::hash_map::RandomState`). This is tamper-evident enough for a test
//! server but **not cryptographic**: std does not promise a MAC-strength hash, and the comparison
//! is not constant-time. A real server would use HMAC-SHA256 with a managed key.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// Seals and opens `requestState` strings with a per-process random key and a TTL.
pub struct Sealer {
    /// The random key (the hasher's seed).
    key: RandomState,
    /// How long a sealed state stays valid.
    ttl: Duration,
}

/// Why a state did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// Not ours, altered, or bound to another tool or other arguments.
    Invalid,
    /// Genuine but past its expiry.
    Expired,
}

impl Sealer {
    /// A sealer with a fresh random key.
    pub fn new(ttl: Duration) -> Self {
        Self {
            key: RandomState::new(),
            ttl,
        }
    }

    /// Seals `round` of a call of `tool` with `arguments`, valid for the TTL from `now`.
    pub fn seal(&self, tool: &str, arguments: &Value, round: u32, now: SystemTime) -> String {
        let expiry_ms =
            millis(now).saturating_add(self.ttl.as_millis().try_into().unwrap_or(u64::MAX));
        self.render(tool, &canonical_json(arguments), round, expiry_ms)
    }

    /// Opens `state` for a retry of `tool` with `arguments`: the round it was sealed for.
    /// Only the exact bytes this sealer produced open.
    pub fn open(
        &self,
        state: &str,
        tool: &str,
        arguments: &Value,
        now: SystemTime,
    ) -> Result<u32, OpenError> {
        let mut parts = state.split('.');
        let (Some("v1"), Some(round), Some(expiry), Some(_tag), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(OpenError::Invalid);
        };
        let round: u32 = round.parse().map_err(|_| OpenError::Invalid)?;
        let expiry_ms: u64 = expiry.parse().map_err(|_| OpenError::Invalid)?;
        if self.render(tool, &canonical_json(arguments), round, expiry_ms) != state {
            return Err(OpenError::Invalid);
        }
        if millis(now) >= expiry_ms {
            return Err(OpenError::Expired);
        }
        Ok(round)
    }

    /// The state string for these fields.
    fn render(&self, tool: &str, canonical_arguments: &str, round: u32, expiry_ms: u64) -> String {
        let high = self.half(0, tool, canonical_arguments, round, expiry_ms);
        let low = self.half(1, tool, canonical_arguments, round, expiry_ms);
        format!("v1.{round}.{expiry_ms}.{high:016x}{low:016x}")
    }

    /// One 64-bit half of the tag (`domain` separates the halves).
    fn half(&self, domain: u8, tool: &str, arguments: &str, round: u32, expiry_ms: u64) -> u64 {
        self.key.hash_one((
            domain,
            "m3-shipping-request-state",
            tool,
            arguments,
            round,
            expiry_ms,
        ))
    }
}

/// Milliseconds since the Unix epoch (0 before it).
fn millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis().try_into().unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Canonical JSON text: object keys sorted, no whitespace, integral numbers without a fraction
/// (so `2` and `2.0` are the same arguments).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// Appends the canonical text of `value` to `out`.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => out.push_str(&value.to_string()),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (None, Some(u), _) => out.push_str(&u.to_string()),
            (None, None, Some(f)) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
                // Exact: |f| < 2^53 and integral.
                out.push_str(&(f as i64).to_string());
            }
            _ => out.push_str(&n.to_string()),
        },
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sealed_state_opens_only_unchanged_and_in_time() {
        let sealer = Sealer::new(Duration::from_secs(60));
        let now = SystemTime::now();
        let args = json!({"item": "book", "weight_kg": 2});
        let state = sealer.seal("book_shipment", &args, 3, now);
        assert_eq!(sealer.open(&state, "book_shipment", &args, now), Ok(3));
        let reordered = json!({"weight_kg": 2.0, "item": "book"});
        assert_eq!(sealer.open(&state, "book_shipment", &reordered, now), Ok(3));
        let other = json!({"item": "lamp", "weight_kg": 2});
        assert_eq!(
            sealer.open(&state, "book_shipment", &other, now),
            Err(OpenError::Invalid)
        );
        assert_eq!(
            sealer.open(&state, "report_env", &args, now),
            Err(OpenError::Invalid)
        );
        let bumped = state.replacen("v1.3.", "v1.4.", 1);
        assert_eq!(
            sealer.open(&bumped, "book_shipment", &args, now),
            Err(OpenError::Invalid)
        );
        let padded = state.replacen("v1.3.", "v1.03.", 1);
        assert_eq!(
            sealer.open(&padded, "book_shipment", &args, now),
            Err(OpenError::Invalid)
        );
        let later = now + Duration::from_secs(61);
        assert_eq!(
            sealer.open(&state, "book_shipment", &args, later),
            Err(OpenError::Expired)
        );
        let stranger = Sealer::new(Duration::from_secs(60));
        assert_eq!(
            stranger.open(&state, "book_shipment", &args, now),
            Err(OpenError::Invalid)
        );
    }

    #[test]
    fn canonical_json_sorts_keys_and_normalises_integral_numbers() {
        assert_eq!(
            canonical_json(&json!({"b": [1.0, 2.5, "x"], "a": {"d": null, "c": true}})),
            r#"{"a":{"c":true,"d":null},"b":[1,2.5,"x"]}"#
        );
    }
}
