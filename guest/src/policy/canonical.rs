//! Canonical comparison of answers, the rule behind idempotency.
//!
//! "Same response" means equal after canonicalisation: object keys sorted, numbers compared as
//! JSON numbers by their exact decimal value (`1` equals `1.0` and `10e-1`; two 30-digit
//! integers are equal only when every digit is), strings byte-exact (no Unicode
//! normalisation).

use crate::m3::managed_input::types::ElicitationResponse;
use serde_json::Value;
use std::cmp::Ordering;
use std::io::Write;

/// Whether two JSON values are the same answer.
pub fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::String(x), Value::String(y)) => x.as_bytes() == y.as_bytes(),
        (Value::Number(x), Value::Number(y)) => same_number(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_value(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => false,
    }
}

fn same_number(x: &serde_json::Number, y: &serde_json::Number) -> bool {
    decimal(x) == decimal(y)
}

/// A number's exact value, as written: (negative, significant digits without leading or
/// trailing zeros, exponent), the value being digits × 10^exponent. Zero is `(false, "", 0)`.
/// The exponent is wide enough for any number `strict_json` reads (its written exponent fits
/// 64 bits; the digits' count is bounded by the text's size).
pub fn decimal(n: &serde_json::Number) -> (bool, String, i128) {
    // Numbers keep the digits they were written with (serde_json's arbitrary precision).
    let text = n.to_string();
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], text[at + 1..].parse::<i128>().unwrap_or(0)),
        None => (text.as_str(), 0),
    };
    let negative = mantissa.starts_with('-');
    let mantissa = mantissa.trim_start_matches(['-', '+']);
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all = format!("{whole}{fraction}");
    let significant = all.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    if trimmed.is_empty() {
        return (false, String::new(), 0);
    }
    let exponent = exponent - fraction.len() as i128 + (significant.len() - trimmed.len()) as i128;
    (negative, trimmed.to_string(), exponent)
}

/// The exact order of two numbers by their decimal values, whatever their size or precision
/// (no double is involved: `1e-400 > 0`, `1e400 > 1.7976931348623157e308`, and
/// `0.1000000000000000000001 > 0.1`).
pub fn compare(a: &serde_json::Number, b: &serde_json::Number) -> Ordering {
    let (a, b) = (decimal(a), decimal(b));
    let sign = |(negative, digits, _): &(bool, String, i128)| match (digits.is_empty(), negative) {
        (true, _) => 0,
        (false, true) => -1,
        (false, false) => 1,
    };
    let (sa, sb) = (sign(&a), sign(&b));
    if sa != sb || sa == 0 {
        return sa.cmp(&sb);
    }
    // Same sign, neither zero: the place of the leading digit first, then the digits (neither
    // has a leading or trailing zero, so a longer run that agrees so far is the larger).
    let magnitude = (a.1.len() as i128 + a.2)
        .cmp(&(b.1.len() as i128 + b.2))
        .then_with(|| a.1.as_bytes().cmp(b.1.as_bytes()));
    if sa < 0 {
        magnitude.reverse()
    } else {
        magnitude
    }
}

/// Whether two response maps are the same answer (same keys, actions and canonical content).
pub fn same_responses(
    a: &[(String, ElicitationResponse)],
    b: &[(String, ElicitationResponse)],
) -> bool {
    let mut a: Vec<_> = a.iter().collect();
    let mut b: Vec<_> = b.iter().collect();
    a.sort_by(|p, q| p.0.cmp(&q.0));
    b.sort_by(|p, q| p.0.cmp(&q.0));
    a.len() == b.len()
        && a.iter().zip(&b).all(|((ka, ra), (kb, rb))| {
            ka == kb && ra.action == rb.action && same_content(&ra.content, &rb.content)
        })
}

fn same_content(a: &Option<String>, b: &Option<String>) -> bool {
    let parse = |t: &Option<String>| match t {
        None => Some(Value::Null),
        Some(text) => crate::strict_json::parse(text).ok(),
    };
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => same_value(&x, &y),
        _ => false,
    }
}

/// The canonical text of a value: compact, object keys sorted, every number written as its exact
/// decimal value (`digits`e`exponent`, `0` for zero), so that values that are the same answer
/// have the same text.
pub fn canonical_text(value: &Value) -> String {
    let mut out = Vec::with_capacity(128);
    write_canonical(value, &mut out);
    // Only JSON text and UTF-8 strings were written.
    String::from_utf8(out).unwrap_or_default()
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, key);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Number(n) => match decimal(n) {
            (_, digits, _) if digits.is_empty() => out.push(b'0'),
            (negative, digits, exponent) => {
                let sign = if negative { "-" } else { "" };
                let _ = write!(out, "{sign}{digits}e{exponent}");
            }
        },
        other => {
            let _ = serde_json::to_writer(&mut *out, other);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_matter() {
        let a = crate::strict_json::parse(r#"{"a":1,"b":{"x":true,"y":"z"}}"#).unwrap();
        let b = crate::strict_json::parse(r#"{"b":{"y":"z","x":true},"a":1}"#).unwrap();
        assert!(same_value(&a, &b));
        assert_eq!(canonical_text(&a), canonical_text(&b));
    }

    #[test]
    fn numbers_compare_by_their_exact_value() {
        let parse = |t: &str| crate::strict_json::parse(t).unwrap();
        assert!(same_value(&parse("10e-1"), &parse("1.000")));
        assert!(same_value(&parse("-0.0"), &parse("0")));
        assert!(same_value(&parse("1.5e2"), &parse("150")));
        // Beyond a double's precision, every digit counts.
        assert!(!same_value(
            &parse("123456789012345678901234567890"),
            &parse("123456789012345678901234567891")
        ));
        assert!(!same_value(
            &parse("0.1000000000000000000001"),
            &parse("0.1")
        ));
        assert_eq!(
            canonical_text(&parse(r#"{"n":1.50e1}"#)),
            canonical_text(&parse(r#"{"n":15}"#))
        );
    }

    #[test]
    fn numbers_beyond_a_double_compare_and_canonicalise_exactly() {
        let parse = |t: &str| crate::strict_json::parse(t).unwrap();
        let n = |t: &str| parse(t).as_number().unwrap().clone();
        for (a, b, order) in [
            ("1e-400", "0", Ordering::Greater),
            ("-1e-400", "0", Ordering::Less),
            ("-1e-400", "-0", Ordering::Less),
            ("1e-400", "1e-401", Ordering::Greater),
            ("1e400", "1.7976931348623157e308", Ordering::Greater),
            ("-1e400", "-1.7976931348623157e308", Ordering::Less),
            ("1e400", "10e399", Ordering::Equal),
            ("0.1000000000000000000001", "0.1", Ordering::Greater),
            (
                "0.1000000000000000055511151231257827",
                "0.1",
                Ordering::Greater,
            ),
            (
                "123456789012345678901234567890",
                "1.2345678901234568e29",
                Ordering::Less,
            ),
            ("0.13", "0.123", Ordering::Greater),
            ("-0.13", "-0.123", Ordering::Less),
            ("1.0", "1", Ordering::Equal),
            ("-0", "0", Ordering::Equal),
            ("99", "100", Ordering::Less),
            ("-5", "3", Ordering::Less),
        ] {
            assert_eq!(compare(&n(a), &n(b)), order, "{a} against {b}");
            assert_eq!(compare(&n(b), &n(a)), order.reverse(), "{b} against {a}");
        }
        assert!(!same_value(&parse("1e-400"), &parse("0")));
        assert!(same_value(&parse("1e400"), &parse("10e399")));
        assert_eq!(canonical_text(&parse("1e400")), "1e400");
        assert_eq!(canonical_text(&parse("-1e-400")), "-1e-400");
        assert_eq!(
            canonical_text(&parse("1e-9223372036854775808")),
            "1e-9223372036854775808"
        );
        assert_eq!(
            canonical_text(&parse("0.5e-9223372036854775808")),
            "5e-9223372036854775809",
            "wider than the written exponent"
        );
    }

    #[test]
    fn one_equals_one_point_zero() {
        assert!(same_value(&json!(1), &json!(1.0)));
        assert_eq!(
            canonical_text(&json!({"n": 1.0})),
            canonical_text(&json!({"n": 1}))
        );
        assert!(!same_value(&json!(1), &json!(1.5)));
        assert!(!same_value(&json!(1), &json!("1")));
    }

    #[test]
    fn strings_are_byte_exact_without_unicode_normalisation() {
        // "é" precomposed (U+00E9) vs "e" + combining acute (U+0065 U+0301)
        assert!(!same_value(&json!("caf\u{e9}"), &json!("cafe\u{301}")));
        assert!(same_value(&json!("caf\u{e9}"), &json!("caf\u{e9}")));
    }

    #[test]
    fn arrays_are_ordered() {
        assert!(!same_value(&json!(["a", "b"]), &json!(["b", "a"])));
    }
}
