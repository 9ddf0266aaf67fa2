//! The guest's MCP client pieces against real MCP peers (installed on first use by
//! `m3_tests::peers` from the pins in `tests/peers/`): `server-everything` (legacy era) and a
//! server on the official Python SDK, `tests/peers/booking_server.py` (both eras).
//!
//! A small blocking stdio driver moves bytes; every message is built and classified only by the
//! guest's pure functions (`m3_guest::mcp::{era, framing, message, legacy, mrtr, request}`), and
//! every form schema a peer sends goes through `m3_guest::schema::check_requested_schema`. Every
//! read has a timeout and every child is killed when its driver is dropped.

use anyhow::{Context, Result, anyhow, bail, ensure};
use m3_guest::m3::managed_input::types::{
    ElicitationAction, ElicitationRequest, ElicitationResponse, FailureCode, FormRequest,
};
use m3_guest::mcp::era::{self, Era, ProbeOutcome};
use m3_guest::mcp::framing::{self, LineBuffer};
use m3_guest::mcp::message::{self, Incoming, RpcError};
use m3_guest::mcp::mrtr::{self, CallResult};
use m3_guest::mcp::{LEGACY_VERSION, MODERN_VERSION, legacy, request};
use m3_guest::schema;
use m3_tests::peers::{self, PeerCommand};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long any one wait for a peer's message may take (peers answer in milliseconds; the
/// margin covers a loaded machine and the Python server's start-up).
const WAIT: Duration = Duration::from_secs(30);
/// How long the era probe waits before it counts as "no answer" (legacy).
const PROBE_WAIT: Duration = Duration::from_secs(10);
/// Most bytes of a peer's stderr kept for failure messages.
const STDERR_KEEP: usize = 16 * 1024;

/// What a wait for the answer to one of our requests saw.
#[derive(Debug)]
enum Event {
    /// The server sent a request of its own (legacy `elicitation/create`).
    ServerRequest {
        id: Value,
        method: String,
        params: Value,
    },
    /// The answer to our request.
    Response(Result<Value, RpcError>),
}

/// One peer process over stdio: a reader thread frames its stdout with the guest's
/// `LineBuffer`; another keeps the tail of its stderr for failure messages.
struct Peer {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Result<String, String>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    next_id: u64,
    _cwd: tempfile::TempDir,
}

impl Peer {
    /// Starts `command` with an empty environment except `PATH` and `HOME`, in a scratch
    /// directory.
    fn spawn(name: &str, command: &PeerCommand) -> Result<Self> {
        let cwd = tempfile::tempdir()?;
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args)
            .env_clear()
            .current_dir(cwd.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for key in ["PATH", "HOME"] {
            if let Some(value) = std::env::var_os(key) {
                cmd.env(key, value);
            }
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {name}: {}", command.display()))?;
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().context("stdout")?;
        let mut stderr_pipe = child.stderr.take().context("stderr")?;
        let (sender, lines) = mpsc::channel();
        thread::spawn(move || {
            let mut framer = LineBuffer::default();
            let mut chunk = [0u8; 64 * 1024];
            loop {
                match stdout.read(&mut chunk) {
                    Ok(0) => {
                        let _ = sender.send(Err("the peer closed its stdout".to_string()));
                        return;
                    }
                    Ok(n) => match framer.push(&chunk[..n]) {
                        Ok(framed) => {
                            for line in framed {
                                if sender.send(Ok(line)).is_err() {
                                    return;
                                }
                            }
                        }
                        Err(e) => {
                            let _ = sender.send(Err(format!("framing: {e:?}")));
                            return;
                        }
                    },
                    Err(e) => {
                        let _ = sender.send(Err(format!("reading stdout: {e}")));
                        return;
                    }
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&stderr);
        thread::spawn(move || {
            let mut chunk = [0u8; 8 * 1024];
            while let Ok(n) = stderr_pipe.read(&mut chunk) {
                if n == 0 {
                    return;
                }
                let mut kept = keep.lock().unwrap_or_else(|e| e.into_inner());
                kept.extend_from_slice(&chunk[..n]);
                let excess = kept.len().saturating_sub(STDERR_KEEP);
                kept.drain(..excess);
            }
        });
        Ok(Self {
            name: name.to_string(),
            child,
            stdin,
            lines,
            stderr,
            next_id: 1,
            _cwd: cwd,
        })
    }

    /// The tail of the peer's stderr.
    fn stderr(&self) -> String {
        let kept = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&kept).into_owned()
    }

    /// Writes one message as a line (the guest's `framing::encode`).
    fn send(&mut self, message: &Value) -> Result<()> {
        let line = framing::encode(message);
        let stdin = self.stdin.as_mut().context("stdin already closed")?;
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .with_context(|| format!("writing to {}; stderr:\n{}", self.name, self.stderr()))
    }

    /// Sends a request with a fresh id and returns the id.
    fn request(&mut self, method: &str, params: Value) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&message::request(id, method, params))?;
        Ok(id)
    }

    /// Sends a notification.
    fn notify(&mut self, method: &str, params: Value) -> Result<()> {
        self.send(&message::notification(method, params))
    }

    /// The next message (classified by `message::parse`), or `None` after `timeout`.
    fn next_message(&mut self, timeout: Duration) -> Result<Option<Incoming>> {
        match self.lines.recv_timeout(timeout) {
            Ok(Ok(line)) => message::parse(&line).map(Some).map_err(|e| {
                anyhow!(
                    "{} sent a line that is not a message ({}): {line}",
                    self.name,
                    e.0
                )
            }),
            Ok(Err(e)) => bail!("{}: {e}; stderr:\n{}", self.name, self.stderr()),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                bail!(
                    "{}: the reader stopped; stderr:\n{}",
                    self.name,
                    self.stderr()
                )
            }
        }
    }

    /// Waits (at most `timeout`) for the answer to request `id`, or a request from the server.
    /// Notifications are skipped; an answer to another id is an error. `None` on timeout.
    fn wait_for(&mut self, id: u64, timeout: Duration) -> Result<Option<Event>> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(incoming) = self.next_message(left)? else {
                return Ok(None);
            };
            match incoming {
                Incoming::Notification { .. } => continue,
                Incoming::Request { id, method, params } => {
                    return Ok(Some(Event::ServerRequest { id, method, params }));
                }
                Incoming::Response {
                    id: answered,
                    outcome,
                } => {
                    ensure!(
                        answered == json!(id),
                        "{} answered id {answered} while we waited for {id}",
                        self.name
                    );
                    return Ok(Some(Event::Response(outcome)));
                }
            }
        }
    }

    /// Like [`Peer::wait_for`], failing on timeout.
    fn expect(&mut self, id: u64) -> Result<Event> {
        self.wait_for(id, WAIT)?.ok_or_else(|| {
            anyhow!(
                "{} did not answer request {id} within {} s; stderr:\n{}",
                self.name,
                WAIT.as_secs(),
                self.stderr()
            )
        })
    }

    /// Waits for the answer to `id`; a server request in between is an error.
    fn expect_response(&mut self, id: u64) -> Result<Result<Value, RpcError>> {
        match self.expect(id)? {
            Event::Response(outcome) => Ok(outcome),
            Event::ServerRequest { method, params, .. } => {
                bail!(
                    "{} sent a request `{method}` {params} instead of answering {id}",
                    self.name
                )
            }
        }
    }

    /// Waits for a successful answer to `id`.
    fn expect_result(&mut self, id: u64) -> Result<Value> {
        self.expect_response(id)?
            .map_err(|e| anyhow!("{} answered {id} with an error: {e:?}", self.name))
    }

    /// Waits for the server's own request while our request `id` is in flight.
    fn expect_server_request(&mut self, id: u64) -> Result<(Value, String, Value)> {
        match self.expect(id)? {
            Event::ServerRequest { id, method, params } => Ok((id, method, params)),
            Event::Response(outcome) => {
                bail!(
                    "{} answered {id} ({outcome:?}) without asking for input",
                    self.name
                )
            }
        }
    }

    /// The era probe: `server/discover`, classified by `era::decide`.
    fn probe(&mut self) -> Result<(ProbeOutcome, Era)> {
        let id = self.request("server/discover", era::discover_params())?;
        let outcome = match self.wait_for(id, PROBE_WAIT)? {
            None => ProbeOutcome::TimedOut,
            Some(Event::Response(Ok(result))) => ProbeOutcome::Discovered(result),
            Some(Event::Response(Err(error))) => ProbeOutcome::Failed(error),
            Some(Event::ServerRequest { method, .. }) => {
                bail!("{} sent `{method}` in answer to server/discover", self.name)
            }
        };
        let era = era::decide(&outcome);
        Ok((outcome, era))
    }

    /// Legacy start-up: `initialize` with `params`, then `notifications/initialized`.
    fn initialize_with(&mut self, params: Value) -> Result<Value> {
        let id = self.request("initialize", params)?;
        let result = self.expect_result(id)?;
        self.notify("notifications/initialized", json!({}))?;
        Ok(result)
    }

    /// Legacy start-up with the guest's `initialize` params (form and URL elicitation).
    fn initialize(&mut self) -> Result<Value> {
        self.initialize_with(era::initialize_params())
    }

    /// Answers the server's request `id` with `result`.
    fn reply(&mut self, id: &Value, result: Value) -> Result<()> {
        self.send(&message::result(id, result))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn server_everything() -> Result<Peer> {
    Peer::spawn("server-everything", &peers::server_everything()?)
}

fn booking_server() -> Result<Peer> {
    Peer::spawn("booking_server.py (mcp 2.3.0)", &peers::booking_server()?)
}

fn accept(content: Value) -> ElicitationResponse {
    ElicitationResponse {
        action: ElicitationAction::Accept,
        content: Some(content.to_string()),
    }
}

/// An accepted URL request: consent only, no content.
fn consent() -> ElicitationResponse {
    ElicitationResponse {
        action: ElicitationAction::Accept,
        content: None,
    }
}

fn decline() -> ElicitationResponse {
    ElicitationResponse {
        action: ElicitationAction::Decline,
        content: None,
    }
}

fn cancel() -> ElicitationResponse {
    ElicitationResponse {
        action: ElicitationAction::Cancel,
        content: None,
    }
}

/// The text parts of a tool result, joined.
fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A form request's schema, checked by the guest's form-subset rules.
fn checked_schema(form: &FormRequest) -> Result<Value> {
    schema::check_requested_schema(&form.requested_schema)
        .map_err(|e| anyhow!("the guest refuses the peer's requestedSchema: {e:?}"))
}

/// The one form request of an `elicitation/create`, parsed by `legacy::elicitation`.
fn legacy_form(method: &str, params: &Value) -> Result<(String, FormRequest)> {
    ensure!(
        method == legacy::ELICITATION_METHOD,
        "expected {}, got {method}",
        legacy::ELICITATION_METHOD
    );
    match legacy::elicitation(params).map_err(|e| anyhow!("unusable elicitation: {}", e.0))? {
        (key, ElicitationRequest::Form(form)) => Ok((key, form)),
        (_, other) => bail!("expected a form request, got {other:?}"),
    }
}

fn tool_names(result: &Value) -> Vec<String> {
    result["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn installed_peers_are_the_pinned_versions() -> Result<()> {
    peers::server_everything()?;
    let python = peers::python_mcp()?;
    let package: Value = serde_json::from_str(&std::fs::read_to_string(
        peers::pin_dir().join("package.json"),
    )?)?;
    let pinned_npm = package["dependencies"]["@modelcontextprotocol/server-everything"]
        .as_str()
        .context("package.json pins server-everything")?;
    let requirements = std::fs::read_to_string(peers::pin_dir().join("requirements.txt"))?;
    let pinned_mcp = requirements
        .lines()
        .find_map(|l| l.trim().strip_prefix("mcp=="))
        .context("requirements.txt pins mcp")?;
    assert_eq!(pinned_npm, peers::SERVER_EVERYTHING_VERSION);
    assert_eq!(pinned_mcp, peers::PYTHON_MCP_VERSION);
    assert_eq!(peers::installed_server_everything_version()?, pinned_npm);
    assert_eq!(peers::installed_python_mcp_version(&python)?, pinned_mcp);
    Ok(())
}

// ---- server-everything (legacy era only) ----

#[test]
fn server_everything_probes_as_legacy_and_lists_elicitation_tools_only_with_the_capability()
-> Result<()> {
    let mut peer = server_everything()?;
    let (outcome, era) = peer.probe()?;
    match &outcome {
        ProbeOutcome::Failed(e) => assert_eq!(e.code, -32601, "server/discover: {e:?}"),
        other => panic!("server-everything answered server/discover with {other:?}"),
    }
    assert_eq!(era, Era::Legacy);
    let init = peer.initialize()?;
    assert_eq!(init["protocolVersion"], LEGACY_VERSION);
    let id = peer.request("tools/list", era::decorate(era, json!({})))?;
    let tools = tool_names(&peer.expect_result(id)?);
    for tool in ["trigger-elicitation-request", "trigger-url-elicitation"] {
        assert!(
            tools.iter().any(|t| t == tool),
            "{tool} missing from {tools:?}"
        );
    }

    // The same server, initialized without the elicitation capability, hides them.
    let mut bare = server_everything()?;
    let mut params = era::initialize_params();
    params["capabilities"]
        .as_object_mut()
        .context("capabilities")?
        .remove("elicitation");
    bare.initialize_with(params)?;
    let id = bare.request("tools/list", json!({}))?;
    let tools = tool_names(&bare.expect_result(id)?);
    assert!(tools.iter().any(|t| t == "echo"), "{tools:?}");
    assert!(
        !tools
            .iter()
            .any(|t| t.starts_with("trigger-") && t.contains("elicitation")),
        "elicitation tools listed without the capability: {tools:?}"
    );
    Ok(())
}

#[test]
fn server_everything_form_with_every_primitive_kind_passes_the_schema_check_and_is_answered()
-> Result<()> {
    let mut peer = server_everything()?;
    peer.initialize()?;
    let call = peer.request(
        "tools/call",
        era::decorate(
            Era::Legacy,
            json!({"name": "trigger-elicitation-request", "arguments": {}}),
        ),
    )?;
    let (request_id, method, params) = peer.expect_server_request(call)?;
    assert!(
        params.get("mode").is_none(),
        "server-everything sends no mode: {params}"
    );
    let (key, form) = legacy_form(&method, &params)?;
    assert_eq!(key, "elicitation");
    assert!(!form.message.is_empty());

    let schema = checked_schema(&form)?;
    let properties = schema["properties"].as_object().context("properties")?;
    let has = |test: &dyn Fn(&Value) -> bool| properties.values().any(test);
    assert!(has(&|p| p["type"] == "string"
        && p.get("format").is_none()
        && p.get("enum").is_none()));
    for format in ["email", "uri", "date"] {
        assert!(has(&|p| p["format"] == format), "no {format} field");
    }
    assert!(has(&|p| p["type"] == "integer"));
    assert!(has(&|p| p["type"] == "number"));
    assert!(has(&|p| p["type"] == "boolean"));
    assert!(has(&|p| p["type"] == "string"
        && p["enum"].is_array()
        && p.get("enumNames").is_none()));
    assert!(
        has(&|p| p["enumNames"].is_array()),
        "no legacy enumNames field"
    );
    assert!(has(&|p| p["oneOf"].is_array()), "no titled single-select");
    assert!(has(
        &|p| p["type"] == "array" && p["items"]["enum"].is_array()
    ));
    assert!(has(
        &|p| p["type"] == "array" && p["items"]["anyOf"].is_array()
    ));

    let content = json!({
        "name": "Asha Rao", "check": true, "email": "asha@example.com",
        "homepage": "https://example.com/asha", "birthdate": "1990-04-01", "integer": 7,
        "number": 2.5, "untitledSingleSelectEnum": "Joey",
        "untitledMultipleSelectEnum": ["Piano", "Drums"], "titledSingleSelectEnum": "hero-3",
        "titledMultipleSelectEnum": ["fish-2"], "legacyTitledEnum": "pet-2"
    });
    let validator = schema::validator_for(&form.requested_schema)
        .map_err(|e| anyhow!("no validator: {e:?}"))?;
    assert!(
        validator.is_valid(&content),
        "our answer fits the server's schema"
    );
    assert!(
        !validator.is_valid(&json!({"name": "Asha", "integer": 500})),
        "an out-of-range integer is refused locally"
    );

    let answer = request::answer(&accept(content.clone()));
    assert_eq!(answer["action"], "accept");
    peer.reply(&request_id, answer)?;
    let result = peer.expect_result(call)?;
    let CallResult::Complete(result) =
        mrtr::classify(&result).map_err(|e| anyhow!("classify: {}", e.0))?
    else {
        bail!("a legacy result classified as input_required: {result}");
    };
    let text = text_of(&result);
    let raw = text
        .split_once("Raw result:")
        .map(|(_, raw)| raw.trim())
        .with_context(|| format!("no raw result in {text}"))?;
    let echoed: Value = serde_json::from_str(raw).with_context(|| format!("raw result {raw}"))?;
    assert_eq!(echoed, json!({"action": "accept", "content": content}));
    Ok(())
}

#[test]
fn server_everything_form_decline_and_cancel_complete_the_call() -> Result<()> {
    let mut peer = server_everything()?;
    peer.initialize()?;
    for (response, action) in [(decline(), "decline"), (cancel(), "cancel")] {
        let call = peer.request(
            "tools/call",
            json!({"name": "trigger-elicitation-request", "arguments": {}}),
        )?;
        let (request_id, method, params) = peer.expect_server_request(call)?;
        let (key, form) = legacy_form(&method, &params)?;
        assert_eq!(key, "elicitation");
        checked_schema(&form)?;
        let answer = request::answer(&response);
        assert_eq!(
            answer,
            json!({"action": action}),
            "no content with {action}"
        );
        peer.reply(&request_id, answer)?;
        let text = text_of(&peer.expect_result(call)?);
        let raw = text
            .split_once("Raw result:")
            .map(|(_, raw)| raw.trim())
            .with_context(|| format!("no raw result in {text}"))?;
        assert_eq!(
            serde_json::from_str::<Value>(raw)?,
            json!({"action": action})
        );
    }
    Ok(())
}

#[test]
fn server_everything_url_elicitation_by_request_and_by_the_32042_error() -> Result<()> {
    let mut peer = server_everything()?;
    peer.initialize()?;
    let url = "https://example.com/consent";

    // The request path: elicitation/create in URL mode.
    let call = peer.request(
        "tools/call",
        json!({"name": "trigger-url-elicitation", "arguments": {"url": url}}),
    )?;
    let (request_id, method, params) = peer.expect_server_request(call)?;
    assert_eq!(method, legacy::ELICITATION_METHOD);
    let (key, parsed) =
        legacy::elicitation(&params).map_err(|e| anyhow!("unusable elicitation: {}", e.0))?;
    assert_eq!(key, "elicitation");
    let ElicitationRequest::Url(requested) = parsed else {
        bail!("expected a URL request: {params}");
    };
    assert_eq!(requested.url, url);
    let elicitation_id = requested
        .elicitation_id
        .clone()
        .context("server-everything sends an elicitationId")?;
    let answer = request::answer(&consent());
    assert_eq!(
        answer,
        json!({"action": "accept"}),
        "URL consent carries no content"
    );
    peer.reply(&request_id, answer)?;
    let text = text_of(&peer.expect_result(call)?);
    assert!(text.contains(&elicitation_id), "{text}");

    // The error path: -32042 lists the URL requests (one round); the retry goes through.
    let arguments =
        json!({"name": "trigger-url-elicitation", "arguments": {"url": url, "errorPath": true}});
    let call = peer.request("tools/call", arguments.clone())?;
    let error = match peer.expect_response(call)? {
        Err(error) => error,
        Ok(result) => bail!("errorPath answered with a result: {result}"),
    };
    assert_eq!(error.code, legacy::URL_ELICITATION_REQUIRED);
    let requests = legacy::url_required(&error)
        .context("-32042 not recognised")?
        .map_err(|e| anyhow!("unusable -32042: {}", e.0))?;
    assert_eq!(requests.len(), 1, "{requests:?}");
    let (key, ElicitationRequest::Url(listed)) = &requests[0] else {
        bail!("not a URL request: {requests:?}");
    };
    assert_eq!(key, "url-0");
    assert!(listed.url.starts_with("https://"), "{}", listed.url);
    assert!(listed.elicitation_id.is_some());
    // After consent the client retries the call with the same arguments: server-everything then
    // takes the request path (elicitation/create in URL mode) and completes.
    let retry = peer.request("tools/call", arguments)?;
    let (request_id, method, params) = peer.expect_server_request(retry)?;
    assert_eq!(method, legacy::ELICITATION_METHOD);
    assert!(matches!(
        legacy::elicitation(&params),
        Ok((_, ElicitationRequest::Url(_)))
    ));
    peer.reply(&request_id, request::answer(&consent()))?;
    let text = text_of(&peer.expect_result(retry)?);
    assert!(text.contains(url), "{text}");
    Ok(())
}

// ---- the Python SDK (mcp 2.3.0): one server, both eras ----

/// The arguments of every booking call.
fn booking_call(era: Era) -> Value {
    era::decorate(
        era,
        json!({"name": "book_table", "arguments": {"restaurant": "Chez M3"}}),
    )
}

/// The answer the tests give to the booking form.
fn booking_answer() -> Value {
    json!({"name": "Asha", "guests": 3, "seating": "terrace", "deposit": 12.5, "high_chair": true})
}

/// The first round of a modern booking call.
struct FirstRound {
    /// The id of the call that got `input_required`.
    call_id: u64,
    /// The request's key, as `mrtr::classify` gives it.
    key: String,
    form: FormRequest,
    request_state: Option<String>,
    /// The raw `input_required` result.
    raw: Value,
}

/// Probes (must be modern), calls `book_table`, and returns the classified `input_required`
/// round.
fn modern_first_round(peer: &mut Peer) -> Result<FirstRound> {
    let (outcome, era) = peer.probe()?;
    let ProbeOutcome::Discovered(discovered) = &outcome else {
        bail!("the Python SDK server answered server/discover with {outcome:?}");
    };
    assert_eq!(era, Era::Modern);
    assert!(
        discovered["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v == MODERN_VERSION)),
        "{discovered}"
    );
    let call_id = peer.request("tools/call", booking_call(era))?;
    let result = peer.expect_result(call_id)?;
    let CallResult::InputRequired {
        mut requests,
        request_state,
    } = mrtr::classify(&result).map_err(|e| anyhow!("classify: {}", e.0))?
    else {
        bail!("the first call completed without asking: {result}");
    };
    ensure!(requests.len() == 1, "one request expected: {requests:?}");
    let (key, request) = requests.remove(0);
    let ElicitationRequest::Form(form) = request else {
        bail!("expected a form request: {result}");
    };
    Ok(FirstRound {
        call_id,
        key,
        form,
        request_state,
        raw: result,
    })
}

#[test]
fn python_sdk_modern_era_is_an_mrtr_round_whose_retry_completes() -> Result<()> {
    let mut peer = booking_server()?;
    let FirstRound {
        call_id,
        key,
        form,
        request_state: state,
        raw,
    } = modern_first_round(&mut peer)?;
    // The key and the state are the server's, verbatim.
    let wire_keys: Vec<&String> = raw["inputRequests"]
        .as_object()
        .context("inputRequests")?
        .keys()
        .collect();
    assert_eq!(wire_keys, [&key]);
    assert_eq!(key, "__main__:ask_booking");
    let state = state.context("the SDK seals a requestState")?;
    assert_eq!(raw["requestState"], state.as_str());
    assert!(form.message.contains("Chez M3"), "{}", form.message);
    let schema = checked_schema(&form)?;
    assert_eq!(schema["required"], json!(["name", "guests", "seating"]));

    let original = booking_call(Era::Modern);
    let retry = mrtr::retry_params(
        &original,
        vec![(key.clone(), request::answer(&accept(booking_answer())))],
        Some(&state),
    );
    assert_eq!(retry["arguments"], original["arguments"]);
    assert_eq!(retry["requestState"], state.as_str());
    let id = peer.request("tools/call", retry)?;
    assert_ne!(id, call_id, "the retry has a new id");
    let result = peer.expect_result(id)?;
    let CallResult::Complete(result) =
        mrtr::classify(&result).map_err(|e| anyhow!("classify: {}", e.0))?
    else {
        bail!("the retry asked again: {result}");
    };
    assert_eq!(result["isError"], false, "{result}");
    let text = text_of(&result);
    assert_eq!(
        text,
        "booked Chez M3 for Asha: guests=3 seating=terrace deposit=12.5 high_chair=True"
    );

    // A declined round completes too; the tool sees the decline.
    let round = modern_first_round(&mut peer)?;
    let retry = mrtr::retry_params(
        &original,
        vec![(round.key, request::answer(&decline()))],
        round.request_state.as_deref(),
    );
    let id = peer.request("tools/call", retry)?;
    let result = peer.expect_result(id)?;
    assert!(matches!(
        mrtr::classify(&result),
        Ok(CallResult::Complete(_))
    ));
    assert_eq!(text_of(&result), "not booked: decline");
    Ok(())
}

#[test]
fn python_sdk_rejects_a_tampered_request_state_as_invalid_request_state() -> Result<()> {
    let mut peer = booking_server()?;
    let round = modern_first_round(&mut peer)?;
    let (key, state) = (round.key, round.request_state);
    let state = state.context("the SDK seals a requestState")?;
    // Flip one character in the middle of the sealed state.
    let mut tampered: Vec<char> = state.chars().collect();
    let middle = tampered.len() / 2;
    tampered[middle] = if tampered[middle] == 'A' { 'B' } else { 'A' };
    let tampered: String = tampered.into_iter().collect();
    assert_ne!(tampered, state);
    let original = booking_call(Era::Modern);
    let answers = vec![(key, request::answer(&accept(booking_answer())))];
    let id = peer.request(
        "tools/call",
        mrtr::retry_params(&original, answers.clone(), Some(&tampered)),
    )?;
    let error = match peer.expect_response(id)? {
        Err(error) => error,
        Ok(result) => bail!("a tampered requestState was accepted: {result}"),
    };
    assert_eq!(error.code, -32602, "{error:?}");
    assert_eq!(
        mrtr::failure_for_retry_error(error.code),
        FailureCode::InvalidRequestState
    );
    // The genuine state still works (the rejection did not poison the call).
    let id = peer.request(
        "tools/call",
        mrtr::retry_params(&original, answers, Some(&state)),
    )?;
    let result = peer.expect_result(id)?;
    assert!(matches!(
        mrtr::classify(&result),
        Ok(CallResult::Complete(_))
    ));
    assert!(text_of(&result).starts_with("booked Chez M3"), "{result}");
    Ok(())
}

#[test]
fn python_sdk_legacy_era_sends_elicitation_create_and_completes() -> Result<()> {
    let mut peer = booking_server()?;
    // The era forced to legacy (no probe): initialize declares the elicitation capability.
    let init = peer.initialize()?;
    assert_eq!(init["protocolVersion"], LEGACY_VERSION);
    for (response, expected) in [
        (
            accept(booking_answer()),
            "booked Chez M3 for Asha: guests=3 seating=terrace deposit=12.5 high_chair=True",
        ),
        (cancel(), "not booked: cancel"),
    ] {
        let call = peer.request("tools/call", booking_call(Era::Legacy))?;
        let (request_id, method, params) = peer.expect_server_request(call)?;
        let (key, form) = legacy_form(&method, &params)?;
        assert_eq!(key, "elicitation");
        let schema = checked_schema(&form)?;
        assert_eq!(schema["required"], json!(["name", "guests", "seating"]));
        peer.reply(&request_id, request::answer(&response))?;
        let result = peer.expect_result(call)?;
        assert!(matches!(
            mrtr::classify(&result),
            Ok(CallResult::Complete(_))
        ));
        assert_eq!(text_of(&result), expected);
    }
    Ok(())
}
