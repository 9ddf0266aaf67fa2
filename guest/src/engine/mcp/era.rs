//! Choosing the protocol era of a connection.
//!
//! The client sends `server/discover` first. A discover result, or a recognised modern error
//! (-32022 unsupported version), means the modern era (2026-07-28). Any other error, or no answer
//! within the probe timeout, means legacy: `initialize` + `notifications/initialized`. A binding
//! may force the era (some dual-era servers fix the era at their first request).

use super::{LEGACY_VERSION, MODERN_VERSION};
use crate::mcp::message::RpcError;
use serde_json::{Value, json};

/// The era a server binding asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EraChoice {
    /// Probe with `server/discover`.
    Auto,
    /// Legacy only: never send `server/discover`.
    Legacy,
    /// Modern only: no `initialize`.
    Modern,
}

/// The era a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// MCP 2025-06-18 / 2025-11-25: `initialize`, server-initiated `elicitation/create`.
    Legacy,
    /// MCP 2026-07-28: per-request `_meta`, `input_required` results.
    Modern,
}

/// What the probe saw.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeOutcome {
    /// `server/discover` returned a result.
    Discovered(Value),
    /// `server/discover` returned an error.
    Failed(RpcError),
    /// No answer within the probe timeout.
    TimedOut,
}

/// The era a probe outcome means.
pub fn decide(outcome: &ProbeOutcome) -> Era {
    match outcome {
        ProbeOutcome::Discovered(_) => Era::Modern,
        ProbeOutcome::Failed(e) if e.code == -32022 && supports_modern(e.data.as_ref()) => {
            Era::Modern
        }
        ProbeOutcome::Failed(_) | ProbeOutcome::TimedOut => Era::Legacy,
    }
}

fn supports_modern(data: Option<&Value>) -> bool {
    data.and_then(|d| d.get("supported"))
        .and_then(Value::as_array)
        .is_some_and(|versions| versions.iter().any(|v| v == MODERN_VERSION))
}

/// The client capabilities: form and URL elicitation.
pub fn client_capabilities() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}})
}

/// The client's identity.
pub fn client_info() -> Value {
    json!({"name": "m3", "title": "M3 managed input", "version": env!("CARGO_PKG_VERSION")})
}

/// The `_meta` every modern request carries.
pub fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": client_capabilities(),
        "io.modelcontextprotocol/clientInfo": client_info(),
    })
}

/// Params of the `server/discover` probe.
pub fn discover_params() -> Value {
    json!({"_meta": modern_meta()})
}

/// Params of `initialize` (legacy), declaring form and URL elicitation.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": LEGACY_VERSION,
        "capabilities": client_capabilities(),
        "clientInfo": client_info(),
    })
}

/// Adds the era's per-request fields to `params` of an operation (`tools/call`, ...).
pub fn decorate(era: Era, mut params: Value) -> Value {
    if era == Era::Modern
        && let Value::Object(map) = &mut params
    {
        let meta = map.entry("_meta").or_insert_with(|| json!({}));
        if let (Value::Object(meta), Value::Object(ours)) = (meta, modern_meta()) {
            meta.extend(ours);
        }
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(code: i64, data: Option<Value>) -> ProbeOutcome {
        ProbeOutcome::Failed(RpcError {
            code,
            message: String::new(),
            data,
        })
    }

    #[test]
    fn a_discover_result_or_a_modern_version_error_means_modern() {
        assert_eq!(decide(&ProbeOutcome::Discovered(json!({}))), Era::Modern);
        assert_eq!(
            decide(&failed(-32022, Some(json!({"supported": ["2026-07-28"]})))),
            Era::Modern
        );
    }

    #[test]
    fn anything_else_means_legacy() {
        for outcome in [
            failed(-32601, None),
            failed(-32602, None),
            failed(-32600, None),
            ProbeOutcome::TimedOut,
            failed(-32022, Some(json!({"supported": ["2099-01-01"]}))),
        ] {
            assert_eq!(decide(&outcome), Era::Legacy, "{outcome:?}");
        }
    }

    #[test]
    fn modern_requests_carry_version_and_capabilities() {
        let params = decorate(
            Era::Modern,
            json!({"name": "book_shipment", "arguments": {}}),
        );
        assert_eq!(
            params["_meta"]["io.modelcontextprotocol/protocolVersion"],
            MODERN_VERSION
        );
        assert!(
            params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["elicitation"]["url"]
                .is_object()
        );
        assert!(decorate(Era::Legacy, json!({})).get("_meta").is_none());
        assert_eq!(
            initialize_params()["capabilities"]["elicitation"],
            json!({"form": {}, "url": {}})
        );
    }
}
