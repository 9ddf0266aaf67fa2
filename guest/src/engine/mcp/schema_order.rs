//! The order in which a server wrote the properties of each `requestedSchema`. The component's
//! JSON objects are sorted maps (an order-keeping map hashes with per-instance random keys, which
//! would make the fuel a call costs vary), so the order is read from the line itself: each line
//! that is parsed is also read for the shape of its objects, and the property orders of its
//! schemas are kept until the next line. A request's schema text is then written with its
//! properties in that order (the terminal form asks them so); everything else stays sorted.

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::cell::RefCell;
use std::fmt;

/// The nesting of a JSON text's objects, with their keys in written order; values that are not
/// objects or arrays are not kept.
enum Shape {
    Leaf,
    List(Vec<Shape>),
    Object(Vec<(String, Shape)>),
}

struct ShapeVisitor;

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::Leaf)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::Leaf)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::Leaf)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::Leaf)
    }
    fn visit_str<E>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::Leaf)
    }
    fn visit_unit<E>(self) -> Result<Shape, E> {
        Ok(Shape::Leaf)
    }
    fn visit_none<E>(self) -> Result<Shape, E> {
        Ok(Shape::Leaf)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Shape>()? {
            items.push(item);
        }
        Ok(Shape::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            // A number (kept as written) arrives as a one-entry map; its text is not needed.
            if key.starts_with("$serde_json::private") {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            entries.push((key, map.next_value::<Shape>()?));
        }
        Ok(Shape::Object(entries))
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ShapeVisitor)
    }
}

thread_local! {
    /// The property orders of the schemas of the line parsed last.
    static ORDERS: RefCell<Vec<Vec<String>>> = const { RefCell::new(Vec::new()) };
}

/// Reads `line` for the property orders of its `requestedSchema` objects (none if it is not
/// JSON) and keeps them until the next line.
pub fn remember(line: &str) {
    let mut orders = Vec::new();
    // Most lines ask for nothing: they are not read twice.
    if line.contains("\"requestedSchema\"")
        && let Ok(shape) = serde_json::from_str::<Shape>(line)
    {
        collect(&shape, &mut orders);
    }
    ORDERS.with(|o| *o.borrow_mut() = orders);
}

fn collect(shape: &Shape, orders: &mut Vec<Vec<String>>) {
    match shape {
        Shape::Leaf => {}
        Shape::List(items) => items.iter().for_each(|i| collect(i, orders)),
        Shape::Object(entries) => {
            for (key, value) in entries {
                if key == "requestedSchema"
                    && let Shape::Object(schema) = value
                    && let Some((_, Shape::Object(properties))) =
                        schema.iter().find(|(k, _)| k == "properties")
                {
                    orders.push(properties.iter().map(|(k, _)| k.clone()).collect());
                }
                collect(value, orders);
            }
        }
    }
}

/// The text of `schema` with its `properties` in the order the server wrote them (from the line
/// parsed last), or its plain (sorted) text when that order is not known.
pub fn schema_text(schema: &Value) -> String {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return schema.to_string();
    };
    let mut names: Vec<&String> = properties.keys().collect();
    names.sort();
    let order = ORDERS.with(|o| {
        o.borrow()
            .iter()
            .find(|order| {
                let mut sorted: Vec<&String> = order.iter().collect();
                sorted.sort();
                sorted == names
            })
            .cloned()
    });
    let (Some(order), Value::Object(top)) = (order, schema) else {
        return schema.to_string();
    };
    let mut text = String::from("{");
    for (i, (key, value)) in top.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&Value::String(key.clone()).to_string());
        text.push(':');
        if key == "properties" {
            text.push('{');
            for (j, name) in order.iter().enumerate() {
                if j > 0 {
                    text.push(',');
                }
                text.push_str(&Value::String(name.clone()).to_string());
                text.push(':');
                text.push_str(&properties[name].to_string());
            }
            text.push('}');
        } else {
            text.push_str(&value.to_string());
        }
    }
    text.push('}');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_is_written_with_its_properties_in_the_servers_order() {
        let line = r#"{"params":{"n":1.50,"requestedSchema":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string","minLength":1}},"required":["street"]}}}"#;
        remember(line);
        let value: Value = serde_json::from_str(line).unwrap();
        let schema = &value["params"]["requestedSchema"];
        let text = schema_text(schema);
        // `city` sorts first, but the server wrote `street` first (the test's native build may
        // keep other objects in either order: only the properties' order is asserted).
        let street = text.find("\"street\"").unwrap();
        let city = text.find("\"city\"").unwrap();
        assert!(street < city, "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), *schema);
        // Another line: that order is forgotten, the text is the plain one.
        remember("{}");
        assert_eq!(schema_text(schema), schema.to_string());
    }
}
