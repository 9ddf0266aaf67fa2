//! The host's process capability: children get exactly the environment they are given and a
//! private scratch directory, and are killed with their process group and reaped on every exit.

use m3::testing::process::is_running;
use m3::testing::process::{ChildProcess, ProcessError, ProcessEvent, ProcessSpec, ScratchDir};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;
use tokio::sync::mpsc::Receiver;
use tokio::time::timeout;

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");

fn spec(command: &str, args: &[&str], env: &[(&str, &str)]) -> ProcessSpec {
    ProcessSpec {
        command: command.to_string(),
        args: args.iter().map(|a| a.to_string()).collect(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        cwd: None,
    }
}

/// Reads stdout until a whole line arrives (10 s at most).
async fn next_line(events: &mut Receiver<ProcessEvent>, pending: &mut Vec<u8>) -> String {
    loop {
        if let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            return String::from_utf8(line).unwrap().trim_end().to_string();
        }
        match timeout(Duration::from_secs(10), events.recv()).await {
            Ok(Some(ProcessEvent::Stdout(bytes))) => pending.extend(bytes),
            other => panic!("no line from the child: {other:?}"),
        }
    }
}

async fn wait_until_gone(pid: u32) -> bool {
    for _ in 0..500 {
        if !is_running(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn a_child_sees_exactly_the_environment_it_is_given() {
    let scratch = ScratchDir::create("m3-test").unwrap();
    let env = [("ONLY_THIS", "value"), ("LANG", "C")];
    let (mut child, mut events) = ChildProcess::spawn(
        &spec(SHIPPING_SERVER, &["--era", "legacy", "--report-env"], &env),
        &scratch,
    )
    .unwrap();
    let mut pending = Vec::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    child.write_line(&initialize.to_string()).await.unwrap();
    let _ = next_line(&mut events, &mut pending).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "report_env", "arguments": {}}});
    child.write_line(&call.to_string()).await.unwrap();
    let reply: Value = serde_json::from_str(&next_line(&mut events, &mut pending).await).unwrap();
    let text = reply["result"]["content"][0]["text"]
        .as_str()
        .expect("a text result");
    let seen: BTreeMap<String, String> = serde_json::from_str(text).unwrap();
    let expected: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(seen, expected, "nothing of the parent's environment leaks");
    assert!(
        std::env::var_os("PATH").is_some(),
        "the parent does have a PATH"
    );
    child.close_stdin();
    let exited = timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        exited,
        ProcessEvent::Exited(Some(0)),
        "an MCP server ends its session on EOF"
    );
}

/// What the host holds in its own process for a running child (decision 82): the child's stdin
/// and stdout are one socket, its stderr a file in its scratch directory, and the host holds no
/// pidfd for it, nor any descriptor on its scratch directory or stderr file, until it is waited
/// for. Closing stdin still ends the child's input while its output reads on, and what it wrote
/// to stderr is its tail.
#[tokio::test]
async fn a_running_child_costs_the_host_its_stdio_socket_alone() {
    let scratch = ScratchDir::create("m3-test").unwrap();
    let script = "echo to-stderr >&2; cat; echo after-eof";
    let (mut child, mut events) =
        ChildProcess::spawn(&spec("/bin/sh", &["-c", script], &[]), &scratch).unwrap();
    let pid = child.pid();
    let link = |fd: &str| std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
    let (stdin, stdout) = (link("0"), link("1"));
    assert!(stdin.to_string_lossy().starts_with("socket:["), "{stdin:?}");
    assert_eq!(stdin, stdout, "stdin and stdout are one socket");
    assert_eq!(link("2"), scratch.path().join(".m3-stderr"));
    child.write_line("hello").await.unwrap();
    let mut pending = Vec::new();
    assert_eq!(next_line(&mut events, &mut pending).await, "hello");
    // Nothing else of the child's is open in this process.
    let scratch_path = scratch.path().to_string_lossy().into_owned();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Ok(target) = std::fs::read_link(entry.path()) {
            assert!(
                !target.to_string_lossy().starts_with(&scratch_path),
                "the host holds {target:?} open"
            );
        }
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{name}")).unwrap_or_default();
        assert!(
            !info
                .lines()
                .any(|l| l.split_whitespace().eq(["Pid:", &pid.to_string()])),
            "the host holds a pidfd for the running child"
        );
    }
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&child.stderr_tail()).contains("to-stderr") {
        assert!(std::time::Instant::now() < until, "no stderr tail");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.close_stdin();
    assert_eq!(next_line(&mut events, &mut pending).await, "after-eof");
    assert_eq!(child.wait().await.unwrap(), ProcessEvent::Exited(Some(0)));
}

#[tokio::test]
async fn dropping_a_child_kills_its_process_group_and_it_is_reaped() {
    let scratch = ScratchDir::create("m3-test").unwrap();
    let script = "sleep 60 & echo $!; wait";
    let (child, mut events) =
        ChildProcess::spawn(&spec("/bin/sh", &["-c", script], &[]), &scratch).unwrap();
    let mut pending = Vec::new();
    let grandchild: u32 = next_line(&mut events, &mut pending).await.parse().unwrap();
    let pid = child.pid();
    assert!(is_running(pid) && is_running(grandchild));
    drop(child);
    assert!(
        wait_until_gone(pid).await,
        "the child was not killed and reaped"
    );
    assert!(
        wait_until_gone(grandchild).await,
        "the grandchild outlived its execution"
    );
}

/// What a child starts in a process group of its own (as Codex starts each MCP server) is
/// still in the child's session and ends with it, also when the child exited first and nobody
/// holds its pipes.
#[tokio::test]
async fn what_a_child_starts_in_another_group_ends_with_its_session() {
    let scratch = ScratchDir::create("m3-test").unwrap();
    let script = "import os, subprocess\n\
                  d = subprocess.DEVNULL\n\
                  p = subprocess.Popen(['sleep', '60'], process_group=0, stdin=d, stdout=d, stderr=d)\n\
                  print(p.pid, os.getpgid(p.pid), flush=True)\n";
    let path = std::env::var("PATH").unwrap_or_default();
    let (mut child, mut events) = ChildProcess::spawn(
        &spec("python3", &["-c", script], &[("PATH", &path)]),
        &scratch,
    )
    .unwrap();
    let mut pending = Vec::new();
    let line = next_line(&mut events, &mut pending).await;
    let (grandchild, group) = line.split_once(' ').expect("pid and group");
    let (grandchild, group): (u32, u32) = (grandchild.parse().unwrap(), group.parse().unwrap());
    assert_eq!(group, grandchild, "the grandchild leads a group of its own");
    assert_ne!(group, child.pid());
    let exited = timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("the child exits by itself")
        .unwrap();
    assert_eq!(exited, ProcessEvent::Exited(Some(0)));
    assert!(
        is_running(grandchild),
        "still running while the child is held"
    );
    drop(child);
    assert!(
        wait_until_gone(grandchild).await,
        "the grandchild in a group of its own outlived its child's session"
    );
}

#[tokio::test]
async fn kill_ends_the_group_and_reports_the_signal() {
    let scratch = ScratchDir::create("m3-test").unwrap();
    // A child with children of its own: a shell that starts two sleepers (one of them in a
    // subshell) and says their process ids.
    let (mut child, mut events) = ChildProcess::spawn(
        &spec(
            "/bin/sh",
            &[
                "-c",
                "sleep 60 & echo $!; (sleep 60 & echo $!; wait) & wait",
            ],
            &[],
        ),
        &scratch,
    )
    .unwrap();
    let mut pending = Vec::new();
    let grandchildren: Vec<u32> = vec![
        next_line(&mut events, &mut pending).await.parse().unwrap(),
        next_line(&mut events, &mut pending).await.parse().unwrap(),
    ];
    for pid in &grandchildren {
        assert!(is_running(*pid), "{pid} started");
    }
    let exited = timeout(Duration::from_secs(10), child.kill())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exited, ProcessEvent::Exited(None), "killed by a signal");
    assert!(!is_running(child.pid()));
    // The whole group went with it (the signal reaches every member at once; give the kernel a
    // moment to deliver it to the last one).
    for pid in &grandchildren {
        let mut waited = 0;
        while is_running(*pid) && waited < 5_000 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            waited += 10;
        }
        assert!(!is_running(*pid), "grandchild {pid} outlived the kill");
    }
    // Nothing reads the child's stdin any more: the child is reaped and its group gone (a zombie
    // has closed its descriptors; the host closed its copy of the read end when it started the
    // child, and the pipes are close-on-exec for every other child), so a write is EPIPE.
    match child.write_line("x").await {
        Err(ProcessError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}"),
        other => panic!("a write to a killed child: {other:?}"),
    }
}

#[tokio::test]
async fn the_scratch_directory_is_private_the_working_directory_and_removed_after() {
    let scratch = ScratchDir::create("m3-test").unwrap();
    let path = scratch.path().to_path_buf();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o700
    );
    scratch.dir().unwrap().create_dir("work").unwrap();
    scratch
        .dir()
        .unwrap()
        .write("work/config.toml", b"x = 1\n")
        .unwrap();
    let mut in_work = spec("/bin/sh", &["-c", "pwd; cat config.toml"], &[]);
    in_work.cwd = Some("work".into());
    let (_child, mut events) = ChildProcess::spawn(&in_work, &scratch).unwrap();
    let mut pending = Vec::new();
    assert_eq!(
        next_line(&mut events, &mut pending).await,
        path.join("work").display().to_string()
    );
    assert_eq!(next_line(&mut events, &mut pending).await, "x = 1");
    // The capability cannot reach outside the scratch directory.
    assert!(scratch.dir().unwrap().write("../escape", b"no").is_err());
    for escape in ["../", "work/../.."] {
        let mut outside = spec("/bin/true", &[], &[]);
        outside.cwd = Some(escape.into());
        assert!(
            matches!(
                ChildProcess::spawn(&outside, &scratch),
                Err(ProcessError::InvalidCwd)
            ),
            "{escape}"
        );
    }
    // An absolute directory (resolved at submission) is used as it is.
    let elsewhere = tempfile::tempdir().unwrap();
    let mut absolute = spec("/bin/sh", &["-c", "pwd"], &[]);
    absolute.cwd = Some(elsewhere.path().to_path_buf());
    let (_child, mut events) = ChildProcess::spawn(&absolute, &scratch).unwrap();
    let mut pending = Vec::new();
    assert_eq!(
        next_line(&mut events, &mut pending).await,
        elsewhere.path().display().to_string()
    );
    drop(scratch);
    assert!(!path.exists());
}

#[tokio::test]
async fn programs_are_looked_up_in_the_given_path_only() {
    let scratch = ScratchDir::create("m3-test").unwrap();
    let no_path = ChildProcess::spawn(&spec("sh", &["-c", "true"], &[]), &scratch);
    assert!(matches!(no_path, Err(ProcessError::NotFound(_))));
    let (mut child, _events) = ChildProcess::spawn(
        &spec("sh", &["-c", "exit 3"], &[("PATH", "/usr/bin:/bin")]),
        &scratch,
    )
    .unwrap();
    assert_eq!(child.wait().await.unwrap(), ProcessEvent::Exited(Some(3)));
}

/// Reads everything the child writes to stdout until it closes (10 s at most).
async fn all_output(events: &mut Receiver<ProcessEvent>) -> String {
    let mut output = Vec::new();
    loop {
        match timeout(Duration::from_secs(10), events.recv()).await {
            Ok(Some(ProcessEvent::Stdout(bytes))) => output.extend(bytes),
            Ok(Some(ProcessEvent::StdoutClosed)) | Ok(None) => break,
            other => panic!("the child's output did not end: {other:?}"),
        }
    }
    String::from_utf8(output).unwrap()
}

/// A child starts in a clean state although the host ignores SIGPIPE and has tokio's signal
/// handlers installed: nothing blocked, SIGPIPE at its default, and it leads a process group of
/// its own.
#[tokio::test]
async fn a_child_starts_with_default_signals_in_a_group_of_its_own() {
    let scratch = ScratchDir::create("m3-test").unwrap();
    let (mut child, mut events) =
        ChildProcess::spawn(&spec("/bin/cat", &["/proc/self/status"], &[]), &scratch).unwrap();
    let status = all_output(&mut events).await;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {name} in {status}"))
            .to_string()
    };
    assert_eq!(field("SigBlk:"), "0000000000000000", "blocked signals");
    // Ignored: nothing the host did not ignore itself (an ignored signal is inherited, as with
    // `std::process::Command`), and not SIGPIPE, which Rust ignores in every program.
    let mask = |hex: &str| u64::from_str_radix(hex, 16).unwrap();
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let host_ignores = mask(
        own.lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .unwrap()
            .trim(),
    );
    let sigpipe = 1u64 << (13 - 1);
    assert_ne!(host_ignores & sigpipe, 0, "the test host ignores SIGPIPE");
    let ignored = mask(&field("SigIgn:"));
    assert_eq!(ignored & sigpipe, 0, "SIGPIPE is back to its default");
    assert_eq!(ignored & !host_ignores, 0, "ignored signals {ignored:x}");
    assert_eq!(field("Pid:"), child.pid().to_string());
    assert_eq!(child.wait().await.unwrap(), ProcessEvent::Exited(Some(0)));

    let (mut child, mut events) =
        ChildProcess::spawn(&spec("/bin/cat", &["/proc/self/stat"], &[]), &scratch).unwrap();
    let stat = all_output(&mut events).await;
    // Field 5 (after the name in parentheses): the process group.
    let group: u32 = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(group, child.pid(), "the child leads its own process group");
    assert_eq!(child.wait().await.unwrap(), ProcessEvent::Exited(Some(0)));
}

/// The parent-death signal: a child whose launching thread ends (as when the host is killed)
/// is killed at once, even when nothing else would end it.
#[test]
fn a_child_dies_with_the_thread_that_started_it() {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let scratch = ScratchDir::create("m3-test").unwrap();
            // Ignores the signals a polite stop would send, and never reads its stdin.
            let (child, events) = ChildProcess::spawn(
                &spec(
                    "/bin/sh",
                    &["-c", "trap '' HUP INT TERM; exec sleep 60"],
                    &[],
                ),
                &scratch,
            )
            .unwrap();
            sender.send(child.pid()).unwrap();
            // Neither killed nor reaped by the host: only the death signal can end it.
            std::mem::forget(child);
            std::mem::forget(events);
            std::mem::forget(scratch);
        });
    })
    .join()
    .unwrap();
    let pid = receiver.recv().unwrap();
    let mut waited = Duration::ZERO;
    while is_running(pid) && waited < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
        waited += Duration::from_millis(10);
    }
    assert!(
        !is_running(pid),
        "the child outlived the thread that started it"
    );
}

/// A program that cannot be run is a typed error, not a child.
#[tokio::test]
async fn a_program_that_cannot_be_run_is_an_error() {
    let scratch = ScratchDir::create("m3-test").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let not_executable = dir.path().join("server");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&not_executable, std::fs::Permissions::from_mode(0o644)).unwrap();
    match ChildProcess::spawn(&spec(not_executable.to_str().unwrap(), &[], &[]), &scratch) {
        Err(ProcessError::Io(e)) => {
            assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}")
        }
        other => panic!("expected a permission error, got {other:?}"),
    }
    let missing = dir.path().join("missing");
    assert!(matches!(
        ChildProcess::spawn(&spec(missing.to_str().unwrap(), &[], &[]), &scratch),
        Err(ProcessError::NotFound(_))
    ));
    let mut elsewhere = spec("/bin/true", &[], &[]);
    elsewhere.cwd = Some(dir.path().join("no-such-directory"));
    assert!(ChildProcess::spawn(&elsewhere, &scratch).is_err());
}

/// A child that closes its stdin but keeps running with its stdout open (the same socket, so a
/// write never meets `EPIPE`): the host's writes fill the socket and then, taking no byte for
/// the stall limit, fail with `StdinStalled` instead of waiting for ever; the child is still
/// running, so it was the stall and not its end.
#[tokio::test]
async fn a_write_to_a_child_that_reads_nothing_fails_once_it_stalls() {
    let scratch = ScratchDir::create("m3-test").unwrap();
    let (mut child, mut events) = ChildProcess::spawn(
        &spec(
            "/bin/sh",
            &["-c", "exec 0<&-; echo closed; exec sleep 60"],
            &[],
        ),
        &scratch,
    )
    .unwrap();
    let mut pending = Vec::new();
    assert_eq!(next_line(&mut events, &mut pending).await, "closed");
    let limit = Duration::from_millis(300);
    child.set_stall_limit(limit);
    let line = "x".repeat(64 * 1024);
    let mut accepted = 0usize;
    let failure = loop {
        match timeout(Duration::from_secs(20), child.write_line(&line))
            .await
            .expect("a stalled write ends by itself")
        {
            Ok(()) => accepted += line.len() + 1,
            Err(e) => break e,
        }
        assert!(accepted < 64 * 1024 * 1024, "the socket never filled");
    };
    assert!(
        matches!(failure, ProcessError::StdinStalled(l) if l == limit),
        "{failure:?}"
    );
    assert!(accepted > 0, "the socket's buffer took the first lines");
    assert!(is_running(child.pid()), "the child still runs");
}

/// A slow reader is not a stalled one: a child that takes its input a piece at a time, with
/// pauses shorter than the stall limit, gets a line that takes longer than the limit to write,
/// whole.
#[tokio::test]
async fn a_slow_reader_gets_a_long_line_whole() {
    let scratch = ScratchDir::create("m3-test").unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let script = "import sys, time\n\
                  total = 0\n\
                  while True:\n\
                  \x20   chunk = sys.stdin.buffer.read1(256 * 1024)\n\
                  \x20   if not chunk: break\n\
                  \x20   total += len(chunk)\n\
                  \x20   if chunk.endswith(b'\\n'): break\n\
                  \x20   time.sleep(0.25)\n\
                  print(total, flush=True)\n";
    let (mut child, mut events) = ChildProcess::spawn(
        &spec("python3", &["-c", script], &[("PATH", &path)]),
        &scratch,
    )
    .unwrap();
    let limit = Duration::from_millis(1_500);
    child.set_stall_limit(limit);
    let line = "y".repeat(4 * 1024 * 1024);
    let started = std::time::Instant::now();
    timeout(Duration::from_secs(60), child.write_line(&line))
        .await
        .expect("the write ends")
        .expect("a slow reader's line is written whole");
    let mut pending = Vec::new();
    assert_eq!(
        next_line(&mut events, &mut pending).await,
        (line.len() + 1).to_string(),
        "the child read the whole line"
    );
    // The child's pauses alone (a quarter of a second after each 256 KiB it reads, and the write
    // ends only once all but the socket's buffer is read) make the write outlast the limit: the
    // limit bounds a pause, not the write.
    assert!(started.elapsed() > limit, "{:?}", started.elapsed());
}
