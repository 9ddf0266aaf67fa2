//! Several models (the specification's `kit.agents([{"harness": "codex", "models": [a, b]}])`):
//! an agent spec read from its dict form gives one agent per model, and each agent's
//! executions run Codex on its own model, against the real, pinned Codex CLI and the loopback
//! model (which logs the `model` of every request it receives).

use crate::codex::{FakeModel, address, codex_binary, submission, wait_pending};
use anyhow::{Result, ensure};
use m3::*;
use m3_tests::*;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The `model` of every request the fake model logged so far (`fake-model: model: NAME`).
fn models_logged(log: &Path) -> Result<Vec<String>> {
    Ok(std::fs::read_to_string(log)?
        .lines()
        .filter_map(|line| line.strip_prefix("fake-model: model: "))
        .map(str::to_string)
        .collect())
}

/// `{"harness": "codex", "models": ["model-a", "model-b"], ..}` gives two agents; the execution
/// of each succeeds, and every request its Codex sends the model names that agent's model.
#[test]
fn two_models_give_two_agents_whose_executions_use_their_own_model() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "tool")?;
    let log = db.dir.path().join("model-tool.log");
    let spec = AgentSpec::from_json(
        &json!({
            "harness": "codex",
            "models": ["model-a", "model-b"],
            "codex": {
                "binary": codex_binary()?.display().to_string(),
                "model_provider": {
                    "name": "fake",
                    "base_url": format!("http://127.0.0.1:{}/v1", model.port),
                },
                "turn_deadline_secs": 120,
                "request_timeout_secs": 60,
            },
        })
        .to_string(),
    )?;
    let store = Arc::new(SqliteExecutionStore::open(&db.path)?);
    let kit = McpTestKit::new(store, [("PATH", std::env::var("PATH").unwrap_or_default())])?;
    let agents = kit.agents([spec])?;
    let names: Vec<_> = agents.iter().map(Agent::model).collect();
    assert_eq!(names, [Some("model-a"), Some("model-b")]);

    // One execution after the other, so each model request is known to be its execution's.
    let mut executions = Vec::new();
    for agent in &agents {
        let before = models_logged(&log)?.len();
        let handle = agent.submit(submission(HumanInput::Managed))?;
        let pending = wait_pending(&handle)?;
        handle.respond_elicitation(&pending.round_id, address(), "address")?;
        let result = handle.result(Some(Duration::from_secs(120)))?;
        assert!(result.succeeded(), "{}", result.outcome);
        let call = &result.outcome.tool_results[0];
        assert!(call.text().contains("1 Main Street"), "{}", call.text());
        // The tool call and the final message: at least two model requests, all on this
        // agent's model.
        let seen = models_logged(&log)?.split_off(before);
        let own = agent.model().unwrap_or_default();
        ensure!(
            seen.len() >= 2 && seen.iter().all(|m| m == own),
            "{own}'s execution made the model requests {seen:?}"
        );
        executions.push(result.execution_id);
    }
    ensure!(
        executions[0] != executions[1],
        "two executions: {executions:?}"
    );
    // Both are stored, finished and succeeded.
    for id in &executions {
        let state = kit.execution(id)?.snapshot()?;
        assert_eq!(state.lifecycle, ExecutionStatus::Finished);
        assert_eq!(
            state.outcome.map(|o| o.kind),
            Some(OutcomeKind::Succeeded),
            "{id}"
        );
    }
    Ok(())
}
