//! `m3`: run executions with managed elicitation input, and see and answer their pending rounds
//! from a terminal or a script.
//!
//! Errors: a non-zero exit and a first stderr line that starts with the typed error's name
//! (`ManagedInputValidationError: ...`, `ModelValidationError: ...`, `OperationTimeout: ...`).
//!
//! # Files
//!
//! - `main.rs`: clap arguments (`--db`/`M3_DB`, `--json` and `--wide` global; `validate`,
//!   `check-schema` and `component` open no database; only `run` and `demo` create one: every other
//!   command refuses a missing `--db` with `StorageError ... (database_missing)`, `pending --wait`
//!   waiting for it to appear), dispatch, the examples (`examples.rs`: each subcommand's `--help`
//!   examples, parsed by a unit test) and `completions`; a closed stdout (the standard library's
//!   print panic) ends the command quietly with 141 while it unwinds (executions cancelled, servers
//!   reaped); input files read up to 8 MiB; listings that report unreadable records; the cache
//!   notice, last.
//! - `error_report.rs`: the error rule: a non-zero exit and a first stderr line `Type: message`, or
//!   with `--json` one object `{"error": {"type", "code", "message"}}`; the type and code come from
//!   the library's typed errors in the chain, else from the `Type: ` prefix and trailing `(code)`
//!   of the command's own errors, else (a bug) `EngineError`; clap's complaints are
//!   `ManagedInputValidationError (invalid_command_line)`.
//! - `engine_start.rs`: the spinners where people wait (the component's first compilation,
//!   "preparing the policy engine, once", and `pending --wait`), on a terminal only and never with
//!   `--json`; with `NO_COLOR` a fixed message is one plain line instead (no cursor escapes).
//! - `seconds.rs`: every duration flag's range.
//! - `json.rs`: the contract's JSON (snake_case, every field present, RFC 3339 UTC) for pending
//!   rounds, records (never lease tokens; `--redacted` swaps answers for the projection),
//!   executions and results; and the reader of one pending round for `validate`.
//! - `run.rs`: `m3 run` (kit in this process, spinner on stderr, every round of the execution
//!   reported once in order from the store's listing: answered in the terminal form while pending,
//!   or printed as a `pending` JSON line; the result; exit 0 only on success; a deadline that timed
//!   the execution out prints its result and then `OperationTimeout: ...`; `--lease`; the agent
//!   from the flags or `--agent` in the dict form; several models: one execution each, driven
//!   together without the terminal form, every result reported, exit 0 only if all succeeded,
//!   SIGTERM and Ctrl-C, in the form or while waiting, cancel all; an interrupted run exits 130;
//!   `--server-url` with `--server-header NAME=VALUE` or `--server-header-file` (`NAME: VALUE`
//!   lines, so a secret need not be on a command line) for a Streamable HTTP server).
//! - `bin/m3-conformance-client.rs`: the binary `m3-conformance-client URL`, the kit's MCP client
//!   under the official conformance suite: the scenario (`MCP_CONFORMANCE_SCENARIO`), version and
//!   context from the environment, one scripted execution against an `HttpServer` with managed
//!   input in a throwaway database, rounds answered as a person would (each field's default, or a
//!   plain value of its type); exit 0 when the execution did what the scenario asks, 1 when not.
//! - `interrupt.rs`: SIGINT/SIGTERM as a flag the command polls (a prompt in raw mode reads Ctrl-C
//!   as a key; the terminal library raises SIGINT itself, so the same flag is set); a second Ctrl-C
//!   exits at once with 130 (signal-hook's conditional shutdown).
//! - `form.rs`: the dialoguer form built from a request's schema, shared by `run`, `respond` and
//!   `demo`: the fields in the schema's order ("A schema's properties keep the server's order"
//!   under "Decisions"), typed fields, enum labels, defaults, `*` on required fields, a format hint
//!   after the label; a value that does not fit is refused at its own prompt with the reason
//!   (`field_check.rs`), so the other values stay; a second try after the component refused the
//!   whole answer starts from the values typed before; URL requests shown in full, consent asked,
//!   never opened; Ctrl-C ends it with `Interrupted` and the cursor shown again.
//! - `field_check.rs`: one field's checks as typed (type, length, range, and the subset's formats
//!   `email`, `uri`, `date`, `date-time`, judged by the component itself: the policy rules, loaded
//!   once, asked to validate a one-field form; the subset has no `pattern`, and the command
//!   compiles no JSON Schema validator of its own).
//! - `demo.rs`: the spec's example on a fresh database (or on `--db`, created if missing and kept),
//!   the server being this binary's `example-server` subcommand (alias `shipping-server`); Ctrl-C
//!   cancels its execution like `run`'s and exits 130.
//! - `pending.rs` (a table, or with `--json` an array of pending rounds; `--wait`, `--watch`),
//!   `respond.rs` (the same path as `respond_elicitation`: `runtime.respond`; answers from flags
//!   with the caller's `--idempotency-key`, or, with no answer flags on a terminal, from the form
//!   with a key made and printed; `--wait [SECS]` follows the round to `resolved` (exit 0) or
//!   `failed` (typed, with its code; `OperationTimeout` when the wait ends first), with a spinner
//!   on a terminal; Ctrl-C in its form submits nothing and exits 130), `inspect.rs` (`rounds`,
//!   `show`, `executions`, `status` (`--watch`), `events`, `cancel`, `recover`); `pending`,
//!   `rounds`, `executions` and `status` run a recovery pass first (saying on stderr what it
//!   failed), so no listing shows a round whose worker is gone as waiting, `policy_check.rs`
//!   (`validate`, `check-schema`: the sandboxed policy, no database; `validate` takes one round, or
//!   `pending --json`'s array when it holds exactly one), `doctor.rs` (one line per check for
//!   people, plain JSON data with `--json`; exit 1 when the database or the component is not
//!   healthy, 0 with no database yet), `migrate.rs` (`m3 migrate --from sqlite:PATH --to
//!   postgres://...`, `--db` unused: the library's copy, its report as a table and the digest or
//!   with `--json` as data; a refusal is a typed error with its code), `component.rs` (`m3
//!   component`: writes the policy-only or the engine component to a file).
//! - `ids.rs`: ids as people type and read them: any unique prefix of a round or execution id is
//!   accepted wherever a command takes one (`show`, `respond`, `status`, `events`, `cancel`,
//!   `--execution`), resolved by the store's prefix query; several matches are a
//!   `ManagedInputValidationError` with the word `ambiguous_id` naming up to 10 candidates ("and N
//!   more") and nothing is done; an unknown id is passed on for the store's own not-found error.
//!   Tables show the shortest prefix unique among the ids listed, at least 8 characters, and a
//!   round `EXEC-rN` as `SHORT-rN` (accepted back: `SHORT` resolves to its execution).
//! - `human.rs`: the look of output for people (`Look`): tables fitted to `COLUMNS` or the
//!   terminal's width, rows one line high and long cells cut with `…` (id columns kept whole),
//!   relative times ("4 min ago", "in 23 h"), colour only on a terminal and never with a non-empty
//!   `NO_COLOR`; `--wide` turns all of it off (whole ids, RFC 3339 times, nothing cut). JSON never
//!   changes with it. Lines (`Look::fit`) and cells of text m3 did not write (`Look::text`) are
//!   escaped first (`escaped.rs`).
//! - `escaped.rs`: text that m3 did not write (a server's message, field titles and choices, its
//!   error, a tool's output, the stderr tail, harness events, request keys, error lines) shown on a
//!   terminal with every control character (C0, DEL, C1), bidirectional override and line separator
//!   as a visible escape (`\x1b`, `\r`, `\u{202e}`): a server's escape sequences never set a title,
//!   clear the screen, write the clipboard or fake a question. `line` escapes newlines and tabs
//!   too; `lines` keeps them. JSON output needs none of it.
//! - `watch.rs`: `--watch` (`pending`, `status`): polls `Executions::data_version` (the database's
//!   `PRAGMA data_version`) every 100 ms, reads again only after a change; on a terminal it redraws
//!   (also every second, for relative times), elsewhere it prints each new snapshot once; ends on
//!   Ctrl-C (SIGINT/SIGTERM, exit 0) or, for `status`, once the execution finished.
//! - `history.rs`: `m3 events`' history, from the store alone: the execution's `created_at` and its
//!   end (`updated_at`, outcome, code), each round's lifecycle timestamps (created, answered =
//!   `response_validated_at`, delivery started, delivered, resolved, failed with its code, worded
//!   "recovered" for `recovery_unavailable` and "withdrawn" for `request_withdrawn`), merged in
//!   time order with the harness's events (kind `harness`); `--json` adds it as `history` next to
//!   the keys `events` always had.
//! - `benches/startup.rs`: `m3 pending` start-up with a warm component cache (the first, cold run
//!   reported apart).
//! - `benches/serve.rs` (`just bench-serve`): rounds answered per second through the API by 50
//!   clients (call latency, time to delivery) and the event stream fanned out to 200 subscribers
//!   (time to each, the server's memory), written to `target/bench/serve.json`.
//! - `benches/notify.rs` (`just bench-serve`): `m3 serve --notify` to a local receiver:
//!   notifications per second for a burst of rounds, and each round's commit to its
//!   notification (p50/p99), written to `target/bench/notify.json`.

mod component;
mod demo;
mod doctor;
mod engine_start;
mod error_report;
mod escaped;
mod examples;
mod field_check;
mod form;
mod history;
mod human;
mod ids;
mod inspect;
mod interrupt;
mod json;
mod migrate;
mod pending;
mod policy_check;
mod respond;
mod run;
mod seconds;
mod serve;
mod watch;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

/// Durable, sandboxed managed elicitation input for MCP agent tests.
#[derive(Debug, Parser)]
#[command(name = "m3", version, about, propagate_version = true, after_help = examples::M3)]
pub struct Cli {
    /// The database of executions and rounds: a SQLite file's path, or a PostgreSQL URL
    /// (`postgres://user@host/database`) that workers and answerers on many machines share.
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
    /// Whether `--db` (or `M3_DB`) was given rather than defaulted.
    #[arg(skip)]
    pub db_given: bool,
    /// Show everything in full in tables and lists: whole ids, RFC 3339 times, no cut cells.
    #[arg(long, global = true, overrides_with = "wide")]
    pub wide: bool,
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
    #[command(after_help = examples::DEMO)]
    Demo {
        /// The MCP era of the bundled server (default: probe).
        #[arg(long, value_enum)]
        era: Option<EraArg>,
        /// The address as JSON (`{"street": ..., "city": ...}`) instead of asking.
        #[arg(long, value_name = "JSON")]
        answer: Option<String>,
    },
    /// Submit an execution and run its worker until it ends.
    #[command(after_help = examples::RUN)]
    Run(Box<run::RunArgs>),
    /// Pending rounds.
    #[command(after_help = examples::PENDING)]
    Pending {
        /// Only this execution's (its id or a unique prefix).
        #[arg(long, value_name = "ID")]
        execution: Option<String>,
        /// Wait up to this many seconds for at least one (exit non-zero if none came).
        #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
        wait: Option<f64>,
        /// Show them again whenever they change, until Ctrl-C.
        #[arg(long, conflicts_with = "wait")]
        watch: bool,
    },
    /// Answer a pending round (a worker in any process delivers it).
    #[command(after_help = examples::RESPOND)]
    Respond(respond::RespondArgs),
    /// Rounds, oldest first.
    #[command(after_help = examples::ROUNDS)]
    Rounds {
        /// Only rounds with this status (`pending`, `response_validated`, ..., `failed`).
        #[arg(long)]
        status: Option<String>,
        /// Only this execution's (its id or a unique prefix).
        #[arg(long, value_name = "ID")]
        execution: Option<String>,
    },
    /// One round with its stored answers (an operator's explicit read).
    #[command(after_help = examples::SHOW)]
    Show {
        /// The round (or a unique prefix of its id).
        round_id: String,
        /// Show the redacted projection instead of the answers.
        #[arg(long)]
        redacted: bool,
    },
    /// Executions, oldest first.
    #[command(after_help = examples::EXECUTIONS)]
    Executions,
    /// One execution: lifecycle, outcome, rounds and its harness's events.
    #[command(after_help = examples::STATUS)]
    Status {
        /// The execution (or a unique prefix of its id).
        execution_id: String,
        /// Show it again whenever it changes, until it finishes or Ctrl-C.
        #[arg(long)]
        watch: bool,
    },
    /// What happened to an execution and its rounds, in time order (created, answered,
    /// delivered, resolved, failed, finished), with what its harness did or reported (MCP
    /// server start-up, approvals, commands, model errors), and its stderr tail once it failed.
    #[command(after_help = examples::EVENTS)]
    Events {
        /// The execution (or a unique prefix of its id).
        execution_id: String,
    },
    /// Cancel an execution (its worker ends the open round with `cancelled`).
    #[command(after_help = examples::CANCEL)]
    Cancel {
        /// The execution (or a unique prefix of its id).
        execution_id: String,
    },
    /// Serve the pending rounds and executions as an HTTP JSON API with a change stream
    /// (`/api/...`; loopback only unless a token is given).
    #[command(after_help = examples::SERVE)]
    Serve(serve::ServeArgs),
    /// Validate answers against a pending round in the sandbox, with no database.
    #[command(after_help = examples::VALIDATE)]
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
    #[command(after_help = examples::CHECK_SCHEMA)]
    CheckSchema {
        /// The bare schema (`-`: stdin).
        file: PathBuf,
    },
    /// Write a component this build embeds to FILE, for another component host (EMBEDDING.md).
    #[command(after_help = examples::COMPONENT)]
    Component {
        /// Which one.
        #[arg(long, value_enum, default_value = "policy-only")]
        world: component::World,
        /// Where to write it.
        file: PathBuf,
    },
    /// Database integrity, schema version, component cache and harness binaries.
    #[command(after_help = examples::DOCTOR)]
    Doctor,
    /// Fail with `recovery_unavailable` the unresolved rounds whose worker is gone.
    #[command(after_help = examples::RECOVER)]
    Recover,
    /// Copy every round and execution of a SQLite database into an empty PostgreSQL one,
    /// verified by counts and a digest (refused while a lease is live).
    #[command(after_help = examples::MIGRATE)]
    Migrate(migrate::MigrateArgs),
    /// Run the bundled example MCP server (shipping) on stdio: the demo's and the walkthrough's
    /// server. Start it through `m3 run --server-command m3 --server-arg example-server`.
    #[command(alias = "shipping-server", after_help = examples::EXAMPLE_SERVER)]
    ExampleServer {
        /// The server's own arguments (`--era legacy|modern`, `--help` for all).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print a shell completion script for `m3` (bash, zsh, fish, elvish or powershell).
    #[command(after_help = examples::COMPLETIONS)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// The command line, parsed; `db_given` says whether `--db` came from the user.
fn parse() -> Result<Cli, clap::Error> {
    let matches = Cli::command().try_get_matches()?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    cli.db_given = matches
        .value_source("db")
        .is_some_and(|source| source != clap::parser::ValueSource::DefaultValue);
    Ok(cli)
}

/// Set by the panic hook when stdout's reader went away (`m3 ... | head -1`).
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The exit status of a command whose output pipe was closed: the shells' 128 + SIGPIPE.
const CLOSED_PIPE_EXIT: u8 = 141;

/// Whether a panic is the standard library's "failed printing to stdout" for a closed pipe.
fn is_closed_stdout(info: &std::panic::PanicHookInfo<'_>) -> bool {
    let payload = info
        .payload()
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| info.payload().downcast_ref::<&str>().copied())
        .unwrap_or_default();
    payload.starts_with("failed printing to stdout") && payload.contains("Broken pipe")
}

fn main() -> ExitCode {
    // The command shows its own spinner and notices (`engine_start.rs`).
    m3::health::set_engine_notices(false);
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // The argument parser's own complaints are typed like every other error.
            let text = e.render().to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text).trim_end();
            let reported = error_report::Reported {
                type_name: "ManagedInputValidationError",
                code: Some("invalid_command_line".into()),
                message: format!("invalid command line: {text}"),
            };
            error_report::print(&reported, &[], error_report::json_requested());
            return ExitCode::from(2);
        }
    };
    // A panic is a bug of m3, never the caller's fault: it ends as a typed error line like any
    // other failure (no backtrace, and no panic payload, which could quote input). A closed
    // stdout is no bug: the command unwinds (its executions cancelled, servers reaped) quietly.
    let json = cli.json;
    std::panic::set_hook(Box::new(move |info| {
        if is_closed_stdout(info) {
            STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::SeqCst);
            return;
        }
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let reported = error_report::Reported {
            type_name: "EngineError",
            code: None,
            message: format!(
                "m3 failed unexpectedly{at}; nothing more was done (please report it)"
            ),
        };
        error_report::print(&reported, &[], json);
    }));
    let outcome = std::panic::catch_unwind(|| dispatch(&cli));
    if STDOUT_CLOSED.load(std::sync::atomic::Ordering::SeqCst) {
        return ExitCode::from(CLOSED_PIPE_EXIT);
    }
    let Ok(outcome) = outcome else {
        return ExitCode::FAILURE;
    };
    let code = report(outcome, cli.json);
    // Said last, so that an error's first stderr line stays the typed error.
    if let Some(notice) = m3::health::engine_if_loaded().and_then(|cache| cache.notice()) {
        eprintln!("notice: {notice}");
    }
    code
}

/// Prints an error as the command's contract says; the exit code.
fn report(outcome: anyhow::Result<ExitCode>, json: bool) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(error) => {
            let reported = error_report::classify(&error);
            let causes: Vec<String> = error.chain().skip(1).map(ToString::to_string).collect();
            error_report::print(&reported, &causes, json);
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: &Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::Demo { era, answer } => demo::demo(cli, *era, answer.as_deref()),
        Command::Run(args) => run::run(cli, args),
        Command::Pending {
            execution,
            wait,
            watch,
        } => pending::pending(cli, execution.as_deref(), *wait, *watch),
        Command::Respond(args) => respond::respond(cli, args),
        Command::Rounds { status, execution } => {
            inspect::rounds(cli, status.as_deref(), execution.as_deref())
        }
        Command::Show { round_id, redacted } => inspect::show(cli, round_id, *redacted),
        Command::Executions => inspect::executions(cli),
        Command::Status {
            execution_id,
            watch,
        } => inspect::status(cli, execution_id, *watch),
        Command::Events { execution_id } => inspect::events(cli, execution_id),
        Command::Cancel { execution_id } => inspect::cancel(cli, execution_id),
        Command::Serve(args) => serve::serve(cli, args),
        Command::Validate { round, responses } => policy_check::validate(cli, round, responses),
        Command::CheckSchema { file } => policy_check::check_schema(cli, file),
        Command::Component { world, file } => component::write(cli, *world, file),
        Command::Doctor => doctor::doctor(cli),
        Command::Recover => inspect::recover(cli),
        Command::Migrate(args) => migrate::migrate(cli, args),
        Command::ExampleServer { args } => {
            let argv = std::iter::once("example-server".to_string()).chain(args.iter().cloned());
            match m3_shipping_server::run_from(argv) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                Err(m3_shipping_server::RunError::Arguments(e)) if !e.use_stderr() => e.exit(),
                // Typed like `m3`'s own argument errors.
                Err(m3_shipping_server::RunError::Arguments(e)) => {
                    let text = e.render().to_string();
                    let text = text.strip_prefix("error: ").unwrap_or(&text);
                    let text = text.lines().next().unwrap_or_default().trim_end();
                    anyhow::bail!(
                        "ManagedInputValidationError: invalid command line: {text} \
                         (invalid_command_line)"
                    )
                }
                Err(m3_shipping_server::RunError::Io(e)) => Err(e.into()),
            }
        }
        Command::Completions { shell } => {
            // Into memory first: a closed pipe then ends the command quietly, like every print.
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "m3", &mut script);
            print!("{}", String::from_utf8_lossy(&script));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The PostgreSQL URL `--db` gives, if it names one (else it is a SQLite file's path).
pub fn postgres_url(cli: &Cli) -> Option<&str> {
    cli.db
        .to_str()
        .filter(|text| text.starts_with("postgres://") || text.starts_with("postgresql://"))
}

/// `--db` as it may be shown: a path, or a URL without its password.
pub fn database_shown(cli: &Cli) -> String {
    match postgres_url(cli) {
        Some(url) => m3::health::postgres_url_shown(url),
        None => cli.db.display().to_string(),
    }
}

/// Whether `--db` names an existing file (or link: opening refuses links with its own error),
/// or a PostgreSQL database that holds m3's tables.
pub fn database_exists(cli: &Cli) -> bool {
    match postgres_url(cli) {
        Some(url) => m3::health::postgres_health(url, std::time::Duration::from_secs(5))
            .is_ok_and(|h| h.schema_version > 0),
        None => std::fs::symlink_metadata(&cli.db).is_ok(),
    }
}

/// The execution store `--db` names (nothing is opened until used).
pub fn execution_store(cli: &Cli) -> anyhow::Result<std::sync::Arc<dyn m3::ExecutionStore>> {
    Ok(match postgres_url(cli) {
        Some(url) => std::sync::Arc::new(m3::PostgresExecutionStore::open(
            url,
            m3::StoreOptions::default(),
        )?),
        None => std::sync::Arc::new(m3::SqliteExecutionStore::open(&cli.db)?),
    })
}

/// The executions on `--db`, which must exist: the commands that read or answer never create a
/// database (a typo in `--db` would otherwise show an empty one).
pub fn executions(cli: &Cli) -> anyhow::Result<std::sync::Arc<m3::Executions>> {
    // A PostgreSQL server that cannot be reached says so, rather than that nothing is there.
    if let Some(url) = postgres_url(cli) {
        m3::health::postgres_health(url, std::time::Duration::from_secs(5))?;
    }
    if !database_exists(cli) {
        anyhow::bail!(
            "StorageError: there is no database at {}; nothing was created (`m3 run` and \
             `m3 demo --db` create one; check --db or M3_DB) (database_missing)",
            database_shown(cli)
        );
    }
    engine_start::prepare(cli);
    Ok(execution_store(cli)?.executions()?)
}

/// The executions on `--db`, after a recovery pass, for the commands that list what waits:
/// a round whose worker is gone is failed (`recovery_unavailable`) before it could be listed as
/// answerable. What was recovered is said on stderr.
pub fn recovered_executions(cli: &Cli) -> anyhow::Result<std::sync::Arc<m3::Executions>> {
    let executions = executions(cli)?;
    let report = match executions.recover() {
        Ok(report) => report,
        // A writer holding the database past the busy timeout while something was due: the
        // listing still answers (a read never queues behind a writer), and says what it could
        // not do. An answer to a round whose worker is gone is refused all the same.
        Err(e) if e.code() == Some(m3::ErrorCode::StorageBusy) => {
            eprintln!(
                "notice: the database was busy, so rounds whose worker is gone may still be \
                 listed as open (`m3 recover` fails them once it is free)"
            );
            return Ok(executions);
        }
        Err(e) => return Err(e.into()),
    };
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
    store: &m3::DatabaseStore,
    filter: &m3::RoundFilter,
) -> anyhow::Result<Vec<m3::ManagedInputRecord>> {
    let (records, unreadable) = store.list_rounds_reporting(filter)?;
    for (round_id, error) in unreadable {
        eprintln!("{error} (round {round_id} is left out of this listing; `m3 doctor` lists all)");
    }
    Ok(records)
}

/// Every execution, oldest first; one whose record cannot be read is reported on stderr (its
/// id and why) and left out, so one bad record never hides the others.
pub fn readable_executions(executions: &m3::Executions) -> anyhow::Result<Vec<m3::ExecutionState>> {
    let (states, unreadable) = executions.states_reporting()?;
    for (execution_id, error) in unreadable {
        eprintln!(
            "{error} (execution {execution_id} is left out of this listing; `m3 doctor` lists all)"
        );
    }
    Ok(states)
}

/// The most a command reads of an input file: the largest answer map, round or script the
/// library would accept (4 MiB, the largest round), plus room for formatting.
pub const MAX_INPUT_BYTES: u64 = 8 * 1024 * 1024;

/// Reads a file, or standard input for `-`, stopping past [`MAX_INPUT_BYTES`] (so `/dev/zero`
/// or an endless pipe is refused, not read); the error says what could not be read (the caller
/// names the typed error it is).
pub fn read_input(path: &std::path::Path) -> Result<String, String> {
    read_input_within(path, MAX_INPUT_BYTES)
}

/// [`read_input`], stopping past `limit` bytes instead (never reading more than one byte past
/// it, whatever the file says its size is: `/proc` files say 0).
pub fn read_input_within(path: &std::path::Path, limit: u64) -> Result<String, String> {
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
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{what} cannot be read: {e}"))?;
    if bytes.len() as u64 > limit {
        let size = if limit.is_multiple_of(1 << 20) {
            format!("{} MiB", limit >> 20)
        } else {
            format!("{} KiB", limit >> 10)
        };
        return Err(format!(
            "{what} is larger than {size} (payload_too_large); nothing was read past that"
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
    println!("{}", json_text(value, line));
}

/// One JSON document (pretty) or one JSON line, with nothing a terminal would obey in it
/// (`escaped::json`: the same value).
pub fn json_text(value: &serde_json::Value, line: bool) -> String {
    let text = if line {
        value.to_string()
    } else {
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    };
    escaped::json(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A help example's words, with single quotes grouping (as a shell would for these lines).
    fn words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let (mut word, mut quoted, mut any) = (String::new(), false, false);
        for c in line.chars() {
            match c {
                '\'' => {
                    quoted = !quoted;
                    any = true;
                }
                ' ' if !quoted => {
                    if any {
                        words.push(std::mem::take(&mut word));
                    }
                    any = false;
                }
                c => {
                    word.push(c);
                    any = true;
                }
            }
        }
        if any {
            words.push(word);
        }
        words
    }

    /// Every `  m3 ...` line of every `--help` parses with the flags as they are now (lines with
    /// a shell redirection are cut before it).
    #[test]
    fn every_help_example_parses() {
        let mut command = Cli::command();
        command.build();
        let mut helps = vec![command.get_after_help().map(ToString::to_string)];
        helps.extend(
            command
                .get_subcommands()
                .map(|s| s.get_after_help().map(ToString::to_string)),
        );
        let mut parsed = 0;
        for help in helps.into_iter().flatten() {
            for line in help.lines().filter_map(|l| l.strip_prefix("  ")) {
                if !line.starts_with("m3 ") {
                    continue;
                }
                let line = line.split(" > ").next().unwrap_or(line);
                let argv = words(line);
                if let Err(e) = Cli::try_parse_from(&argv) {
                    panic!("the help example `{line}` does not parse: {e}");
                }
                parsed += 1;
            }
        }
        let subcommands = Cli::command().get_subcommands().count();
        assert!(
            parsed > subcommands,
            "only {parsed} examples for {subcommands} subcommands"
        );
        for sub in Cli::command().get_subcommands() {
            assert!(
                sub.get_after_help()
                    .is_some_and(|h| h.to_string().contains("  m3 ")),
                "`m3 {}` has no example",
                sub.get_name()
            );
        }
    }
}
