//! One child process on tokio, with exactly the environment it is given.

use super::scratch::ScratchDir;
use super::stderr_log::StderrLog;
use std::collections::BTreeMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;

/// How to start a child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSpec {
    /// The program: a path, or a name looked up in the `PATH` of `env` (not of the host).
    pub command: String,
    /// Arguments.
    pub args: Vec<String>,
    /// The whole environment of the child: nothing of the host's environment is inherited.
    pub env: BTreeMap<String, String>,
    /// Working directory: an absolute path (resolved when the execution was submitted), a
    /// relative path inside the scratch directory, or `None` for the scratch directory.
    pub cwd: Option<PathBuf>,
}

/// What a child did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    /// Bytes the child wrote to stdout (not framed).
    Stdout(Vec<u8>),
    /// The child's stdout closed.
    StdoutClosed,
    /// The child exited (`None`: killed by a signal).
    Exited(Option<i32>),
}

/// Why a child could not be started or written to.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program was not found (in the given environment's `PATH`).
    #[error("program not found: {0}")]
    NotFound(String),
    /// The working directory is neither absolute nor a plain relative path inside the scratch
    /// directory.
    #[error("the working directory must be absolute or a plain path inside the scratch directory")]
    InvalidCwd,
    /// The operating system refused.
    #[error("process I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// The child's stdin is closed.
    #[error("the child's stdin is closed")]
    StdinClosed,
    /// The child took none of a line written to it for `STDIN_STALL_LIMIT`: it stopped
    /// reading its input (or closed it while its stdout, the same socket, stays open).
    #[error("the child has read none of its input for {0:?}")]
    StdinStalled(std::time::Duration),
}

/// A running child. Dropping it kills its whole process group; it is reaped in the background.
///
/// An exited child is left unreaped (a zombie) until the value is dropped: its id, which is
/// also its process group's, stays reserved, so the group can still be signalled safely once
/// the child itself has exited, and what it started (a daemonised helper with its own stdio
/// included) ends with it.
///
/// While it runs the host holds one descriptor for it: the socket that is its stdin and stdout.
/// Its stderr goes to a file (`stderr_log.rs`), and its exit is watched through a pidfd opened
/// only when it is waited for.
#[derive(Debug)]
pub struct ChildProcess {
    /// The host's writing half of the child's stdio socket (shut down for writing when closed).
    stdin: Option<OwnedWriteHalf>,
    /// How long a write may make no progress ([`STDIN_STALL_LIMIT`] unless a test shortens it).
    stall_limit: std::time::Duration,
    pid: u32,
    /// Readable once the child has exited: opened at the first wait (taken by the background
    /// reaper on drop).
    pidfd: Option<AsyncFd<OwnedFd>>,
    /// How it exited, once it has (`None` inside: killed by a signal). Seen without reaping:
    /// the zombie keeps the group's id reserved until `drop` signals the group and reaps it.
    exit: Option<Option<i32>>,
    /// Where its stderr goes.
    stderr: StderrLog,
}

pub use super::stderr_log::STDERR_TAIL_BYTES;

/// How often a child waited for without a pidfd is looked at.
const EXIT_LOOK: std::time::Duration = std::time::Duration::from_millis(20);

/// How long a write to a child's stdin may make no progress before it fails: its socket's buffer
/// is full and the child reads nothing (a server that stopped reading, or closed its stdin but not
/// its stdout, which is the same socket and so never gives `EPIPE`).
pub const STDIN_STALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The largest stdout chunk read at once.
pub const STDOUT_CHUNK_BYTES: usize = 64 * 1024;

/// How many stdout chunks wait for the execution to read them (at most 1 MiB); past that the
/// child's writes block on its socket.
pub const STDOUT_CHUNKS_BUFFERED: usize = 16;

fn resolve(command: &str, env: &BTreeMap<String, String>) -> Result<PathBuf, ProcessError> {
    if command.contains('/') {
        return Ok(PathBuf::from(command));
    }
    let path = env.get("PATH").map(String::as_str).unwrap_or("");
    std::env::split_paths(path)
        .map(|dir| dir.join(command))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| ProcessError::NotFound(command.to_string()))
}

impl ChildProcess {
    /// Starts `spec` in `scratch`; its events arrive on the returned receiver.
    pub fn spawn(
        spec: &ProcessSpec,
        scratch: &ScratchDir,
    ) -> Result<(Self, mpsc::Receiver<ProcessEvent>), ProcessError> {
        let cwd = match &spec.cwd {
            None => scratch.path().to_path_buf(),
            Some(absolute) if absolute.is_absolute() => absolute.clone(),
            Some(relative) => {
                let inside = relative
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
                if !inside {
                    return Err(ProcessError::InvalidCwd);
                }
                scratch.path().join(relative)
            }
        };
        let program = resolve(&spec.command, &spec.env)?;
        let (stderr, stderr_fd) = StderrLog::create(scratch)?;
        // Started without copying this process (`launch.rs`): a fork would copy the page
        // tables of every parked execution's instance, once per server started.
        let launched = super::launch::launch(&program, &spec.args, &spec.env, &cwd, stderr_fd)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    ProcessError::NotFound(program.display().to_string())
                }
                _ => ProcessError::Io(e),
            })?;
        let pid = launched.pid;
        // From here the child runs: whatever fails below drops it, which kills and reaps it.
        let mut child = Self {
            stdin: None,
            stall_limit: STDIN_STALL_LIMIT,
            pid,
            pidfd: None,
            exit: None,
            stderr,
        };
        let stdio = std::os::unix::net::UnixStream::from(launched.stdio);
        stdio.set_nonblocking(true)?;
        let (mut stdout, stdin) = tokio::net::UnixStream::from_std(stdio)?.into_split();
        child.stdin = Some(stdin);
        // Bounded: a child that writes faster than its execution reads is held back by its
        // socket, so a flooding server cannot grow this process's memory.
        let (events, receiver) = mpsc::channel(STDOUT_CHUNKS_BUFFERED);
        {
            let events = events.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; STDOUT_CHUNK_BYTES];
                loop {
                    match stdout.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if events
                                .send(ProcessEvent::Stdout(buffer[..n].to_vec()))
                                .await
                                .is_err()
                            {
                                break;
                            }
                        }
                    }
                }
                let _ = events.send(ProcessEvent::StdoutClosed).await;
            });
        }
        Ok((child, receiver))
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Writes one line (a newline is appended) to the child's stdin. A child that takes none of
    /// it for the stall limit fails the write with [`ProcessError::StdinStalled`] (a slow reader
    /// that keeps taking bytes is waited for).
    pub async fn write_line(&mut self, line: &str) -> Result<(), ProcessError> {
        let limit = self.stall_limit;
        let stdin = self.stdin.as_mut().ok_or(ProcessError::StdinClosed)?;
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        let mut written = 0;
        while written < bytes.len() {
            match tokio::time::timeout(limit, stdin.write(&bytes[written..])).await {
                Ok(Ok(0)) => return Err(ProcessError::StdinClosed),
                Ok(Ok(n)) => written += n,
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => return Err(ProcessError::StdinStalled(limit)),
            }
        }
        stdin.flush().await?;
        Ok(())
    }

    /// Shortens the stall limit of [`ChildProcess::write_line`] (tests of a child that stopped
    /// reading).
    #[cfg(any(test, feature = "internals"))]
    pub fn set_stall_limit(&mut self, limit: std::time::Duration) {
        self.stall_limit = limit;
    }

    /// Closes the child's stdin (an MCP server ends its session on EOF): the socket is shut
    /// down for writing, its stdout still reads.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the child to exit (it is reaped when dropped).
    pub async fn wait(&mut self) -> Result<ProcessEvent, ProcessError> {
        Ok(ProcessEvent::Exited(self.reaped().await?))
    }

    /// Waits for the child to exit, leaving it unreaped: its exit code (`None`: a signal
    /// ended it).
    async fn reaped(&mut self) -> Result<Option<i32>, ProcessError> {
        if let Some(exit) = self.exit {
            return Ok(exit);
        }
        // No descriptor is spent on a child until it is waited for.
        if self.pidfd.is_none()
            && exit_status(self.pid)?.is_none()
            && let Ok(pidfd) = watch(self.pid)
        {
            self.pidfd = Some(pidfd);
        }
        let exit = match self.pidfd.as_ref() {
            Some(pidfd) => exited(pidfd, self.pid).await?,
            // Exited already, or no pidfd could be opened (no descriptor left): looked at
            // until it has exited, so its exit is still reported exactly.
            None => loop {
                if let Some(exit) = exit_status(self.pid)? {
                    break exit;
                }
                tokio::time::sleep(EXIT_LOOK).await;
            },
        };
        self.exit = Some(exit);
        Ok(exit)
    }

    /// Kills the child's whole process group and waits for the child to exit.
    pub async fn kill(&mut self) -> Result<ProcessEvent, ProcessError> {
        self.signal_group();
        self.wait().await
    }

    /// The last [`STDERR_TAIL_BYTES`] the child wrote to stderr (diagnostics; may hold anything
    /// the child printed, so never logged by the host). Empty if the child removed or replaced
    /// its stderr file.
    pub fn stderr_tail(&self) -> Vec<u8> {
        self.stderr.tail(STDERR_TAIL_BYTES)
    }

    /// SIGKILL to the child's process group at once, and to the rest of its session (what it
    /// started in groups of their own) by the sweeper (`session.rs`). Safe whether or not the
    /// child has exited: it is reaped only after this, in `drop`, so its id cannot name
    /// another group yet.
    fn signal_group(&self) {
        if let Ok(pgid) = i32::try_from(self.pid)
            && pgid > 0
        {
            // SAFETY: kill(2) with a negative pid signals the process group this host created
            // for the child (`launch.rs`: its own session and group); it has no memory-safety
            // preconditions.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
            super::session::end(self.pid);
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // Take the whole group down, also when the child itself has exited: what it started
        // may live on in its group. (Linux never hands out an id that a live group still
        // uses, and the child, unreaped until below, keeps its id.)
        self.signal_group();
        if self.exit.is_some() {
            // A zombie already: reaping it cannot block.
            let _ = try_reap(self.pid);
            return;
        }
        // Reaped in the background: on this runtime once its pidfd says it exited, or on a
        // thread of its own when there is no runtime (or the runtime cannot watch it).
        let pid = self.pid;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            std::thread::spawn(move || reap_blocking(pid));
            return;
        };
        let pidfd = self.pidfd.take();
        runtime.spawn(async move {
            let pidfd = match pidfd {
                Some(pidfd) => Ok(pidfd),
                None => watch(pid),
            };
            let reaped = match pidfd {
                Ok(pidfd) => reap_when_exited(&pidfd, pid).await.is_ok(),
                Err(_) => false,
            };
            if !reaped {
                tokio::task::spawn_blocking(move || reap_blocking(pid));
            }
        });
    }
}

/// A pidfd for child `pid`, registered with the runtime: readable once the child has exited.
/// The child is this process's and unreaped, so its id cannot name another process yet.
fn watch(pid: u32) -> Result<AsyncFd<OwnedFd>, ProcessError> {
    // SAFETY: pidfd_open(2) with no flags; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(ProcessError::Io(std::io::Error::last_os_error()));
    }
    // SAFETY: the kernel just created this descriptor and nobody else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    // SAFETY: an `OwnedFd` stays open and names the same pidfd until the `AsyncFd` drops it.
    let registered = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
    registered.map_err(|e| ProcessError::Io(std::io::Error::from(e)))
}

/// Waits until `pidfd` (child `pid`'s) says the child exited, without reaping it: its exit
/// code (`None`: a signal ended it).
async fn exited(pidfd: &AsyncFd<OwnedFd>, pid: u32) -> Result<Option<i32>, ProcessError> {
    once_exited(pidfd, pid, exit_status).await
}

/// Waits until `pidfd` says the child exited and `look` (the exit seen, or reaped) agrees.
async fn once_exited(
    pidfd: &AsyncFd<OwnedFd>,
    pid: u32,
    look: fn(u32) -> Result<Option<Option<i32>>, ProcessError>,
) -> Result<Option<i32>, ProcessError> {
    loop {
        let mut ready = pidfd.readable().await?;
        if let Some(exit) = look(pid)? {
            return Ok(exit);
        }
        ready.clear_ready();
    }
}

/// Child `pid`'s exit, if it has exited, seen without reaping it (`WNOWAIT`): `Some(exit
/// code)` (`Some(None)`: a signal ended it).
fn exit_status(pid: u32) -> Result<Option<Option<i32>>, ProcessError> {
    // SAFETY: an all-zero siginfo_t is a valid value; waitid(2) with WNOHANG | WNOWAIT on a
    // child of this process only writes into it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    // SAFETY: as above; `info` outlives the call.
    if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) } == -1 {
        return Err(ProcessError::Io(std::io::Error::last_os_error()));
    }
    // SAFETY: waitid filled `info` for a child state change (or left si_pid 0 for none).
    let (child, status) = unsafe { (info.si_pid(), info.si_status()) };
    if child == 0 {
        return Ok(None);
    }
    Ok(Some((info.si_code == libc::CLD_EXITED).then_some(status)))
}

/// Waits until `pidfd` (child `pid`'s) says the child exited, then reaps it: its exit code
/// (`None`: a signal ended it).
async fn reap_when_exited(pidfd: &AsyncFd<OwnedFd>, pid: u32) -> Result<Option<i32>, ProcessError> {
    once_exited(pidfd, pid, try_reap).await
}

/// Reaps child `pid` if it has exited: `Some(exit code)` (`Some(None)`: a signal ended it).
fn try_reap(pid: u32) -> Result<Option<Option<i32>>, ProcessError> {
    let mut status = 0;
    // SAFETY: waitpid(2) with WNOHANG on a child of this process, writing its status.
    let reaped = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
    match reaped {
        0 => Ok(None),
        -1 => Err(ProcessError::Io(std::io::Error::last_os_error())),
        _ if libc::WIFEXITED(status) => Ok(Some(Some(libc::WEXITSTATUS(status)))),
        _ => Ok(Some(None)),
    }
}

/// Waits for child `pid` to exit, and reaps it.
fn reap_blocking(pid: u32) {
    let mut status = 0;
    // SAFETY: waitpid(2) on a child of this process, writing its status.
    while unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) } == -1
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
}

/// When process `pid` started, in clock ticks since boot (field 22 of `/proc/<pid>/stat`):
/// with the id, it names one process for good (an id is reused, a start time is not).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after its end.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Ends what a dead worker left behind: its child's process group and session, if they are
/// still the ones it started (its leader's start time matches, or the leader is gone and only
/// members remain, whose id Linux does not hand out while they live), and its scratch
/// directory, if it is plainly one of this user's m3 scratch directories (under whatever
/// temporary directory the dead worker had: `scratch::remove_left_behind`). Returns whether a
/// group was signalled.
pub fn end_left_behind(process_group: u32, started_at: u64, scratch: &Path) -> bool {
    let mut signalled = false;
    if let Ok(pgid) = i32::try_from(process_group)
        && pgid > 1
    {
        let same = match start_ticks(process_group) {
            Some(ticks) => ticks == started_at,
            // The leader is gone: whatever still runs in its group is what it started.
            None => true,
        };
        if same {
            // SAFETY: kill(2) on a process group id; no memory-safety preconditions.
            signalled = unsafe { libc::kill(-pgid, libc::SIGKILL) } == 0;
            // And what it started in groups of their own (its session, `session.rs`).
            signalled |= super::session::kill_members(&[process_group]) > 0;
        }
    }
    super::scratch::remove_left_behind(scratch);
    signalled
}

/// Whether a process id is alive and not a zombie (Linux `/proc`).
pub fn is_running(pid: u32) -> bool {
    let status = Path::new("/proc").join(pid.to_string()).join("status");
    std::fs::read_to_string(status).is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("State:"))
            .is_some_and(|l| !l.contains('Z') && !l.contains('X'))
    })
}
