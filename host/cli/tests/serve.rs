//! `m3 serve` (issue 19, first slice: the HTTP JSON API and its event stream), tested against
//! the real binary: `m3 serve --listen 127.0.0.1:0` in one process (its first stdout line is the
//! bound address), a real `m3 run --no-prompt --json` in another, and a real HTTP client
//! (`ureq`). Every wait has a timeout; every child is killed when its guard drops.

mod common;

use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// A running `m3 serve` and a client for it.
struct Server {
    _guard: ChildGuard,
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

/// An HTTP answer: status and JSON body.
struct Reply {
    status: u16,
    body: Value,
}

impl Server {
    /// Starts `m3 serve --listen 127.0.0.1:0 EXTRA...` on the sandbox's database.
    fn start(sb: &Sandbox, extra: &[&str], token: Option<&str>) -> Self {
        let mut cmd = sb.command(&["serve", "--listen", "127.0.0.1:0"]);
        cmd.args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawning `m3 serve`");
        let lines = read_lines(child.stdout.take().expect("piped stdout"));
        let _stderr = read_all(child.stderr.take().expect("piped stderr"));
        let guard = ChildGuard { child };
        let address = lines
            .recv_timeout(COMMAND_TIMEOUT)
            .expect("`m3 serve` prints its bound address first");
        assert!(
            address.starts_with("127.0.0.1:") && !address.ends_with(":0"),
            "{address}"
        );
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        Self {
            _guard: guard,
            base: format!("http://{address}"),
            token: token.map(str::to_string),
            agent,
        }
    }

    fn reply(response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Reply {
        let mut response = response.expect("an HTTP answer");
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_string()
            .expect("a body");
        let body = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("a body that is not JSON ({e}): {text}"));
        Reply { status, body }
    }

    fn get(&self, path: &str) -> Reply {
        let mut request = self.agent.get(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        Self::reply(request.call())
    }

    fn post(&self, path: &str, body: &str) -> Reply {
        let mut request = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("Content-Type", "application/json");
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        Self::reply(request.send(body))
    }

    /// The one pending round, waited for through the API.
    fn wait_pending(&self) -> Value {
        let until = Instant::now() + RUN_TIMEOUT;
        loop {
            let reply = self.get("/api/rounds/pending");
            assert_eq!(reply.status, 200, "{}", reply.body);
            if let Some(round) = reply.body.as_array().and_then(|a| a.first()) {
                return round.clone();
            }
            assert!(Instant::now() < until, "no pending round appeared");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Subscribes to `/api/events/stream`: its `(event, data)` pairs as they come.
    fn subscribe(&self) -> Receiver<(String, Value)> {
        let mut request = self.agent.get(format!("{}/api/events/stream", self.base));
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let response = request.call().expect("the event stream");
        assert_eq!(response.status().as_u16(), 200);
        let reader = BufReader::new(response.into_body().into_reader());
        let (send, receive) = mpsc::channel();
        std::thread::spawn(move || {
            let mut event = String::new();
            for line in reader.lines() {
                let Ok(line) = line else { return };
                if let Some(name) = line.strip_prefix("event: ") {
                    event = name.to_string();
                } else if let Some(data) = line.strip_prefix("data: ") {
                    let data = serde_json::from_str(data).expect("JSON event data");
                    if send.send((std::mem::take(&mut event), data)).is_err() {
                        return;
                    }
                }
            }
        });
        receive
    }
}

/// The answer body for the test's address under `key`.
fn answer(key: &str) -> String {
    json!({"responses": {"shipping_address": address_answer()}, "idempotency_key": key}).to_string()
}

/// The `{"error": {...}}` of a failed call: its type and code.
fn error_of(reply: &Reply) -> (String, String) {
    let error = &reply.body["error"];
    assert_keys(
        error,
        &["type", "code", "message", "request_key", "field"],
        "an API error",
    );
    (
        error["type"].as_str().unwrap_or_default().to_string(),
        error["code"].as_str().unwrap_or_default().to_string(),
    )
}

/// Every endpoint's shape; answered through the API, the run succeeds with that answer; a
/// repeat is idempotent, a different answer under the same key a conflict; invalid answers are
/// refused; the event stream says what happened.
#[test]
fn the_api_answers_a_run_and_streams_its_changes() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let stream = server.subscribe();
    let run = sb.spawn_run("legacy", &[], &[]);

    let round = server.wait_pending();
    check_round(&round);
    let (round_id, execution_id) = ids(&round);
    let filtered = server.get(&format!(
        "/api/rounds/pending?execution={}",
        &execution_id[..12]
    ));
    assert_eq!(filtered.status, 200);
    assert_eq!(filtered.body, json!([round]));

    // Reads, ids by prefix.
    let shown = server.get(&format!("/api/rounds/{round_id}"));
    assert_eq!(shown.status, 200, "{}", shown.body);
    check_record(&shown.body);
    assert_eq!(shown.body["redacted"], true);
    assert_eq!(shown.body["status"], "pending");
    let executions = server.get("/api/executions");
    assert_eq!(executions.status, 200);
    let list = executions.body.as_array().expect("an array");
    assert_eq!(list.len(), 1);
    check_execution(&list[0]);
    let status = server.get(&format!("/api/executions/{}", &execution_id[..12]));
    assert_eq!(status.status, 200, "{}", status.body);
    check_status(&status.body);
    assert_eq!(status.body["lifecycle"], "waiting_for_input");
    let events = server.get(&format!("/api/executions/{execution_id}/events"));
    assert_eq!(events.status, 200);
    check_events(&events.body);
    assert!(events.body["history"].is_array(), "{}", events.body);

    // Refused answers change nothing.
    let invalid = server.post(
        &format!("/api/rounds/{round_id}/responses"),
        &json!({"responses": {"shipping_address": {"action": "accept", "content": {"street": 1}}},
                "idempotency_key": "bad"})
        .to_string(),
    );
    assert_eq!(invalid.status, 400, "{}", invalid.body);
    let (kind, code) = error_of(&invalid);
    assert_eq!(kind, "ManagedInputValidationError");
    assert!(!code.is_empty(), "{}", invalid.body);
    // The error says which request and field it is about (a page shows it next to the field).
    assert_eq!(
        invalid.body["error"]["request_key"], "shipping_address",
        "{}",
        invalid.body
    );
    assert_eq!(invalid.body["error"]["field"], "city", "{}", invalid.body);
    let keyless = server.post(
        &format!("/api/rounds/{round_id}/responses"),
        &json!({"responses": {"shipping_address": address_answer()}}).to_string(),
    );
    assert_eq!(keyless.status, 400);
    assert_eq!(error_of(&keyless).1, "missing_idempotency_key");
    let unknown = server.post("/api/rounds/exec-nope-r1/responses", &answer("k"));
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(error_of(&unknown).1, "round_not_found");
    let unknown = server.get("/api/executions/exec-nope");
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(error_of(&unknown).1, "execution_not_found");
    assert_eq!(
        server.get(&format!("/api/rounds/{round_id}")).body["status"],
        "pending"
    );

    // The answer, then a repeat and a conflicting one under the same key.
    let answered = server.post(
        &format!("/api/rounds/{round_id}/responses"),
        &answer("api-1"),
    );
    assert_eq!(answered.status, 200, "{}", answered.body);
    check_record(&answered.body);
    assert_eq!(answered.body["redacted"], true, "answers are never shown");
    assert!(!answered.body.to_string().contains(STREET));
    let (out, lines) = run.finish();
    let result = check_run_stdout(&out, &lines);
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(
        result["tool_calls"][0]["output"],
        format!("Booked shipment to {STREET}, {CITY}")
    );
    let again = server.post(
        &format!("/api/rounds/{round_id}/responses"),
        &answer("api-1"),
    );
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["round_id"], round_id.as_str());
    assert_eq!(again.body["responses"], answered.body["responses"]);
    let other = json!({"responses": {"shipping_address": {"action": "decline"}},
                       "idempotency_key": "api-1"});
    let conflict = server.post(
        &format!("/api/rounds/{round_id}/responses"),
        &other.to_string(),
    );
    assert_eq!(conflict.status, 409, "{}", conflict.body);
    assert_eq!(
        error_of(&conflict),
        ("ManagedInputConflict".into(), "idempotency_conflict".into())
    );

    // The stream said it all, in order.
    let mut kinds = Vec::new();
    let until = Instant::now() + RUN_TIMEOUT;
    while !kinds.contains(&"execution_finished".to_string()) {
        let left = until.saturating_duration_since(Instant::now());
        let (kind, data) = stream
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("the stream stopped after {kinds:?}"));
        assert_eq!(data["execution_id"], execution_id.as_str(), "{data}");
        if kind.starts_with("round_") {
            assert_eq!(data["round_id"], round_id.as_str(), "{data}");
            assert!(data["status"].is_string(), "{data}");
        } else {
            assert_eq!(data["outcome"], "succeeded", "{data}");
        }
        kinds.push(kind);
    }
    let position = |kind: &str| kinds.iter().position(|k| k == kind);
    assert_eq!(position("round_created"), Some(0), "{kinds:?}");
    let resolved = position("round_resolved").unwrap_or_else(|| panic!("{kinds:?}"));
    assert!(resolved < kinds.len() - 1, "{kinds:?}");
}

/// A cancelled execution's round takes no answer (410 `round_terminal`).
#[test]
fn answering_a_failed_round_is_gone() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, execution_id) = ids(&server.wait_pending());
    let cancelled = server.post(&format!("/api/executions/{execution_id}/cancel"), "");
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    check_execution(&cancelled.body);
    assert_eq!(cancelled.body["cancel_requested"], true);
    let (out, _) = run.finish();
    assert!(!out.status.success(), "a cancelled run exits non-zero");
    assert_eq!(
        server.get(&format!("/api/rounds/{round_id}")).body["status"],
        "failed"
    );
    let late = server.post(
        &format!("/api/rounds/{round_id}/responses"),
        &answer("late"),
    );
    assert_eq!(late.status, 410, "{}", late.body);
    assert_eq!(
        error_of(&late),
        ("ManagedInputStateError".into(), "round_terminal".into())
    );
}

/// With a token, a call without it or with a wrong one is 401 and changes nothing; a body over
/// the limit is 413.
#[test]
fn a_token_guards_every_call_and_bodies_are_bounded() {
    let sb = Sandbox::new();
    sb.create_database();
    let token = "s3cret-token-for-the-test";
    let file = sb.write("token.txt", &format!("{token}\n"));
    let server = Server::start(
        &sb,
        &["--token-file", file.to_str().expect("a UTF-8 path")],
        Some(token),
    );
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, execution_id) = ids(&server.wait_pending());
    let bare = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let url = format!("{}/api/rounds/{round_id}/responses", server.base);
    for header in [
        None,
        Some("Bearer wrong"),
        Some("Basic s3cret-token-for-the-test"),
    ] {
        let mut request = bare.post(&url);
        if let Some(header) = header {
            request = request.header("Authorization", header);
        }
        let reply = Server::reply(request.send(answer("k")));
        assert_eq!(reply.status, 401, "{header:?}: {}", reply.body);
        assert_eq!(error_of(&reply).1, "unauthorized");
        assert!(!reply.body.to_string().contains(token));
        let listing = Server::reply(bare.get(format!("{}/api/executions", server.base)).call());
        assert_eq!(listing.status, 401);
    }
    assert_eq!(
        server.get(&format!("/api/rounds/{round_id}")).body["status"],
        "pending"
    );

    // Said in the request's head, so the server answers before the body is sent (a client
    // still writing 9 MiB could not read the answer of a server that stopped reading).
    let too_large = declared_too_large(&server, &round_id, token);
    assert_eq!(too_large.status, 413, "{}", too_large.body);
    assert_eq!(error_of(&too_large).1, "payload_too_large");
    assert_eq!(
        server.get(&format!("/api/rounds/{round_id}")).body["status"],
        "pending"
    );

    let answered = server.post(&format!("/api/rounds/{round_id}/responses"), &answer("k"));
    assert_eq!(answered.status, 200, "{}", answered.body);
    let (out, lines) = run.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
    let status = server.get(&format!("/api/executions/{execution_id}"));
    assert_eq!(status.body["outcome"], "succeeded");
}

/// A POST of a body 4 KiB over the 8 MiB limit, over a plain socket (the server stops reading
/// at the limit and answers; the last bytes sit in the socket's buffers); the answer.
fn declared_too_large(server: &Server, round_id: &str, token: &str) -> Reply {
    use std::io::{Read, Write};
    let address = server.base.trim_start_matches("http://");
    let mut socket = std::net::TcpStream::connect(address).expect("connecting");
    socket
        .set_read_timeout(Some(COMMAND_TIMEOUT))
        .expect("a read timeout");
    let size = 8 * 1024 * 1024 + 4096;
    let head = format!(
        "POST /api/rounds/{round_id}/responses HTTP/1.1\r\nHost: {address}\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Content-Length: {size}\r\nConnection: close\r\n\r\n"
    );
    let mut request = head.into_bytes();
    request.extend(std::iter::repeat_n(b' ', size));
    // The server may stop reading once it has its answer: a failed write is no failure here.
    let _ = socket.write_all(&request);
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    Reply { status, body }
}

/// A non-loopback address without a token is refused at start; a missing database too.
#[test]
fn serve_refuses_to_start_unsafely() {
    let sb = Sandbox::new();
    sb.create_database();
    let out = sb.m3(&["serve", "--listen", "0.0.0.0:0"]);
    assert!(!out.status.success());
    assert!(
        out.fails_with("ManagedInputValidationError")
            .contains("token_required"),
        "{}",
        out.stderr
    );
    let out = sb.m3(&["--json", "serve", "--listen", "0.0.0.0:0"]);
    let error: Value =
        serde_json::from_str(out.stderr.lines().next().unwrap_or_default()).expect("a JSON error");
    assert_eq!(error["error"]["code"], "token_required");
    let missing = Sandbox::new();
    let out = missing.m3(&["serve", "--listen", "127.0.0.1:0"]);
    assert!(out.fails_with("StorageError").contains("database_missing"));
}
