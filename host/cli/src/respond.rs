//! `m3 respond`: answers a pending round through the same path as `respond_elicitation` (the
//! component validates and commits; the worker, in whatever process, delivers it). The answers
//! come from the flags (scripts, with their own idempotency key), or, with none on a terminal,
//! from the same form `m3 run` shows (with a key made here and printed). `--wait` then follows
//! the round until it is resolved or failed.

use crate::interrupt::Interrupt;
use crate::{Cli, json, print_json, read_input};
use anyhow::{Result, anyhow, bail};
use clap::Args;
use m3::{
    FailureCode, ManagedInputError, ManagedInputRecord, ManagedInputStatus, ManagedInputStore,
};
use std::hash::{BuildHasher, Hasher};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How often `--wait` looks at the round.
const POLL: Duration = Duration::from_millis(25);

/// Arguments of `m3 respond`.
#[derive(Debug, Args)]
pub struct RespondArgs {
    /// The round to answer (or a unique prefix of its id).
    round_id: String,
    /// Makes a retry safe: the same key with the same answers returns the stored record.
    /// Required with answers given as flags; the terminal form makes one and prints it.
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    /// Accept request KEY with JSON content (`KEY=JSON`), or with none (`KEY`: URL consent).
    #[arg(long, value_name = "KEY[=JSON]")]
    accept: Vec<String>,
    /// Decline request KEY.
    #[arg(long, value_name = "KEY")]
    decline: Vec<String>,
    /// Cancel request KEY.
    #[arg(long, value_name = "KEY")]
    cancel: Vec<String>,
    /// All answers as a JSON object of request key -> `{"action", "content"}` (`-`: stdin).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["accept", "decline", "cancel"])]
    responses: Option<PathBuf>,
    /// Then wait until the round is resolved (exit 0) or failed (a typed error), for at most
    /// SECS seconds if given (`OperationTimeout` after that).
    #[arg(
        long,
        value_name = "SECS",
        num_args = 0..=1,
        require_equals = false,
        allow_negative_numbers = true
    )]
    wait: Option<Option<f64>>,
}

impl RespondArgs {
    /// Whether answers were given as flags (not asked in the form).
    fn has_answers(&self) -> bool {
        self.responses.is_some()
            || !self.accept.is_empty()
            || !self.decline.is_empty()
            || !self.cancel.is_empty()
    }
}

/// The response map as JSON text, from the flags. Content is checked to be one JSON value and
/// embedded verbatim, so the component's strict parser sees exactly what was typed.
fn response_map(args: &RespondArgs) -> Result<String> {
    if let Some(file) = &args.responses {
        return read_input(file).map_err(crate::invalid_input);
    }
    let mut entries = Vec::new();
    for accept in &args.accept {
        let (key, content) = match accept.split_once('=') {
            Some((key, content)) => {
                serde_json::from_str::<serde_json::Value>(content).map_err(|_| {
                    anyhow!(
                        "ManagedInputValidationError: the content given for `{key}` is not one JSON value (malformed_json)"
                    )
                })?;
                (key, Some(content))
            }
            None => (accept.as_str(), None),
        };
        let entry = match content {
            Some(content) => format!("{{\"action\":\"accept\",\"content\":{content}}}"),
            None => "{\"action\":\"accept\"}".to_string(),
        };
        entries.push((key.to_string(), entry));
    }
    for key in &args.decline {
        entries.push((key.clone(), "{\"action\":\"decline\"}".into()));
    }
    for key in &args.cancel {
        entries.push((key.clone(), "{\"action\":\"cancel\"}".into()));
    }
    if entries.is_empty() {
        return Err(crate::invalid_input(
            "give --accept, --decline, --cancel (one per request key) or --responses",
        ));
    }
    let body: Vec<String> = entries
        .iter()
        .map(|(k, v)| format!("{}:{v}", serde_json::Value::String(k.clone())))
        .collect();
    Ok(format!("{{{}}}", body.join(",")))
}

/// `m3 respond`.
pub fn respond(cli: &Cli, args: &RespondArgs) -> Result<ExitCode> {
    // Checked before anything is submitted: a bad `--wait` never leaves an answer behind.
    let wait = match args.wait {
        None => None,
        Some(None) => Some(None),
        Some(Some(secs)) => Some(Some(
            crate::seconds::seconds("--wait", secs, crate::seconds::WAIT)
                .map_err(crate::invalid_input)?,
        )),
    };
    let interrupt = if wait.is_some() || !args.has_answers() {
        Some(Interrupt::catch()?)
    } else {
        None
    };
    // The round's id, resolved from the prefix given (`ids.rs`), once the database is open.
    // What was submitted (the response map and its key): a repeat of it asks the component
    // what became of it once the round failed.
    let (executions, round_id, submitted) = if args.has_answers() {
        let text = response_map(args)?;
        let key = args.idempotency_key.as_deref().ok_or_else(|| {
            crate::invalid_input(
                "--idempotency-key KEY is required with --accept, --decline, --cancel or \
                 --responses (a retry with the same key and answers is safe); without them, on \
                 a terminal, m3 respond asks in a form and makes a key",
            )
        })?;
        let executions = crate::executions(cli)?;
        let round_id = crate::ids::round(&executions, &args.round_id)?;
        submit(&executions, &round_id, &text, key)?;
        (executions, round_id, (text, key.to_string()))
    } else {
        if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
            return Err(crate::invalid_input(
                "no answers given and no terminal to ask on: give --accept KEY[=JSON], \
                 --decline KEY or --cancel KEY (one per request key), or --responses FILE, \
                 with --idempotency-key KEY",
            ));
        }
        let executions = crate::executions(cli)?;
        let round_id = crate::ids::round(&executions, &args.round_id)?;
        let Some(submitted) =
            answer_in_form(cli, &executions, &round_id, args, interrupt.as_ref())?
        else {
            return Ok(ExitCode::from(crate::interrupt::EXIT_CODE));
        };
        (executions, round_id, submitted)
    };
    let store = executions.store();
    let record = store
        .get_round(&round_id)?
        .ok_or_else(|| anyhow!("StorageError: the round {round_id} disappeared"))?;
    if let (Some(limit), Some(interrupt)) = (wait, &interrupt) {
        // How the round ends says it all, a failure after the answer included.
        return wait_for_end(cli, store, &round_id, limit, interrupt);
    }
    if record.status == ManagedInputStatus::Failed {
        // It failed after the answer was taken. The repeat (same key, same answers) is refused
        // by the component with what became of the answer: delivered (and when), delivery
        // unconfirmed, or never delivered.
        let (text, key) = &submitted;
        submit(&executions, &round_id, text, key)?;
        bail!(
            "ManagedInputStateError: round {round_id} failed: {}",
            delivery_fact(&record)
        );
    }
    if cli.json {
        print_json(&json::record(&record, None), false);
    } else {
        println!("{}", said(&record));
    }
    Ok(ExitCode::SUCCESS)
}

/// Validates and commits `text` (a response map) for `round_id`.
pub fn submit(executions: &m3::Executions, round_id: &str, text: &str, key: &str) -> Result<()> {
    let store = executions.store();
    match store.get_round(round_id) {
        Ok(Some(record)) => {
            executions.respond(&record.pending.execution_id, round_id, text, key)?
        }
        // No such round (or an id the store refuses): the store's own typed error.
        _ => {
            store.submit_responses_json(round_id, text, key)?;
        }
    }
    Ok(())
}

/// A fresh idempotency key for an answer typed in the form: 128 bits from the standard
/// library's randomly seeded hasher, with the time mixed in.
fn new_key() -> String {
    let part = |salt: u64| {
        let mut hasher = std::hash::RandomState::new().build_hasher();
        hasher.write_u64(salt);
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        hasher.write_u32(std::process::id());
        hasher.finish()
    };
    format!("form-{:016x}{:016x}", part(1), part(2))
}

/// Shows the pending round's requests and asks for each in the terminal form, then submits the
/// answers under a key made here (or `--idempotency-key`), printed once they are taken. A
/// refused answer (rare: the form checks each field) says why and asks again with the typed
/// values. Whether it was submitted: not when Ctrl-C ended the form (said on stderr).
fn answer_in_form(
    cli: &Cli,
    executions: &m3::Executions,
    id: &str,
    args: &RespondArgs,
    interrupt: Option<&Interrupt>,
) -> Result<Option<(String, String)>> {
    let record = match executions.store().get_round(id) {
        Ok(Some(record)) => record,
        Ok(None) => bail!("ManagedInputStateError: round {id} does not exist (round_not_found)"),
        Err(e) => return Err(e.into()),
    };
    if record.status != ManagedInputStatus::Pending {
        bail!(
            "ManagedInputStateError: round {id} is {}, not pending: it takes no answer \
             (`m3 show {id}` says what it has)",
            record.status
        );
    }
    let key = args.idempotency_key.clone().unwrap_or_else(new_key);
    let mut earlier = None;
    let text = loop {
        let answers = match crate::form::ask_round(&record.pending, earlier.as_ref()) {
            Ok(answers) => answers,
            Err(e)
                if crate::form::interrupted(&e) || interrupt.is_some_and(Interrupt::requested) =>
            {
                crate::form::restore_terminal();
                eprintln!("interrupted: nothing was submitted for round {id}");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let text = serde_json::to_string(&answers)
            .map_err(|_| crate::invalid_input("the answers could not be encoded as JSON"))?;
        match executions.respond(&record.pending.execution_id, id, &text, &key) {
            Ok(()) => break text,
            Err(ManagedInputError::Validation(e)) => {
                eprintln!(
                    "ManagedInputValidationError: {}; asking again with your values",
                    crate::escaped::line(&e.to_string())
                );
                earlier = Some(answers);
            }
            Err(e) => return Err(e.into()),
        }
    };
    let line = format!(
        "submitted with idempotency key {key} (the same key with the same answers repeats safely)"
    );
    if cli.json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
    Ok(Some((text, key)))
}

/// What the stored status of a round whose answer was just taken means, never more: its worker
/// delivers the answer once or fails the round saying why.
fn said(record: &ManagedInputRecord) -> String {
    let id = &record.pending.round_id;
    match record.status {
        ManagedInputStatus::ResponseValidated => format!(
            "round {id} is response_validated: the answers are stored and wait for its worker, \
             which delivers them once or fails the round saying why (`m3 show {id}`)"
        ),
        ManagedInputStatus::DeliveryStarted => {
            format!("round {id} is delivery_started: the answers are being delivered")
        }
        ManagedInputStatus::Delivered => format!(
            "round {id} is delivered: the server received the answers and its reply is awaited"
        ),
        ManagedInputStatus::Resolved => {
            format!("round {id} is resolved: the answers were delivered and the server replied")
        }
        // Not after a taken answer (a failed round is reported as an error before this).
        status @ (ManagedInputStatus::Pending | ManagedInputStatus::Failed) => {
            format!("round {id} is {status}")
        }
    }
}

/// What became of a failed round's answers, as its timestamps record it (`--wait`'s report).
fn delivery_fact(record: &ManagedInputRecord) -> String {
    let t = &record.timestamps;
    match (t.delivered_at, t.delivery_started_at) {
        (Some(at), _) => format!(
            "its answers were delivered to the server at {} before it failed",
            at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        ),
        (None, Some(at)) => format!(
            "delivery of its answers started at {} and was never confirmed: the server may \
             have received them",
            at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        ),
        (None, None) => "its answers were never delivered".to_string(),
    }
}

/// `--wait`: follows the round until it is resolved (exit 0, the record printed with `--json`)
/// or failed (its failure as a typed error: `OperationTimeout` for a passed deadline,
/// `ManagedInputStateError` otherwise), or `limit` passes (`OperationTimeout`). A spinner shows
/// the wait on a terminal; Ctrl-C stops waiting (exit 130) and changes nothing.
fn wait_for_end(
    cli: &Cli,
    store: &m3::DatabaseStore,
    id: &str,
    limit: Option<Duration>,
    interrupt: &Interrupt,
) -> Result<ExitCode> {
    let until = limit.map(|limit| Instant::now() + limit);
    let progress = crate::engine_start::on_stderr();
    let ended = loop {
        let record = store
            .get_round(id)?
            .ok_or_else(|| anyhow!("StorageError: the round {id} disappeared"))?;
        match record.status {
            ManagedInputStatus::Resolved | ManagedInputStatus::Failed => break Ok(record),
            status => progress.set_message(format!(
                "waiting for round {id} to be resolved (now {status})"
            )),
        }
        if interrupt.requested() {
            break Err(None);
        }
        if until.is_some_and(|until| Instant::now() >= until) {
            break Err(Some(record.status));
        }
        std::thread::sleep(POLL);
    };
    progress.finish_and_clear();
    crate::form::restore_terminal();
    let record = match ended {
        Ok(record) => record,
        Err(None) => {
            eprintln!("interrupted: stopped waiting for round {id} (nothing was changed)");
            return Ok(ExitCode::from(crate::interrupt::EXIT_CODE));
        }
        Err(Some(status)) => bail!(
            "OperationTimeout: round {id} is still {status} after {} s of --wait",
            limit.unwrap_or_default().as_secs_f64()
        ),
    };
    if record.status == ManagedInputStatus::Failed {
        let (code, message) = record
            .failure
            .as_ref()
            .map(|f| (f.code, f.message.as_str()))
            .unwrap_or((FailureCode::Cancelled, "no reason was stored"));
        let name = if code == FailureCode::DeadlineExceeded {
            "OperationTimeout"
        } else {
            "ManagedInputStateError"
        };
        bail!(
            "{name}: round {id} failed: {code} ({message}); {}",
            delivery_fact(&record)
        );
    }
    if cli.json {
        print_json(&json::record(&record, None), false);
    } else {
        println!("round {id} is resolved: the answers were delivered and the server replied");
    }
    Ok(ExitCode::SUCCESS)
}
