//! What the `m3 serve` tests share: a running `m3 serve` (its output kept for the secrecy
//! checks), a real HTTP client for it (`ureq`), a reader of its Server-Sent Events, and raw
//! sockets for what an HTTP client library will not do (stop halfway, never read).
#![allow(dead_code)]

use crate::common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A running `m3 serve` and a client for it.
pub struct Server {
    pub guard: ChildGuard,
    /// `http://ADDRESS`.
    pub base: String,
    /// `127.0.0.1:PORT`.
    pub address: String,
    pub token: Option<String>,
    agent: ureq::Agent,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
}

/// An HTTP answer: status and JSON body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

/// An agent that reports every status (an error status is an answer, not a failure). It
/// reuses a connection only while it has been idle for less than 250 ms: the server closes
/// idle connections after its request timeout (1 s in some tests), and a request sent on a
/// connection the server has just closed would end in an error no real server's client sees
/// from a fresh one.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_idle_age(Duration::from_millis(250))
        .build()
        .into()
}

/// An HTTP answer as it came: status, headers and body text (for what [`Reply`] does not
/// show: the content type, `Location`, `Set-Cookie`, `Allow`, a body that is not JSON).
#[derive(Debug)]
pub struct Exchange {
    pub status: u16,
    pub headers: ureq::http::HeaderMap,
    pub text: String,
}

impl Exchange {
    /// The value of the header `name` (`None` when absent or not text).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `Content-Type`'s media type, without parameters (empty when there is none).
    pub fn media_type(&self) -> &str {
        self.header("content-type")
            .and_then(|v| v.split(';').next())
            .unwrap_or_default()
            .trim()
    }

    /// The body as the API's JSON answer; asserts the content type says so.
    pub fn reply(&self) -> Reply {
        assert_eq!(
            self.media_type(),
            "application/json",
            "{:?}: {}",
            self.headers,
            self.text
        );
        let body = serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("a body that is not JSON ({e}): {:?}", self.text));
        Reply {
            status: self.status,
            body,
        }
    }
}

impl Server {
    /// `METHOD PATH` with `headers` and `body` (`None`: no body at all), the token added when
    /// the server has one; a redirect is returned, never followed.
    pub fn exchange(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Exchange {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let response = match body {
            Some(body) => agent.run(request.body(body.to_string()).expect("a request")),
            None => agent.run(request.body(()).expect("a request")),
        };
        let mut response = response.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.body_mut().read_to_string().expect("a text body");
        Exchange {
            status,
            headers,
            text,
        }
    }

    /// Starts `m3 serve --listen 127.0.0.1:0 EXTRA...` on the sandbox's database; `token` is
    /// what the client sends (`Authorization: Bearer TOKEN`).
    pub fn start(sb: &Sandbox, extra: &[&str], token: Option<&str>) -> Self {
        let mut cmd = sb.command(&["serve", "--listen", "127.0.0.1:0"]);
        cmd.args(extra);
        Self::spawn(cmd, token)
    }

    /// Starts `cmd` (an `m3 serve` command) and reads its bound address.
    pub fn spawn(mut cmd: std::process::Command, token: Option<&str>) -> Self {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawning `m3 serve`");
        let stdout = read_lines(child.stdout.take().expect("piped stdout"));
        let stderr = read_all(child.stderr.take().expect("piped stderr"));
        let guard = ChildGuard { child };
        let address = stdout.recv_timeout(COMMAND_TIMEOUT).unwrap_or_else(|e| {
            let said = stderr
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_default();
            panic!("`m3 serve` prints its bound address first ({e}); its stderr: {said}")
        });
        assert!(
            address.starts_with("127.0.0.1:") && !address.ends_with(":0"),
            "{address}"
        );
        Self {
            guard,
            base: format!("http://{address}"),
            address,
            token: token.map(str::to_string),
            agent: agent(),
            stdout,
            stderr,
        }
    }

    /// Stops the server with SIGTERM (as a service manager does); asserts it exits 0 and
    /// returns all it printed: stdout (after the address line) and stderr.
    pub fn stop(mut self) -> (String, String) {
        let pid = self.guard.child.id() as libc::pid_t;
        // SAFETY: signals a child this test started and still holds.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status = self
            .guard
            .wait_for(COMMAND_TIMEOUT)
            .expect("`m3 serve` stops on SIGTERM");
        let stderr = self
            .stderr
            .recv_timeout(COMMAND_TIMEOUT)
            .expect("its stderr closes");
        let stdout: Vec<String> = self.stdout.try_iter().collect();
        let out = Output::new("m3 serve".into(), status, stdout.join("\n"), stderr);
        out.ok();
        (out.stdout, out.stderr)
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn crash(mut self) {
        self.guard.kill();
    }

    /// The status and JSON body of `response`.
    pub fn reply(response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Reply {
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

    /// `Authorization: Bearer TOKEN`, when the server has a token.
    fn authorized<B>(&self, mut request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        request
    }

    /// `GET PATH`.
    pub fn get(&self, path: &str) -> Reply {
        let request = self.authorized(self.agent.get(format!("{}{path}", self.base)));
        Self::reply(request.call())
    }

    /// `POST PATH` with a JSON body.
    pub fn post(&self, path: &str, body: &str) -> Reply {
        let request = self.authorized(
            self.agent
                .post(format!("{}{path}", self.base))
                .header("Content-Type", "application/json"),
        );
        Self::reply(request.send(body))
    }

    /// `POST /api/rounds/{round}/responses` with `body`.
    pub fn answer(&self, round_id: &str, body: &str) -> Reply {
        self.post(&format!("/api/rounds/{round_id}/responses"), body)
    }

    /// The round's stored record (redacted), as the API shows it.
    pub fn round(&self, round_id: &str) -> Value {
        let reply = self.get(&format!("/api/rounds/{round_id}"));
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.body
    }

    /// The pending rounds, waited for until there are `count` through the API.
    pub fn wait_pending_count(&self, count: usize) -> Vec<Value> {
        let until = Instant::now() + RUN_TIMEOUT;
        loop {
            let reply = self.get("/api/rounds/pending");
            assert_eq!(reply.status, 200, "{}", reply.body);
            let rounds = reply.body.as_array().expect("an array").clone();
            if rounds.len() >= count {
                assert_eq!(rounds.len(), count, "{rounds:?}");
                return rounds;
            }
            assert!(
                Instant::now() < until,
                "{count} pending round(s) did not appear: {rounds:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The one pending round, waited for through the API.
    pub fn wait_pending(&self) -> Value {
        self.wait_pending_count(1).remove(0)
    }

    /// Subscribes to `/api/events/stream` (with the token, if any).
    pub fn subscribe(&self) -> EventStream {
        let request = self.authorized(self.agent.get(format!("{}/api/events/stream", self.base)));
        let response = request.call().expect("the event stream");
        assert_eq!(response.status().as_u16(), 200);
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        EventStream::read(response.into_body().into_reader())
    }
}

/// One item of an event stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `event: KIND` and `data: JSON`.
    Event(String, Value),
    /// A comment line (`:...`), as keep-alives are.
    Comment,
}

/// A subscriber's view of `/api/events/stream`, read on a thread.
pub struct EventStream {
    items: Receiver<Item>,
}

impl EventStream {
    /// Reads `reader` (an SSE body) on a thread.
    pub fn read(reader: impl Read + Send + 'static) -> Self {
        let (send, items) = mpsc::channel();
        std::thread::spawn(move || {
            let mut event = String::new();
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { return };
                let item = if line.starts_with(':') {
                    Item::Comment
                } else if let Some(name) = line.strip_prefix("event: ") {
                    event = name.to_string();
                    continue;
                } else if let Some(data) = line.strip_prefix("data: ") {
                    let data = serde_json::from_str(data).expect("JSON event data");
                    Item::Event(std::mem::take(&mut event), data)
                } else {
                    continue;
                };
                if send.send(item).is_err() {
                    return;
                }
            }
        });
        Self { items }
    }

    /// The next item, waiting at most `timeout`; `None` on timeout.
    pub fn next_item(&self, timeout: Duration) -> Option<Item> {
        match self.items.recv_timeout(timeout) {
            Ok(item) => Some(item),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => panic!("the event stream ended"),
        }
    }

    /// The next event (comments skipped), waiting at most `RUN_TIMEOUT`.
    pub fn next_event(&self) -> (String, Value) {
        let until = Instant::now() + RUN_TIMEOUT;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.next_item(left) {
                Some(Item::Event(kind, data)) => return (kind, data),
                Some(Item::Comment) => {}
                None => panic!("no event within {RUN_TIMEOUT:?}"),
            }
        }
    }

    /// The events of `execution_id` (others skipped) up to and including its
    /// `execution_finished`.
    pub fn life_of(&self, execution_id: &str) -> Vec<(String, Value)> {
        let mut events = Vec::new();
        loop {
            let (kind, data) = self.next_event();
            if data["execution_id"] != execution_id {
                continue;
            }
            let done = kind == "execution_finished";
            events.push((kind, data));
            if done {
                return events;
            }
        }
    }
}

/// The kinds of `events`.
pub fn kinds(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(kind, _)| kind.as_str()).collect()
}

/// The answer body for the test's address under `key`.
pub fn answer(key: &str) -> String {
    json!({"responses": {"shipping_address": address_answer()}, "idempotency_key": key}).to_string()
}

/// The answer body for another address (`street`) under `key`.
pub fn answer_street(street: &str, key: &str) -> String {
    json!({"responses": {"shipping_address": {"action": "accept",
            "content": {"street": street, "city": CITY}}},
           "idempotency_key": key})
    .to_string()
}

/// The `{"error": {...}}` of a failed call: its type and code.
pub fn error_of(reply: &Reply) -> (String, String) {
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

/// Asserts `reply` is the typed error `(type, code)` with `status`.
pub fn assert_problem(reply: &Reply, status: u16, kind: &str, code: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_eq!(
        error_of(reply),
        (kind.to_string(), code.to_string()),
        "{}",
        reply.body
    );
}

/// Stops (`SIGSTOP`) or resumes (`SIGCONT`) the child `pid`.
pub fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: signals a child the test started and still holds.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, signal) }, 0);
}

/// A raw connection to `address` that has sent `bytes` (nothing more unless the test writes).
pub fn raw(address: &str, bytes: &[u8]) -> TcpStream {
    let mut socket = TcpStream::connect(address).expect("connecting");
    socket
        .set_read_timeout(Some(COMMAND_TIMEOUT))
        .expect("a read timeout");
    socket.write_all(bytes).expect("writing");
    socket
}

/// Reads an HTTP answer from `socket` to its end (the request said `Connection: close`):
/// status and body text.
pub fn raw_answer(socket: &mut TcpStream) -> (u16, String) {
    let (status, _, body) = raw_answer_with_head(socket);
    (status, body)
}

/// As [`raw_answer`], with the answer's head (status line and headers, lower-case) too.
pub fn raw_answer_with_head(socket: &mut TcpStream) -> (u16, String, String) {
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("an HTTP answer: {answer:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    (status, head.to_ascii_lowercase(), body.to_string())
}
