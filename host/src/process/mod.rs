//! Child processes (agent harnesses and MCP servers) for the execution runtime: each gets exactly
//! the environment it is given, a private scratch directory handed out as a capability, and is
//! killed (with its whole process group and session, `session.rs`) and reaped on every exit
//! path. Programs and working
//! directories are resolved once, at submission (`resolve.rs`).
//!
//! The host frames nothing: a child's stdout arrives as byte chunks, and the component's MCP
//! client does the line framing. Protocol knowledge stays in the component.
//!
//! # Files
//!
//! The process capability behind the `process` import (`mod.rs`: the module's rules). `child.rs`
//! starts a child on tokio with exactly the given environment, in its own session and process
//! group, in the working directory resolved at submission (or the scratch directory), stdout as
//! unframed byte chunks, a bounded stderr tail that is never logged; an exited child is seen
//! without being reaped (`waitid` with `WNOWAIT`), so kill and drop still take the whole group down
//! after the child itself exited, and it is reaped (through a pidfd opened when it is waited
//! for) only then. A running child costs the host one descriptor: the Unix socket that is its
//! stdin and stdout.
//!
//! - `session.rs`: what a child starts in a group of its own (Codex starts each MCP server so)
//!   stays in its session; when a child ends, one sweeper thread kills the rest of every session
//!   ended since its last pass with one scan of `/proc`, and recovery does the same for a dead
//!   worker's recorded session. `launch.rs` starts the child without copying the host: `clone` with
//!   `CLONE_VM | CLONE_VFORK` (as `posix_spawn` does), and in the child, before `execve`, only
//!   async-signal-safe calls on data prepared before the clone (signals with a handler and SIGPIPE
//!   back to their default, none blocked, a new session and process group, the parent-death signal,
//!   the working directory, the stdio socket and the stderr file); a failure before `execve`
//!   comes back as its `errno`
//!   through a close-on-exec pipe. `resolve.rs` resolves a submission's programs and working
//!   directories once, when it is submitted, as a subprocess API does: absolute as given, relative
//!   against the caller's working directory, a bare name in the `PATH` of the child's environment
//!   or, if that has none, the host's; a missing one is a `ModelValidationError`. `scratch.rs`
//!   hands out a private (0700) scratch directory as a cap-std `Dir`, opened when the host
//!   writes and checked to be the directory created; the host writes inside it only through
//!   that capability; removed on drop. `stderr_log.rs`: a child's stderr goes to a file in its
//!   scratch directory, read back only if it is still the file created, its disk bounded by one
//!   trimmer thread that frees all but the tail of a log grown too large.
//! - `home.rs`: a child's private home inside it (Codex's `CODEX_HOME`; Claude Code's
//!   `CLAUDE_CONFIG_DIR`, `HOME` and `CLAUDE_CODE_TMPDIR`): the copied sign-in and the server's
//!   environment (Codex's `config.toml` table, or Claude Code's `mcp.json` whose server `env`
//!   also empties what the server must not inherit), each written owner-only (0600) through the
//!   home's capability.

pub mod child;
pub mod home;
pub(crate) mod launch;
pub mod resolve;
pub mod scratch;
pub(crate) mod session;
pub(crate) mod stderr_log;

pub use child::{ChildProcess, ProcessError, ProcessEvent, ProcessSpec};
pub use scratch::ScratchDir;
