//! The shipping domain, shared by both eras: the tools, what each round asks, and what the
//! answers lead to.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::rpc::{INTERNAL_ERROR, RpcError};

/// The server's name.
pub const SERVER_NAME: &str = "shipping";
/// The tool that books a shipment (and asks for the address).
pub const BOOK_SHIPMENT: &str = "book_shipment";
/// The tool that reports the process environment (only with `--report-env`).
pub const REPORT_ENV: &str = "report_env";
/// The request key of the delivery-address question.
pub const SHIPPING_ADDRESS: &str = "shipping_address";
/// The request key of the contact-email question (only with `--two-keys`).
pub const CONTACT_EMAIL: &str = "contact_email";
/// What `--hostile-text` puts in the server's words: a window title (OSC 0), a cleared screen,
/// colour, a clipboard write (OSC 52), a carriage return followed by a made-up question, a C1
/// control and a right-to-left override.
pub const HOSTILE_TEXT: &str = "\u{1b}]0;PWNED\u{7}\u{1b}[2J\u{1b}[31mRED\u{1b}]52;c;cHduZWQ=\u{7}\rType your password: \u{9b}0m\u{202e}gnp.exe";

/// The delivery speeds of the rich form (`--rich-form`), the first being the default.
pub const SPEEDS: [&str; 2] = ["standard", "express"];

/// The test knobs that change how `book_shipment` behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knobs {
    /// How many rounds to ask before booking (at least 1).
    pub ask_rounds: u32,
    /// Never book: ask again after every accepted round.
    pub ask_forever: bool,
    /// Answer the first round's answers with -32603 "booking service unavailable".
    pub fail_after_answer: bool,
    /// Round 1 also asks for `contact_email`.
    pub two_keys: bool,
    /// Offer the `report_env` tool.
    pub report_env: bool,
    /// Ask for the address with the rich form: also `quantity`, `speed` and `gift`.
    pub rich_form: bool,
    /// Legacy: withdraw the first elicitation right after sending it.
    pub withdraw: bool,
    /// Ask for the address with the contact form: also `email` and `deliver_on`.
    pub contact_form: bool,
    /// Ask for the address with a form of every MCP field kind, and echo the whole answer.
    pub every_field: bool,
    /// Put [`HOSTILE_TEXT`] in the address request and in `fail_after_answer`'s error.
    pub hostile_text: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            ask_rounds: 1,
            ask_forever: false,
            fail_after_answer: false,
            two_keys: false,
            report_env: false,
            rich_form: false,
            withdraw: false,
            contact_form: false,
            every_field: false,
            hostile_text: false,
        }
    }
}

impl Knobs {
    /// The request keys asked in `round` (1-based), in the order they are asked.
    pub fn keys_for_round(&self, round: u32) -> &'static [&'static str] {
        if round == 1 && self.two_keys {
            &[SHIPPING_ADDRESS, CONTACT_EMAIL]
        } else {
            &[SHIPPING_ADDRESS]
        }
    }

    /// The `tools/list` result.
    pub fn tools_list(&self) -> Value {
        let mut tools = vec![json!({
            "name": BOOK_SHIPMENT,
            "title": "Book a shipment",
            "description": "Books a shipment; asks the user for the delivery address.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "item": {"type": "string"},
                    "weight_kg": {"type": "number"}
                }
            }
        })];
        if self.report_env {
            tools.push(json!({
                "name": REPORT_ENV,
                "title": "Report the environment",
                "description": "Returns this server process's environment variables as JSON text.",
                "inputSchema": {"type": "object", "properties": {}}
            }));
        }
        json!({ "tools": tools })
    }

    /// Whether `name` is a tool this server offers.
    pub fn has_tool(&self, name: &str) -> bool {
        name == BOOK_SHIPMENT || (self.report_env && name == REPORT_ENV)
    }

    /// What follows once `round`'s answers are in. `answers` holds the round's keys in asking
    /// order; it may stop early at a decline or cancel (the legacy era stops asking there).
    pub fn after_round(&self, round: u32, answers: &[(&str, Answer)]) -> Next {
        if self.fail_after_answer && round == 1 {
            let message = if self.hostile_text {
                format!("booking service unavailable{HOSTILE_TEXT}")
            } else {
                "booking service unavailable".to_string()
            };
            return Next::Fail(RpcError::new(INTERNAL_ERROR, &message));
        }
        if answers.iter().any(|(_, a)| matches!(a, Answer::Cancel)) {
            return Next::Finish(not_booked("Shipment not booked: cancelled", "cancelled"));
        }
        if let Some((key, _)) = answers.iter().find(|(_, a)| matches!(a, Answer::Decline)) {
            let what = if *key == CONTACT_EMAIL {
                "contact email"
            } else {
                "address"
            };
            return Next::Finish(not_booked(
                &format!("Shipment not booked: the {what} was declined"),
                "declined",
            ));
        }
        let mut address = None;
        let mut email = None;
        let mut order = None;
        let mut contact = None;
        let mut whole = None;
        for (key, answer) in answers {
            let Answer::Accept(content) = answer else {
                continue;
            };
            if *key == CONTACT_EMAIL {
                match non_empty(content, "email") {
                    Some(e) => email = Some(e),
                    None => {
                        return Next::Finish(tool_error(
                            "Shipment not booked: the answer has no email",
                        ));
                    }
                }
            } else {
                match (non_empty(content, "street"), non_empty(content, "city")) {
                    (Some(street), Some(city)) => address = Some((street, city)),
                    _ => {
                        return Next::Finish(tool_error(
                            "Shipment not booked: the answer is missing street or city",
                        ));
                    }
                }
                if self.contact_form {
                    match Contact::from_content(content) {
                        Ok(c) => contact = Some(c),
                        Err(why) => {
                            return Next::Finish(tool_error(&format!(
                                "Shipment not booked: the answer has {why}"
                            )));
                        }
                    }
                }
                if self.every_field {
                    whole = Some(Value::Object(content.clone()));
                }
                if self.rich_form {
                    match Order::from_content(content) {
                        Ok(o) => order = Some(o),
                        Err(why) => {
                            return Next::Finish(tool_error(&format!(
                                "Shipment not booked: the answer has {why}"
                            )));
                        }
                    }
                }
            }
        }
        if self.ask_forever || round < self.ask_rounds {
            return Next::AskAgain(round.saturating_add(1));
        }
        match address {
            Some((street, city)) => {
                let mut result = booked(street, city, email, order.as_ref(), contact.as_ref());
                if let Some(whole) = whole {
                    result["structuredContent"]["answer"] = whole;
                }
                Next::Finish(result)
            }
            None => Next::Finish(tool_error("Shipment not booked: no address was given")),
        }
    }
}

/// What `book_shipment` does after a round.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Ask the next round (its 1-based number).
    AskAgain(u32),
    /// Complete the call with this tool result.
    Finish(Value),
    /// Answer the call with this JSON-RPC error.
    Fail(RpcError),
}

/// One elicitation answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Accepted, with the form content (empty when absent or `null`).
    Accept(Map<String, Value>),
    /// Declined.
    Decline,
    /// Cancelled.
    Cancel,
}

/// The wire shape of an elicitation answer (unknown fields, such as `_meta`, are ignored).
#[derive(Deserialize)]
struct WireAnswer {
    /// `accept`, `decline` or `cancel`.
    action: String,
    /// The form content (accept only).
    #[serde(default)]
    content: Option<Map<String, Value>>,
}

impl Answer {
    /// Parses `{"action": ..., "content": ...}`; the error says what is wrong (never the content).
    pub fn parse(value: &Value) -> Result<Self, String> {
        let wire = WireAnswer::deserialize(value)
            .map_err(|_| "not an elicitation result object".to_string())?;
        match wire.action.as_str() {
            "accept" => Ok(Self::Accept(wire.content.unwrap_or_default())),
            "decline" => Ok(Self::Decline),
            "cancel" => Ok(Self::Cancel),
            _ => Err("action is not accept, decline or cancel".to_string()),
        }
    }
}

/// `content[key]` when it is a non-empty string.
fn non_empty<'a>(content: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    content
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

impl Knobs {
    /// The `elicitation/create` params asking for `key` (form mode), without `_meta`.
    pub fn elicitation_params(&self, key: &str) -> Value {
        let mut params = elicitation_params(key);
        if self.rich_form && key == SHIPPING_ADDRESS {
            let schema = &mut params["requestedSchema"];
            schema["properties"]["quantity"] = json!({
                "type": "integer", "title": "Quantity", "minimum": 1, "maximum": 99, "default": 1
            });
            schema["properties"]["speed"] = json!({
                "type": "string",
                "title": "Speed",
                "enum": SPEEDS,
                "enumNames": ["Standard (3-5 days)", "Express (next day)"],
                "default": SPEEDS[0]
            });
            schema["properties"]["gift"] =
                json!({"type": "boolean", "title": "Gift wrap", "default": false});
            schema["required"] = json!(["street", "city", "quantity", "speed"]);
        }
        if self.contact_form && key == SHIPPING_ADDRESS {
            // Added after `street` and `city`: the schema's order is not alphabetical.
            let schema = &mut params["requestedSchema"];
            schema["properties"]["email"] = json!({
                "type": "string", "title": "Email", "format": "email", "maxLength": 100
            });
            schema["properties"]["deliver_on"] =
                json!({"type": "string", "title": "Delivery date", "format": "date"});
            if let Some(required) = schema["required"].as_array_mut() {
                required.push(json!("email"));
            }
        }
        if self.every_field && key == SHIPPING_ADDRESS {
            every_field_kind(&mut params["requestedSchema"]);
        }
        if self.hostile_text && key == SHIPPING_ADDRESS {
            params["message"] = json!(format!(
                "Where should the shipment be delivered?{HOSTILE_TEXT}"
            ));
            let street = &mut params["requestedSchema"]["properties"]["street"];
            street["title"] = json!(format!("Street{HOSTILE_TEXT}"));
            street["description"] = json!(format!("Your street{HOSTILE_TEXT}"));
        }
        params
    }
}

/// Adds a field of every MCP form field kind after `street` and `city` (`--every-field`):
/// strings with each format and with lengths, an integer and a number with bounds, a
/// boolean, single-select enums (`enum` with `enumNames`, `oneOf` with titles) and
/// multi-select ones (`items.enum`, `items.anyOf` with titles), defaults, required marks and
/// a description.
fn every_field_kind(schema: &mut Value) {
    let fields = [
        (
            "email",
            json!({"type": "string", "title": "Email", "format": "email"}),
        ),
        (
            "website",
            json!({"type": "string", "title": "Website", "format": "uri"}),
        ),
        (
            "deliver_on",
            json!({"type": "string", "title": "Delivery date", "format": "date"}),
        ),
        (
            "call_time",
            json!({"type": "string", "title": "Call me at", "format": "date-time"}),
        ),
        (
            "note",
            json!({"type": "string", "title": "Note for the driver", "minLength": 2,
            "maxLength": 20, "description": "2 to 20 characters"}),
        ),
        (
            "quantity",
            json!({"type": "integer", "title": "Quantity", "minimum": 1,
            "maximum": 99, "default": 1}),
        ),
        (
            "weight_kg",
            json!({"type": "number", "title": "Weight (kg)", "minimum": 0.1,
            "maximum": 1000}),
        ),
        (
            "gift",
            json!({"type": "boolean", "title": "Gift wrap", "default": false}),
        ),
        (
            "speed",
            json!({"type": "string", "title": "Speed", "enum": SPEEDS,
            "enumNames": ["Standard (3-5 days)", "Express (next day)"], "default": SPEEDS[0]}),
        ),
        (
            "carrier",
            json!({"type": "string", "title": "Carrier", "oneOf": [
            {"const": "post", "title": "National post"},
            {"const": "courier", "title": "Courier"}]}),
        ),
        (
            "extras",
            json!({"type": "array", "title": "Extras", "maxItems": 2, "items": {
            "anyOf": [{"const": "insurance", "title": "Insurance"},
                      {"const": "signature", "title": "Signature on delivery"},
                      {"const": "sms", "title": "SMS updates"}]}}),
        ),
        (
            "labels",
            json!({"type": "array", "title": "Labels", "minItems": 1,
            "items": {"type": "string", "enum": ["fragile", "upright", "perishable"]},
            "default": ["fragile"]}),
        ),
    ];
    for (name, field) in fields {
        schema["properties"][name] = field;
    }
    schema["required"] = json!(["street", "city", "email", "quantity", "speed", "carrier"]);
}

/// The rest of a rich-form answer (`--rich-form`): what is shipped, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// How many items (1 to 99; 1 when absent).
    pub quantity: u64,
    /// One of [`SPEEDS`] ("standard" when absent).
    pub speed: String,
    /// Whether to gift-wrap (false when absent).
    pub gift: bool,
}

impl Order {
    /// The order fields of an accepted rich-form answer, or what is wrong with them.
    fn from_content(content: &Map<String, Value>) -> Result<Self, &'static str> {
        let quantity = match content.get("quantity") {
            None => 1,
            Some(q) => q
                .as_u64()
                .filter(|q| (1..=99).contains(q))
                .ok_or("an invalid quantity")?,
        };
        let speed = match content.get("speed") {
            None => SPEEDS[0],
            Some(s) => s
                .as_str()
                .filter(|s| SPEEDS.contains(s))
                .ok_or("an invalid speed")?,
        };
        let gift = match content.get("gift") {
            None => false,
            Some(g) => g.as_bool().ok_or("an invalid gift choice")?,
        };
        Ok(Self {
            quantity,
            speed: speed.to_string(),
            gift,
        })
    }
}

/// The rest of a contact-form answer (`--contact-form`): whom to tell, and when to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contact {
    /// Where shipping updates go.
    pub email: String,
    /// The delivery date (`YYYY-MM-DD`), if one was asked for.
    pub deliver_on: Option<String>,
}

impl Contact {
    /// The contact fields of an accepted contact-form answer, or what is wrong with them.
    fn from_content(content: &Map<String, Value>) -> Result<Self, &'static str> {
        let email = non_empty(content, "email").ok_or("no email")?;
        let deliver_on = match content.get("deliver_on") {
            None => None,
            Some(d) => Some(d.as_str().ok_or("an invalid delivery date")?.to_string()),
        };
        Ok(Self {
            email: email.to_string(),
            deliver_on,
        })
    }
}

/// The plain `elicitation/create` params asking for `key` (form mode), without `_meta`.
fn elicitation_params(key: &str) -> Value {
    if key == CONTACT_EMAIL {
        json!({
            "mode": "form",
            "message": "Which email address should receive shipping updates?",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "email": {"type": "string", "title": "Email", "format": "email"}
                },
                "required": ["email"]
            }
        })
    } else {
        json!({
            "mode": "form",
            "message": "Where should the shipment be delivered?",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "street": {"type": "string", "title": "Street", "minLength": 1},
                    "city": {"type": "string", "title": "City", "minLength": 1}
                },
                "required": ["street", "city"]
            }
        })
    }
}

/// Whether a client's `elicitation` capability covers form mode: an object that is empty
/// (form only, the 2025-06-18 shape) or names `form`.
pub fn supports_form(capabilities: &Value) -> bool {
    match capabilities.get("elicitation") {
        Some(Value::Object(elicitation)) => {
            elicitation.is_empty() || elicitation.contains_key("form")
        }
        _ => false,
    }
}

/// A successful booking (the rich form's order and the contact form's fields, when there are
/// some, are echoed in the text).
fn booked(
    street: &str,
    city: &str,
    email: Option<&str>,
    order: Option<&Order>,
    contact: Option<&Contact>,
) -> Value {
    let mut structured = json!({"booked": true, "street": street, "city": city});
    if let Some(email) = email {
        structured["email"] = json!(email);
    }
    let mut text = format!("Booked shipment to {street}, {city}");
    if let Some(order) = order {
        structured["quantity"] = json!(order.quantity);
        structured["speed"] = json!(order.speed);
        structured["gift"] = json!(order.gift);
        text.push_str(&format!(
            " (quantity {}, {} delivery, gift wrap {})",
            order.quantity,
            order.speed,
            if order.gift { "yes" } else { "no" }
        ));
    }
    if let Some(contact) = contact {
        structured["email"] = json!(contact.email);
        structured["deliver_on"] = json!(contact.deliver_on);
        text.push_str(&format!(
            " (updates to {}, delivery on {})",
            contact.email,
            contact.deliver_on.as_deref().unwrap_or("any day")
        ));
    }
    json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": false
    })
}

/// A call that completed without booking (not an error).
fn not_booked(text: &str, reason: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"booked": false, "reason": reason},
        "isError": false
    })
}

/// A tool error result (`isError: true`).
pub fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// The `report_env` result: the process environment as JSON text (and structured).
pub fn report_env() -> Value {
    let env: BTreeMap<String, String> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    let text = serde_json::to_string(&env).unwrap_or_else(|_| "{}".to_string());
    json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"env": env},
        "isError": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(content: Value) -> Answer {
        Answer::parse(&json!({"action": "accept", "content": content})).unwrap()
    }

    #[test]
    fn one_round_books_the_address() {
        let knobs = Knobs::default();
        let next = knobs.after_round(
            1,
            &[(
                SHIPPING_ADDRESS,
                accept(json!({"street": "1 Main", "city": "Oslo"})),
            )],
        );
        let Next::Finish(result) = next else {
            panic!("{next:?}")
        };
        assert_eq!(
            result["content"][0]["text"],
            "Booked shipment to 1 Main, Oslo"
        );
        assert_eq!(result["structuredContent"]["booked"], true);
    }

    #[test]
    fn rounds_and_failures_follow_the_knobs() {
        let address = || accept(json!({"street": "s", "city": "c"}));
        let two = Knobs {
            ask_rounds: 2,
            ..Knobs::default()
        };
        assert_eq!(
            two.after_round(1, &[(SHIPPING_ADDRESS, address())]),
            Next::AskAgain(2)
        );
        assert!(matches!(
            two.after_round(2, &[(SHIPPING_ADDRESS, address())]),
            Next::Finish(_)
        ));
        let forever = Knobs {
            ask_forever: true,
            ..Knobs::default()
        };
        assert_eq!(
            forever.after_round(7, &[(SHIPPING_ADDRESS, address())]),
            Next::AskAgain(8)
        );
        let failing = Knobs {
            fail_after_answer: true,
            ..Knobs::default()
        };
        assert!(matches!(
            failing.after_round(1, &[(SHIPPING_ADDRESS, Answer::Decline)]),
            Next::Fail(RpcError { code: -32603, .. })
        ));
    }

    #[test]
    fn bad_answers_do_not_book() {
        let knobs = Knobs::default();
        let Next::Finish(missing) =
            knobs.after_round(1, &[(SHIPPING_ADDRESS, accept(json!({"street": "s"})))])
        else {
            panic!()
        };
        assert_eq!(missing["isError"], true);
        assert!(Answer::parse(&json!({"action": "maybe"})).is_err());
        assert!(Answer::parse(&json!("accept")).is_err());
        assert_eq!(
            Answer::parse(&json!({"action": "accept", "content": null})).unwrap(),
            Answer::Accept(Map::new())
        );
    }

    #[test]
    fn the_rich_form_asks_for_the_order_and_echoes_it() {
        let rich = Knobs {
            rich_form: true,
            ..Knobs::default()
        };
        let schema = &rich.elicitation_params(SHIPPING_ADDRESS)["requestedSchema"];
        assert_eq!(schema["properties"]["quantity"]["default"], 1);
        assert_eq!(schema["properties"]["speed"]["enum"], json!(SPEEDS));
        assert_eq!(schema["properties"]["gift"]["type"], "boolean");
        assert_eq!(
            schema["required"],
            json!(["street", "city", "quantity", "speed"])
        );
        let plain = &Knobs::default().elicitation_params(SHIPPING_ADDRESS)["requestedSchema"];
        assert!(plain["properties"].get("quantity").is_none());
        let answer = accept(json!({
            "street": "1 Main", "city": "Oslo", "quantity": 3, "speed": "express", "gift": true
        }));
        let Next::Finish(result) = rich.after_round(1, &[(SHIPPING_ADDRESS, answer)]) else {
            panic!()
        };
        assert_eq!(
            result["content"][0]["text"],
            "Booked shipment to 1 Main, Oslo (quantity 3, express delivery, gift wrap yes)"
        );
        assert_eq!(result["structuredContent"]["speed"], "express");
        let defaults = accept(json!({"street": "s", "city": "c"}));
        let Next::Finish(result) = rich.after_round(1, &[(SHIPPING_ADDRESS, defaults)]) else {
            panic!()
        };
        assert_eq!(
            result["content"][0]["text"],
            "Booked shipment to s, c (quantity 1, standard delivery, gift wrap no)"
        );
        let bad = accept(json!({"street": "s", "city": "c", "quantity": 0}));
        let Next::Finish(result) = rich.after_round(1, &[(SHIPPING_ADDRESS, bad)]) else {
            panic!()
        };
        assert_eq!(result["isError"], true);
    }

    #[test]
    fn form_support_follows_the_capability_shape() {
        assert!(supports_form(&json!({"elicitation": {}})));
        assert!(supports_form(
            &json!({"elicitation": {"form": {}, "url": {}}})
        ));
        assert!(!supports_form(&json!({"elicitation": {"url": {}}})));
        assert!(!supports_form(&json!({"sampling": {}})));
        assert!(!supports_form(&Value::Null));
    }
}
