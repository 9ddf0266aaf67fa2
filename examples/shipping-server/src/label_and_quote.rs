//! The prompt `shipping_label` and the resource `shipping://quote`: operations other than tools
//! that ask for the delivery address (request key `shipping_address`) before they answer, in
//! both eras. A client's elicitations then belong to a prompt or a resource, not a tool call.

use serde_json::{Value, json};

use crate::rpc::{INVALID_PARAMS, RpcError, field};
use crate::shipping::Answer;

/// The prompt that writes a shipping label.
pub const SHIPPING_LABEL: &str = "shipping_label";
/// The resource that quotes a delivery.
pub const QUOTE_URI: &str = "shipping://quote";

/// An operation that is not a tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// `prompts/get` of [`SHIPPING_LABEL`], with its `item` argument.
    Label {
        /// What is shipped ("parcel" when not given).
        item: String,
    },
    /// `resources/read` of [`QUOTE_URI`].
    Quote,
}

impl Operation {
    /// The operation a `prompts/get` asks for.
    pub fn prompt(params: &Value) -> Result<Self, RpcError> {
        let name = field(params, "name").as_str().unwrap_or("");
        if name != SHIPPING_LABEL {
            return Err(RpcError::new(
                INVALID_PARAMS,
                format!("Unknown prompt: {name}"),
            ));
        }
        let item = match field(field(params, "arguments"), "item") {
            Value::Null => "parcel".to_string(),
            Value::String(item) => item.clone(),
            _ => {
                return Err(RpcError::new(
                    INVALID_PARAMS,
                    "prompt arguments must be strings",
                ));
            }
        };
        Ok(Self::Label { item })
    }

    /// The operation a `resources/read` asks for.
    pub fn resource(params: &Value) -> Result<Self, RpcError> {
        let uri = field(params, "uri").as_str().unwrap_or("");
        if uri != QUOTE_URI {
            return Err(RpcError::new(-32002, format!("Resource not found: {uri}")));
        }
        Ok(Self::Quote)
    }

    /// The name a sealed `requestState` is bound to (with the operation's arguments).
    pub fn seal_name(&self) -> &'static str {
        match self {
            Self::Label { .. } => "prompt:shipping_label",
            Self::Quote => "resource:shipping://quote",
        }
    }

    /// The operation's result once the address question is answered.
    pub fn result(&self, answer: &Answer) -> Value {
        let address = match answer {
            Answer::Accept(content) => match (
                content.get("street").and_then(Value::as_str),
                content.get("city").and_then(Value::as_str),
            ) {
                (Some(street), Some(city)) if !street.is_empty() && !city.is_empty() => {
                    Some((street, city))
                }
                _ => None,
            },
            Answer::Decline | Answer::Cancel => None,
        };
        match (self, address) {
            (Self::Label { item }, Some((street, city))) => json!({
                "description": "A shipping label",
                "messages": [{"role": "user", "content": {"type": "text",
                    "text": format!("Shipping label: {item} to {street}, {city}")}}]
            }),
            (Self::Label { .. }, None) => json!({
                "description": "A shipping label",
                "messages": [{"role": "user", "content": {"type": "text",
                    "text": "No shipping label: no address was given"}}]
            }),
            (Self::Quote, Some((_, city))) => json!({
                "contents": [{"uri": QUOTE_URI, "mimeType": "text/plain",
                    "text": format!("Delivery to {city}: 12.50 EUR")}]
            }),
            (Self::Quote, None) => json!({
                "contents": [{"uri": QUOTE_URI, "mimeType": "text/plain",
                    "text": "No quote: no address was given"}]
            }),
        }
    }
}

/// The `prompts/list` result.
pub fn prompts_list() -> Value {
    json!({"prompts": [{
        "name": SHIPPING_LABEL,
        "title": "Shipping label",
        "description": "Writes a shipping label; asks the user for the delivery address.",
        "arguments": [{"name": "item", "description": "What is shipped", "required": false}]
    }]})
}

/// The `resources/list` result.
pub fn resources_list() -> Value {
    json!({"resources": [{
        "uri": QUOTE_URI,
        "name": "quote",
        "title": "Delivery quote",
        "description": "A delivery quote; asks the user for the delivery address.",
        "mimeType": "text/plain"
    }]})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_and_the_quote_use_the_answered_address() {
        let answer = Answer::parse(
            &json!({"action": "accept", "content": {"street": "1 Main", "city": "Pune"}}),
        )
        .unwrap();
        let label =
            Operation::prompt(&json!({"name": "shipping_label", "arguments": {"item": "book"}}))
                .unwrap();
        assert_eq!(
            label.result(&answer)["messages"][0]["content"]["text"],
            "Shipping label: book to 1 Main, Pune"
        );
        let quote = Operation::resource(&json!({"uri": QUOTE_URI})).unwrap();
        assert_eq!(
            quote.result(&answer)["contents"][0]["text"],
            "Delivery to Pune: 12.50 EUR"
        );
        assert_eq!(
            quote.result(&Answer::Decline)["contents"][0]["text"],
            "No quote: no address was given"
        );
        assert!(Operation::prompt(&json!({"name": "other"})).is_err());
        assert!(Operation::resource(&json!({"uri": "shipping://other"})).is_err());
    }
}
