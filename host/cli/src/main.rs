//! `m3`: run executions with managed elicitation input, and see and answer their pending rounds
//! from a terminal or a script.
//!
//! Errors: a non-zero exit and a first stderr line that starts with the typed error's name
//! (`ManagedInputValidationError: ...`, `ModelValidationError: ...`, `OperationTimeout: ...`).

mod component;
mod demo;
mod doctor;
mod field_check;
mod form;
mod inspect;
mod interrupt;
mod json;
mod pending;
mod policy_check;
mod respond;
mod run;
mod seconds;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

/// Durable, sandboxed managed elicitation input for MCP agent tests.
#[derive(Debug, Parser)]
#[command(name = "m3", version, about, propagate_version = true)]
pub struct Cli {
    /// The SQLite database of executions and rounds.
    #[arg(
        long,
        global = true,
        env = "M3_DB",
        default_value = "executions.sqlite",
        overrides_with = "db"
    )]
    pub db: PathBuf,
    /// Machine-readable output: one JSON document, or JSON lines for streams.
    #[arg(long, global = true, overrides_with = "json")]
    pub json: bool,
    #[command(subcommand)]
    command: Command,
}

/// The MCP era a server is asked to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EraArg {
    /// 2025-06-18 / 2025-11-25: `initialize` and server-initiated `elicitation/create`.
    Legacy,
    /// 2026-07-28: `input_required` results.
    Modern,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The specification's example end to end: the bundled shipping server asks for a delivery
    /// address, you answer, the shipment is booked (on a fresh database).
    Demo {
        /// The MCP era of the bundled server (default: probe).
        #[arg(long, value_enum)]
        era: Option<EraArg>,
        /// The address as JSON (`{"street": ..., "city": ...}`) instead of asking.
        #[arg(long, value_name = "JSON")]
        answer: Option<String>,
    },
    /// Submit an execution and run its worker until it ends.
    Run(Box<run::RunArgs>),
    /// Pending rounds.
    Pending {
        /// Only this execution's.
        #[arg(long, value_name = "ID")]
        execution: Option<String>,
        /// Wait up to this many seconds for at least one (exit non-zero if none came).
        #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
        wait: Option<f64>,
    },
    /// Answer a pending round (a worker in any process delivers it).
    Respond(respond::RespondArgs),
    /// Rounds, oldest first.
    Rounds {
        /// Only rounds with this status (`pending`, `response_validated`, ..., `failed`).
        #[arg(long)]
        status: Option<String>,
        /// Only this execution's.
        #[arg(long, value_name = "ID")]
        execution: Option<String>,
    },
    /// One round with its stored answers (an operator's explicit read).
    Show {
        /// The round.
        round_id: String,
        /// Show the redacted projection instead of the answers.
        #[arg(long)]
        redacted: bool,
    },
    /// Executions, oldest first.
    Executions,
    /// One execution: lifecycle, outcome, rounds and its harness's events.
    Status {
        /// The execution.
        execution_id: String,
    },
    /// What an execution's harness did or reported (MCP server start-up, approvals, commands,
    /// model errors), and its stderr tail once it failed.
    Events {
        /// The execution.
        execution_id: String,
    },
    /// Cancel an execution (its worker ends the open round with `cancelled`).
    Cancel {
        /// The execution.
        execution_id: String,
    },
    /// Validate answers against a pending round in the sandbox, with no database.
    Validate {
        /// A pending round: `pending --json`'s output when it lists exactly one round (a
        /// one-element array), or one element of that array (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        round: PathBuf,
        /// The answers: a JSON object of request key -> `{"action", "content"}` (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        responses: PathBuf,
    },
    /// Check a `requestedSchema` against the MCP form subset, with no database.
    CheckSchema {
        /// The bare schema (`-`: stdin).
        file: PathBuf,
    },
    /// Write a component this build embeds to FILE, for another component host (EMBEDDING.md).
    Component {
        /// Which one.
        #[arg(long, value_enum, default_value = "policy-only")]
        world: component::World,
        /// Where to write it.
        file: PathBuf,
    },
    /// Database integrity, schema version, component cache and harness binaries.
    Doctor,
    /// Fail with `recovery_unavailable` the unresolved rounds whose worker is gone.
    Recover,
    /// Run the bundled shipping MCP server on stdio (the demo's and tests' server).
    #[command(hide = true)]
    ShippingServer {
        /// The server's own arguments (`--era`, ...).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // The argument parser's own complaints are typed like every other error.
            let text = e.render().to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            eprint!("ManagedInputValidationError: invalid command line: {text}");
            return ExitCode::from(2);
        }
    };
    // A panic is a bug of m3, never the caller's fault: it ends as a typed error line like any
    // other failure (no backtrace, and no panic payload, which could quote input).
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "EngineError: m3 failed unexpectedly{at}; nothing more was done (please report it)"
        );
    }));
    let outcome = std::panic::catch_unwind(|| dispatch(&cli));
    let Ok(outcome) = outcome else {
        return ExitCode::FAILURE;
    };
    let code = report(outcome);
    // Said last, so that an error's first stderr line stays the typed error.
    if let Some(notice) = m3::health::engine_if_loaded().and_then(|cache| cache.notice()) {
        eprintln!("notice: {notice}");
    }
    code
}

/// Prints an error as the command's contract says; the exit code.
fn report(outcome: anyhow::Result<ExitCode>) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(error) => {
            // The first line is the typed error's own text ("ManagedInputStateError: ...").
            let first = error.to_string();
            eprintln!("{first}");
            for cause in error.chain().skip(1) {
                let cause = cause.to_string();
                if !first.contains(&cause) {
                    eprintln!("  caused by: {cause}");
                }
            }
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: &Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::Demo { era, answer } => demo::demo(cli, *era, answer.as_deref()),
        Command::Run(args) => run::run(cli, args),
        Command::Pending { execution, wait } => pending::pending(cli, execution.as_deref(), *wait),
        Command::Respond(args) => respond::respond(cli, args),
        Command::Rounds { status, execution } => {
            inspect::rounds(cli, status.as_deref(), execution.as_deref())
        }
        Command::Show { round_id, redacted } => inspect::show(cli, round_id, *redacted),
        Command::Executions => inspect::executions(cli),
        Command::Status { execution_id } => inspect::status(cli, execution_id),
        Command::Events { execution_id } => inspect::events(cli, execution_id),
        Command::Cancel { execution_id } => inspect::cancel(cli, execution_id),
        Command::Validate { round, responses } => policy_check::validate(cli, round, responses),
        Command::CheckSchema { file } => policy_check::check_schema(cli, file),
        Command::Component { world, file } => component::write(cli, *world, file),
        Command::Doctor => doctor::doctor(cli),
        Command::Recover => inspect::recover(cli),
        Command::ShippingServer { args } => {
            let argv = std::iter::once("shipping-server".to_string()).chain(args.iter().cloned());
            m3_shipping_server::run_from(argv)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The executions on `--db`.
pub fn executions(cli: &Cli) -> anyhow::Result<std::sync::Arc<m3::Executions>> {
    use m3::ExecutionStore;
    let store = m3::SqliteExecutionStore::open(&cli.db)?;
    Ok(store.executions()?)
}

/// The executions on `--db`, after a recovery pass, for the commands that list what waits:
/// a round whose worker is gone is failed (`recovery_unavailable`) before it could be listed as
/// answerable. What was recovered is said on stderr.
pub fn recovered_executions(cli: &Cli) -> anyhow::Result<std::sync::Arc<m3::Executions>> {
    let executions = executions(cli)?;
    let report = executions.recover()?;
    if report.rounds_failed + report.executions_failed > 0 {
        eprintln!(
            "recovered: failed {} round(s) and {} execution(s) whose worker is gone \
             (recovery_unavailable)",
            report.rounds_failed, report.executions_failed
        );
    }
    if report.records_unreadable > 0 {
        eprintln!(
            "{} record(s) could not be read and are left as they are (`m3 doctor` names them)",
            report.records_unreadable
        );
    }
    Ok(executions)
}

/// The rounds `filter` selects; a record that cannot be read is reported on stderr (its id and
/// why) and left out, so one bad record never hides the others.
pub fn readable_rounds(
    store: &m3::SqliteManagedInputStore,
    filter: &m3::RoundFilter,
) -> anyhow::Result<Vec<m3::ManagedInputRecord>> {
    let (records, unreadable) = store.list_rounds_reporting(filter)?;
    for (round_id, error) in unreadable {
        eprintln!("{error} (round {round_id} is left out of this listing; `m3 doctor` lists all)");
    }
    Ok(records)
}

/// The most a command reads of an input file: the largest answer map, round or script the
/// library would accept (4 MiB, the largest round), plus room for formatting.
pub const MAX_INPUT_BYTES: u64 = 8 * 1024 * 1024;

/// Reads a file, or standard input for `-`, stopping past [`MAX_INPUT_BYTES`] (so `/dev/zero`
/// or an endless pipe is refused, not read); the error says what could not be read (the caller
/// names the typed error it is).
pub fn read_input(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let (what, source): (String, Box<dyn Read>) = if path.as_os_str() == "-" {
        ("standard input".into(), Box::new(std::io::stdin()))
    } else {
        let file = std::fs::File::open(path)
            .map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
        (path.display().to_string(), Box::new(file))
    };
    let mut bytes = Vec::new();
    source
        .take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{what} cannot be read: {e}"))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!(
            "{what} is larger than {} MiB (payload_too_large); nothing was read past that",
            MAX_INPUT_BYTES >> 20
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8 text"))
}

/// Input a caller gave (answers, rounds, schemas, filters) that cannot be used.
pub fn invalid_input(message: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("ManagedInputValidationError: {message}")
}

/// A submission that cannot run (the specification's `ModelValidationError`).
pub fn invalid_submission(message: impl std::fmt::Display) -> anyhow::Error {
    m3::ModelValidationError {
        message: message.to_string(),
    }
    .into()
}

/// Prints one JSON document (pretty) or one JSON line.
pub fn print_json(value: &serde_json::Value, line: bool) {
    let text = if line {
        value.to_string()
    } else {
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    };
    println!("{text}");
}
