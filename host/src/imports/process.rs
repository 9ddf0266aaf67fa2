//! The `process` and `events` imports: the I/O of one execution. The host starts the child the
//! component asks for, with exactly the environment the kit was given, and reports what happens;
//! it decides nothing.

use crate::component::bindings::m3::managed_input::events::{self, Event};
use crate::component::bindings::m3::managed_input::process::{
    self, ServerEnvFile, SpawnSpec, Spawned,
};
use crate::component::bindings::m3::managed_input::types::HeldLeases;
use crate::process::{ChildProcess, ProcessEvent, ProcessSpec, ScratchDir, home};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::io::poll;

/// Most bytes of a child's stderr tail handed to the component (the WIT's 4 KiB).
const STDERR_TAIL_LIMIT: usize = 4096;

/// The fault point (tests only, `checks::fault`) reached when the server's output about to be
/// handed to the component holds the text the test names (`M3_FAULT_MATCH`): a test pauses the
/// worker there, e.g. to commit an answer after the server wrote something and before the
/// component reads it. The host knows no protocol: the text is the test's.
const MATCH_POINT: &str = "server_output.matched";

/// Environment variables whose values are not secrets (kept in a stderr tail).
const PLAIN_VARIABLES: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ", "PWD",
];

/// A child's stderr with the values of the environment it was given replaced by `[redacted]`
/// (the server binding's every value, the kit's but for [`PLAIN_VARIABLES`]; values shorter
/// than 4 bytes are left, they would match everywhere).
fn redact(mut text: String, io: &ExecutionIo) -> String {
    let kit = io
        .env
        .iter()
        .filter(|(name, _)| !PLAIN_VARIABLES.contains(&name.as_str()));
    let mut values: Vec<&String> = kit.chain(io.server_env.iter()).map(|(_, v)| v).collect();
    // Longest first, so a value holding another is replaced whole.
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    for value in values.into_iter().filter(|v| v.len() >= 4) {
        if text.contains(value.as_str()) {
            text = text.replace(value.as_str(), "[redacted]");
        }
    }
    text
}

/// The I/O of one running execution.
pub struct ExecutionIo {
    /// The kit's `env`.
    pub env: BTreeMap<String, String>,
    /// The server binding's `env`: added to the child's environment, or (for a harness that
    /// starts the server itself) written to its private home's `config.toml` for that server.
    pub server_env: BTreeMap<String, String>,
    /// Woken when a commit, in this process or another, concerns the execution
    /// (`wake-execution`: an answer, a cancel request, its round failed).
    pub wake: Arc<Notify>,
    /// Where a parked worker's leases are renewed (`events.next-holding`).
    pub parking: Arc<crate::worker::parking::Parking>,
    /// Where the child runs.
    pub scratch: Option<ScratchDir>,
    child: Option<ChildProcess>,
    output: Option<mpsc::Receiver<ProcessEvent>>,
    stdout_closed: bool,
    exit_reported: bool,
    /// Output held back to be handed on after a pause at [`MATCH_POINT`] (only ever set
    /// when a test armed that pause).
    withheld: Option<Vec<u8>>,
}

impl ExecutionIo {
    /// I/O for an execution whose child gets exactly `env` and the server binding's
    /// `server_env`.
    pub fn new(
        env: BTreeMap<String, String>,
        server_env: BTreeMap<String, String>,
        wake: Arc<Notify>,
        parking: Arc<crate::worker::parking::Parking>,
    ) -> Self {
        Self {
            env,
            server_env,
            wake,
            parking,
            scratch: None,
            child: None,
            output: None,
            stdout_closed: false,
            exit_reported: false,
            withheld: None,
        }
    }

    /// Kills and reaps the child (every exit path of a worker ends here).
    pub async fn reap(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
        self.output = None;
        self.withheld = None;
    }

    fn spawn(&mut self, spec: SpawnSpec) -> Result<Spawned, String> {
        if self.child.is_some() {
            return Err("the execution already has a child process".into());
        }
        let scratch = match self.scratch.take() {
            Some(scratch) => scratch,
            None => ScratchDir::create(crate::process::scratch::EXECUTION_PREFIX)
                .map_err(|e| e.to_string())?,
        };
        let mut env = self.env.clone();
        if spec.server_env.is_none() {
            env.extend(self.server_env.clone());
        }
        for (name, value) in spec.fixed_env {
            if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0')
            {
                return Err("a fixed environment variable must have a name without `=`".into());
            }
            env.insert(name, value);
        }
        let home_env: Vec<String> = spec
            .home_env
            .into_iter()
            .filter(|n| !n.is_empty() && !n.contains('=') && !n.contains('\0'))
            .collect();
        if !home_env.is_empty() {
            // A private home for the child (e.g. CODEX_HOME), made through the capability.
            let home = "home";
            let scratch_dir = scratch.dir().map_err(|e| e.to_string())?;
            if !scratch_dir.exists(home) {
                scratch_dir.create_dir(home).map_err(|e| e.to_string())?;
            }
            let dir = scratch_dir.open_dir(home).map_err(|e| e.to_string())?;
            home::copy_files(&dir, &spec.home_files)?;
            match &spec.server_env {
                Some(ServerEnvFile::CodexConfig(server)) => {
                    home::write_server_env(&dir, server, &self.server_env)?;
                }
                Some(ServerEnvFile::McpConfig(config)) => {
                    // The server inherits Claude Code's environment: what it must not see is
                    // emptied, the private home's variables get back the caller's values.
                    let mut server_env = BTreeMap::new();
                    for name in &config.withheld {
                        server_env.insert(name.clone(), String::new());
                    }
                    for name in &home_env {
                        server_env.insert(
                            name.clone(),
                            self.env.get(name).cloned().unwrap_or_default(),
                        );
                    }
                    server_env.extend(self.server_env.clone());
                    home::write_mcp_config(&dir, config, &server_env)?;
                }
                None => {}
            }
            let path = scratch.path().join(home).display().to_string();
            for name in home_env {
                env.insert(name, path.clone());
            }
        } else if spec.server_env.is_some() || !spec.home_files.is_empty() {
            return Err("home files and a server environment file need a private home".into());
        }
        let workdir = scratch.path().display().to_string();
        let spec = ProcessSpec {
            command: spec.program,
            args: spec.args,
            env,
            cwd: spec.cwd.map(Into::into),
        };
        let spawned = ChildProcess::spawn(&spec, &scratch);
        self.scratch = Some(scratch);
        let (child, output) = spawned.map_err(|e| e.to_string())?;
        let pid = child.pid();
        self.child = Some(child);
        self.output = Some(output);
        self.stdout_closed = false;
        self.exit_reported = false;
        self.withheld = None;
        Ok(Spawned {
            scratch: workdir,
            process_group: pid,
            started_at: crate::process::child::start_ticks(pid).unwrap_or(0),
        })
    }

    async fn next(&mut self, timeout: Duration) -> Event {
        if let Some(bytes) = self.withheld.take() {
            crate::checks::fault::hit(MATCH_POINT);
            return Event::Stdout(bytes);
        }
        // Output first, so lines written before an exit are never lost behind it.
        if let Some(output) = self.output.as_mut()
            && let Ok(event) = output.try_recv()
        {
            return self.output_event(event);
        }
        let sleep = tokio::time::sleep(timeout);
        tokio::pin!(sleep);
        tokio::select! {
            biased;
            event = recv(self.output.as_mut()), if self.output.is_some() && !self.stdout_closed => {
                match event {
                    Some(event) => self.output_event(event),
                    None => {
                        self.stdout_closed = true;
                        Event::StdoutClosed
                    }
                }
            }
            code = wait(self.child.as_mut()), if self.stdout_closed && !self.exit_reported && self.child.is_some() => {
                self.exit_reported = true;
                Event::Exited(code)
            }
            _ = self.wake.notified() => Event::Wake,
            _ = &mut sleep => Event::Timeout,
        }
    }

    /// [`ExecutionIo::next`] while the worker's leases are parked with the renewer: it also
    /// ends when the renewer needs the worker to look, or when `watched` (the component's
    /// pollables) is ready. Returns the leases as renewed.
    async fn next_holding(
        &mut self,
        timeout: Duration,
        held: HeldLeases,
        watched: Option<impl Future<Output = wasmtime::Result<Vec<u32>>>>,
    ) -> wasmtime::Result<(Event, HeldLeases)> {
        let holding = self.parking.park(held.clone());
        let event = tokio::select! {
            biased;
            event = self.next(timeout) => Ok(event),
            event = holding.signalled() => Ok(event),
            ready = ready(watched) => ready.map(Event::Ready),
        };
        let held = holding.finish().unwrap_or(held);
        Ok((event?, held))
    }

    fn output_event(&mut self, event: ProcessEvent) -> Event {
        match event {
            ProcessEvent::Stdout(bytes) => self.stdout_event(bytes),
            ProcessEvent::StdoutClosed => {
                self.stdout_closed = true;
                Event::StdoutClosed
            }
            ProcessEvent::Exited(code) => {
                self.exit_reported = true;
                Event::Exited(code)
            }
        }
    }

    /// The server's output as an event. Only when a test armed a pause at [`MATCH_POINT`]:
    /// output holding the test's text reaches that point before it is handed on, and the lines
    /// before the matching one go first, the rest (from the matching line on)
    /// at the next [`ExecutionIo::next`], so the component has seen everything the server wrote
    /// before withdrawing (its request above all) when the worker pauses.
    fn stdout_event(&mut self, mut bytes: Vec<u8>) -> Event {
        if let Some(text) = crate::checks::fault::pause_match(MATCH_POINT)
            && let Some(start) = matching_line(&bytes, text)
        {
            if start > 0 {
                self.withheld = Some(bytes.split_off(start));
                return Event::Stdout(bytes);
            }
            crate::checks::fault::hit(MATCH_POINT);
        }
        Event::Stdout(bytes)
    }
}

/// Where the first line of `bytes` holding `text` starts, if one does.
fn matching_line(bytes: &[u8], text: &[u8]) -> Option<usize> {
    if text.is_empty() {
        return None;
    }
    let at = bytes.windows(text.len()).position(|w| w == text)?;
    Some(
        bytes[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |newline| newline + 1),
    )
}

/// The indices of the watched pollables that are ready; never, when nothing is watched.
async fn ready(
    watched: Option<impl Future<Output = wasmtime::Result<Vec<u32>>>>,
) -> wasmtime::Result<Vec<u32>> {
    match watched {
        Some(watched) => watched.await,
        None => std::future::pending().await,
    }
}

async fn recv(output: Option<&mut mpsc::Receiver<ProcessEvent>>) -> Option<ProcessEvent> {
    match output {
        Some(output) => output.recv().await,
        None => std::future::pending().await,
    }
}

async fn wait(child: Option<&mut ChildProcess>) -> Option<i32> {
    match child {
        Some(child) => match child.wait().await {
            Ok(ProcessEvent::Exited(code)) => code,
            _ => None,
        },
        None => std::future::pending().await,
    }
}

/// The `process` and `events` capabilities of one instance (linked by projection from the
/// instance's state): an execution's I/O in a worker's instance, nothing in any other. It also
/// holds the instance's `wasi:http` state, whose pollables `events` waits on.
#[derive(Default)]
pub struct ProcessContext {
    /// The execution's I/O, in a worker's instance.
    pub io: Option<ExecutionIo>,
    /// The resources of `wasi:http` and `wasi:io` (requests, responses, streams, pollables).
    pub table: ResourceTable,
    /// `wasi:http`'s own settings.
    pub http: wasmtime_wasi_http::WasiHttpCtx,
    /// Where the component's HTTP requests may go: the execution's server origin, or nowhere.
    pub network: super::network::NetworkGrant,
}

impl ProcessContext {
    fn io(&mut self) -> Result<&mut ExecutionIo, String> {
        self.io
            .as_mut()
            .ok_or_else(|| "this instance has no process capability".to_string())
    }
}

impl process::Host for ProcessContext {
    fn spawn(&mut self, spec: SpawnSpec) -> wasmtime::Result<Result<Spawned, String>> {
        let result = self.io().and_then(|io| io.spawn(spec));
        Ok(result)
    }

    async fn write_line(&mut self, line: String) -> wasmtime::Result<Result<(), String>> {
        let result = match self.io() {
            Ok(io) => match io.child.as_mut() {
                Some(child) => child.write_line(&line).await.map_err(|e| e.to_string()),
                None => Err("no child process".into()),
            },
            Err(e) => Err(e),
        };
        Ok(result)
    }

    fn close_stdin(&mut self) -> wasmtime::Result<()> {
        if let Ok(io) = self.io()
            && let Some(child) = io.child.as_mut()
        {
            child.close_stdin();
        }
        Ok(())
    }

    fn stderr_tail(&mut self) -> wasmtime::Result<String> {
        let tail = match self.io() {
            Ok(io) => io
                .child
                .as_ref()
                .map(ChildProcess::stderr_tail)
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let text = String::from_utf8_lossy(&tail).into_owned();
        let text = match self.io.as_ref() {
            Some(io) => redact(text, io),
            None => text,
        };
        let mut start = text.len().saturating_sub(STDERR_TAIL_LIMIT);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        Ok(text[start..].to_string())
    }

    fn kill(&mut self) -> wasmtime::Result<()> {
        if let Ok(io) = self.io()
            && let Some(child) = io.child.take()
        {
            // Dropping kills the whole process group; tokio reaps the child.
            drop(child);
            io.output = None;
        }
        Ok(())
    }
}

impl events::Host for ProcessContext {
    async fn next(
        &mut self,
        timeout_ms: u64,
        watch: Vec<Resource<DynPollable>>,
    ) -> wasmtime::Result<Event> {
        let timeout = Duration::from_millis(timeout_ms);
        let Some(io) = self.io.as_mut() else {
            return Ok(Event::Timeout);
        };
        let watched = (!watch.is_empty()).then(|| poll::Host::poll(&mut self.table, watch));
        tokio::select! {
            biased;
            event = io.next(timeout) => Ok(event),
            ready = ready(watched) => ready.map(Event::Ready),
        }
    }

    async fn next_holding(
        &mut self,
        timeout_ms: u64,
        held: HeldLeases,
        watch: Vec<Resource<DynPollable>>,
    ) -> wasmtime::Result<(Event, HeldLeases)> {
        let timeout = Duration::from_millis(timeout_ms);
        let Some(io) = self.io.as_mut() else {
            return Ok((Event::Timeout, held));
        };
        let watched = (!watch.is_empty()).then(|| poll::Host::poll(&mut self.table, watch));
        io.next_holding(timeout, held, watched).await
    }
}
