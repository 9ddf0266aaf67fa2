//! The fixtures the benchmarks share: every kind of field of the MCP form subset (the same form
//! as `tests/support`'s `every_kind_schema`), the booking agent and its answer against the
//! bundled shipping server, its address round as a worker stores it, and small conversions.

use m3::{
    AgentSpec, ElicitationRequest, ElicitationResponse, HumanInput, McpEra, NewRound, Script,
    StdioServer, Submission,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

use crate::BenchResult;

/// A path as text (bench arguments and JSON need UTF-8).
pub fn path_text(path: &Path) -> BenchResult<String> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| format!("not a UTF-8 path: {}", path.display()).into())
}

/// The era's name, as the tables print it.
pub fn era_name(era: McpEra) -> &'static str {
    match era {
        McpEra::Auto => "auto",
        McpEra::Legacy => "legacy",
        McpEra::Modern => "modern",
    }
}

/// The agent that books one shipment with the bundled shipping server.
pub fn booking_agent() -> AgentSpec {
    AgentSpec::scripted(Script::call(
        "shipping:book_shipment",
        json!({"item": "book", "quantity": 1}),
    ))
}

/// The shipping server at `server` in the modern era, asking once per call.
pub fn booking_server(server: &Path) -> BenchResult<StdioServer> {
    Ok(StdioServer::new("shipping", path_text(server)?)
        .args(["--era", "modern", "--ask-rounds", "1"])
        .era(McpEra::Modern))
}

/// A booking on `binding` with managed input: one round, answered by a caller.
pub fn booking_submission(binding: StdioServer) -> Submission {
    Submission::new(
        "Ask for the delivery address, then book the shipment.",
        binding,
    )
    .tools(["shipping:book_shipment"])
    .human_input(HumanInput::Managed)
    .round_limit(1)
}

/// The request key of the shipping server's address form.
pub const ADDRESS_KEY: &str = "shipping_address";

/// The address the answers give.
pub fn address_content() -> Value {
    json!({"street": "1 Main Street", "city": "Pune"})
}

/// The shipping server's address round, answered.
pub fn address() -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        ADDRESS_KEY.to_string(),
        ElicitationResponse::accept(address_content()),
    )])
}

/// A pending address round for the shipping server's `book_shipment`, made through the store
/// API with no execution behind it. It has no owner: an owned round's lease, which nothing here
/// renews, would expire and have it recovered (failed) while a slow run still reads it.
pub fn address_round(round_id: &str, execution_id: &str) -> NewRound {
    let requests = BTreeMap::from([(
        ADDRESS_KEY.to_string(),
        ElicitationRequest::form(
            "Where should the shipment be delivered?",
            json!({
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                "required": ["street", "city"]
            }),
        ),
    )]);
    NewRound::new(
        round_id,
        execution_id,
        "shipping",
        "book_shipment",
        requests,
    )
}

/// The every-kind form.
pub fn every_kind_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2, "maxLength": 10},
            "email": {"type": "string", "format": "email"},
            "site": {"type": "string", "format": "uri"},
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "score": {"type": "number", "minimum": 0.5, "maximum": 9.5},
            "agree": {"type": "boolean"},
            "color": {"type": "string", "enum": ["red", "green"], "enumNames": ["Red", "Green"]},
            "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 2}
        },
        "required": ["name", "age"]
    })
}

/// A valid answer to it with every field.
pub fn every_kind_answer() -> Value {
    json!({
        "name": "Asha", "email": "asha@example.com", "site": "https://example.com/x",
        "day": "2026-11-30", "at": "2026-11-30T12:00:00Z", "age": 30, "score": 2.5,
        "agree": true, "color": "red", "size": "s", "tags": ["a", "b"]
    })
}
