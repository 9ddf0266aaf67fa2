//! A real MCP server listening for Streamable HTTP on loopback, for the tests: started from a
//! [`PeerCommand`] on a free port of its own, waited for until it accepts connections, killed
//! (with every process it started) when dropped, and restartable on the same port.

use crate::peers::PeerCommand;
use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to start listening (Node's and Python's start-up on a loaded
/// machine).
const START_WAIT: Duration = Duration::from_secs(60);

/// A port nobody listens on now (the OS's pick; the server binds it right after).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// One HTTP server process.
pub struct HttpServer {
    name: String,
    command: PeerCommand,
    env: Vec<(OsString, OsString)>,
    port: u16,
    path: String,
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl HttpServer {
    /// Starts `command` (its arguments may hold `{port}`, replaced by the port) with only
    /// `PATH`, `HOME` and `env`, and waits until it listens on `127.0.0.1:<port>`; its endpoint
    /// is `path` there.
    pub fn start(
        name: &str,
        command: PeerCommand,
        env: &[(&str, String)],
        path: &str,
    ) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut server = Self {
            name: name.to_string(),
            command,
            env: env
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect(),
            port: free_port()?,
            path: path.to_string(),
            child: None,
            log: dir.path().join("server.log"),
            _dir: dir,
        };
        server.launch()?;
        Ok(server)
    }

    fn launch(&mut self) -> Result<()> {
        let port = self.port.to_string();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut command = Command::new(&self.command.program);
        command
            .args(
                self.command
                    .args
                    .iter()
                    .map(|a| OsString::from(a.to_string_lossy().replace("{port}", &port))),
            )
            .env_clear()
            .current_dir(self._dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // A group of its own, so that killing it kills what it started.
            .process_group(0);
        for key in ["PATH", "HOME"] {
            if let Some(value) = std::env::var_os(key) {
                command.env(key, value);
            }
        }
        for (key, value) in &self.env {
            command.env(key, value.to_string_lossy().replace("{port}", &port));
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {}: {}", self.name, self.command.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_WAIT;
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        loop {
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "{} exited ({status}) before listening on port {}; its log:\n{}",
                    self.name,
                    self.port,
                    self.log()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not listen on port {} within {} s; its log:\n{}",
                    self.name,
                    self.port,
                    START_WAIT.as_secs(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The MCP endpoint, `http://127.0.0.1:<port><path>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}{}", self.port, self.path)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What it wrote (stdout and stderr), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills it (and its process group) with SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the group this child leads; no memory is involved.
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it and starts it again on the same port (a server restart: whatever it kept in
    /// memory, sessions included, is gone).
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.launch()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.kill();
    }
}
