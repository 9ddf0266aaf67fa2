//! `m3 demo`: the specification's example end to end, with the bundled example server (this
//! binary, `m3 example-server`) and the scripted harness: on a fresh database removed
//! afterwards, or on the `--db` given (created if missing, and kept).

use crate::run::Output;
use crate::{Cli, EraArg, json, print_json};
use anyhow::{Result, anyhow};
use m3::{
    AgentSpec, ElicitationResponse, ExecutionStatus, HumanInput, McpEra, McpTestKit, Script,
    SqliteExecutionStore, StdioServer, Submission,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The answer used when there is neither `--answer` nor a terminal to ask on.
const SPEC_ANSWER: &str = r#"{"street": "1 Main Street", "city": "Pune"}"#;

/// A private directory for the demo's fresh database, removed afterwards.
struct FreshDir(std::path::PathBuf);

impl FreshDir {
    fn new() -> Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("m3-demo-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| {
            anyhow!(
                "StorageError: the demo's directory {} cannot be created: {e}",
                dir.display()
            )
        })?;
        Ok(Self(dir))
    }
}

impl Drop for FreshDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Ctrl-C before the answer: the execution is cancelled (its open round fails `cancelled`), the
/// terminal restored, and the command ends with 130. A cancel that cannot be written is the
/// command's error, never dropped; an execution that has not ended within 30 s is said so.
fn interrupted(handle: &m3::ExecutionHandle, output: &Output) -> Result<ExitCode> {
    output.progress.finish_and_clear();
    crate::form::restore_terminal();
    handle.cancel()?;
    if let Err(e) = handle.result(Some(Duration::from_secs(30))) {
        eprintln!("interrupted: the cancel is stored, but the execution has not ended yet: {e}");
        return Ok(ExitCode::from(crate::interrupt::EXIT_CODE));
    }
    eprintln!("interrupted: the execution was cancelled");
    Ok(ExitCode::from(crate::interrupt::EXIT_CODE))
}

/// `m3 demo`.
pub fn demo(cli: &Cli, era: Option<EraArg>, answer: Option<&str>) -> Result<ExitCode> {
    // A database named on the command line (or by M3_DB) is used and kept, so that `m3 status`
    // and `m3 events` can show the demo's execution afterwards.
    let (_dir, db) = if cli.db_given {
        (None, cli.db.clone())
    } else {
        let dir = FreshDir::new()?;
        let db = dir.0.join("executions.sqlite");
        (Some(dir), db)
    };
    let program = std::env::current_exe()
        .map_err(|e| anyhow!("EngineError: this program cannot locate itself: {e}"))?;
    let mut server =
        StdioServer::new("shipping", program.display().to_string()).args(["example-server"]);
    server.era = match era {
        None => McpEra::Auto,
        Some(EraArg::Legacy) => McpEra::Legacy,
        Some(EraArg::Modern) => McpEra::Modern,
    };
    if let Some(era) = era {
        server = server.args([
            "--era",
            if era == EraArg::Legacy {
                "legacy"
            } else {
                "modern"
            },
        ]);
    }
    crate::engine_start::prepare(cli);
    let store: Arc<dyn m3::ExecutionStore> = if cli.db_given {
        crate::execution_store(cli)?
    } else {
        Arc::new(SqliteExecutionStore::open(&db)?)
    };
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let agent = kit
        .agents([AgentSpec::scripted(Script::call(
            "shipping:book_shipment",
            json!({"item": "book", "quantity": 1}),
        ))])?
        .remove(0);
    let output = Output::new(cli, answer.is_some());
    // Ctrl-C cancels the execution (its round fails `cancelled`); a second one exits at once.
    let interrupt = crate::interrupt::Interrupt::catch()?;
    let say = |line: String| {
        if !output.json {
            output.progress.suspend(|| println!("{line}"));
        }
    };
    say(if cli.db_given {
        format!("database: {} (kept)", crate::database_shown(cli))
    } else {
        format!("database: {} (fresh, removed afterwards)", db.display())
    });
    let handle = agent.submit(
        Submission::new(
            "Ask for the delivery address, then book the shipment.",
            server,
        )
        .tools(["shipping:book_shipment"])
        .human_input(HumanInput::Managed),
    )?;
    say(format!("submitted execution {}", handle.execution_id()));
    output.progress.set_message("waiting for the server to ask");
    let until = Instant::now() + Duration::from_secs(60);
    let pending = loop {
        if interrupt.requested() {
            return interrupted(&handle, &output);
        }
        if let Some(pending) = handle.pending_elicitation()? {
            break pending;
        }
        let snapshot = handle.snapshot()?;
        if snapshot.lifecycle == ExecutionStatus::Finished {
            return Err(anyhow!(
                "ManagedInputStateError: the execution finished before it asked for input: {}",
                snapshot.outcome.map(|o| o.to_string()).unwrap_or_default()
            ));
        }
        if Instant::now() > until {
            return Err(anyhow!(
                "OperationTimeout: the server did not ask within 60 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if output.json {
        print_json(
            &json!({"event": "pending", "round": json::pending_round(&pending)}),
            true,
        );
    } else {
        output.progress.suspend(|| {
            println!("pending round {}:", pending.round_id);
            println!(
                "{}",
                crate::json_text(&json::pending_round(&pending), false)
            );
        });
    }
    let key = format!("address-{}", pending.round_id);
    if output.interactive {
        let answers = match output
            .progress
            .suspend(|| crate::form::ask_round(&pending, None))
        {
            Ok(answers) => answers,
            Err(e) if crate::form::interrupted(&e) => return interrupted(&handle, &output),
            Err(e) => return Err(e),
        };
        handle.respond_elicitation(&pending.round_id, answers, &key)?;
    } else {
        let text = answer.unwrap_or(SPEC_ANSWER);
        let content: Value = serde_json::from_str(text).map_err(|_| {
            anyhow!("ManagedInputValidationError: --answer is not valid JSON (malformed_json)")
        })?;
        say(format!("answering shipping_address with {text}"));
        handle.respond_elicitation(
            &pending.round_id,
            BTreeMap::from([(
                "shipping_address".to_string(),
                ElicitationResponse::accept(content),
            )]),
            &key,
        )?;
    }
    output.progress.set_message("delivering the answer");
    let ended = handle.result(Some(Duration::from_secs(60)));
    output.progress.finish_and_clear();
    let code = crate::run::finish(ended, &output);
    let record = m3::ManagedInputStore::get_round(
        store
            .managed_input_store()?
            .ok_or_else(|| {
                anyhow!("StorageError: the execution store resolves no managed-input store")
            })?
            .as_ref(),
        &pending.round_id,
    )?;
    if let Some(record) = record {
        say(format!(
            "round {} is {}",
            record.pending.round_id, record.status
        ));
    }
    drop(kit);
    store.close();
    code
}
