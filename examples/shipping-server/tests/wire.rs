//! Wire tests: the built `shipping-server` binary driven over real pipes by a small line-based
//! JSON-RPC client. Every read has a timeout, so a misbehaving server fails a test instead of
//! hanging the suite.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long any single expected message may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long to listen when a message must *not* arrive.
const QUIET: Duration = Duration::from_millis(300);
/// The modern protocol version.
const MODERN: &str = "2026-07-28";
/// The address form the server must ask with.
fn address_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "street": {"type": "string", "title": "Street", "minLength": 1},
            "city": {"type": "string", "title": "City", "minLength": 1}
        },
        "required": ["street", "city"]
    })
}

/// A running server with a line-based JSON-RPC client attached.
struct Peer {
    /// The child process.
    child: Child,
    /// Its stdin (`None` once closed).
    stdin: Option<ChildStdin>,
    /// Lines read from its stdout by the reader thread.
    lines: Receiver<String>,
    /// The next id of our requests.
    next_id: u64,
}

impl Peer {
    /// Starts the server with `args`, inheriting the test's environment.
    fn start(args: &[&str]) -> Self {
        Self::spawn(args, None)
    }

    /// Starts the server with `args` and exactly the environment `env`.
    fn spawn(args: &[&str], env: Option<&[(&str, &str)]>) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_shipping-server"));
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(env) = env {
            command.env_clear();
            command.envs(env.iter().copied());
        }
        let mut child = command.spawn().expect("spawn shipping-server");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
            next_id: 1,
        }
    }

    /// Writes one message as one line.
    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let mut text = serde_json::to_string(message).unwrap();
        text.push('\n');
        stdin.write_all(text.as_bytes()).expect("write to server");
        stdin.flush().expect("flush");
    }

    /// The next message from the server (a JSON-RPC 2.0 object on one line).
    fn recv(&self) -> Value {
        let line = match self.lines.recv_timeout(TIMEOUT) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("no message from the server within {TIMEOUT:?}")
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the server closed stdout"),
        };
        let message: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
        message
    }

    /// Asserts that the server sends nothing for a short while.
    fn expect_silence(&self) {
        match self.lines.recv_timeout(QUIET) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(line) => panic!("unexpected message: {line}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the server closed stdout"),
        }
    }

    /// Sends a request with a fresh id; returns that id.
    fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Sends a request and returns the server's answer to it (the next message).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        let answer = self.recv();
        assert_eq!(
            answer["id"],
            json!(id),
            "expected the answer to {method}: {answer}"
        );
        assert!(
            answer.get("method").is_none(),
            "expected a response: {answer}"
        );
        answer
    }

    /// Sends a notification.
    fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Answers the server's request `id` with `result`.
    fn reply(&mut self, id: &Value, result: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    /// Closes stdin and waits (bounded) for the server to exit.
    fn close(&mut self) -> ExitStatus {
        drop(self.stdin.take());
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "the server did not exit after stdin closed"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Legacy handshake: `initialize` (with `capabilities`) + `notifications/initialized`.
    fn initialize(&mut self, version: &str, capabilities: Value) -> Value {
        let answer = self.request(
            "initialize",
            json!({
                "protocolVersion": version,
                "capabilities": capabilities,
                "clientInfo": {"name": "wire-test", "version": "0"}
            }),
        );
        self.notify("notifications/initialized", json!({}));
        answer
    }

    /// A modern request's params: `extra` plus the per-request `_meta`.
    fn modern_params(extra: Value, capabilities: Value) -> Value {
        let mut params = extra;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "wire-test", "version": "0"}
        });
        params
    }

    /// A modern request with full `_meta` (form and URL elicitation declared).
    fn modern(&mut self, method: &str, extra: Value) -> Value {
        let params = Self::modern_params(extra, json!({"elicitation": {"form": {}, "url": {}}}));
        self.request(method, params)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The result of a response, failing on an error.
fn result(answer: &Value) -> &Value {
    assert!(answer.get("error").is_none(), "unexpected error: {answer}");
    &answer["result"]
}

/// The error code of a response, failing on a result.
fn error_code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error: {answer}"))
}

/// The first text content of a tool result.
fn text(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {result}"))
}

/// An accept answer with an address.
fn accept(street: &str, city: &str) -> Value {
    json!({"action": "accept", "content": {"street": street, "city": city}})
}

/// Legacy: initialize with elicitation and start `book_shipment`; returns the call id and the
/// first `elicitation/create` request.
fn legacy_start_booking(peer: &mut Peer) -> (u64, Value) {
    let init = peer.initialize(
        "2025-11-25",
        json!({"elicitation": {"form": {}, "url": {}}}),
    );
    result(&init);
    let call = peer.send_request(
        "tools/call",
        json!({"name": "book_shipment", "arguments": {"item": "lamp", "weight_kg": 2.5}}),
    );
    let ask = peer.recv();
    (call, ask)
}

/// Asserts `ask` is an `elicitation/create` for `key` and returns its id.
fn assert_legacy_ask(ask: &Value, key: &str) -> Value {
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert!(ask["id"].is_u64(), "{ask}");
    assert_eq!(ask["params"]["mode"], "form");
    assert_eq!(ask["params"]["_meta"]["m3/request_key"], key);
    ask["id"].clone()
}

/// Modern: the first `book_shipment` attempt's `input_required` result.
fn modern_first(peer: &mut Peer, arguments: &Value) -> Value {
    let answer = peer.modern(
        "tools/call",
        json!({"name": "book_shipment", "arguments": arguments}),
    );
    let first = result(&answer).clone();
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert!(first["requestState"].is_string(), "{first}");
    first
}

/// Modern: a retry with `responses` and `state`.
fn modern_retry(peer: &mut Peer, arguments: &Value, state: &Value, responses: Value) -> Value {
    peer.modern(
        "tools/call",
        json!({
            "name": "book_shipment",
            "arguments": arguments,
            "inputResponses": responses,
            "requestState": state
        }),
    )
}

#[test]
fn help_documents_every_flag() {
    let output = Command::new(env!("CARGO_BIN_EXE_shipping-server"))
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for flag in [
        "--era",
        "--state-ttl-secs",
        "--ask-rounds",
        "--ask-forever",
        "--fail-after-answer",
        "--two-keys",
        "--report-env",
        "--rich-form",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

#[test]
fn legacy_initialize_negotiates_a_version_and_lists_the_tool() {
    let mut peer = Peer::start(&["--era", "legacy"]);
    let init = peer.initialize("2025-06-18", json!({}));
    let init = result(&init);
    assert_eq!(init["protocolVersion"], "2025-06-18");
    assert_eq!(
        init["capabilities"],
        json!({"tools": {}, "prompts": {}, "resources": {}})
    );
    assert_eq!(init["serverInfo"]["name"], "shipping");
    // The notification got no reply: the next message answers tools/list.
    let list = peer.request("tools/list", json!({}));
    let tools = result(&list)["tools"].as_array().unwrap().clone();
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0]["name"], "book_shipment");
    assert_eq!(
        tools[0]["inputSchema"],
        json!({"type": "object", "properties": {"item": {"type": "string"}, "weight_kg": {"type": "number"}}})
    );

    let mut other = Peer::start(&["--era", "legacy"]);
    let init = other.initialize("2024-11-05", json!({}));
    assert_eq!(result(&init)["protocolVersion"], "2025-11-25");
    let init = other.initialize("2025-11-25", json!({}));
    assert_eq!(result(&init)["protocolVersion"], "2025-11-25");
}

#[test]
fn legacy_booking_elicits_the_address_with_the_request_key_and_books_on_accept() {
    let mut peer = Peer::start(&["--era", "legacy"]);
    let (call, ask) = legacy_start_booking(&mut peer);
    let ask_id = assert_legacy_ask(&ask, "shipping_address");
    assert_eq!(ask["id"], 0, "the server's own ids start at 0");
    assert_eq!(
        ask["params"]["message"],
        "Where should the shipment be delivered?"
    );
    assert_eq!(ask["params"]["requestedSchema"], address_schema());
    // Other requests are still served while the call waits.
    let ping = peer.request("ping", json!({}));
    assert_eq!(result(&ping), &json!({}));
    peer.reply(&ask_id, accept("1 Main St", "Oslo"));
    let done = peer.recv();
    assert_eq!(done["id"], json!(call));
    let done = result(&done);
    assert_eq!(text(done), "Booked shipment to 1 Main St, Oslo");
    assert_eq!(done["isError"], false);
    assert_eq!(
        done["structuredContent"],
        json!({"booked": true, "street": "1 Main St", "city": "Oslo"})
    );
    // A second call uses the next id of the server's own id space.
    peer.send_request("tools/call", json!({"name": "book_shipment"}));
    assert_eq!(peer.recv()["id"], 1);
}

#[test]
fn legacy_decline_cancel_and_an_incomplete_accept_do_not_book() {
    let cases = [
        (
            json!({"action": "decline"}),
            "Shipment not booked: the address was declined",
            false,
        ),
        (
            json!({"action": "cancel"}),
            "Shipment not booked: cancelled",
            false,
        ),
        (
            json!({"action": "accept", "content": {"street": "1 Main St"}}),
            "Shipment not booked: the answer is missing street or city",
            true,
        ),
    ];
    for (answer, expected, is_error) in cases {
        let mut peer = Peer::start(&["--era", "legacy"]);
        let (call, ask) = legacy_start_booking(&mut peer);
        let ask_id = assert_legacy_ask(&ask, "shipping_address");
        peer.reply(&ask_id, answer);
        let done = peer.recv();
        assert_eq!(done["id"], json!(call));
        let done = result(&done);
        assert_eq!(text(done), expected);
        assert_eq!(done["isError"], is_error);
        if !is_error {
            assert_eq!(done["structuredContent"]["booked"], false);
        }
    }
}

#[test]
fn legacy_without_the_elicitation_capability_the_call_is_an_error_result() {
    let mut peer = Peer::start(&["--era", "legacy"]);
    result(&peer.initialize("2025-11-25", json!({"sampling": {}})));
    let done = peer.request(
        "tools/call",
        json!({"name": "book_shipment", "arguments": {}}),
    );
    let done = result(&done);
    assert_eq!(done["isError"], true);
    assert_eq!(text(done), "elicitation not supported by the client");
}

#[test]
fn legacy_rejects_discover_and_unknown_methods_with_method_not_found() {
    let mut peer = Peer::start(&["--era", "legacy"]);
    let discover = peer.modern("server/discover", json!({}));
    assert_eq!(error_code(&discover), -32601);
    result(&peer.initialize("2025-11-25", json!({"elicitation": {}})));
    assert_eq!(
        error_code(&peer.request("server/discover", json!({}))),
        -32601
    );
    assert_eq!(
        error_code(&peer.request("completion/complete", json!({}))),
        -32601
    );
    let unknown_tool = peer.request("tools/call", json!({"name": "report_env"}));
    assert_eq!(error_code(&unknown_tool), -32602);
    // Notifications are never answered, known or not.
    peer.notify("notifications/whatever", json!({}));
    peer.notify("notifications/cancelled", json!({"requestId": 99}));
    peer.expect_silence();
    // Malformed input gets the standard errors.
    peer.stdin
        .as_mut()
        .unwrap()
        .write_all(b"{not json\n")
        .unwrap();
    assert_eq!(error_code(&peer.recv()), -32700);
    peer.send(&json!({"jsonrpc": "2.0", "id": 7}));
    let invalid = peer.recv();
    assert_eq!(error_code(&invalid), -32600);
    assert_eq!(invalid["id"], 7);
}

#[test]
fn legacy_a_cancelled_call_abandons_its_elicitation_and_is_never_answered() {
    let mut peer = Peer::start(&["--era", "legacy"]);
    let (call, ask) = legacy_start_booking(&mut peer);
    let ask_id = assert_legacy_ask(&ask, "shipping_address");
    peer.notify(
        "notifications/cancelled",
        json!({"requestId": call, "reason": "test"}),
    );
    // A late answer to the abandoned elicitation changes nothing.
    peer.reply(&ask_id, accept("1 Main St", "Oslo"));
    let ping = peer.request("ping", json!({}));
    assert_eq!(result(&ping), &json!({}));
    peer.expect_silence();
    assert!(peer.close().success());
}

#[test]
fn legacy_ask_rounds_two_sends_two_elicitations_in_a_row() {
    let mut peer = Peer::start(&["--era", "legacy", "--ask-rounds", "2"]);
    let (call, first) = legacy_start_booking(&mut peer);
    let first_id = assert_legacy_ask(&first, "shipping_address");
    peer.reply(&first_id, accept("1 Old Rd", "Bergen"));
    let second = peer.recv();
    let second_id = assert_legacy_ask(&second, "shipping_address");
    assert_ne!(first_id, second_id);
    peer.reply(&second_id, accept("2 New Rd", "Oslo"));
    let done = peer.recv();
    assert_eq!(done["id"], json!(call));
    assert_eq!(text(result(&done)), "Booked shipment to 2 New Rd, Oslo");
}

#[test]
fn legacy_ask_forever_keeps_asking_until_cancelled() {
    let mut peer = Peer::start(&["--era", "legacy", "--ask-forever"]);
    let (call, mut ask) = legacy_start_booking(&mut peer);
    for _ in 0..5 {
        let id = assert_legacy_ask(&ask, "shipping_address");
        peer.reply(&id, accept("1 Main St", "Oslo"));
        ask = peer.recv();
    }
    let id = assert_legacy_ask(&ask, "shipping_address");
    peer.reply(&id, json!({"action": "cancel"}));
    let done = peer.recv();
    assert_eq!(done["id"], json!(call));
    assert_eq!(text(result(&done)), "Shipment not booked: cancelled");
}

#[test]
fn legacy_two_keys_sends_two_elicitations_with_their_request_keys() {
    let mut peer = Peer::start(&["--era", "legacy", "--two-keys"]);
    let (call, first) = legacy_start_booking(&mut peer);
    let first_id = assert_legacy_ask(&first, "shipping_address");
    peer.reply(&first_id, accept("1 Main St", "Oslo"));
    let second = peer.recv();
    let second_id = assert_legacy_ask(&second, "contact_email");
    assert_eq!(
        second["params"]["requestedSchema"]["properties"]["email"],
        json!({"type": "string", "title": "Email", "format": "email"})
    );
    peer.reply(
        &second_id,
        json!({"action": "accept", "content": {"email": "a@example.com"}}),
    );
    let done = peer.recv();
    assert_eq!(done["id"], json!(call));
    let done = result(&done);
    assert_eq!(text(done), "Booked shipment to 1 Main St, Oslo");
    assert_eq!(done["structuredContent"]["email"], "a@example.com");
}

#[test]
fn legacy_fail_after_answer_answers_the_call_with_an_internal_error() {
    let mut peer = Peer::start(&["--era", "legacy", "--fail-after-answer"]);
    let (call, ask) = legacy_start_booking(&mut peer);
    let ask_id = assert_legacy_ask(&ask, "shipping_address");
    peer.reply(&ask_id, accept("1 Main St", "Oslo"));
    let done = peer.recv();
    assert_eq!(done["id"], json!(call));
    assert_eq!(error_code(&done), -32603);
    assert_eq!(done["error"]["message"], "booking service unavailable");
}

#[test]
fn modern_discover_then_input_required_then_booked_on_retry() {
    let mut peer = Peer::start(&["--era", "modern"]);
    let discover = peer.modern("server/discover", json!({}));
    let discover = result(&discover);
    assert_eq!(discover["supportedVersions"], json!([MODERN]));
    assert_eq!(
        discover["capabilities"],
        json!({"tools": {}, "prompts": {}, "resources": {}})
    );
    assert_eq!(discover["serverInfo"]["name"], "shipping");
    let list = peer.modern("tools/list", json!({}));
    assert_eq!(result(&list)["tools"][0]["name"], "book_shipment");

    let arguments = json!({"item": "lamp", "weight_kg": 2});
    let first = modern_first(&mut peer, &arguments);
    let requests = first["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{first}");
    let ask = &requests["shipping_address"];
    assert_eq!(ask["method"], "elicitation/create");
    assert_eq!(ask["params"]["mode"], "form");
    assert_eq!(
        ask["params"]["message"],
        "Where should the shipment be delivered?"
    );
    assert_eq!(ask["params"]["requestedSchema"], address_schema());

    let done = modern_retry(
        &mut peer,
        &arguments,
        &first["requestState"],
        json!({"shipping_address": accept("1 Main St", "Oslo")}),
    );
    let done = result(&done);
    assert_ne!(done["resultType"], "input_required");
    assert_eq!(text(done), "Booked shipment to 1 Main St, Oslo");
    assert_eq!(
        done["structuredContent"],
        json!({"booked": true, "street": "1 Main St", "city": "Oslo"})
    );
    // Key order and integral floats do not change the arguments.
    let reordered = json!({"weight_kg": 2.0, "item": "lamp"});
    let again = modern_retry(
        &mut peer,
        &reordered,
        &first["requestState"],
        json!({"shipping_address": accept("1 Main St", "Oslo")}),
    );
    assert_eq!(result(&again)["structuredContent"]["booked"], true);
}

#[test]
fn modern_decline_cancel_and_an_incomplete_accept_do_not_book() {
    let cases = [
        (
            json!({"action": "decline"}),
            "Shipment not booked: the address was declined",
            false,
        ),
        (
            json!({"action": "cancel"}),
            "Shipment not booked: cancelled",
            false,
        ),
        (
            json!({"action": "accept", "content": {"city": "Oslo"}}),
            "Shipment not booked: the answer is missing street or city",
            true,
        ),
    ];
    let mut peer = Peer::start(&["--era", "modern"]);
    for (answer, expected, is_error) in cases {
        let first = modern_first(&mut peer, &json!({}));
        let done = modern_retry(
            &mut peer,
            &json!({}),
            &first["requestState"],
            json!({"shipping_address": answer}),
        );
        let done = result(&done);
        assert_eq!(text(done), expected);
        assert_eq!(done["isError"], is_error);
    }
}

#[test]
fn modern_tampered_mismatched_or_missing_state_is_rejected() {
    let mut peer = Peer::start(&["--era", "modern"]);
    let arguments = json!({"item": "lamp"});
    let first = modern_first(&mut peer, &arguments);
    let state = first["requestState"].as_str().unwrap().to_string();
    let answer = json!({"shipping_address": accept("1 Main St", "Oslo")});

    let mut tampered = state.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).unwrap();
    let extended = format!("{state}0");
    for bad in [json!(tampered), json!(extended), json!(""), json!(42)] {
        let rejected = modern_retry(&mut peer, &arguments, &bad, answer.clone());
        assert_eq!(error_code(&rejected), -32602, "{bad}");
        assert_eq!(
            rejected["error"]["message"],
            "Invalid or expired requestState"
        );
    }
    // The state is bound to the arguments.
    let other_args = json!({"item": "sofa"});
    let rejected = modern_retry(&mut peer, &other_args, &json!(state), answer.clone());
    assert_eq!(error_code(&rejected), -32602);
    // Answers without any state.
    let rejected = modern_retry(&mut peer, &arguments, &Value::Null, answer.clone());
    assert_eq!(error_code(&rejected), -32602);
    // Another server process cannot open this one's state.
    let mut stranger = Peer::start(&["--era", "modern"]);
    let rejected = modern_retry(&mut stranger, &arguments, &json!(state), answer.clone());
    assert_eq!(error_code(&rejected), -32602);
    // The genuine state still works.
    let done = modern_retry(&mut peer, &arguments, &json!(state), answer);
    assert_eq!(result(&done)["structuredContent"]["booked"], true);
}

#[test]
fn modern_expired_state_is_rejected() {
    let mut peer = Peer::start(&["--era", "modern", "--state-ttl-secs", "0"]);
    let first = modern_first(&mut peer, &json!({}));
    let rejected = modern_retry(
        &mut peer,
        &json!({}),
        &first["requestState"],
        json!({"shipping_address": accept("1 Main St", "Oslo")}),
    );
    assert_eq!(error_code(&rejected), -32602);
    assert_eq!(
        rejected["error"]["message"],
        "Invalid or expired requestState"
    );
}

#[test]
fn modern_missing_or_unsupported_protocol_version_is_minus_32022() {
    let mut peer = Peer::start(&["--era", "modern"]);
    let missing = peer.request("tools/list", json!({}));
    assert_eq!(error_code(&missing), -32022);
    assert_eq!(missing["error"]["data"]["supported"], json!([MODERN]));
    let no_meta_call = peer.request("tools/call", json!({"name": "book_shipment"}));
    assert_eq!(error_code(&no_meta_call), -32022);
    let mut params = Peer::modern_params(json!({}), json!({"elicitation": {}}));
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    let wrong = peer.request("tools/list", params.clone());
    assert_eq!(error_code(&wrong), -32022);
    assert_eq!(wrong["error"]["data"]["supported"], json!([MODERN]));
    let wrong_discover = peer.request("server/discover", params);
    assert_eq!(error_code(&wrong_discover), -32022);
    // Modern servers do not speak initialize.
    let init = peer.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
    );
    assert_eq!(error_code(&init), -32601);
}

#[test]
fn modern_without_the_elicitation_capability_is_minus_32021() {
    let mut peer = Peer::start(&["--era", "modern"]);
    for capabilities in [json!({}), json!({"elicitation": {"url": {}}}), Value::Null] {
        let params = Peer::modern_params(
            json!({"name": "book_shipment", "arguments": {}}),
            capabilities.clone(),
        );
        let refused = peer.request("tools/call", params);
        assert_eq!(error_code(&refused), -32021, "{capabilities}");
        assert_eq!(
            refused["error"]["data"]["requiredCapabilities"],
            json!({"elicitation": {"form": {}}})
        );
    }
    // A call that needs no input does not need the capability.
    let list = peer.request("tools/list", Peer::modern_params(json!({}), json!({})));
    result(&list);
    // `{}` alone means form.
    let params = Peer::modern_params(json!({"name": "book_shipment"}), json!({"elicitation": {}}));
    let answer = peer.request("tools/call", params);
    assert_eq!(result(&answer)["resultType"], "input_required");
}

#[test]
fn modern_ask_rounds_two_asks_again_with_a_new_state() {
    let mut peer = Peer::start(&["--era", "modern", "--ask-rounds", "2"]);
    let arguments = json!({"item": "lamp"});
    let first = modern_first(&mut peer, &arguments);
    let second = modern_retry(
        &mut peer,
        &arguments,
        &first["requestState"],
        json!({"shipping_address": accept("1 Old Rd", "Bergen")}),
    );
    let second = result(&second).clone();
    assert_eq!(second["resultType"], "input_required", "{second}");
    assert!(second["inputRequests"]["shipping_address"].is_object());
    assert_ne!(second["requestState"], first["requestState"]);
    assert!(second["requestState"].is_string());
    // The first round's state is for round 1 only: replaying it asks round 2 again, never books.
    let replay = modern_retry(
        &mut peer,
        &arguments,
        &first["requestState"],
        json!({"shipping_address": accept("1 Old Rd", "Bergen")}),
    );
    assert_eq!(result(&replay)["resultType"], "input_required");
    let done = modern_retry(
        &mut peer,
        &arguments,
        &second["requestState"],
        json!({"shipping_address": accept("2 New Rd", "Oslo")}),
    );
    assert_eq!(text(result(&done)), "Booked shipment to 2 New Rd, Oslo");
}

#[test]
fn modern_ask_forever_never_books() {
    let mut peer = Peer::start(&["--era", "modern", "--ask-forever"]);
    let mut round = modern_first(&mut peer, &json!({}));
    for _ in 0..12 {
        let next = modern_retry(
            &mut peer,
            &json!({}),
            &round["requestState"],
            json!({"shipping_address": accept("1 Main St", "Oslo")}),
        );
        round = result(&next).clone();
        assert_eq!(round["resultType"], "input_required", "{round}");
    }
}

#[test]
fn modern_two_keys_asks_both_in_one_round() {
    let mut peer = Peer::start(&["--era", "modern", "--two-keys"]);
    let first = modern_first(&mut peer, &json!({}));
    let requests = first["inputRequests"].as_object().unwrap();
    let mut keys: Vec<_> = requests.keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["contact_email", "shipping_address"]);
    assert_eq!(
        requests["contact_email"]["params"]["requestedSchema"]["properties"]["email"]["format"],
        "email"
    );
    // Both answers are needed.
    let partial = modern_retry(
        &mut peer,
        &json!({}),
        &first["requestState"],
        json!({"shipping_address": accept("1 Main St", "Oslo")}),
    );
    assert_eq!(error_code(&partial), -32602);
    let done = modern_retry(
        &mut peer,
        &json!({}),
        &first["requestState"],
        json!({
            "shipping_address": accept("1 Main St", "Oslo"),
            "contact_email": {"action": "accept", "content": {"email": "a@example.com"}}
        }),
    );
    let done = result(&done);
    assert_eq!(text(done), "Booked shipment to 1 Main St, Oslo");
    assert_eq!(done["structuredContent"]["email"], "a@example.com");
}

#[test]
fn modern_fail_after_answer_answers_the_first_retry_with_an_internal_error() {
    let mut peer = Peer::start(&["--era", "modern", "--fail-after-answer"]);
    let first = modern_first(&mut peer, &json!({}));
    let failed = modern_retry(
        &mut peer,
        &json!({}),
        &first["requestState"],
        json!({"shipping_address": accept("1 Main St", "Oslo")}),
    );
    assert_eq!(error_code(&failed), -32603);
    assert_eq!(failed["error"]["message"], "booking service unavailable");
}

#[test]
fn auto_mode_goes_modern_when_discover_comes_first() {
    let mut peer = Peer::start(&[]);
    let discover = peer.modern("server/discover", json!({}));
    assert_eq!(result(&discover)["supportedVersions"], json!([MODERN]));
    let first = modern_first(&mut peer, &json!({}));
    assert!(first["inputRequests"]["shipping_address"].is_object());
    let init = peer.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}}),
    );
    assert_eq!(error_code(&init), -32601);
}

#[test]
fn auto_mode_goes_legacy_when_initialize_comes_first() {
    let mut peer = Peer::start(&["--era", "auto"]);
    let (_call, ask) = legacy_start_booking(&mut peer);
    assert_legacy_ask(&ask, "shipping_address");
    let discover = peer.modern("server/discover", json!({}));
    assert_eq!(error_code(&discover), -32601);
}

#[test]
fn report_env_returns_exactly_the_given_environment_in_both_eras() {
    let env = [("SHIPPING_TEST", "yes"), ("ONLY_THIS", "1")];
    let mut modern = Peer::spawn(&["--era", "modern", "--report-env"], Some(&env));
    let list = modern.modern("tools/list", json!({}));
    let names: Vec<_> = result(&list)["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["book_shipment", "report_env"]);
    let report = modern.modern("tools/call", json!({"name": "report_env", "arguments": {}}));
    let reported: Value = serde_json::from_str(text(result(&report))).unwrap();
    assert_eq!(reported, json!({"SHIPPING_TEST": "yes", "ONLY_THIS": "1"}));

    let mut legacy = Peer::spawn(&["--era", "legacy", "--report-env"], Some(&env));
    result(&legacy.initialize("2025-11-25", json!({})));
    let report = legacy.request("tools/call", json!({"name": "report_env"}));
    let reported: Value = serde_json::from_str(text(result(&report))).unwrap();
    assert_eq!(reported, json!({"SHIPPING_TEST": "yes", "ONLY_THIS": "1"}));

    // Without the flag the tool does not exist.
    let mut plain = Peer::start(&["--era", "modern"]);
    let list = plain.modern("tools/list", json!({}));
    assert_eq!(result(&list)["tools"].as_array().unwrap().len(), 1);
    let refused = plain.modern("tools/call", json!({"name": "report_env"}));
    assert_eq!(error_code(&refused), -32602);
}

#[test]
fn the_server_exits_when_stdin_closes() {
    // Idle, after a modern exchange.
    let mut modern = Peer::start(&["--era", "modern"]);
    result(&modern.modern("server/discover", json!({})));
    assert!(modern.close().success());
    // With a legacy call waiting on an elicitation.
    let mut legacy = Peer::start(&["--era", "legacy"]);
    let (_call, ask) = legacy_start_booking(&mut legacy);
    assert_legacy_ask(&ask, "shipping_address");
    assert!(legacy.close().success());
    // Before any request at all.
    let mut fresh = Peer::start(&[]);
    assert!(fresh.close().success());
}

/// The prompt `shipping_label` and the resource `shipping://quote` ask for the address while the
/// request is in flight (legacy) and answer with it; unknown names are errors.
#[test]
fn legacy_the_prompt_and_the_resource_elicit_the_address() {
    let mut peer = Peer::start(&["--era", "legacy"]);
    result(&peer.initialize("2025-11-25", json!({"elicitation": {"form": {}}})));
    let prompts = peer.request("prompts/list", json!({}));
    assert_eq!(result(&prompts)["prompts"][0]["name"], "shipping_label");
    let resources = peer.request("resources/list", json!({}));
    assert_eq!(
        result(&resources)["resources"][0]["uri"],
        "shipping://quote"
    );
    let get = peer.send_request(
        "prompts/get",
        json!({"name": "shipping_label", "arguments": {"item": "lamp"}}),
    );
    let ask = peer.recv();
    let ask_id = assert_legacy_ask(&ask, "shipping_address");
    peer.reply(&ask_id, accept("1 Main", "Pune"));
    let label = peer.recv();
    assert_eq!(label["id"], get);
    assert_eq!(
        result(&label)["messages"][0]["content"]["text"],
        "Shipping label: lamp to 1 Main, Pune"
    );
    let read = peer.send_request("resources/read", json!({"uri": "shipping://quote"}));
    let ask = peer.recv();
    let ask_id = assert_legacy_ask(&ask, "shipping_address");
    peer.reply(&ask_id, json!({"action": "decline"}));
    let quote = peer.recv();
    assert_eq!(quote["id"], read);
    assert_eq!(
        result(&quote)["contents"][0]["text"],
        "No quote: no address was given"
    );
    assert_eq!(
        error_code(&peer.request("prompts/get", json!({"name": "other"}))),
        -32602
    );
    assert_eq!(
        error_code(&peer.request("resources/read", json!({"uri": "shipping://other"}))),
        -32002
    );
}

/// Modern: the prompt and the resource answer `input_required` and complete on the retry.
#[test]
fn modern_the_prompt_and_the_resource_elicit_the_address() {
    let mut peer = Peer::start(&["--era", "modern"]);
    let first = peer.modern("resources/read", json!({"uri": "shipping://quote"}));
    let first = result(&first).clone();
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert!(first["inputRequests"]["shipping_address"].is_object());
    let retry = peer.modern(
        "resources/read",
        json!({
            "uri": "shipping://quote",
            "inputResponses": {"shipping_address": accept("1 Main", "Pune")},
            "requestState": first["requestState"]
        }),
    );
    let done = result(&retry);
    assert_eq!(done["resultType"], "complete");
    assert_eq!(done["contents"][0]["text"], "Delivery to Pune: 12.50 EUR");
    // The state is bound to the operation: the quote's state does not open the label.
    let misused = peer.modern(
        "prompts/get",
        json!({
            "name": "shipping_label",
            "inputResponses": {"shipping_address": accept("1 Main", "Pune")},
            "requestState": first["requestState"]
        }),
    );
    assert_eq!(error_code(&misused), -32602);
}
