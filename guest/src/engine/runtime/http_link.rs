//! The MCP client's Streamable HTTP transport, over `wasi:http` (which the host grants for the
//! server's origin alone).
//!
//! Every outgoing JSON-RPC message is one `POST` to the endpoint. A request's answer comes back
//! on its own exchange, as one JSON body or as a stream of Server-Sent Events that may also
//! carry the server's own requests and notifications before the answer; a response or a
//! notification is accepted with `202`. In the legacy era the server's `Mcp-Session-Id` (from
//! `initialize`) and the negotiated `MCP-Protocol-Version` go on every later request, and a
//! standalone `GET` stream is opened for what the server sends outside any request; later
//! messages wait until that stream is open and `notifications/initialized` accepted (separate
//! requests have no order, unlike the lines of stdio). In the
//! 2026-07-28 era there is no session: each request names its version (`MCP-Protocol-Version`,
//! as its `_meta` does) and its method (`Mcp-Method`, `Mcp-Name`), and a tool call carries the
//! `Mcp-Param-*` headers its tool's schema asks for (`x-mcp-header`, SEP-2243): the transport
//! lists the server's tools once before the first call to learn them, and does not call a tool
//! whose annotations break the rules (the call gets an error instead). A stream that breaks before
//! its answer is resumed with `GET` and `Last-Event-ID` when the server gave event ids (after
//! its `retry` delay); otherwise the server is lost.
//!
//! Nothing here blocks: the worker passes [`HttpLink::pollables`] to `events.next-holding` and
//! calls [`HttpLink::progress`] after each wait. An answer's delivery is reported once the
//! server accepted it ([`LinkEvent::Delivered`]); what arrives meanwhile on other exchanges is
//! held until then, so a reply to the answer is never seen before its delivery.

use crate::m3::managed_input::types::Timestamp;
use crate::mcp::endpoint::{Endpoint, Scheme};
use crate::mcp::framing::MAX_LINE_BYTES;
use crate::mcp::sse::SseDecoder;
use crate::time;
use serde_json::{Value, json};
use std::collections::VecDeque;
use wasip2::http::{outgoing_handler, types as wasi};
use wasip2::io::poll::Pollable;
use wasip2::io::streams::{InputStream, OutputStream, StreamError};

/// How long connecting to the server (TCP and TLS) may take.
pub const CONNECT_TIMEOUT_MS: u64 = 30_000;
/// How long a response may take to begin, and a stream may stay silent: a stream of a call that
/// waits for a person may be silent for as long as a round may wait (the deadline ends it).
pub const STREAM_SILENCE_MS: u64 = crate::round_protocol::MAX_DEADLINE_MS + 60 * 60 * 1000;
/// Most redirects followed for one message (each to the server's origin, or refused by the
/// host).
pub const MAX_REDIRECTS: u8 = 5;
/// Most failed attempts in a row to resume a broken stream before the server is lost.
pub const MAX_RESUME_ATTEMPTS: u32 = 5;
/// The resumption delay when the server named none (`retry`).
pub const DEFAULT_RETRY_MS: u64 = 1_000;
/// Most bytes of an error response's body read (for its JSON-RPC error).
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Most bytes of the server's `Mcp-Session-Id`, which goes back on every request of the
/// session: a UUID, a hash or a signed token fits many times over.
pub const MAX_SESSION_ID_BYTES: usize = 4 * 1024;
/// Most bytes of the protocol version `initialize` negotiated (a date), which goes back on
/// every request as `MCP-Protocol-Version`.
pub const MAX_VERSION_BYTES: usize = 64;
/// Most bytes of any other response header the transport reads (`Content-Type`, `Location`).
pub const MAX_HEADER_VALUE_BYTES: usize = 8 * 1024;
/// Most headers on one request of the kit (its own and the `Mcp-Param-*` a tool asks for).
pub const MAX_REQUEST_HEADERS: usize = 128;
/// Most bytes of one request's headers, counted as `wasi:http` counts them (names and values,
/// and [`HEADER_ENTRY_COST`] for each): its fields trap the component past 128 KiB, so the kit
/// refuses a request at half that, as a typed failure, before asking for the fields.
pub const MAX_REQUEST_HEADER_BYTES: usize = 64 * 1024;
/// What one header costs beyond its name and value in `wasi:http`'s count (its in-memory name
/// and value, generously).
const HEADER_ENTRY_COST: usize = 128;
/// Bytes read from one stream in one read.
const READ_CHUNK: u64 = 64 * 1024;
/// Most bytes read in one [`HttpLink::progress`] before the worker gets to look around.
const READ_BUDGET: usize = 4 * 1024 * 1024;
/// The protocol version that speaks without sessions and names each request's method.
const MODERN_VERSION: &str = crate::mcp::MODERN_VERSION;

/// What the transport reports to the worker.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkEvent {
    /// A JSON-RPC message from the server (one line's worth).
    Message(String),
    /// The server accepted the message carrying the round's answer.
    Delivered,
    /// The server is lost: how, as a phrase after "the server" (it cannot be reached, it broke
    /// a stream that cannot be resumed, it refused the answer).
    Lost(String),
    /// The server led the kit somewhere it may not go (the host refused the request): what
    /// happened, as a phrase after "the server was stopped: ".
    Refused(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Post,
    Delete,
}

/// What an exchange is for.
#[derive(Debug, Clone, PartialEq)]
enum Purpose {
    /// A JSON-RPC request; its answer comes back on this exchange.
    Call { id: Value, method: String },
    /// A response or a notification, accepted with `202`.
    Reply,
    /// The standalone `GET` stream.
    Listen,
    /// `DELETE` of the session.
    Close,
}

/// The request an exchange sends (again after a redirect).
#[derive(Debug, Clone)]
struct Outgoing {
    method: Method,
    target: Endpoint,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

/// Writing a request's body.
struct Writing {
    // Field order is drop order: a pollable before its stream, a stream before its body.
    pollable: Option<Pollable>,
    stream: Option<OutputStream>,
    body: Option<wasi::OutgoingBody>,
    written: usize,
}

impl Writing {
    /// Writes what the stream takes now. A stream that fails (the request was refused or its
    /// connection lost) is let go: the response's outcome says what happened.
    fn advance(&mut self, bytes: &[u8]) {
        if self.write(bytes).is_err() {
            self.pollable = None;
            self.stream = None;
            self.body = None;
        }
    }

    /// `Ok(true)` once the whole body is written and finished.
    fn write(&mut self, bytes: &[u8]) -> Result<bool, StreamError> {
        let Some(stream) = &self.stream else {
            return Ok(true);
        };
        while self.written < bytes.len() {
            let room = stream.check_write()?;
            if room == 0 {
                if self.pollable.is_none() {
                    self.pollable = Some(stream.subscribe());
                }
                return Ok(false);
            }
            let end = bytes
                .len()
                .min(self.written + usize::try_from(room).unwrap_or(usize::MAX));
            stream.write(&bytes[self.written..end])?;
            self.written = end;
        }
        let _ = stream.flush();
        self.pollable = None;
        self.stream = None;
        if let Some(body) = self.body.take() {
            // A body that cannot be finished is a request the response's outcome reports.
            let _ = wasi::OutgoingBody::finish(body, None);
        }
        Ok(true)
    }
}

/// Waiting for the response's head (and writing the body meanwhile).
struct Sending {
    pollable: Pollable,
    writing: Writing,
    future: wasi::FutureIncomingResponse,
}

/// How a body is read.
#[derive(Debug)]
enum BodyKind {
    /// Server-Sent Events (the decoder is the exchange's).
    Events,
    /// One JSON-RPC message (or a batch).
    Json(Vec<u8>),
    /// An error response's body, kept up to [`MAX_ERROR_BODY`].
    Error(Vec<u8>),
    /// Read and dropped.
    Discard,
}

/// Reading the response's body.
struct Reading {
    // Field order is drop order: the pollable, the stream, then the body it belongs to.
    pollable: Pollable,
    stream: InputStream,
    _body: wasi::IncomingBody,
    kind: BodyKind,
    status: u16,
}

enum Phase {
    Sending(Box<Sending>),
    Reading(Box<Reading>),
    /// Waiting until then to resume a broken stream (`GET` with `Last-Event-ID`).
    Resting(Timestamp),
    Done,
}

struct Exchange {
    purpose: Purpose,
    /// It carries the round's answer.
    delivery: bool,
    outgoing: Outgoing,
    redirects: u8,
    /// The `GET` resuming this exchange's stream is under way.
    resuming: bool,
    /// Failed resumption attempts in a row.
    resume_failures: u32,
    decoder: SseDecoder,
    /// Ids of the events seen (the latest ones): a resumed stream that replays them is not
    /// taken twice.
    seen: VecDeque<String>,
    /// A call's answer arrived.
    answered: bool,
    /// Later messages wait until this exchange's response begins (or until then): the
    /// standalone stream must be open before a request whose elicitation the server may send
    /// there, and `notifications/initialized` accepted before the next request (a server may
    /// offer its tools only once it has it; concurrent requests have no order).
    gate: Option<Timestamp>,
    phase: Phase,
}

/// How long messages wait for a gating exchange (see [`Exchange::gate`]) at most.
pub const GATE_MS: u64 = 10_000;

/// Most event ids remembered per exchange.
const MAX_SEEN_IDS: usize = 1024;

impl Exchange {
    /// An exchange that has not started (its phase `Done` until its request is sent).
    fn new(purpose: Purpose, delivery: bool, outgoing: Outgoing) -> Self {
        Self {
            purpose,
            delivery,
            outgoing,
            redirects: 0,
            resuming: false,
            resume_failures: 0,
            decoder: SseDecoder::default(),
            seen: VecDeque::new(),
            answered: false,
            gate: None,
            phase: Phase::Done,
        }
    }
}

/// What happened to one exchange during a progress pass.
enum Step {
    Nothing,
    Head(wasi::IncomingResponse),
    Failed(wasi::ErrorCode),
    Bytes(Vec<u8>),
    Ended,
    Broke(String),
    Due,
}

/// The transport of one server connection.
pub struct HttpLink {
    endpoint: Endpoint,
    session_id: Option<String>,
    /// The version `initialize` negotiated (legacy).
    negotiated: Option<String>,
    /// The ids of `initialize` requests sent.
    initialize_ids: Vec<Value>,
    exchanges: Vec<Exchange>,
    /// The standalone stream was asked for.
    listening: bool,
    /// Messages waiting for the gate to open (see [`Exchange::gate`]).
    queued: VecDeque<(Value, bool)>,
    /// The answer's exchange has not been accepted yet: what arrives meanwhile waits.
    delivering: bool,
    held: VecDeque<LinkEvent>,
    events: VecDeque<LinkEvent>,
    /// Bytes received in all.
    received: u64,
    closing: bool,
    /// What the transport knows of the server's tools (2026-07-28).
    tools: ToolCatalog,
}

/// One listed tool: its name, and its annotated parameters (`(parameter, header)`) or why it
/// may not be called.
type ToolHeaders = (String, Result<Vec<(String, String)>, String>);

/// The server's tools as far as their headers go (2026-07-28, SEP-2243).
#[derive(Debug, Default)]
enum ToolCatalog {
    /// Not listed yet.
    #[default]
    Unknown,
    /// Being listed: the page request's id, the pages so far, the calls that wait.
    Listing {
        id: Value,
        pages: u32,
        tools: Vec<ToolHeaders>,
        waiting: VecDeque<(Value, bool)>,
    },
    /// Listed: each tool's annotated parameters, or why it may not be called.
    Known(Vec<ToolHeaders>),
}

/// Most pages of `tools/list` read.
const MAX_TOOL_PAGES: u32 = 100;
/// The id prefix of the transport's own `tools/list` requests (never the session's ids, which
/// are numbers).
const LISTING_ID_PREFIX: &str = "m3-tools-list-";

impl HttpLink {
    /// A transport to `url` (checked by the host at submission).
    pub fn new(url: &str) -> Result<Self, String> {
        let endpoint =
            Endpoint::parse(url).map_err(|e| format!("the server URL is not usable: {}", e.0))?;
        Ok(Self {
            endpoint,
            session_id: None,
            negotiated: None,
            initialize_ids: Vec::new(),
            exchanges: Vec::new(),
            listening: false,
            queued: VecDeque::new(),
            delivering: false,
            held: VecDeque::new(),
            events: VecDeque::new(),
            received: 0,
            closing: false,
            tools: ToolCatalog::default(),
        })
    }

    /// Bytes received from the server so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Sends one JSON-RPC message; `delivery` when it carries the round's answer (then
    /// [`LinkEvent::Delivered`] or [`LinkEvent::Lost`] follows).
    pub fn send(&mut self, message: Value, delivery: bool) {
        if delivery {
            self.delivering = true;
        }
        if !self.queued.is_empty() || !self.gate_open() {
            self.queued.push_back((message, delivery));
            return;
        }
        self.post(message, delivery);
    }

    /// Whether messages may go out: no exchange that others must wait for (the standalone
    /// stream being opened, `notifications/initialized` on its way) is still waiting for its
    /// response's head, unless it has waited [`GATE_MS`].
    fn gate_open(&self) -> bool {
        let now = time::now();
        !self.exchanges.iter().any(|e| {
            matches!(e.phase, Phase::Sending(_))
                && e.gate.is_some_and(|until| !time::at_or_after(&now, &until))
        })
    }

    /// Sends what waited for the gate, in order, as long as it stays open.
    fn flush(&mut self) {
        while self.gate_open() {
            let Some((message, delivery)) = self.queued.pop_front() else {
                return;
            };
            self.post(message, delivery);
        }
    }

    fn post(&mut self, message: Value, delivery: bool) {
        let modern = message
            .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
            .and_then(Value::as_str)
            == Some(MODERN_VERSION);
        if modern && message.get("method").and_then(Value::as_str) == Some("tools/call") {
            match &mut self.tools {
                ToolCatalog::Unknown => {
                    let meta = message.pointer("/params/_meta").cloned();
                    self.tools = ToolCatalog::Listing {
                        id: Value::Null,
                        pages: 0,
                        tools: Vec::new(),
                        waiting: VecDeque::from([(message, delivery)]),
                    };
                    self.list_tools(None, meta);
                    return;
                }
                ToolCatalog::Listing { waiting, .. } => {
                    waiting.push_back((message, delivery));
                    return;
                }
                ToolCatalog::Known(_) => {}
            }
        }
        self.post_now(message, delivery);
    }

    /// Asks for one page of the server's tools (the transport's own request).
    fn list_tools(&mut self, cursor: Option<String>, meta: Option<Value>) {
        let ToolCatalog::Listing { id, pages, .. } = &mut self.tools else {
            return;
        };
        *pages += 1;
        *id = Value::String(format!("{LISTING_ID_PREFIX}{pages}"));
        let mut params = json!({});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        if let Some(cursor) = cursor {
            params["cursor"] = Value::String(cursor);
        }
        let request =
            json!({"jsonrpc": "2.0", "id": id.clone(), "method": "tools/list", "params": params});
        self.post_now(request, false);
    }

    /// The answer to the transport's own `tools/list`: the next page, or the catalog complete
    /// and the waiting calls sent (a call of a tool whose annotations break the rules is
    /// answered with an error instead, and never sent).
    fn listed(&mut self, answer: &Value, meta: Option<Value>) {
        let ToolCatalog::Listing { tools, pages, .. } = &mut self.tools else {
            return;
        };
        let mut next = None;
        if let Some(result) = answer.get("result") {
            for tool in result
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(name) = tool.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let schema = tool.get("inputSchema").cloned().unwrap_or(Value::Null);
                tools.push((
                    name.to_string(),
                    crate::mcp::param_headers::annotations(&schema),
                ));
            }
            next = result
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_string)
                .filter(|_| *pages < MAX_TOOL_PAGES);
        }
        if next.is_some() {
            self.list_tools(next, meta);
            return;
        }
        let ToolCatalog::Listing { tools, waiting, .. } = std::mem::take(&mut self.tools) else {
            return;
        };
        self.tools = ToolCatalog::Known(tools);
        for (message, delivery) in waiting {
            self.post(message, delivery);
        }
    }

    fn post_now(&mut self, message: Value, delivery: bool) {
        if let Some(refusal) = self.refused_tool(&message) {
            if delivery {
                self.delivering = false;
            }
            self.message(refusal);
            return;
        }
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_string);
        let id = message.get("id").filter(|id| !id.is_null()).cloned();
        let purpose = match (&method, id) {
            (Some(method), Some(id)) => {
                if method == "initialize" {
                    self.initialize_ids.push(id.clone());
                }
                Purpose::Call {
                    id,
                    method: method.clone(),
                }
            }
            _ => Purpose::Reply,
        };
        let version = message
            .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| self.negotiated.clone());
        let mut headers = vec![
            header("content-type", "application/json"),
            header("accept", "application/json, text/event-stream"),
        ];
        if let Some(version) = &version {
            headers.push(header("mcp-protocol-version", version));
        }
        if version.as_deref() == Some(MODERN_VERSION) {
            if let Some(method) = &method {
                headers.push(header_value("mcp-method", method));
                let name = match method.as_str() {
                    "tools/call" | "prompts/get" => message.pointer("/params/name"),
                    "resources/read" => message.pointer("/params/uri"),
                    _ => None,
                };
                if let Some(name) = name.and_then(Value::as_str) {
                    headers.push(header_value("mcp-name", name));
                }
                if method == "tools/call"
                    && let Some(annotations) = self.annotations_of(&message)
                {
                    let arguments = message
                        .pointer("/params/arguments")
                        .cloned()
                        .unwrap_or(Value::Null);
                    for (name, value) in crate::mcp::param_headers::headers(annotations, &arguments)
                    {
                        headers.push((name, value.into_bytes()));
                    }
                }
            }
        } else if let Some(session) = &self.session_id {
            headers.push(header("mcp-session-id", session));
        }
        let body = message.to_string().into_bytes();
        let exchange = self.start(
            purpose,
            delivery,
            Outgoing {
                method: Method::Post,
                target: self.endpoint.clone(),
                headers,
                body,
            },
        );
        if method.as_deref() == Some("notifications/initialized") {
            self.gate(exchange);
        }
    }

    /// Makes later messages wait for the exchange at `index`, if it is still under way (see
    /// [`Exchange::gate`]).
    fn gate(&mut self, index: Option<usize>) {
        if let Some(exchange) = index.and_then(|i| self.exchanges.get_mut(i)) {
            exchange.gate = Some(time::add_millis(&time::now(), GATE_MS));
        }
    }

    /// The annotated parameters of the tool a `tools/call` names, when the catalog has them.
    fn annotations_of(&self, message: &Value) -> Option<&[(String, String)]> {
        let ToolCatalog::Known(tools) = &self.tools else {
            return None;
        };
        let name = message.pointer("/params/name")?.as_str()?;
        match tools.iter().find(|(tool, _)| tool == name) {
            Some((_, Ok(annotations))) => Some(annotations),
            _ => None,
        }
    }

    /// The error answering a `tools/call` of a tool whose `x-mcp-header` annotations break the
    /// rules: such a tool is never called.
    fn refused_tool(&self, message: &Value) -> Option<String> {
        let ToolCatalog::Known(tools) = &self.tools else {
            return None;
        };
        if message.get("method").and_then(Value::as_str) != Some("tools/call") {
            return None;
        }
        let name = message.pointer("/params/name")?.as_str()?;
        let (_, Err(why)) = tools.iter().find(|(tool, _)| tool == name)? else {
            return None;
        };
        let id = message.get("id")?;
        Some(error_reply(
            id,
            -32602,
            &format!(
                "the kit does not call the server's tool `{}`: its x-mcp-header annotations \
                 break the rules of MCP 2026-07-28 ({why})",
                crate::errors::bounded(name)
            ),
        ))
    }

    /// The headers of a `GET` or `DELETE` in the session.
    fn session_headers(&self) -> Vec<(String, Vec<u8>)> {
        let mut headers = Vec::new();
        if let Some(session) = &self.session_id {
            headers.push(header("mcp-session-id", session));
        }
        if let Some(version) = &self.negotiated {
            headers.push(header("mcp-protocol-version", version));
        }
        headers
    }

    /// Starts an exchange; its index while it is under way.
    fn start(&mut self, purpose: Purpose, delivery: bool, outgoing: Outgoing) -> Option<usize> {
        let mut exchange = Exchange::new(purpose, delivery, outgoing);
        match begin(&exchange.outgoing) {
            Ok(sending) => exchange.phase = Phase::Sending(Box::new(sending)),
            Err(code) => self.exchange_failed(&mut exchange, &code),
        }
        if matches!(exchange.phase, Phase::Done) {
            return None;
        }
        self.exchanges.push(exchange);
        Some(self.exchanges.len() - 1)
    }

    /// Ends the session: `DELETE` when the server gave one (the caller waits for
    /// [`HttpLink::is_idle`] a moment), and stops listening and reading everything else.
    pub fn close(&mut self) {
        if self.closing {
            return;
        }
        self.closing = true;
        self.exchanges.clear();
        self.queued.clear();
        if self.session_id.is_some() {
            let outgoing = Outgoing {
                method: Method::Delete,
                target: self.endpoint.clone(),
                headers: self.session_headers(),
                body: Vec::new(),
            };
            self.start(Purpose::Close, false, outgoing);
        }
    }

    /// Gives up the answer's delivery (its time ran out before the server accepted or refused
    /// it): its exchange is dropped with its request, and what waited for it is let through.
    /// The answer is never sent again, and [`LinkEvent::Delivered`] never follows.
    pub fn give_up_delivery(&mut self) {
        for exchange in &mut self.exchanges {
            if exchange.delivery {
                exchange.delivery = false;
                exchange.phase = Phase::Done;
            }
        }
        self.queued.retain(|(_, delivery)| !delivery);
        if let ToolCatalog::Listing { waiting, .. } = &mut self.tools {
            waiting.retain(|(_, delivery)| !delivery);
        }
        if self.delivering {
            self.delivering = false;
            self.release();
        }
    }

    /// Nothing is under way.
    pub fn is_idle(&self) -> bool {
        self.exchanges.is_empty()
    }

    /// The pollables to wait on.
    pub fn pollables(&self) -> Vec<&Pollable> {
        let mut out = Vec::new();
        for exchange in &self.exchanges {
            match &exchange.phase {
                Phase::Sending(sending) => {
                    out.push(&sending.pollable);
                    if let Some(p) = &sending.writing.pollable {
                        out.push(p);
                    }
                }
                Phase::Reading(reading) => out.push(&reading.pollable),
                Phase::Resting(_) | Phase::Done => {}
            }
        }
        out
    }

    /// When something is due: a resting exchange's resumption, or a gate's end while
    /// messages wait for it.
    pub fn next_due(&self) -> Option<Timestamp> {
        let waiting = !self.queued.is_empty();
        self.exchanges
            .iter()
            .filter_map(|e| match (&e.phase, e.gate) {
                (Phase::Resting(at), _) => Some(*at),
                (Phase::Sending(_), Some(until)) if waiting => Some(until),
                _ => None,
            })
            .min_by(|a, b| time::to_nanos(a).cmp(&time::to_nanos(b)))
    }

    /// Moves every exchange on as far as it goes without waiting; returns what happened.
    pub fn progress(&mut self) -> Vec<LinkEvent> {
        let mut budget = READ_BUDGET;
        let mut index = 0;
        while index < self.exchanges.len() {
            self.advance(index, &mut budget);
            index += 1;
        }
        self.exchanges.retain(|e| !matches!(e.phase, Phase::Done));
        self.flush();
        self.events.drain(..).collect()
    }

    fn advance(&mut self, index: usize, budget: &mut usize) {
        loop {
            let step = poll_exchange(&mut self.exchanges[index], budget);
            match step {
                Step::Nothing => return,
                Step::Head(response) => self.head(index, response),
                Step::Failed(code) => {
                    let mut exchange = self.take(index);
                    self.exchange_failed(&mut exchange, &code);
                    self.exchanges[index] = exchange;
                }
                Step::Bytes(bytes) => self.bytes(index, bytes),
                Step::Ended => self.ended(index, None),
                Step::Broke(why) => self.ended(index, Some(why)),
                Step::Due => self.resume(index),
            }
        }
    }

    /// Takes the exchange out of the list for a moment (its place keeps a finished one).
    fn take(&mut self, index: usize) -> Exchange {
        let placeholder = Exchange::new(
            Purpose::Reply,
            false,
            Outgoing {
                method: Method::Get,
                target: self.endpoint.clone(),
                headers: Vec::new(),
                body: Vec::new(),
            },
        );
        std::mem::replace(&mut self.exchanges[index], placeholder)
    }

    fn head(&mut self, index: usize, response: wasi::IncomingResponse) {
        let status = response.status();
        let headers = response.headers();
        // Each value the transport reads is bounded before it is kept or sent back; a server
        // past a bound is lost, the message naming the limit, never the value.
        let read = |name: &str, limit: usize| {
            let value = headers.get(&name.to_ascii_lowercase()).into_iter().next();
            bounded_header(name, value, limit)
        };
        let values = (|| {
            Ok::<_, String>((
                read("Content-Type", MAX_HEADER_VALUE_BYTES)?,
                read("Location", MAX_HEADER_VALUE_BYTES)?,
                read("Mcp-Session-Id", MAX_SESSION_ID_BYTES)?,
            ))
        })();
        drop(headers);
        let (content_type, location, session) = match values {
            Ok(values) => values,
            Err(what) => {
                drop(response);
                let mut exchange = self.take(index);
                exchange.phase = Phase::Done;
                self.lost(&mut exchange, what);
                self.exchanges[index] = exchange;
                return;
            }
        };
        let content_type = content_type.unwrap_or_default().to_ascii_lowercase();
        let exchange = &mut self.exchanges[index];
        if (300..400).contains(&status)
            && let Some(location) = location
        {
            exchange.phase = Phase::Done;
            self.redirect(index, status, &location);
            return;
        }
        let ok = (200..300).contains(&status);
        if ok
            && session.is_some()
            && self.session_id.is_none()
            && let Purpose::Call { id, .. } = &exchange.purpose
            && self.initialize_ids.contains(id)
        {
            self.session_id = session;
        }
        if exchange.resuming && ok {
            exchange.resume_failures = 0;
        }
        let events = content_type.starts_with("text/event-stream");
        let kind = match (&exchange.purpose, ok) {
            (Purpose::Call { .. } | Purpose::Listen, true) if events => BodyKind::Events,
            (Purpose::Call { .. }, true) if exchange.resuming || status == 202 || status == 204 => {
                BodyKind::Discard
            }
            (Purpose::Call { .. }, true) => BodyKind::Json(Vec::new()),
            (_, true) => BodyKind::Discard,
            (_, false) => BodyKind::Error(Vec::new()),
        };
        // An answer is delivered once the server took it: a response or notification with a
        // success status, or the call carrying it (2026-07-28) answered with one.
        let accepted = exchange.delivery
            && ok
            && match exchange.purpose {
                Purpose::Reply => true,
                Purpose::Call { .. } => !exchange.resuming,
                Purpose::Listen | Purpose::Close => false,
            };
        if accepted {
            exchange.delivery = false;
            self.delivered();
        }
        let exchange = &mut self.exchanges[index];
        let body = match response.consume() {
            Ok(body) => body,
            Err(()) => {
                exchange.phase = Phase::Done;
                return;
            }
        };
        let Ok(stream) = body.stream() else {
            exchange.phase = Phase::Done;
            return;
        };
        let pollable = stream.subscribe();
        exchange.phase = Phase::Reading(Box::new(Reading {
            pollable,
            stream,
            _body: body,
            kind,
            status,
        }));
    }

    fn redirect(&mut self, index: usize, status: u16, location: &str) {
        let mut exchange = self.take(index);
        let target = match exchange.outgoing.target.resolve(location) {
            Ok(target) => target,
            Err(e) => {
                self.lost(
                    &mut exchange,
                    format!(
                        "redirected (HTTP {status}) to a malformed location ({})",
                        e.0
                    ),
                );
                self.exchanges[index] = exchange;
                return;
            }
        };
        if exchange.redirects >= MAX_REDIRECTS {
            self.lost(
                &mut exchange,
                format!("redirected the kit more than {MAX_REDIRECTS} times"),
            );
            self.exchanges[index] = exchange;
            return;
        }
        exchange.redirects += 1;
        exchange.outgoing.target = target;
        match begin(&exchange.outgoing) {
            Ok(sending) => exchange.phase = Phase::Sending(Box::new(sending)),
            Err(code) => self.exchange_failed(&mut exchange, &code),
        }
        self.exchanges[index] = exchange;
    }

    fn bytes(&mut self, index: usize, bytes: Vec<u8>) {
        self.received = self.received.saturating_add(bytes.len() as u64);
        let exchange = &mut self.exchanges[index];
        let Phase::Reading(reading) = &mut exchange.phase else {
            return;
        };
        match &mut reading.kind {
            BodyKind::Discard => {}
            BodyKind::Error(kept) => {
                let room = MAX_ERROR_BODY.saturating_sub(kept.len());
                kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            BodyKind::Json(kept) => {
                if kept.len() + bytes.len() > MAX_LINE_BYTES {
                    exchange.phase = Phase::Done;
                    let mut exchange = self.take(index);
                    self.lost(
                        &mut exchange,
                        format!(
                            "answered with a body longer than {} MiB",
                            MAX_LINE_BYTES >> 20
                        ),
                    );
                    self.exchanges[index] = exchange;
                    return;
                }
                kept.extend_from_slice(&bytes);
            }
            BodyKind::Events => {
                let events = match exchange.decoder.push(&bytes) {
                    Ok(events) => events,
                    Err(e) => {
                        let mut exchange = self.take(index);
                        exchange.phase = Phase::Done;
                        self.lost(&mut exchange, e.to_string());
                        self.exchanges[index] = exchange;
                        return;
                    }
                };
                let mut answered = false;
                let mut messages = Vec::new();
                for event in events {
                    if let Some(id) = event.id.as_deref().filter(|id| !id.is_empty()) {
                        if exchange.seen.iter().any(|seen| seen == id) {
                            continue;
                        }
                        if exchange.seen.len() == MAX_SEEN_IDS {
                            exchange.seen.pop_front();
                        }
                        exchange.seen.push_back(id.to_string());
                    }
                    if event.event != "message" || event.data.trim().is_empty() {
                        continue;
                    }
                    if let Purpose::Call { id, .. } = &exchange.purpose
                        && answers(&event.data, id)
                    {
                        answered = true;
                    }
                    messages.push(event.data);
                }
                if answered {
                    exchange.answered = true;
                    // The call is answered: its stream is done (a server may keep it open).
                    exchange.phase = Phase::Done;
                }
                for message in messages {
                    self.message(message);
                }
            }
        }
    }

    /// A body or stream ended (`broke`: with an error).
    fn ended(&mut self, index: usize, broke: Option<String>) {
        let mut exchange = self.take(index);
        let Phase::Reading(reading) = std::mem::replace(&mut exchange.phase, Phase::Done) else {
            self.exchanges[index] = exchange;
            return;
        };
        let Reading { kind, status, .. } = *reading;
        match kind {
            BodyKind::Events => match &exchange.purpose {
                Purpose::Call { method, .. } if !exchange.answered => {
                    let method = method.clone();
                    self.stream_broke(&mut exchange, &method, broke);
                }
                Purpose::Listen if !self.closing => {
                    // The server closed its stream (it may, and a client opens it again).
                    self.rest(&mut exchange);
                }
                _ => {}
            },
            BodyKind::Json(bytes) => {
                self.json_body(&mut exchange, &bytes, broke);
            }
            BodyKind::Error(bytes) => self.error_body(&mut exchange, status, &bytes),
            BodyKind::Discard => {
                if let Purpose::Call { method, .. } = &exchange.purpose {
                    if exchange.resuming {
                        // A resumption that did not stream: try again.
                        let method = method.clone();
                        self.stream_broke(&mut exchange, &method, None);
                    } else {
                        let reply = error_reply(
                            &call_id(&exchange),
                            -32603,
                            &format!("the server answered HTTP {status} without a response"),
                        );
                        self.message(reply);
                    }
                }
            }
        }
        self.exchanges[index] = exchange;
    }

    fn json_body(&mut self, exchange: &mut Exchange, bytes: &[u8], broke: Option<String>) {
        let Purpose::Call { method, .. } = &exchange.purpose else {
            return;
        };
        let method = method.clone();
        if let Some(why) = broke {
            self.lost(exchange, format!("broke its answer to `{method}` ({why})"));
            return;
        }
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Array(batch)) => {
                for message in batch {
                    self.message(message.to_string());
                }
            }
            Ok(Value::Object(_)) => {
                // As written: numbers keep their digits, properties their order.
                self.message(String::from_utf8_lossy(bytes).trim().to_string());
            }
            _ => self.lost(
                exchange,
                format!("answered `{method}` with a body that is not JSON"),
            ),
        }
    }

    /// An error status: the server's JSON-RPC error for the call, or one made of the status.
    fn error_body(&mut self, exchange: &mut Exchange, status: u16, bytes: &[u8]) {
        let session_gone = status == 404 && self.session_id.is_some();
        let reason = if session_gone {
            format!("HTTP {status}: the server no longer knows the session")
        } else {
            format!("HTTP {status}")
        };
        match &exchange.purpose {
            Purpose::Call { method, .. } if exchange.resuming => {
                let method = method.clone();
                if status == 404 || status == 400 {
                    self.lost(
                        exchange,
                        format!(
                            "broke the stream of `{method}`, and refused to resume it ({reason})"
                        ),
                    );
                } else {
                    self.stream_broke(exchange, &method, Some(reason));
                }
            }
            Purpose::Call { id, method } => {
                let parsed = serde_json::from_slice::<Value>(bytes).ok();
                let ours = parsed.as_ref().is_some_and(|m| answers_value(m, id));
                if exchange.delivery {
                    exchange.delivery = false;
                    if ours {
                        // The server took the answer and answered it (with an error).
                        self.delivered();
                    } else {
                        let method = method.clone();
                        self.lost(
                            exchange,
                            format!("did not take the answer to `{method}` ({reason})"),
                        );
                        return;
                    }
                }
                let reply = match parsed {
                    Some(mut message) if message.get("error").is_some_and(Value::is_object) => {
                        message["id"] = id.clone();
                        if !ours && let Some(text) = message.pointer_mut("/error/message") {
                            *text = Value::String(format!(
                                "{} ({reason})",
                                text.as_str().unwrap_or_default()
                            ));
                        }
                        message.to_string()
                    }
                    _ => error_reply(id, -32000, &format!("the server answered {reason}")),
                };
                self.message(reply);
            }
            Purpose::Reply => {
                if exchange.delivery {
                    exchange.delivery = false;
                    self.lost(exchange, format!("did not take the answer ({reason})"));
                } else {
                    self.lost(exchange, format!("refused a message of the kit ({reason})"));
                }
            }
            Purpose::Listen => {
                if exchange.resuming
                    && status != 405
                    && !session_gone
                    && exchange.resume_failures < MAX_RESUME_ATTEMPTS
                {
                    self.rest(exchange);
                }
            }
            Purpose::Close => {}
        }
    }

    /// A call's stream ended before its answer: resume it, or the server is lost.
    fn stream_broke(&mut self, exchange: &mut Exchange, method: &str, broke: Option<String>) {
        let resumable = exchange
            .decoder
            .last_event_id()
            .is_some_and(|id| !id.is_empty());
        if resumable && !self.closing {
            if exchange.resuming && exchange.resume_failures >= MAX_RESUME_ATTEMPTS {
                self.lost(
                    exchange,
                    format!(
                        "broke the stream of `{method}` and it could not be resumed in \
                         {MAX_RESUME_ATTEMPTS} attempts"
                    ),
                );
                return;
            }
            self.rest(exchange);
            return;
        }
        let why = broke.map(|w| format!(" ({w})")).unwrap_or_default();
        self.lost(
            exchange,
            format!("ended the stream of `{method}` before answering it{why}, and gave no event id to resume it"),
        );
    }

    /// Waits the server's `retry` delay, then resumes with `GET`.
    fn rest(&mut self, exchange: &mut Exchange) {
        let delay = exchange
            .decoder
            .retry_ms()
            .unwrap_or(DEFAULT_RETRY_MS)
            .max(1);
        exchange.decoder.resume();
        exchange.phase = Phase::Resting(time::add_millis(&time::now(), delay));
    }

    fn resume(&mut self, index: usize) {
        let mut exchange = self.take(index);
        let mut headers = vec![header("accept", "text/event-stream")];
        headers.extend(self.session_headers());
        if let Some(id) = exchange.decoder.last_event_id().filter(|id| !id.is_empty()) {
            headers.push(header("last-event-id", id));
        }
        exchange.resuming = true;
        exchange.resume_failures += 1;
        exchange.redirects = 0;
        exchange.outgoing = Outgoing {
            method: Method::Get,
            target: self.endpoint.clone(),
            headers,
            body: Vec::new(),
        };
        match begin(&exchange.outgoing) {
            Ok(sending) => exchange.phase = Phase::Sending(Box::new(sending)),
            Err(code) => self.exchange_failed(&mut exchange, &code),
        }
        self.exchanges[index] = exchange;
    }

    /// The request could not be sent or answered at all.
    fn exchange_failed(&mut self, exchange: &mut Exchange, code: &wasi::ErrorCode) {
        exchange.phase = Phase::Done;
        if matches!(code, wasi::ErrorCode::HttpRequestDenied) {
            let asked = exchange.outgoing.target.origin();
            let what = if exchange.redirects > 0 {
                format!(
                    "it redirected the kit to {asked}, an origin the host does not grant (only the \
                     server's own, {}, is)",
                    self.endpoint.origin()
                )
            } else {
                format!(
                    "the host refused a request to {asked} (only the server's origin, {}, is \
                     granted)",
                    self.endpoint.origin()
                )
            };
            if exchange.delivery {
                exchange.delivery = false;
                self.delivering = false;
                self.release();
                self.events.push_back(LinkEvent::Refused(what));
            } else {
                self.after_delivery(LinkEvent::Refused(what));
            }
            return;
        }
        let why = describe(code);
        match &exchange.purpose {
            Purpose::Listen => {
                if !self.closing && exchange.resume_failures < MAX_RESUME_ATTEMPTS {
                    self.rest(exchange);
                }
            }
            Purpose::Close => {}
            Purpose::Call { method, .. } if exchange.resuming => {
                let method = method.clone();
                self.stream_broke(exchange, &method, Some(why));
            }
            Purpose::Call { .. } | Purpose::Reply => {
                let how = match stage(code) {
                    Stage::Unreached => {
                        format!("could not be reached at {} ({why})", self.endpoint.url())
                    }
                    Stage::Unsent => format!("was not sent the kit's request ({why})"),
                    Stage::Sent if exchange.delivery => format!(
                        "broke the connection after the answer was sent, before responding ({why})"
                    ),
                    Stage::Sent => format!(
                        "broke the connection after the kit's request was sent, before \
                         responding ({why})"
                    ),
                };
                self.lost(exchange, how);
            }
        }
    }

    fn lost(&mut self, exchange: &mut Exchange, how: String) {
        exchange.phase = Phase::Done;
        if exchange.delivery {
            exchange.delivery = false;
            self.delivering = false;
            self.release();
            self.events.push_back(LinkEvent::Lost(how));
            return;
        }
        self.after_delivery(LinkEvent::Lost(how));
    }

    /// Whether the answer's own exchange is under way: sent, its acceptance (or refusal) not yet
    /// known. (`delivering` alone also covers an answer still queued behind a gate or a listing,
    /// which has not reached the server.)
    fn delivery_in_flight(&self) -> bool {
        self.exchanges.iter().any(|e| e.delivery)
    }

    /// Says `event` (another exchange lost or refused) now or, while the answer is in flight,
    /// after the answer's outcome: a server that accepted the answer and then died is said to
    /// have been delivered to first, whichever of its connections the host heard end first.
    /// The wait is the delivery's own, bounded by its timeout and the round's deadline
    /// ([`HttpLink::give_up_delivery`] lets it through).
    fn after_delivery(&mut self, event: LinkEvent) {
        if self.delivering && self.delivery_in_flight() {
            self.held.push_back(event);
        } else {
            self.events.push_back(event);
        }
    }

    fn delivered(&mut self) {
        self.delivering = false;
        self.events.push_back(LinkEvent::Delivered);
        self.release();
    }

    fn release(&mut self) {
        while let Some(event) = self.held.pop_front() {
            self.events.push_back(event);
        }
    }

    fn message(&mut self, text: String) {
        if let ToolCatalog::Listing { id, waiting, .. } = &self.tools
            && let Ok(answer) = serde_json::from_str::<Value>(&text)
            && answers_value(&answer, id)
        {
            let meta = waiting
                .front()
                .and_then(|(m, _)| m.pointer("/params/_meta").cloned());
            self.listed(&answer, meta);
            return;
        }
        self.note_message(&text);
        let event = LinkEvent::Message(text);
        if self.delivering {
            self.held.push_back(event);
        } else {
            self.events.push_back(event);
        }
    }

    /// What the transport learns from a message: the version `initialize` negotiated, then
    /// it opens the standalone stream.
    fn note_message(&mut self, text: &str) {
        if self.initialize_ids.is_empty() || self.negotiated.is_some() {
            return;
        }
        let Ok(message) = serde_json::from_str::<Value>(text) else {
            return;
        };
        let Some(id) = message.get("id") else {
            return;
        };
        if !self.initialize_ids.contains(id) {
            return;
        }
        if let Some(version) = message
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
        {
            if version.len() > MAX_VERSION_BYTES {
                // It would go back on every request: the server is lost instead.
                self.events.push_back(LinkEvent::Lost(format!(
                    "named a protocol version of {} bytes, over the {MAX_VERSION_BYTES}-byte limit",
                    version.len()
                )));
                return;
            }
            self.negotiated = Some(version.to_string());
            self.open_listen();
        }
    }

    /// Opens the standalone `GET` stream (legacy): requests wait until it is open, so that
    /// nothing the server sends there is missed.
    fn open_listen(&mut self) {
        if self.listening || self.closing {
            return;
        }
        self.listening = true;
        let mut headers = vec![header("accept", "text/event-stream")];
        headers.extend(self.session_headers());
        let exchange = self.start(
            Purpose::Listen,
            false,
            Outgoing {
                method: Method::Get,
                target: self.endpoint.clone(),
                headers,
                body: Vec::new(),
            },
        );
        self.gate(exchange);
    }
}

/// Starts an exchange's request.
fn begin(outgoing: &Outgoing) -> Result<Sending, wasi::ErrorCode> {
    let mut headers = outgoing.headers.clone();
    if outgoing.method == Method::Post {
        headers.push(header("content-length", &outgoing.body.len().to_string()));
    }
    // Past its limit `wasi:http` traps instead of refusing: the kit refuses first.
    let size = header_cost(&headers);
    if headers.len() > MAX_REQUEST_HEADERS || size > MAX_REQUEST_HEADER_BYTES {
        return Err(wasi::ErrorCode::HttpRequestHeaderSectionSize(Some(
            u32::try_from(size).unwrap_or(u32::MAX),
        )));
    }
    let fields = wasi::Fields::from_list(&headers)
        .map_err(|e| wasi::ErrorCode::InternalError(Some(format!("a header: {e:?}"))))?;
    let request = wasi::OutgoingRequest::new(fields);
    let method = match outgoing.method {
        Method::Get => wasi::Method::Get,
        Method::Post => wasi::Method::Post,
        Method::Delete => wasi::Method::Delete,
    };
    let bad = |what: &str| wasi::ErrorCode::InternalError(Some(format!("the request's {what}")));
    request.set_method(&method).map_err(|()| bad("method"))?;
    let scheme = match outgoing.target.scheme {
        Scheme::Http => wasi::Scheme::Http,
        Scheme::Https => wasi::Scheme::Https,
    };
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| bad("scheme"))?;
    request
        .set_authority(Some(&outgoing.target.authority))
        .map_err(|()| bad("authority"))?;
    request
        .set_path_with_query(Some(&outgoing.target.path_and_query))
        .map_err(|()| bad("path"))?;
    let body = if outgoing.method == Method::Post {
        Some(request.body().map_err(|()| bad("body"))?)
    } else {
        None
    };
    let options = wasi::RequestOptions::new();
    let nanos = |ms: u64| ms.saturating_mul(1_000_000);
    let _ = options.set_connect_timeout(Some(nanos(CONNECT_TIMEOUT_MS)));
    let _ = options.set_first_byte_timeout(Some(nanos(STREAM_SILENCE_MS)));
    let _ = options.set_between_bytes_timeout(Some(nanos(STREAM_SILENCE_MS)));
    let future = outgoing_handler::handle(request, Some(options))?;
    let mut writing = Writing {
        pollable: None,
        stream: None,
        body: None,
        written: 0,
    };
    if let Some(body) = body {
        writing.stream = Some(body.write().map_err(|()| bad("body stream"))?);
        writing.body = Some(body);
        // As much of the body as the stream takes now; the rest when it has room.
        writing.advance(&outgoing.body);
    }
    let pollable = future.subscribe();
    Ok(Sending {
        pollable,
        writing,
        future,
    })
}

/// One non-blocking step of an exchange.
fn poll_exchange(exchange: &mut Exchange, budget: &mut usize) -> Step {
    match &mut exchange.phase {
        Phase::Done => Step::Nothing,
        Phase::Resting(at) => {
            if time::at_or_after(&time::now(), at) {
                exchange.phase = Phase::Done;
                Step::Due
            } else {
                Step::Nothing
            }
        }
        Phase::Sending(sending) => {
            sending.writing.advance(&exchange.outgoing.body);
            if !sending.pollable.ready() {
                return Step::Nothing;
            }
            let result = sending.future.get();
            exchange.phase = Phase::Done;
            match result {
                Some(Ok(Ok(response))) => Step::Head(response),
                Some(Ok(Err(code))) => Step::Failed(code),
                Some(Err(())) | None => Step::Failed(wasi::ErrorCode::InternalError(Some(
                    "the response was lost".into(),
                ))),
            }
        }
        Phase::Reading(reading) => {
            if *budget == 0 {
                return Step::Nothing;
            }
            match reading.stream.read(READ_CHUNK) {
                Ok(bytes) if bytes.is_empty() => Step::Nothing,
                Ok(bytes) => {
                    *budget = budget.saturating_sub(bytes.len());
                    Step::Bytes(bytes)
                }
                Err(StreamError::Closed) => Step::Ended,
                Err(StreamError::LastOperationFailed(e)) => {
                    let why = wasi::http_error_code(&e)
                        .map(|code| describe(&code))
                        .unwrap_or_else(|| e.to_debug_string());
                    Step::Broke(why)
                }
            }
        }
    }
}

/// Whether `text` is the JSON-RPC response to request `id`.
fn answers(text: &str, id: &Value) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|m| answers_value(&m, id))
}

fn answers_value(message: &Value, id: &Value) -> bool {
    message.get("id") == Some(id)
        && message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some())
}

fn call_id(exchange: &Exchange) -> Value {
    match &exchange.purpose {
        Purpose::Call { id, .. } => id.clone(),
        _ => Value::Null,
    }
}

/// A JSON-RPC error response to `id`, as the transport's own.
fn error_reply(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// A response header's value as text (`None` when absent or not UTF-8), or, when it is over
/// `limit` bytes, what the server did, as a phrase after "the server" (never the value).
fn bounded_header(
    name: &str,
    value: Option<Vec<u8>>,
    limit: usize,
) -> Result<Option<String>, String> {
    match value {
        Some(value) if value.len() > limit => Err(format!(
            "sent a `{name}` header of {} bytes, over the {limit}-byte limit",
            value.len()
        )),
        Some(value) => Ok(String::from_utf8(value).ok()),
        None => Ok(None),
    }
}

/// What `headers` cost against [`MAX_REQUEST_HEADER_BYTES`].
fn header_cost(headers: &[(String, Vec<u8>)]) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.len() + value.len() + HEADER_ENTRY_COST)
        .sum()
}

fn header(name: &str, value: &str) -> (String, Vec<u8>) {
    (name.to_string(), value.as_bytes().to_vec())
}

/// A header carrying a value from a message: as it is when it is printable ASCII without
/// surrounding spaces, else as `=?base64?...?=` (SEP-2243).
fn header_value(name: &str, value: &str) -> (String, Vec<u8>) {
    (
        name.to_string(),
        crate::mcp::param_headers::encode_text(value).into_bytes(),
    )
}

/// How far a request that failed before its response got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// No connection to the server was made.
    Unreached,
    /// The kit did not send it (the host or the kit refused it before any connection).
    Unsent,
    /// Connected, and sent (or being sent) when the connection broke or the time ran out.
    Sent,
}

/// How far a request that failed with `code` got.
fn stage(code: &wasi::ErrorCode) -> Stage {
    use wasi::ErrorCode as E;
    match code {
        E::ConnectionRefused
        | E::ConnectionTimeout
        | E::DnsTimeout
        | E::DnsError(_)
        | E::DestinationNotFound
        | E::DestinationUnavailable
        | E::DestinationIpProhibited
        | E::DestinationIpUnroutable
        | E::TlsProtocolError
        | E::TlsCertificateError
        | E::TlsAlertReceived(_) => Stage::Unreached,
        E::HttpRequestDenied | E::HttpRequestHeaderSectionSize(_) | E::InternalError(_) => {
            Stage::Unsent
        }
        _ => Stage::Sent,
    }
}

/// What a `wasi:http` error means, in words.
fn describe(code: &wasi::ErrorCode) -> String {
    use wasi::ErrorCode as E;
    match code {
        E::ConnectionRefused => "connection refused".into(),
        E::ConnectionTerminated => "the connection was reset".into(),
        E::HttpRequestHeaderSectionSize(size) => format!(
            "its headers ({} bytes) are over the kit's limits of {MAX_REQUEST_HEADERS} headers \
             and {MAX_REQUEST_HEADER_BYTES} bytes",
            size.unwrap_or_default()
        ),
        E::ConnectionTimeout => "connecting timed out".into(),
        E::ConnectionReadTimeout | E::HttpResponseTimeout => "no answer in time".into(),
        E::DnsTimeout | E::DnsError(_) => "its host name could not be resolved".into(),
        E::DestinationNotFound | E::DestinationUnavailable => "unreachable".into(),
        E::TlsProtocolError | E::TlsCertificateError | E::TlsAlertReceived(_) => {
            "TLS failed (its certificate, or the handshake)".into()
        }
        E::HttpResponseIncomplete => "the connection closed before a complete response".into(),
        E::HttpProtocolError => "the response is not valid HTTP".into(),
        E::HttpRequestDenied => "the host refused the request".into(),
        E::InternalError(Some(why)) => why.clone(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_or_header_past_its_bound_is_refused_naming_the_limit_not_the_value() {
        let huge = vec![b's'; 200 * 1024];
        let refused =
            bounded_header("Mcp-Session-Id", Some(huge), MAX_SESSION_ID_BYTES).unwrap_err();
        assert_eq!(
            refused,
            "sent a `Mcp-Session-Id` header of 204800 bytes, over the 4096-byte limit"
        );
        let fits = vec![b'a'; MAX_SESSION_ID_BYTES];
        assert_eq!(
            bounded_header("Mcp-Session-Id", Some(fits.clone()), MAX_SESSION_ID_BYTES),
            Ok(Some(String::from_utf8(fits).unwrap()))
        );
        assert_eq!(bounded_header("Location", None, 1), Ok(None));
        assert_eq!(
            bounded_header("Content-Type", Some(vec![0xff]), MAX_HEADER_VALUE_BYTES),
            Ok(None)
        );
    }

    #[test]
    fn the_largest_request_the_kit_sends_stays_under_what_wasi_http_traps_at() {
        // Every value a server gave that goes back, at its bound, with the kit's own headers.
        let headers = vec![
            header("content-type", "application/json"),
            header("accept", "application/json, text/event-stream"),
            header("mcp-protocol-version", &"9".repeat(MAX_VERSION_BYTES)),
            header("mcp-session-id", &"s".repeat(MAX_SESSION_ID_BYTES)),
            header(
                "last-event-id",
                &"7".repeat(crate::mcp::sse::MAX_EVENT_ID_BYTES),
            ),
            header("content-length", "1000000"),
        ];
        assert!(header_cost(&headers) < MAX_REQUEST_HEADER_BYTES);
        // wasi:http's own limit (wasmtime-wasi-http's default field size limit).
        const WASI_HTTP_FIELDS_LIMIT: usize = 128 * 1024;
        const { assert!(MAX_REQUEST_HEADER_BYTES * 2 <= WASI_HTTP_FIELDS_LIMIT) };
        // A request within the kit's bounds stays under the trap in wasi:http's own count
        // (each entry's name and value, and at most 72 bytes of its structures).
        const { assert!(MAX_REQUEST_HEADERS * 72 + MAX_REQUEST_HEADER_BYTES < WASI_HTTP_FIELDS_LIMIT) };
    }
}
