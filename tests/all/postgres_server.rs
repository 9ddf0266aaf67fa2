//! The throwaway PostgreSQL server of the tests (`support/postgres_server.rs`): fresh databases
//! of their own, an unprivileged server on a private socket with `fsync` on, a restart that keeps
//! the data, and a server stopped and removed when the process that started it is killed.

use m3_tests::postgres_server::{OWNER_LINE, PostgresServer};
use m3_tests::process_is_running;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The helper binary whose `own-postgres` mode is the owner process that
/// [`the_sentinel_stops_the_server_when_its_owner_is_killed`] kills.
const HELPER: &str = env!("CARGO_BIN_EXE_m3-test-helper");

/// The uid fields (real, effective, saved, filesystem) of process `pid`.
fn uids(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    let line = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .expect("a Uid line");
    line.split_whitespace()
        .skip(1)
        .map(|n| n.parse().expect("a uid"))
        .collect()
}

/// Waits up to `limit` for `done`, returning whether it happened.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

#[test]
fn fresh_databases_hold_tables_and_are_distinct() {
    let server = PostgresServer::shared();
    let a = server.fresh_database();
    let b = server.fresh_database();
    assert_ne!(a.name, b.name);
    assert_ne!(a.url, b.url);
    for db in [&a, &b] {
        let host = server.socket_dir().to_str().unwrap().replace('/', "%2F");
        assert_eq!(
            db.url,
            format!("postgres://{}@{host}/{}", server.user(), db.name)
        );
        assert!(
            db.name
                .starts_with(&format!("m3_test_{}_", std::process::id())),
            "{}",
            db.name
        );
        assert_eq!(
            server.psql(&db.name, "SELECT current_database()").trim(),
            db.name
        );
    }

    let rows = server.psql(
        &a.name,
        "CREATE TABLE t (id integer PRIMARY KEY, v text NOT NULL);
         INSERT INTO t VALUES (1, 'one'), (2, 'two');
         SELECT id, v FROM t ORDER BY id;",
    );
    assert_eq!(rows.trim(), "1|one\n2|two");
    assert_eq!(
        server
            .psql(&b.name, "SELECT to_regclass('t') IS NULL")
            .trim(),
        "t",
        "a table of one fresh database is not in another"
    );

    let failed = std::panic::catch_unwind(|| server.psql(&b.name, "SELECT v FROM t"))
        .expect_err("psql of a missing table panics");
    let message = failed
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert!(
        message.contains(r#"relation "t" does not exist"#),
        "{message}"
    );
}

#[test]
fn the_server_runs_as_an_unprivileged_user() {
    let server = PostgresServer::shared();
    let db = server.fresh_database();
    let user = server
        .psql(&db.name, "SELECT current_user")
        .trim()
        .to_string();
    assert_eq!(user, server.user());
    assert_ne!(user, "root");
    assert_eq!(
        server
            .psql(
                &db.name,
                "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
            )
            .trim(),
        "t",
        "the URL's user is the superuser"
    );
    assert_ne!(server.uid(), 0);
    let postmaster = server.postmaster_pid();
    assert_eq!(
        uids(postmaster),
        vec![server.uid(); 4],
        "postmaster {postmaster}"
    );
    let backend: u32 = server
        .psql(&db.name, "SELECT pg_backend_pid()")
        .trim()
        .parse()
        .expect("a backend pid");
    assert_ne!(backend, postmaster);

    let dir = std::fs::metadata(server.socket_dir()).expect("the socket directory");
    assert_eq!(dir.uid(), server.uid());
    assert_eq!(dir.mode() & 0o777, 0o700, "only the server's user and root");
}

#[test]
fn the_server_listens_only_on_its_socket_with_fsync_on() {
    let server = PostgresServer::shared();
    let db = server.fresh_database();
    let setting = |name: &str| {
        server
            .psql(&db.name, &format!("SHOW {name}"))
            .trim()
            .to_string()
    };
    assert_eq!(setting("fsync"), "on");
    assert_eq!(setting("listen_addresses"), "");
    assert_eq!(
        setting("unix_socket_directories"),
        server.socket_dir().to_str().unwrap()
    );
    let socket = std::fs::metadata(server.socket_dir().join(".s.PGSQL.5432")).expect("socket");
    assert!(socket.file_type().is_socket());
    assert_eq!(socket.mode() & 0o777, 0o777);
}

#[test]
fn a_restart_keeps_the_data_and_stop_removes_the_server() {
    let server = PostgresServer::start();
    let db = server.fresh_database();
    server.psql(
        &db.name,
        "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('written before the restart');",
    );
    let before = server.postmaster_pid();
    server.restart();
    let after = server.postmaster_pid();
    assert_ne!(before, after, "a new postmaster");
    assert!(!process_is_running(before), "the old postmaster is gone");
    assert_eq!(
        server.psql(&db.name, "SELECT v FROM kept").trim(),
        "written before the restart"
    );

    let dir = server.socket_dir().to_path_buf();
    server.stop();
    assert!(!process_is_running(after), "stop() stops the postmaster");
    assert!(!dir.exists(), "stop() removes {}", dir.display());
    assert_eq!(server.postmaster_pid(), 0);
}

/// The parent of process `pid` (from `/proc/<pid>/status`).
fn parent_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a PPid line")
}

#[test]
fn only_this_process_holds_the_sentinel_s_pipe() {
    let server = PostgresServer::shared();
    let sentinel = parent_of(server.postmaster_pid());
    let pipe = std::fs::read_link(format!("/proc/{sentinel}/fd/0")).expect("the sentinel's stdin");
    assert!(pipe.to_string_lossy().starts_with("pipe:"), "{pipe:?}");
    let ours = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| *target == pipe)
        .count();
    assert_eq!(ours, 1, "this process holds the write end of {pipe:?} once");

    let listing = Command::new("/bin/sh")
        .args(["-c", "for f in /proc/$$/fd/*; do readlink \"$f\"; done"])
        .stdin(Stdio::null())
        .output()
        .expect("a child listing its descriptors");
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        listing.contains("pipe:"),
        "the listing sees its own stdout: {listing}"
    );
    assert!(
        !listing.lines().any(|l| l == pipe.to_string_lossy()),
        "another child inherited {pipe:?}: {listing}"
    );
}

#[test]
fn the_sentinel_stops_the_server_when_its_owner_is_killed() {
    let mut child = Command::new(HELPER)
        .arg("own-postgres")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {HELPER}: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let named = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => {
                if let Some(at) = line.find(OWNER_LINE) {
                    break line[at + OWNER_LINE.len()..].to_string();
                }
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the owner process never named its server ({e})");
            }
        }
    };
    let (pid, dir) = named.split_once(' ').expect("`<pid> <dir>`");
    let pid: u32 = pid.parse().expect("a pid");
    let dir = PathBuf::from(dir);
    assert!(process_is_running(pid), "the owner's postmaster {pid} runs");
    assert!(
        dir.join("data").is_dir(),
        "{} holds a cluster",
        dir.display()
    );

    child.kill().expect("SIGKILL to the owner");
    child.wait().expect("reaping the owner");
    assert!(
        eventually(Duration::from_secs(60), || !process_is_running(pid)),
        "postmaster {pid} still runs 60 s after its owner was killed"
    );
    assert!(
        eventually(Duration::from_secs(30), || !dir.exists()),
        "{} still exists 30 s after the postmaster stopped",
        dir.display()
    );
}
