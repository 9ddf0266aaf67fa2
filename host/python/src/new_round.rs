//! The JSON form of a new round the Python `create_round` sends (its arguments, named as the
//! specification names them) -> [`m3::NewRound`].

use crate::failure::{Outcome, invalid};
use m3::{Deadline, ElicitationRequest, HarnessMetadata, NewRound, OperationKind, OwnerClaim};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `create_round`'s arguments as the Python side sends them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewRoundJson {
    round_id: String,
    execution_id: String,
    logical_operation_id: String,
    server: String,
    operation_kind: OperationKind,
    operation_name: String,
    requests: BTreeMap<String, ElicitationRequest>,
    request_state: Option<String>,
    /// `None`: no deadline (the specification's default).
    deadline: Option<chrono::DateTime<chrono::Utc>>,
    round_index: u32,
    round_limit: u32,
    owner: Option<OwnerJson>,
    operation_parameters: serde_json::Map<String, serde_json::Value>,
    harness: HarnessMetadata,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnerJson {
    owner_id: String,
    lease_ttl_ms: f64,
}

/// A lease duration in milliseconds -> a `Duration` (the component checks its range).
pub(crate) fn lease_ttl(ms: f64) -> Outcome<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| {
        invalid(
            "invalid_lease",
            "lease_ttl must be a positive, finite number of seconds",
        )
    })
}

/// Reads the JSON of `create_round`'s arguments.
pub(crate) fn new_round(text: &str) -> Outcome<NewRound> {
    let json: NewRoundJson = serde_json::from_str(text).map_err(|e| {
        invalid(
            "invalid_round",
            format!("the round does not convert: {}", kind_only(&e)),
        )
    })?;
    let owner = match json.owner {
        Some(owner) => Some(OwnerClaim {
            owner_id: owner.owner_id,
            lease_ttl: lease_ttl(owner.lease_ttl_ms)?,
        }),
        None => None,
    };
    Ok(NewRound {
        round_id: json.round_id,
        execution_id: json.execution_id,
        logical_operation_id: json.logical_operation_id,
        server: json.server,
        operation_kind: json.operation_kind,
        operation_name: json.operation_name,
        requests: json.requests,
        request_state: json.request_state,
        deadline: json.deadline.map_or(Deadline::None, Deadline::At),
        round_index: json.round_index,
        round_limit: json.round_limit,
        owner,
        operation_parameters: json.operation_parameters,
        harness: json.harness,
    })
}

/// What serde_json found wrong, naming fields but never a value given: a wrong value may be an
/// environment variable's or a header's (a secret), or part of a request.
pub(crate) fn kind_only(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let named = ["missing field", "unknown field", "duplicate field"];
    match named.iter().find(|head| text.starts_with(*head)) {
        Some(_) => {
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            text.strip_suffix(&suffix).unwrap_or(&text).to_string()
        }
        None => "a value has the wrong type or form".to_string(),
    }
}
