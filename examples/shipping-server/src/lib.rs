//! `shipping-server`: the bundled example MCP server of m3.
//!
//! An MCP server over stdio (one JSON-RPC 2.0 message per line; logs on stderr; it exits when
//! stdin closes) named `shipping`, with one tool, `book_shipment`, that asks the client for a
//! delivery address under the request key `shipping_address` before it books; the prompt
//! `shipping_label` and the resource `shipping://quote` ask for it too. It speaks the
//! legacy era (2025-06-18 / 2025-11-25: server-initiated `elicitation/create`, the key hinted in
//! `_meta["m3/request_key"]`) or the modern one (2026-07-28: `input_required` results with a
//! sealed `requestState`), chosen by `--era`. The other flags are knobs for the kit's tests.
//!
//! # Files
//!
//! - `lib.rs`: arguments, the stdio loop, `run_from(args)`, which lets a host embed it (`m3
//!   shipping-server` is the demo's server).
//! - `main.rs`: the `shipping-server` binary.
//! - `shipping.rs`: the tools, what each round asks, what the answers lead to.
//! - `legacy.rs`: `initialize`, server-initiated `elicitation/create`.
//! - `modern.rs`: `server/discover`, `input_required` results answered by a retry.
//! - `seal.rs`: the sealed `requestState`: a keyed hash, tamper-evident but not cryptographic.
//! - `rpc.rs`: JSON-RPC helpers.
//! - `label_and_quote.rs`: the prompt and the resource.
//! - `tests/wire.rs`: drives it over real pipes.

mod label_and_quote;
mod legacy;
mod modern;
mod rpc;
mod seal;
mod shipping;

use std::io::{self, BufRead, Write};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde_json::{Value, json};

use crate::legacy::Legacy;
use crate::modern::Modern;
use crate::rpc::{INVALID_REQUEST, Incoming, PARSE_ERROR, RpcError};
use crate::seal::Sealer;
use crate::shipping::Knobs;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "shipping-server",
    version,
    about = "Example MCP server `shipping` (tool `book_shipment`) over stdio, in either protocol era",
    long_about = "Example MCP server `shipping` over stdio: one JSON-RPC 2.0 message per line, \
                  logs on stderr, exits when stdin closes. The tool `book_shipment` asks for a \
                  delivery address (request key `shipping_address`) before it books."
)]
struct Args {
    /// Protocol era: `legacy` (initialize + server-initiated elicitation/create), `modern`
    /// (2026-07-28 server/discover + input_required results), or `auto` (decided per
    /// connection by the first request: server/discover -> modern, initialize -> legacy).
    #[arg(long, value_enum, default_value_t = EraSetting::Auto)]
    era: EraSetting,

    /// Modern era: seconds a sealed requestState stays valid (0: every state is already
    /// expired). The default, 25 hours, outlives a round's default deadline of 24 hours, so an
    /// answer given in time is never refused for an expired state.
    #[arg(long, default_value_t = 90_000, value_name = "SECS")]
    state_ttl_secs: u64,

    /// How many times book_shipment asks for the address before booking (modern: one
    /// input_required round each; legacy: one elicitation/create each).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    ask_rounds: u32,

    /// Never book: ask again after every accepted answer (decline or cancel still end the call).
    #[arg(long)]
    ask_forever: bool,

    /// Answer the first round's answers with JSON-RPC error -32603 "booking service
    /// unavailable" (modern: the first retry; legacy: the tools/call after the elicitation).
    #[arg(long)]
    fail_after_answer: bool,

    /// The first round also asks for `contact_email` (modern: both keys in one inputRequests;
    /// legacy: a second elicitation/create with `_meta["m3/request_key"] = "contact_email"`).
    #[arg(long)]
    two_keys: bool,

    /// Also offer the tool `report_env`, which returns this process's environment as JSON text.
    #[arg(long)]
    report_env: bool,

    /// Ask for the address with a richer form (a test knob for terminal forms): besides the
    /// required `street` and `city`, a required integer `quantity` (1 to 99, default 1), a
    /// required enum `speed` (`standard` or `express`, with labels, default `standard`) and an
    /// optional boolean `gift` (default false). The booking text echoes the chosen values.
    #[arg(long)]
    rich_form: bool,

    /// Legacy era: right after asking for the address, stop waiting for it: send
    /// `notifications/cancelled` for the `elicitation/create` and end the call unbooked (a test
    /// knob: a server that withdraws its request, as an SDK's request timeout does).
    #[arg(long)]
    withdraw: bool,
    /// Ask for the address with a contact form (a test knob for terminal forms): after the
    /// required `street` and `city`, a required `email` (format email, at most 100 characters)
    /// and an optional `deliver_on` (format date), in that order, which is not alphabetical.
    /// The booking text echoes them.
    #[arg(long)]
    contact_form: bool,
    /// Ask for the address with a form of every MCP form field kind (a test knob for the web
    /// inbox): after `street` and `city`, strings with each format and with lengths, bounded
    /// numbers, a boolean, single- and multi-select enums with titles, defaults and required
    /// fields. The booking's structured content echoes the whole answer as `answer`.
    #[arg(long)]
    every_field: bool,

    /// Put terminal escape sequences and invisible controls (`shipping::HOSTILE_TEXT`: a
    /// window title, a cleared screen, colour, an OSC 52 clipboard write, a carriage return
    /// with a made-up question, a right-to-left override) in the address request's message and
    /// field title and description, in the error of `--fail-after-answer`, and in a line on
    /// stderr at start-up (a test knob: a hostile server's words must reach no terminal raw).
    #[arg(long)]
    hostile_text: bool,

    /// Append every line received on stdin to this file, as received (a test knob: tests read
    /// what the server was sent, e.g. a `cancel` answer or `notifications/cancelled`).
    #[arg(long, value_name = "PATH")]
    transcript: Option<std::path::PathBuf>,

    /// After every request for input, also send a `notifications/message` whose `data` is a
    /// string of this many bytes (a test knob: a server whose output costs the client memory
    /// and work while a round is open).
    #[arg(long, value_name = "BYTES")]
    note_after_ask: Option<usize>,
}

/// The `--era` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EraSetting {
    /// 2025-06-18 / 2025-11-25.
    Legacy,
    /// 2026-07-28.
    Modern,
    /// Decided by the connection's first request.
    Auto,
}

/// The `serverInfo` object of both eras.
pub fn server_info() -> Value {
    json!({
        "name": shipping::SERVER_NAME,
        "title": "Shipping (m3 example)",
        "version": env!("CARGO_PKG_VERSION")
    })
}

/// The era a connection runs in, once decided.
enum Era {
    /// 2025-06-18 / 2025-11-25.
    Legacy(Legacy),
    /// 2026-07-28.
    Modern(Modern),
}

/// One stdio connection.
struct Server {
    /// The test knobs.
    knobs: Knobs,
    /// The modern era's state lifetime.
    state_ttl: Duration,
    /// The era, once decided (`None` only in `auto` before the first request).
    era: Option<Era>,
    /// `--note-after-ask`.
    note_after_ask: Option<usize>,
}

impl Server {
    /// A connection for these flags.
    fn new(args: &Args) -> Self {
        let knobs = Knobs {
            ask_rounds: args.ask_rounds,
            ask_forever: args.ask_forever,
            fail_after_answer: args.fail_after_answer,
            two_keys: args.two_keys,
            report_env: args.report_env,
            rich_form: args.rich_form,
            withdraw: args.withdraw,
            contact_form: args.contact_form,
            every_field: args.every_field,
            hostile_text: args.hostile_text,
        };
        let mut server = Self {
            knobs,
            state_ttl: Duration::from_secs(args.state_ttl_secs),
            era: None,
            note_after_ask: args.note_after_ask,
        };
        server.era = match args.era {
            EraSetting::Legacy => Some(server.legacy()),
            EraSetting::Modern => Some(server.modern()),
            EraSetting::Auto => None,
        };
        server
    }

    /// A fresh legacy connection state.
    fn legacy(&self) -> Era {
        Era::Legacy(Legacy::new(self.knobs))
    }

    /// A fresh modern handler (with its own sealing key).
    fn modern(&self) -> Era {
        Era::Modern(Modern::new(self.knobs, Sealer::new(self.state_ttl)))
    }

    /// Handles one input line; returns the messages to write (with `--note-after-ask`'s note
    /// after any request for input).
    fn on_line(&mut self, line: &str) -> Vec<Value> {
        let mut out = self.answer_line(line);
        if let Some(bytes) = self.note_after_ask {
            let asks = |m: &Value| {
                m["method"] == "elicitation/create" || m["result"]["resultType"] == "input_required"
            };
            if out.iter().any(asks) {
                out.push(json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": "info", "data": "n".repeat(bytes)}
                }));
            }
        }
        out
    }

    /// Handles one input line; returns the messages to write.
    fn answer_line(&mut self, line: &str) -> Vec<Value> {
        if line.trim().is_empty() {
            return Vec::new();
        }
        let message: Value = match serde_json::from_str(line) {
            Ok(message) => message,
            Err(_) => {
                let error = RpcError::new(PARSE_ERROR, "Parse error");
                return vec![rpc::error(Value::Null, &error)];
            }
        };
        match rpc::classify(message) {
            Incoming::Request { id, method, params } => {
                let era = self
                    .era
                    .take()
                    .unwrap_or_else(|| self.decide(&method, &params));
                match self.era.insert(era) {
                    Era::Legacy(legacy) => legacy.on_request(id, &method, &params),
                    Era::Modern(modern) => {
                        vec![rpc::respond(id, modern.on_request(&method, &params))]
                    }
                }
            }
            Incoming::Notification { method, params } => {
                if let Some(Era::Legacy(legacy)) = &mut self.era {
                    legacy.on_notification(&method, &params);
                }
                Vec::new()
            }
            Incoming::Response { id, outcome } => match &mut self.era {
                Some(Era::Legacy(legacy)) => legacy.on_response(&id, outcome),
                _ => {
                    eprintln!("shipping-server: ignoring a response (id {id}): no request pending");
                    Vec::new()
                }
            },
            Incoming::Invalid { id } => {
                vec![rpc::error(
                    id,
                    &RpcError::new(INVALID_REQUEST, "Invalid Request"),
                )]
            }
        }
    }

    /// `auto`: the era for a connection whose first request is `method`. `server/discover`
    /// means modern and `initialize` legacy; any other request is modern only when it carries
    /// the 2026-07-28 protocol version in `_meta`.
    fn decide(&self, method: &str, params: &Value) -> Era {
        let modern = match method {
            "server/discover" => true,
            "initialize" => false,
            _ => rpc::field(
                rpc::field(params, "_meta"),
                "io.modelcontextprotocol/protocolVersion",
            )
            .is_string(),
        };
        eprintln!(
            "shipping-server: era {} (first request {method})",
            if modern { "modern" } else { "legacy" }
        );
        if modern { self.modern() } else { self.legacy() }
    }
}

/// Runs the server with the process's arguments: reads stdin line by line until it closes,
/// answering on stdout.
pub fn run() -> io::Result<()> {
    serve(Args::parse())
}

/// Why [`run_from`] did not serve to the end.
#[derive(Debug)]
pub enum RunError {
    /// The arguments are not the server's (or asked for `--help`/`--version`): clap's verdict,
    /// for the embedding command to report in its own way.
    Arguments(clap::Error),
    /// Reading stdin or writing stdout (or the transcript) failed.
    Io(io::Error),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Arguments(e) => write!(f, "{}", e.render()),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RunError {}

/// Runs the server with `args` (the first item is the program name), for hosts that embed it
/// as a subcommand; arguments it does not take are returned, not printed.
pub fn run_from<I, T>(args: I) -> Result<(), RunError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    serve(Args::try_parse_from(args).map_err(RunError::Arguments)?).map_err(RunError::Io)
}

fn serve(args: Args) -> io::Result<()> {
    if args.hostile_text {
        eprintln!("shipping-server: {}", shipping::HOSTILE_TEXT);
    }
    let mut server = Server::new(&args);
    let stdin = io::stdin();
    let mut stdout = io::stdout().lock();
    let mut transcript = match &args.transcript {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        ),
        None => None,
    };
    for line in stdin.lock().lines() {
        let line = line?;
        if let Some(file) = transcript.as_mut() {
            file.write_all(line.as_bytes())?;
            file.write_all(b"\n")?;
            file.flush()?;
        }
        for message in server.on_line(&line) {
            let text = serde_json::to_string(&message).map_err(io::Error::other)?;
            stdout.write_all(text.as_bytes())?;
            stdout.write_all(b"\n")?;
            stdout.flush()?;
        }
    }
    Ok(())
}
