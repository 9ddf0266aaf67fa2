//! Launching a child without copying the host: `clone(2)` with `CLONE_VM | CLONE_VFORK`, as
//! `posix_spawn` does, plus what `posix_spawn` cannot do: the parent-death signal.
//!
//! A `fork` copies the host's page tables (hundreds of MiB of them with thousands of parked
//! executions, each with its component instance) only for `exec` to throw them away, and holds
//! the host's memory map locked meanwhile: at 2,000 parked executions on 2 cores, starting
//! servers took most of the CPU and leases expired. Here the child borrows the host's memory
//! and stack space until it calls `execve` (or fails), while the calling thread waits; it runs
//! only async-signal-safe calls on data prepared before the clone.
//!
//! In the child, before `execve`: signals that had a handler, and `SIGPIPE`, go back to their
//! default, and none is blocked (as `std::process::Command` leaves them); it leads a new session
//! (and so a new process group); it gets `SIGKILL` when the thread that launched it ends (this process killed
//! included), and gives up if that already happened; it moves to its working directory; its
//! stdin and stdout are one end of a socket pair (the host keeps the other: one descriptor per
//! child, issue 43) and its stderr the file it is given. A failure before `execve` is reported
//! back (its `errno`) through a close-on-exec pipe.
//!
//! No pidfd is kept: the host watches a child's exit only once its output has ended, and opens a
//! pidfd then (`child.rs`); the child, unreaped until the host reaps it, keeps its id meanwhile.

use std::collections::BTreeMap;
use std::ffi::{CString, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The stack the child runs on until `execve` (it calls a handful of system calls only).
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// A launched child: its id, and the host's end of the socket that is its stdin and stdout.
#[derive(Debug)]
pub(crate) struct Launched {
    /// The child's process id (also its process group and session id).
    pub pid: u32,
    /// The host's end of the child's stdin and stdout (a Unix stream socket, close-on-exec).
    pub stdio: OwnedFd,
}

/// What the child reads, prepared before the clone (the child allocates nothing).
struct ChildPlan {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// The child's stdin, stdout and stderr (all above 2; stdin and stdout the same socket).
    stdio: [RawFd; 3],
    /// The write end of the error pipe (close-on-exec).
    report: RawFd,
    /// The launching process, to find out whether it died before the death signal was set.
    parent: libc::pid_t,
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a program, argument, variable or directory holds a NUL byte",
        )
    })
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2(2) writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A close-on-exec Unix stream socket pair: (host's end, child's end).
fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: socketpair(2) writes two descriptors into the array it is given.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if made == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `fd` moved above the standard descriptors (a host started with one of them closed hands out
/// 0, 1 or 2 for new descriptors, which the child's `dup2`s would overwrite).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl(2) F_DUPFD_CLOEXEC on a descriptor this function owns.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if moved == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `moved` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// Launches `program` (a path) with `args`, exactly the environment `env`, in `cwd`, with
/// `stderr` (closed here once the child has it) as its stderr.
pub(crate) fn launch(
    program: &Path,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
    stderr: OwnedFd,
) -> io::Result<Launched> {
    let program_c = c_string(program.as_os_str().as_bytes())?;
    let mut argv_c = vec![program_c.clone()];
    for arg in args {
        argv_c.push(c_string(arg.as_bytes())?);
    }
    let mut envp_c = Vec::with_capacity(env.len());
    for (key, value) in env {
        if key.is_empty() || key.contains('=') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an environment variable's name is empty or holds '='",
            ));
        }
        envp_c.push(c_string(format!("{key}={value}").as_bytes())?);
    }
    let cwd_c = c_string(cwd.as_os_str().as_bytes())?;
    let argv: Vec<*const libc::c_char> = argv_c
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = envp_c
        .iter()
        .map(|e| e.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();

    let (host_end, child_end) = socket_pair()?;
    let (report_read, report_write) = pipe()?;
    let child_ends = [above_stdio(child_end)?, above_stdio(stderr)?];
    let plan = ChildPlan {
        program: program_c.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cwd_c.as_ptr(),
        stdio: [
            child_ends[0].as_raw_fd(),
            child_ends[0].as_raw_fd(),
            child_ends[1].as_raw_fd(),
        ],
        report: report_write.as_raw_fd(),
        // SAFETY: getpid(2) has no preconditions.
        parent: unsafe { libc::getpid() },
    };
    let mut stack = vec![0u8; CHILD_STACK_BYTES];
    // The stack grows down from its end, 16-byte aligned.
    let top = {
        let end = stack.as_mut_ptr() as usize + stack.len();
        (end & !15) as *mut c_void
    };

    // Every signal is blocked across the clone, so that none runs one of this process's
    // handlers in the child (which shares this process's memory until `execve`).
    // SAFETY: sigset_t is plain data; sigfillset and pthread_sigmask write the sets given.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut previous: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
    }
    // SAFETY: `child_main` runs on `stack` (alive until the clone returns: CLONE_VFORK holds
    // this thread until the child has called `execve` or exited) and reads `plan` and the
    // strings it points to, which live until the end of this function.
    let pid = unsafe {
        libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &plan as *const ChildPlan as *mut c_void,
        )
    };
    let clone_error = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
    }
    drop(child_ends);
    drop(report_write);
    if pid == -1 {
        return Err(clone_error);
    }

    // Empty: `execve` closed the child's end. Four bytes: the child's errno, and it exited.
    let mut errno = [0u8; 4];
    let mut read = 0;
    while read < errno.len() {
        // SAFETY: read(2) into the rest of a buffer this function owns.
        let n = unsafe {
            libc::read(
                report_read.as_raw_fd(),
                errno[read..].as_mut_ptr() as *mut c_void,
                errno.len() - read,
            )
        };
        match n {
            0 => break,
            n if n > 0 => read += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    break;
                }
            }
        }
    }
    if read == errno.len() {
        // The child exited without running the program: reap it here and now.
        let mut status = 0;
        // SAFETY: waitpid(2) on the child this function created, which has exited.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)));
    }
    Ok(Launched {
        pid: pid as u32,
        stdio: host_end,
    })
}

/// The child, between the clone and `execve`: async-signal-safe calls only, on prepared data.
extern "C" fn child_main(plan: *mut c_void) -> c_int {
    // SAFETY: `plan` points to the launcher's `ChildPlan`, alive while the launcher waits for
    // this child to call `execve` or exit. Every call below is async-signal-safe and its
    // arguments are valid for it; nothing allocates.
    unsafe {
        let plan = &*(plan as *const ChildPlan);
        // Handlers are this process's code: a signal now would run one in the child. Back to
        // the defaults (SIGPIPE too: Rust ignores it in the host), then unblock everything.
        for signal in 1..=libc::SIGRTMAX() {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) != 0 {
                continue;
            }
            let handled =
                current.sa_sigaction != libc::SIG_DFL && current.sa_sigaction != libc::SIG_IGN;
            if handled || signal == libc::SIGPIPE {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // A session of its own (and so a process group of its own): what it starts stays in
        // the session even if it moves to another group (`session.rs`).
        if libc::setsid() == -1 {
            fail(plan.report);
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) == -1 {
            fail(plan.report);
        }
        // The launcher died before the death signal was set: nobody would ever kill this.
        if libc::getppid() != plan.parent {
            libc::_exit(127);
        }
        if libc::chdir(plan.cwd) == -1 {
            fail(plan.report);
        }
        for (target, fd) in plan.stdio.iter().enumerate() {
            if libc::dup2(*fd, target as c_int) == -1 {
                fail(plan.report);
            }
        }
        libc::execve(plan.program, plan.argv, plan.envp);
        fail(plan.report)
    }
}

/// Reports the current `errno` to the launcher and exits the child.
///
/// # Safety
/// Only in the child, with `report` the error pipe's write end.
unsafe fn fail(report: RawFd) -> ! {
    // SAFETY: the caller is the child; __errno_location, write(2) and _exit(2) are
    // async-signal-safe.
    unsafe {
        let errno = (*libc::__errno_location()).to_ne_bytes();
        libc::write(report, errno.as_ptr() as *const c_void, errno.len());
        libc::_exit(127)
    }
}
