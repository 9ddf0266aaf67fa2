//! `m3 validate` and `m3 check-schema`: the component's policy in the sandbox, with no database,
//! for testing policies.

use crate::{Cli, json, print_json, read_input};
use anyhow::Result;
use m3::Policy;
use std::path::Path;
use std::process::ExitCode;

/// `m3 validate --round FILE --responses FILE`. The round file is what `m3 pending --json`
/// prints when it lists exactly one round, or one element of that array.
pub fn validate(cli: &Cli, round: &Path, responses: &Path) -> Result<ExitCode> {
    let round_text = read_input(round).map_err(crate::invalid_input)?;
    let round_json: serde_json::Value = serde_json::from_str(&round_text)
        .map_err(|_| crate::invalid_input("the round file is not JSON (malformed_json)"))?;
    let round = one_round(&round_json)
        .and_then(json::pending_round_from)
        .map_err(|e| {
            crate::invalid_input(format!(
                "the round file is not a pending round as `m3 pending --json` prints it: {e}"
            ))
        })?;
    let responses = read_input(responses).map_err(crate::invalid_input)?;
    crate::engine_start::prepare(cli);
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

/// The round of a round file: `pending --json`'s output (an array, which must hold exactly one
/// round) or one element of it (an object).
fn one_round(v: &serde_json::Value) -> Result<&serde_json::Value> {
    match v.as_array().map(Vec::as_slice) {
        None => Ok(v),
        Some([one]) => Ok(one),
        Some([]) => anyhow::bail!("an empty array holds no round; give one round"),
        Some(many) => anyhow::bail!(
            "an array of {} rounds; give one round (an object, or an array of exactly one)",
            many.len()
        ),
    }
}

/// `m3 check-schema FILE`.
pub fn check_schema(cli: &Cli, file: &Path) -> Result<ExitCode> {
    let text = read_input(file).map_err(crate::invalid_input)?;
    crate::engine_start::prepare(cli);
    Policy::new()?.check_requested_schema_json(text)?;
    if cli.json {
        print_json(&serde_json::json!({"valid": true}), false);
    } else {
        println!("valid: the schema is inside the MCP form subset");
    }
    Ok(ExitCode::SUCCESS)
}
