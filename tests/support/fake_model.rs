//! A loopback Responses API for running the real Codex CLI with no model service: it scripts the
//! model's turns. Codex POSTs `/v1/responses` and reads `text/event-stream`.
//!
//! As a binary: `m3-test-fake-model PORT_FILE [MODE] [ARGUMENTS_JSON] [MARKER_PATH]` listens on
//! 127.0.0.1 (a free port, written to PORT_FILE) until killed; [`serve_in_background`] does the
//! same on a thread of the calling test. Modes:
//! - `tool` (default): a request whose `input` holds no `function_call_output` is answered with a
//!   call of the first MCP tool listed in the request's `tools` (arguments: ARGUMENTS_JSON, `{}`
//!   by default); the next one with a final assistant message.
//! - `silent`: accepts requests and never answers (Codex then retries; the kit's turn deadline
//!   must end the turn).
//! - `shell`: first asks to run `touch MARKER_PATH` unsandboxed (provoking Codex's command
//!   approval), then the tool call, then the final message.
//! - `builtin`: first calls Codex's own tools, one per turn (`exec_command` writing `env` to
//!   MARKER_PATH, `apply_patch` adding MARKER_PATH, `spawn_agent`, `view_image`,
//!   `web_search`), then the MCP tool, then the final message.
//! - `auth:KEY`: as `tool`, but every request without `Authorization: Bearer KEY` is refused
//!   with HTTP 401.
//! - `status:CODE`: every request is answered with HTTP CODE.
//!
//! Every request's path and first 200 bytes of body go to stderr, and the output of every
//! function call the conversation holds (tests read it, e.g. to see a declined command).
//! Every request body's `model` goes to stderr as a line `fake-model: model: NAME`, and is
//! kept for [`models_seen`] (a model served on a thread of the test).

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

/// The final assistant message.
pub const FINAL_MESSAGE: &str = "The shipment is booked.";

/// How the fake model behaves.
#[derive(Debug, Clone)]
pub struct Script {
    /// `tool`, `silent` or `shell`.
    pub mode: String,
    /// The tool call's arguments (JSON text).
    pub arguments: String,
    /// The file `shell` mode asks to create.
    pub marker: String,
}

/// The `model` of every request body, by the port that received it.
static MODELS: std::sync::Mutex<std::collections::BTreeMap<u16, Vec<String>>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// The `model` of every request the fake model on `port` (in this process) received, in order.
pub fn models_seen(port: u16) -> Vec<String> {
    let models = MODELS.lock().unwrap_or_else(|e| e.into_inner());
    models.get(&port).cloned().unwrap_or_default()
}

/// Logs and keeps a request body's `model`.
fn note_model(port: u16, body: &[u8]) {
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if let Some(model) = body["model"].as_str() {
        eprintln!("fake-model: model: {model}");
        let mut models = MODELS.lock().unwrap_or_else(|e| e.into_inner());
        models.entry(port).or_default().push(model.to_string());
    }
}

/// Serves `script` on `listener` until the process ends (one thread per connection).
pub fn serve_forever(listener: TcpListener, script: Script) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let script = script.clone();
        std::thread::spawn(move || {
            if let Err(e) = serve(stream, &script.mode, &script.arguments, &script.marker) {
                eprintln!("fake-model: {e}");
            }
        });
    }
}

/// Starts the fake model on a background thread of this process; returns its port.
pub fn serve_in_background(script: Script) -> std::io::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || serve_forever(listener, script));
    Ok(port)
}

/// The binary's main: arguments as documented above.
pub fn main_with_args(mut args: impl Iterator<Item = String>) -> anyhow::Result<()> {
    let port_file = args.next().ok_or_else(|| {
        anyhow::anyhow!("usage: PORT_FILE [tool|silent|shell] [ARGUMENTS_JSON] [MARKER]")
    })?;
    let mode = args.next().unwrap_or_else(|| "tool".into());
    let arguments = args.next().unwrap_or_else(|| "{}".into());
    serde_json::from_str::<Value>(&arguments)?;
    let marker = args
        .next()
        .unwrap_or_else(|| "/nonexistent/m3-marker".into());
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let partial = format!("{port_file}.partial");
    std::fs::write(&partial, port.to_string())?;
    std::fs::rename(&partial, &port_file)?;
    serve_forever(
        listener,
        Script {
            mode,
            arguments,
            marker,
        },
    );
    Ok(())
}

/// One HTTP request as a loopback fake reads it.
pub(crate) struct HttpRequest {
    /// `POST /v1/responses HTTP/1.1`.
    pub line: String,
    /// Header names in lower case, with their values.
    pub headers: Vec<(String, String)>,
    /// The body (a chunked one put together).
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// The value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The request's path, query included.
    pub fn path(&self) -> &str {
        self.line.split_whitespace().nth(1).unwrap_or("")
    }
}

/// Reads the next request of a keep-alive connection (`None`: the client closed it).
pub(crate) fn read_request(
    reader: &mut BufReader<TcpStream>,
) -> anyhow::Result<Option<HttpRequest>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let mut request = HttpRequest {
        line: line.trim_end().to_string(),
        headers,
        body: Vec::new(),
    };
    request.body = if request
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        read_chunked(reader)?
    } else {
        let length: usize = request.header("content-length").unwrap_or("0").parse()?;
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    };
    Ok(Some(request))
}

/// One HTTP/1.1 connection (keep-alive: several requests).
fn serve(stream: TcpStream, mode: &str, arguments: &str, marker: &str) -> anyhow::Result<()> {
    let port = stream.local_addr()?.port();
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    while let Some(request) = read_request(&mut reader)? {
        let path = request.path().to_string();
        let authorization = request.header("authorization").map(str::to_string);
        let body = request.body;
        eprintln!(
            "fake-model: {} {}",
            request.line,
            String::from_utf8_lossy(&body[..body.len().min(200)])
        );
        note_model(port, &body);
        if !path.ends_with("/responses") {
            let text = "not found";
            write!(
                writer,
                "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{text}",
                text.len()
            )?;
            writer.flush()?;
            continue;
        }
        let refusal = match (mode.strip_prefix("auth:"), mode.strip_prefix("status:")) {
            (Some(key), _) if authorization.as_deref() != Some(&format!("Bearer {key}")) => {
                eprintln!("fake-model: refused: authorization missing or wrong");
                Some(401)
            }
            (_, Some(code)) => Some(code.parse::<u16>().unwrap_or(500)),
            _ => None,
        };
        if let Some(code) = refusal {
            let text = json!({"error": {"message": format!("refused with {code}"),
                "type": "invalid_request_error", "code": code.to_string()}})
            .to_string();
            write!(
                writer,
                "HTTP/1.1 {code} Refused\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
                text.len()
            )?;
            writer.flush()?;
            continue;
        }
        let mode = if mode.starts_with("auth:") {
            "tool"
        } else {
            mode
        };
        if mode == "silent" {
            // Never answer: hold the connection until the client gives up.
            std::thread::sleep(std::time::Duration::from_secs(3600));
            return Ok(());
        }
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        for item in request["input"].as_array().into_iter().flatten() {
            if item["type"] == "function_call_output" {
                let output = item["output"].to_string();
                eprintln!(
                    "fake-model: output of {}: {}",
                    item["call_id"],
                    &output[..output.len().min(300)]
                );
            }
        }
        let tools: Vec<&str> = request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str())
            .collect();
        eprintln!("fake-model: tools offered: {tools:?}");
        eprintln!(
            "fake-model: tool types offered: {:?}",
            request["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| t["type"].as_str().unwrap_or(""))
                .collect::<Vec<_>>()
        );
        let events = turn(&request, mode, arguments, marker);
        let mut stream_body = String::new();
        for (event, data) in events {
            stream_body.push_str(&format!("event: {event}\ndata: {data}\n\n"));
        }
        write!(
            writer,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ncontent-length: {}\r\n\r\n{stream_body}",
            stream_body.len()
        )?;
        writer.flush()?;
    }
    Ok(())
}

fn read_chunked(reader: &mut BufReader<TcpStream>) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)?;
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk)?;
        chunk.truncate(size);
        body.extend_from_slice(&chunk);
        if size == 0 {
            return Ok(body);
        }
    }
}

/// How many function calls the conversation already holds outputs for.
fn outputs(request: &Value) -> usize {
    request["input"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|i| i["type"] == "function_call_output")
                .count()
        })
        .unwrap_or(0)
}

/// The first MCP tool offered: `(namespace, tool)`.
fn first_mcp_tool(request: &Value) -> Option<(String, String)> {
    for tool in request["tools"].as_array()? {
        if tool["type"] == "namespace"
            && let Some(name) = tool["name"].as_str()
            && name.starts_with("mcp__")
            && let Some(inner) = tool["tools"].as_array().and_then(|t| t.first())
            && let Some(function) = inner["name"].as_str()
        {
            return Some((name.to_string(), function.to_string()));
        }
    }
    None
}

fn completed(id: &str) -> (String, String) {
    (
        "response.completed".into(),
        json!({"type": "response.completed", "response": {"id": id, "usage": {
            "input_tokens": 0, "input_tokens_details": null, "output_tokens": 0,
            "output_tokens_details": null, "total_tokens": 0}}})
        .to_string(),
    )
}

fn created(id: &str) -> (String, String) {
    (
        "response.created".into(),
        json!({"type": "response.created", "response": {"id": id}}).to_string(),
    )
}

fn item(item: Value) -> (String, String) {
    (
        "response.output_item.done".into(),
        json!({"type": "response.output_item.done", "item": item}).to_string(),
    )
}

/// The events of one model turn.
fn turn(request: &Value, mode: &str, arguments: &str, marker: &str) -> Vec<(String, String)> {
    let done = outputs(request);
    let id = format!("resp-{done}");
    let shell_first = mode == "shell";
    let mut events = vec![created(&id)];
    let builtin = [
        ("exec_command", json!({"cmd": format!("env > {marker}")})),
        (
            "apply_patch",
            json!({"input": format!("*** Begin Patch\n*** Add File: {marker}\n+x\n*** End Patch\n")}),
        ),
        (
            "spawn_agent",
            json!({"message": format!("run `touch {marker}`")}),
        ),
        ("view_image", json!({"path": "/etc/hostname"})),
        ("web_search", json!({"query": "m3"})),
    ];
    if mode == "builtin" && done < builtin.len() {
        let (name, arguments) = &builtin[done];
        events.push(item(json!({
            "type": "function_call", "call_id": format!("call-{name}"), "name": name,
            "arguments": arguments.to_string()
        })));
    } else if mode == "builtin"
        && done == builtin.len()
        && let Some((namespace, tool)) = first_mcp_tool(request)
    {
        events.push(item(json!({
            "type": "function_call", "call_id": format!("call-{done}"), "name": tool,
            "namespace": namespace, "arguments": arguments
        })));
    } else if mode == "builtin" {
        events.push(item(json!({
            "type": "message", "role": "assistant", "id": format!("msg-{done}"),
            "content": [{"type": "output_text", "text": FINAL_MESSAGE}]
        })));
    } else if shell_first && done == 0 {
        // An unsandboxed command: under approval policy `on-request` Codex asks the client.
        events.push(item(json!({
            "type": "function_call", "call_id": "call-shell", "name": "exec_command",
            "arguments": json!({
                "cmd": format!("touch {marker}"),
                "sandbox_permissions": "require_escalated",
                "justification": "Create a marker file"
            }).to_string()
        })));
    } else if done == usize::from(shell_first)
        && let Some((namespace, tool)) = first_mcp_tool(request)
    {
        events.push(item(json!({
            "type": "function_call", "call_id": format!("call-{done}"), "name": tool,
            "namespace": namespace, "arguments": arguments
        })));
    } else {
        events.push(item(json!({
            "type": "message", "role": "assistant", "id": format!("msg-{done}"),
            "content": [{"type": "output_text", "text": FINAL_MESSAGE}]
        })));
    }
    events.push(completed(&id));
    events
}
