//! `m3 validate` and `m3 check-schema`: the component's policy in the sandbox, with no database,
//! for testing policies.

use crate::{Cli, json, print_json, read_input};
use anyhow::Result;
use m3::Policy;
use std::path::Path;
use std::process::ExitCode;

/// `m3 validate --round FILE --responses FILE`.
pub fn validate(cli: &Cli, round: &Path, responses: &Path) -> Result<ExitCode> {
    let round_text = read_input(round).map_err(crate::invalid_input)?;
    let round_json: serde_json::Value = serde_json::from_str(&round_text)
        .map_err(|_| crate::invalid_input("the round file is not JSON (malformed_json)"))?;
    let round = json::pending_round_from(&round_json).map_err(|e| {
        crate::invalid_input(format!(
            "the round file is not a pending round as `m3 pending --json` prints it: {e}"
        ))
    })?;
    let responses = read_input(responses).map_err(crate::invalid_input)?;
    let policy = Policy::new()?;
    let canonical = policy.validate_responses_json(&round, &responses)?;
    if cli.json {
        let map: serde_json::Map<String, serde_json::Value> = canonical
            .iter()
            .map(|(k, r)| (k.clone(), json::response(r)))
            .collect();
        print_json(&serde_json::json!({"valid": true, "responses": map}), false);
    } else {
        println!("valid: the answers fit round {}", round.round_id);
    }
    Ok(ExitCode::SUCCESS)
}

/// `m3 check-schema FILE`.
pub fn check_schema(cli: &Cli, file: &Path) -> Result<ExitCode> {
    let text = read_input(file).map_err(crate::invalid_input)?;
    Policy::new()?.check_requested_schema_json(text)?;
    if cli.json {
        print_json(&serde_json::json!({"valid": true}), false);
    } else {
        println!("valid: the schema is inside the MCP form subset");
    }
    Ok(ExitCode::SUCCESS)
}
