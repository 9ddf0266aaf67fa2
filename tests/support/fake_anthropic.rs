//! A loopback Anthropic Messages API for running the real Claude Code CLI with no model service:
//! it scripts the model's turns. Claude Code POSTs `/v1/messages?beta=true` with `"stream":
//! true` and reads `text/event-stream` (`message_start`, content blocks, `message_delta`,
//! `message_stop`). [`serve_in_background`] serves on a thread of the calling test. Modes:
//! - `tool` (default): a request whose messages hold no `tool_result` is answered with a call of
//!   the first MCP tool offered (`mcp__...`, input: the arguments), the next with a final text.
//! - `builtin`: first calls, one per turn, Claude Code's own tools and a tool of the server
//!   outside the allow-list (`Bash` writing the environment to the marker, `Write` of the marker,
//!   `WebFetch`, `Task`, `mcp__<server>__<OUTSIDE_TOOL>`), then the MCP tool, then the final
//!   text.
//! - `auth:KEY`: as `tool`, but every request without `x-api-key: KEY` is refused with HTTP 401.
//! - `status:CODE`: every request is answered with HTTP CODE and an Anthropic error body.
//! - `call:NAME`: as `tool`, but the tool called is NAME (`mcp__<server>__<tool>`).
//! - `silent`: accepts requests and never answers (the kit's turn deadline must end the turn).
//!
//! Modes combine, separated by commas (`auth:KEY,call:NAME`).
//!
//! Every request is kept ([`requests_seen`]): its headers and body, for the tests to read what
//! was offered and sent.

use crate::fake_model::{HttpRequest, read_request};
use serde_json::{Value, json};
use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};

/// The final text of the scripted model.
pub const FINAL_MESSAGE: &str = "The shipment is booked.";

/// The server tool outside the allow-list that `builtin` mode calls.
pub const OUTSIDE_TOOL: &str = "report_env";

/// How the fake model behaves.
#[derive(Debug, Clone)]
pub struct Script {
    /// `tool`, `builtin`, `auth:KEY` or `status:CODE`.
    pub mode: String,
    /// The MCP tool call's input.
    pub arguments: Value,
    /// The file `builtin` mode's tools try to write.
    pub marker: String,
}

impl Script {
    /// The value of the mode part `name` (`auth:`, `status:`, `call:`), if the mode has one.
    fn part(&self, name: &str) -> Option<&str> {
        self.mode.split(',').find_map(|p| p.strip_prefix(name))
    }

    /// Calls the first MCP tool with `arguments`, then answers with the final text.
    pub fn tool(arguments: Value) -> Self {
        Self {
            mode: "tool".into(),
            arguments,
            marker: "/nonexistent/m3-marker".into(),
        }
    }
}

/// A request the fake model received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Its path (query included).
    pub path: String,
    /// Its headers (names in lower case).
    pub headers: Vec<(String, String)>,
    /// Its body as JSON (`Null` if it was not).
    pub body: Value,
}

impl Seen {
    /// The names of the tools the request offered the model.
    pub fn tools(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str().map(str::to_string))
            .collect()
    }

    /// The texts of the `tool_result` blocks the conversation holds, in order.
    pub fn tool_results(&self) -> Vec<String> {
        let mut out = Vec::new();
        for message in self.body["messages"].as_array().into_iter().flatten() {
            for block in message["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_result" {
                    out.push(match &block["content"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    });
                }
            }
        }
        out
    }
}

/// Every request received, by the port that received it.
static SEEN: std::sync::Mutex<std::collections::BTreeMap<u16, Vec<Seen>>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// The requests the fake model on `port` (in this process) received, in order.
pub fn requests_seen(port: u16) -> Vec<Seen> {
    let seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    seen.get(&port).cloned().unwrap_or_default()
}

/// Starts the fake model on a background thread of this process; returns its port.
pub fn serve_in_background(script: Script) -> std::io::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let script = script.clone();
            std::thread::spawn(move || {
                if let Err(e) = serve(stream, &script) {
                    eprintln!("fake-anthropic: {e}");
                }
            });
        }
    });
    Ok(port)
}

fn respond(writer: &mut TcpStream, status: &str, kind: &str, body: &str) -> std::io::Result<()> {
    write!(
        writer,
        "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncache-control: no-cache\r\n\
         request-id: req_m3\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )?;
    writer.flush()
}

fn keep(port: u16, request: &HttpRequest) -> Seen {
    let seen = Seen {
        path: request.path().to_string(),
        headers: request.headers.clone(),
        body: serde_json::from_slice(&request.body).unwrap_or(Value::Null),
    };
    eprintln!(
        "fake-anthropic: {} tools {:?} results {:?}",
        request.line,
        seen.tools(),
        seen.tool_results()
    );
    let mut all = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    all.entry(port).or_default().push(seen.clone());
    seen
}

/// One HTTP/1.1 connection (keep-alive: several requests).
fn serve(stream: TcpStream, script: &Script) -> anyhow::Result<()> {
    let port = stream.local_addr()?.port();
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    while let Some(request) = read_request(&mut reader)? {
        let seen = keep(port, &request);
        if request.line.starts_with("HEAD ") || !seen.path.starts_with("/v1/messages") {
            respond(&mut writer, "404 Not Found", "text/plain", "not found")?;
            continue;
        }
        let refusal = if let Some(key) = script.part("auth:")
            && request.header("x-api-key") != Some(key)
        {
            Some(401)
        } else {
            script
                .part("status:")
                .map(|code| code.parse::<u16>().unwrap_or(500))
        };
        if let Some(code) = refusal {
            let kind = match code {
                401 => "authentication_error",
                403 => "permission_error",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                _ => "api_error",
            };
            let body = json!({"type": "error", "error": {"type": kind,
                "message": format!("refused with {code}")}})
            .to_string();
            respond(
                &mut writer,
                &format!("{code} Refused"),
                "application/json",
                &body,
            )?;
            continue;
        }
        if script.mode.split(',').any(|p| p == "silent") {
            // Never answer: hold the connection until the client gives up.
            std::thread::sleep(std::time::Duration::from_secs(3600));
            return Ok(());
        }
        let events = turn(&seen, script);
        let mut body = String::new();
        for event in events {
            body.push_str(&format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or("")
            ));
        }
        respond(&mut writer, "200 OK", "text/event-stream", &body)?;
    }
    Ok(())
}

/// The first MCP tool offered, and its server's part of the name.
fn first_mcp_tool(seen: &Seen) -> Option<(String, String)> {
    let name = seen.tools().into_iter().find(|t| t.starts_with("mcp__"))?;
    let server = name.strip_prefix("mcp__")?.split("__").next()?.to_string();
    Some((name, server))
}

fn message_start(seen: &Seen, index: usize) -> Value {
    json!({"type": "message_start", "message": {
        "id": format!("msg_{index}"), "type": "message", "role": "assistant",
        "model": seen.body["model"], "content": [], "stop_reason": null,
        "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
}

fn tool_use(index: usize, name: &str, input: &Value) -> Vec<Value> {
    vec![
        json!({"type": "content_block_start", "index": 0, "content_block": {
            "type": "tool_use", "id": format!("toolu_{index}"), "name": name, "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {
            "type": "input_json_delta", "partial_json": input.to_string()}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use",
            "stop_sequence": null}, "usage": {"output_tokens": 1}}),
    ]
}

fn text(text: &str) -> Vec<Value> {
    vec![
        json!({"type": "content_block_start", "index": 0, "content_block": {
            "type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {
            "type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
            "stop_sequence": null}, "usage": {"output_tokens": 1}}),
    ]
}

/// The events of one model turn.
fn turn(seen: &Seen, script: &Script) -> Vec<Value> {
    let done = seen.tool_results().len();
    let mut events = vec![message_start(seen, done)];
    let mcp = first_mcp_tool(seen).map(|(name, server)| match script.part("call:") {
        Some(called) => (called.to_string(), server),
        None => (name, server),
    });
    let marker = &script.marker;
    let mut builtin = vec![
        (
            "Bash".to_string(),
            json!({"command": format!("env > {marker}"), "description": "write the marker"}),
        ),
        (
            "Write".to_string(),
            json!({"file_path": marker, "content": "x"}),
        ),
        (
            "WebFetch".to_string(),
            json!({"url": "http://127.0.0.1:9/", "prompt": "read it"}),
        ),
        (
            "Task".to_string(),
            json!({"description": "d", "prompt": format!("run `touch {marker}`"),
                "subagent_type": "general-purpose"}),
        ),
    ];
    if let Some((_, server)) = &mcp {
        builtin.push((format!("mcp__{server}__{OUTSIDE_TOOL}"), json!({})));
    }
    let first_own = if script.mode.split(',').any(|p| p == "builtin") {
        builtin.len()
    } else {
        0
    };
    if done < first_own {
        let (name, input) = &builtin[done];
        events.extend(tool_use(done, name, input));
    } else if done == first_own
        && let Some((name, _)) = &mcp
    {
        events.extend(tool_use(done, name, &script.arguments));
    } else {
        events.extend(text(FINAL_MESSAGE));
    }
    events.push(json!({"type": "message_stop"}));
    events
}
