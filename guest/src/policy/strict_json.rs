//! Strict JSON parsing: RFC 8259 text with no duplicate object keys.
//!
//! `serde_json` alone keeps the last of two equal keys, which would let `{"a":1,"a":2}` mean
//! different things to different readers. Parse errors never quote the input.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Why a text is not acceptable JSON (the message never quotes the input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError(pub String);

/// Parses `text` as one JSON value, rejecting duplicate keys, trailing data and exponents beyond
/// a 64-bit integer; numbers keep the text they were written with. Nesting is bounded by
/// `serde_json`'s recursion limit (128).
pub fn parse(text: &str) -> Result<Value, JsonError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = StrictValue
        .deserialize(&mut deserializer)
        .map_err(|e| JsonError(describe(&e)))?;
    deserializer.end().map_err(|e| JsonError(describe(&e)))?;
    Ok(value)
}

fn describe(e: &serde_json::Error) -> String {
    // serde_json's syntax messages carry positions, not input; custom ones are ours.
    match e.classify() {
        serde_json::error::Category::Eof => {
            format!("unexpected end of JSON at column {}", e.column())
        }
        _ => e.to_string(),
    }
}

struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

/// How serde_json hands an arbitrary-precision number to a visitor.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// A number as written, whatever its magnitude or precision (`1e400`, `1e-400`, 30 digits): it
/// is kept as text and compared exactly (`canonical::decimal`, `canonical::compare`), never as a
/// double. Only an exponent outside a 64-bit integer is refused, a limit of the parser like its
/// depth: exact comparison does arithmetic on the exponent.
fn number<E: de::Error>(digits: &str) -> Result<serde_json::Number, E> {
    if let Some(at) = digits.find(['e', 'E'])
        && digits[at + 1..].parse::<i64>().is_err()
    {
        return Err(E::custom(
            "a number's exponent is beyond the parser's limit (a 64-bit integer)",
        ));
    }
    digits
        .parse::<serde_json::Number>()
        .map_err(|_| E::custom("a number could not be read"))
}

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(StrictValue)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // serde_json's arbitrary-precision numbers arrive as a one-member map under its
            // private token (a JSON object key can never produce it: it is not valid here as the
            // first key of a real object only because this parser reads numbers this way).
            if object.is_empty() && key == NUMBER_TOKEN {
                let digits: String = map.next_value()?;
                return number(&digits).map(Value::Number);
            }
            // One lookup per member: the entry is found once, checked, then filled.
            match object.entry(key) {
                serde_json::map::Entry::Occupied(_) => {
                    return Err(de::Error::custom("duplicate key in a JSON object"));
                }
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(map.next_value_seed(StrictValue)?);
                }
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_rejected_at_any_depth() {
        assert!(parse(r#"{"a":1,"a":1}"#).is_err());
        assert!(parse(r#"{"x":{"b":true,"b":false}}"#).is_err());
        assert!(parse(r#"[{"k":1},{"k":2}]"#).is_ok());
    }

    /// Every number is kept with every digit, whatever a double would make of it (`1e400` is no
    /// double, `1e-400` would be zero); only an exponent no 64-bit integer holds is refused.
    #[test]
    fn numbers_keep_every_digit_and_unrepresentable_ones_are_refused() {
        for exact in [
            "123456789012345678901234567890",
            "0.1000000000000000000001",
            "0.1000000000000000055511151231257827",
            "-1.50e-300",
            "1e+308",
            "0e-400",
            "1e+400",
            "-1e+400",
            "1e-400",
            "2.5e-330",
            "-0",
            "1.0",
            "1e+9223372036854775807",
            "1e-9223372036854775808",
        ] {
            let value = parse(exact).unwrap();
            assert_eq!(value.to_string(), exact, "kept as written");
        }
        // An exponent is written `e+` when it has no sign; the value is the same.
        assert_eq!(parse("1e400").unwrap().to_string(), "1e+400");
        for refused in [
            "1e9223372036854775808",
            "-1e-9223372036854775809",
            "1e99999999999999999999999",
        ] {
            let error = parse(refused).unwrap_err();
            assert!(
                error.0.contains("beyond the parser's limit"),
                "{refused}: {}",
                error.0
            );
        }
    }

    #[test]
    fn non_json_numbers_and_trailing_data_are_rejected() {
        for bad in [
            "NaN",
            "Infinity",
            "-Infinity",
            "1e99999999999999999999",
            "{} {}",
            "",
            "{\"a\":",
            "'a'",
        ] {
            assert!(parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn errors_never_quote_the_input() {
        let secret = "s3cr3t-value";
        for text in [
            format!("{{\"a\":\"{secret}\",\"a\":1}}"),
            format!("[\"{secret}\" x]"),
        ] {
            let err = parse(&text).unwrap_err();
            assert!(!err.0.contains(secret), "{}", err.0);
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = "[".repeat(100_000);
        assert!(parse(&deep).is_err());
    }
}
