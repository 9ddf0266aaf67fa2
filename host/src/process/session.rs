//! The session of an execution's processes. Every child starts a session of its own
//! (`launch.rs`: `setsid`), and what it starts stays in that session even when it moves to a
//! process group of its own: Codex starts each MCP server in a group of its own, so killing a
//! harness's group alone left what its servers started running. When a child ends, its group
//! is killed at once (`child.rs`) and the rest of its session here: one sweeper thread scans
//! `/proc` once for every session that ended since its last pass, so a burst of thousands of
//! ending executions costs a few scans, not one each.
//!
//! A session id is its leader's process id, and Linux never hands an id out again while any
//! process still uses it as a session id: a session whose leader was reaped still names only
//! the processes that leader started (or that they started).

use std::sync::{Condvar, Mutex, OnceLock};

/// Sessions waiting for the sweeper, and whether its thread runs.
struct Ended {
    sessions: Mutex<Vec<u32>>,
    wake: Condvar,
}

fn ended() -> &'static Ended {
    static ENDED: OnceLock<Ended> = OnceLock::new();
    ENDED.get_or_init(|| {
        std::thread::Builder::new()
            .name("m3-session-sweeper".into())
            .spawn(sweeper)
            .expect("starting the session sweeper thread");
        Ended {
            sessions: Mutex::new(Vec::new()),
            wake: Condvar::new(),
        }
    })
}

/// Hands `session` to the sweeper: every process still in it is sent SIGKILL shortly.
pub fn end(session: u32) {
    let ended = ended();
    ended
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(session);
    ended.wake.notify_one();
}

fn sweeper() {
    let ended = ended();
    loop {
        let sessions = {
            let mut queued = ended.sessions.lock().unwrap_or_else(|e| e.into_inner());
            while queued.is_empty() {
                queued = ended.wake.wait(queued).unwrap_or_else(|e| e.into_inner());
            }
            std::mem::take(&mut *queued)
        };
        kill_members(&sessions);
    }
}

/// Sends SIGKILL to every process in one of `sessions` (but never to this process's own
/// session, nor to session 0 or 1); returns how many were signalled. One scan of `/proc`.
pub fn kill_members(sessions: &[u32]) -> usize {
    // SAFETY: getsid(0) has no preconditions.
    let own = unsafe { libc::getsid(0) };
    let wanted: Vec<u32> = sessions
        .iter()
        .copied()
        .filter(|&s| s > 1 && i64::from(s) != i64::from(own))
        .collect();
    if wanted.is_empty() {
        return 0;
    }
    let mut signalled = 0;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if session_of(pid as u32).is_some_and(|s| wanted.contains(&s)) {
            // SAFETY: kill(2) on a process id; no memory-safety preconditions.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                signalled += 1;
            }
        }
    }
    signalled
}

/// The session of process `pid` (field 6 of `/proc/<pid>/stat`).
pub fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after its end.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_s_own_session_is_never_swept() {
        let own = session_of(std::process::id()).expect("this process's session");
        assert_eq!(kill_members(&[own, 0, 1]), 0);
    }
}
