//! Checks of a submission before it runs (the specification's `ModelValidationError` cases).

use crate::errors::bounded;
use crate::exports::m3::managed_input::policy::{HumanInput, SubmissionError};

fn error(message: String) -> SubmissionError {
    SubmissionError { message }
}

/// `fail` or `managed`.
pub fn parse_human_input(value: &str) -> Result<HumanInput, SubmissionError> {
    match value {
        "fail" => Ok(HumanInput::Fail),
        "managed" => Ok(HumanInput::Managed),
        other => Err(error(format!(
            "unknown human_input `{}`: expected \"fail\" or \"managed\"",
            bounded(other)
        ))),
    }
}

/// `managed` needs a resolvable managed-input store and no elicitation plan.
pub fn check_human_input(
    mode: HumanInput,
    agent_has_plan: bool,
    store_resolves: bool,
) -> Result<(), SubmissionError> {
    if mode == HumanInput::Fail {
        return Ok(());
    }
    if agent_has_plan {
        return Err(error(
            "human_input \"managed\" cannot be combined with an agent that has an elicitation plan"
                .into(),
        ));
    }
    if !store_resolves {
        return Err(error(
            "human_input \"managed\" requires a persistent execution store with a managed-input store".into(),
        ));
    }
    Ok(())
}

/// Every entry `server:tool` for this server; the tool names, in order, deduplicated.
pub fn check_tool_allow_list(
    server: &str,
    tools: &[String],
) -> Result<Vec<String>, SubmissionError> {
    if server.is_empty() || server.contains(':') {
        return Err(error(format!(
            "the server binding's name `{}` must be non-empty and contain no `:`",
            bounded(server)
        )));
    }
    let mut names: Vec<String> = Vec::with_capacity(tools.len());
    for entry in tools {
        let Some((named_server, tool)) = entry.split_once(':') else {
            return Err(error(format!(
                "tool `{}` must be written `server:tool`",
                bounded(entry)
            )));
        };
        if named_server.is_empty() || tool.is_empty() || tool.contains(':') {
            return Err(error(format!(
                "tool `{}` must be written `server:tool`",
                bounded(entry)
            )));
        }
        if named_server != server {
            return Err(error(format!(
                "tool `{}` names server `{}`, but the submission's server is `{}`",
                bounded(entry),
                bounded(named_server),
                bounded(server)
            )));
        }
        if !names.iter().any(|n| n == tool) {
            names.push(tool.to_string());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_input_values_parse_strictly() {
        assert_eq!(parse_human_input("managed").unwrap(), HumanInput::Managed);
        assert_eq!(parse_human_input("fail").unwrap(), HumanInput::Fail);
        for bad in ["Managed", "", "auto", "managed "] {
            assert!(parse_human_input(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn managed_needs_a_store_and_no_plan() {
        assert!(check_human_input(HumanInput::Managed, false, true).is_ok());
        assert!(check_human_input(HumanInput::Managed, true, true).is_err());
        assert!(check_human_input(HumanInput::Managed, false, false).is_err());
        assert!(check_human_input(HumanInput::Fail, true, false).is_ok());
    }

    #[test]
    fn tool_entries_name_this_server() {
        let tools = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            check_tool_allow_list(
                "shipping",
                &tools(&["shipping:book_shipment", "shipping:track", "shipping:track"])
            )
            .unwrap(),
            ["book_shipment", "track"]
        );
        for bad in [
            &["book_shipment"][..],
            &["billing:charge"],
            &[":x"],
            &["shipping:"],
            &["shipping:a:b"],
        ] {
            assert!(
                check_tool_allow_list("shipping", &tools(bad)).is_err(),
                "{bad:?}"
            );
        }
        assert!(check_tool_allow_list("", &tools(&[])).is_err());
    }
}
