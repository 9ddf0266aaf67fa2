//! Output people read (issue 18): ids given by any unique prefix (an ambiguous one is a typed
//! `ambiguous_id` error that changes nothing; `%` and `_` are literal), `m3 events`' history of
//! an execution and its rounds (resolved, cancelled, withdrawn, recovered), `--watch`, and
//! tables on a real pseudo-terminal 80 columns wide (every line fits; colour on a terminal,
//! none with `NO_COLOR`).
//!
//! Every test uses the real `m3` binary, a fresh temporary SQLite database, and the binary's
//! own `shipping-server` as the MCP server, as `tests/contract.rs` does.

mod common;

use common::*;
use rexpect::process::WaitStatus;
use rexpect::reader::Options;
use rexpect::session::spawn_with_options;
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

/// The `kind`s of `events --json`'s history, the harness's own events left out.
fn history_kinds(events: &Value) -> Vec<String> {
    let history = events["history"].as_array().expect("a history array");
    let mut last = None;
    for h in history {
        assert_keys(h, &["at", "kind", "round_id", "code", "message"], "history");
        let at = timestamp(&h["at"], "history at");
        if h["kind"] != "execution_finished" {
            assert!(
                last.is_none_or(|l| l <= at),
                "history out of order: {events}"
            );
            last = Some(at);
        }
    }
    history
        .iter()
        .filter(|h| h["kind"] != "harness")
        .map(|h| h["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `events ID --json`, checked to keep the keys it always had and to add `history`.
fn events(sb: &Sandbox, id: &str) -> Value {
    let events = sb.m3(&["events", id, "--json"]).json();
    assert_keys(
        &events,
        &["events", "events_dropped", "stderr_tail", "history"],
        "events --json",
    );
    events
}

/// The history entry of `kind`.
fn entry<'a>(events: &'a Value, kind: &str) -> &'a Value {
    events["history"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| h["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {events}"))
}

/// The characters two ids share at their start.
fn common_prefix(a: &str, b: &str) -> String {
    a.chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect()
}

/// Two waiting runs: an ambiguous prefix of their ids is refused by every command that takes an
/// id (naming both candidates, changing nothing), `%` and `_` match only themselves, and a
/// unique prefix (or `PREFIX-rN` for a round) works for `status`, `show`, `events`, `pending
/// --execution`, `respond` and `cancel`. Then the histories of the answered (resolved) and the
/// cancelled execution, kind by kind.
#[test]
fn ids_work_by_unique_prefix_and_an_ambiguous_prefix_changes_nothing() {
    let sb = Sandbox::new();
    let mut first = sb.spawn_run("legacy", &[], &[]);
    let (round1, exec1) = ids(&first.next_json()["round"]);
    let mut second = sb.spawn_run("legacy", &[], &[]);
    let (round2, exec2) = ids(&second.next_json()["round"]);
    let common = common_prefix(&exec1, &exec2);
    assert!(common.starts_with("exec-"), "{exec1} {exec2}");

    let address = accept_address();
    let ambiguous: Vec<(Vec<&str>, [&str; 2])> = vec![
        (vec!["status", &common], [&exec1, &exec2]),
        (vec!["events", &common], [&exec1, &exec2]),
        (vec!["cancel", &common], [&exec1, &exec2]),
        (vec!["pending", "--execution", &common], [&exec1, &exec2]),
        (vec!["rounds", "--execution", &common], [&exec1, &exec2]),
        (vec!["show", &common], [&round1, &round2]),
        (
            vec![
                "respond",
                &common,
                "--idempotency-key",
                "k",
                "--accept",
                &address,
            ],
            [&round1, &round2],
        ),
    ];
    for (args, candidates) in ambiguous {
        let out = sb.m3(&args);
        let first_line = out.fails_with("ManagedInputValidationError");
        assert!(
            first_line.contains("ambiguous_id"),
            "{args:?}: {first_line}"
        );
        for candidate in candidates {
            assert!(first_line.contains(candidate), "{args:?}: {first_line}");
        }
    }
    // Nothing changed: both rounds still wait, neither execution was cancelled.
    let pending = sb.m3(&["pending", "--json"]).json();
    assert_eq!(pending.as_array().map(Vec::len), Some(2), "{pending}");
    for exec in [&exec1, &exec2] {
        let status = sb.status(exec);
        assert_eq!(status["lifecycle"], "waiting_for_input");
        assert_eq!(status["cancel_requested"], false);
    }

    // `%` and `_` are ordinary characters: they match no id (a LIKE pattern would match all).
    for hostile in ["exec%", "exec_", "%", "_", "exec-%", "e_ec-"] {
        sb.m3(&["status", hostile])
            .fails_with("ManagedInputStateError");
        sb.m3(&["show", hostile])
            .fails_with("ManagedInputStateError");
        sb.m3(&["cancel", hostile])
            .fails_with("ManagedInputStateError");
        let none = sb.m3(&["rounds", "--execution", hostile, "--json"]).json();
        assert_eq!(none, serde_json::json!([]), "{hostile}");
    }
    sb.m3(&["status", "exec-zzz"])
        .fails_with("ManagedInputStateError");

    // A unique prefix: one character past the common part.
    let short = |id: &str| {
        id.chars()
            .take(common.chars().count() + 1)
            .collect::<String>()
    };
    let (p1, p2) = (short(&exec1), short(&exec2));
    assert_eq!(sb.status(&p1)["execution_id"], exec1.as_str());
    assert_eq!(sb.show(&p1)["round_id"], round1.as_str());
    assert_eq!(sb.show(&format!("{p2}-r1"))["round_id"], round2.as_str());
    assert_eq!(sb.show(&round2)["round_id"], round2.as_str());
    assert_eq!(events(&sb, &p2)["history"][0]["kind"], "execution_created");
    let only = sb.m3(&["pending", "--execution", &p2, "--json"]).json();
    assert_eq!(only.as_array().map(Vec::len), Some(1), "{only}");
    assert_eq!(only[0]["round_id"], round2.as_str());

    // Answer the first by prefix, cancel the second by prefix.
    sb.m3(&[
        "respond",
        &p1,
        "--idempotency-key",
        "k1",
        "--accept",
        &address,
    ])
    .ok();
    let (out, lines) = first.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
    let cancelled = sb.m3(&["cancel", &p2, "--json"]).json();
    assert_eq!(cancelled["execution_id"], exec2.as_str());
    let (out, lines) = second.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "cancelled");

    let resolved = events(&sb, &exec1);
    assert_eq!(
        history_kinds(&resolved),
        [
            "execution_created",
            "round_created",
            "round_answered",
            "round_delivery_started",
            "round_delivered",
            "round_resolved",
            "execution_finished",
        ]
    );
    assert_eq!(
        entry(&resolved, "round_resolved")["round_id"],
        round1.as_str()
    );
    let finished = entry(&resolved, "execution_finished");
    assert!(
        finished["message"]
            .as_str()
            .unwrap_or_default()
            .contains("succeeded")
    );

    let cancelled = events(&sb, &exec2);
    assert_eq!(
        history_kinds(&cancelled),
        [
            "execution_created",
            "round_created",
            "round_failed",
            "execution_finished",
        ]
    );
    assert_eq!(entry(&cancelled, "round_failed")["code"], "cancelled");
    let finished = entry(&cancelled, "execution_finished");
    assert!(
        finished["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cancelled")
    );

    // For people: the same history, one line each, in order.
    let text = sb.m3(&["events", &p1]).ok().stdout.clone();
    let order = [
        "execution_created",
        "round_answered",
        "round_resolved",
        "execution_finished",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|k| text.find(k).unwrap_or_else(|| panic!("no {k} in:\n{text}")))
        .collect();
    assert!(positions.is_sorted(), "out of order:\n{text}");
}

/// A server that stops waiting for its question (`shipping-server --withdraw`): the round's
/// history says it was withdrawn (`request_withdrawn`), and the execution still finishes.
#[test]
fn events_history_of_a_withdrawn_round() {
    let sb = Sandbox::new();
    let mut run = sb.spawn_run("legacy", &["--withdraw"], &[]);
    let (round_id, execution_id) = ids(&run.next_json()["round"]);
    let (out, lines) = run.finish();
    check_run_stdout(&out, &lines);
    let events = events(&sb, &execution_id);
    assert_eq!(
        history_kinds(&events),
        [
            "execution_created",
            "round_created",
            "round_failed",
            "execution_finished",
        ]
    );
    let failed = entry(&events, "round_failed");
    assert_eq!(failed["code"], "request_withdrawn");
    assert_eq!(failed["round_id"], round_id.as_str());
    assert!(
        failed["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("withdrawn"),
        "{failed}"
    );
    let text = sb.m3(&["events", &execution_id]).ok().stdout.clone();
    assert!(text.contains("withdrawn"), "{text}");
}

/// A worker killed with SIGKILL, then `m3 recover` once its lease expired: the round's history
/// says it was recovered (`recovery_unavailable`), and the execution ended with that code.
#[test]
fn events_history_of_a_recovered_round() {
    let sb = Sandbox::new();
    let mut run = sb.spawn_run("legacy", &[], &["--lease", "2"]);
    let (round_id, execution_id) = ids(&run.next_json()["round"]);
    run.guard.kill(); // SIGKILL
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let report = sb.m3(&["recover", "--json"]).json();
        if report["rounds_failed"] == 1 {
            break;
        }
        assert!(Instant::now() < until, "nothing was recovered: {report}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let events = events(&sb, &execution_id);
    assert_eq!(
        history_kinds(&events),
        [
            "execution_created",
            "round_created",
            "round_failed",
            "execution_finished",
        ]
    );
    let failed = entry(&events, "round_failed");
    assert_eq!(failed["code"], "recovery_unavailable");
    assert_eq!(failed["round_id"], round_id.as_str());
    assert!(
        failed["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("recovered"),
        "{failed}"
    );
    assert_eq!(
        entry(&events, "execution_finished")["code"],
        "recovery_unavailable"
    );
}

/// `--watch` off a terminal prints each new snapshot once: `pending --watch --json` prints the
/// waiting round, then (after the answer) an empty list, and ends on SIGINT with exit 0;
/// `status --watch` prints until the execution finished, then ends by itself.
#[test]
fn watch_prints_each_change_once_and_stops() {
    let sb = Sandbox::new();
    let mut run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, execution_id) = ids(&run.next_json()["round"]);
    let mut pending = sb.spawn(&["pending".into(), "--watch".into(), "--json".into()]);
    let listed: Value = serde_json::from_str(&pending.next_line()).expect("a JSON line");
    assert_eq!(listed[0]["round_id"], round_id.as_str());
    let mut status = sb.spawn(&["status".into(), execution_id.clone(), "--watch".into()]);
    let mut shown = String::new();
    while !shown.contains("waiting_for_input") {
        shown.push_str(&status.next_line());
        shown.push('\n');
    }
    sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "k",
        "--accept",
        &accept_address(),
    ])
    .ok();
    let (out, lines) = run.finish();
    check_run_stdout(&out, &lines);
    assert_eq!(pending.next_line(), "[]");
    // SAFETY: signalling our own child, still running (its guard reaps it).
    unsafe {
        libc::kill(pending.guard.child.id() as libc::pid_t, libc::SIGINT);
    }
    let (out, lines) = pending.finish();
    out.ok();
    assert_eq!(lines.len(), 2, "one line per change: {lines:?}");
    let (out, lines) = status.finish();
    out.ok();
    let text = lines.join("\n");
    assert!(
        text.contains("finished") && text.contains("resolved"),
        "{text}"
    );
    let finished_tables = text.matches("| finished").count();
    assert_eq!(finished_tables, 1, "the final snapshot once:\n{text}");
}

// ---------------------------------------------------------------------------------------------
// On a terminal
// ---------------------------------------------------------------------------------------------

/// `m3 ARGS` on a fresh pseudo-terminal with `env`; what it printed (escapes kept, `\r`
/// removed) once it exited 0.
fn on_terminal(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut command = Command::new(M3);
    command
        .arg("--db")
        .arg(&sb.db)
        .args(args)
        .env_remove("M3_DB")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm-256color");
    for (k, v) in env {
        command.env(k, v);
    }
    let options = Options::new()
        .timeout_ms(Some(60_000))
        .strip_ansi_escape_codes(false);
    let mut session = spawn_with_options(command, options).expect("m3 on a pty");
    let text = session.exp_eof().expect("m3 ends");
    match session.process().wait() {
        Ok(WaitStatus::Exited(_, 0)) => {}
        other => panic!("{args:?} on a terminal: {other:?}\n{text}"),
    }
    // rexpect hands over each byte as one `char`: put the UTF-8 (`…`) back together.
    let bytes: Vec<u8> = text.chars().map(|c| c as u32 as u8).collect();
    String::from_utf8_lossy(&bytes).replace('\r', "")
}

/// `text` without its ANSI escapes (`ESC [ ... letter`).
fn visible(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `pending`, `rounds` and `status` on an 80-column terminal (`COLUMNS=80`): every line fits in
/// 80 columns, ids are short, times relative, statuses coloured; `NO_COLOR=1` leaves every
/// escape out; without `COLUMNS` a 60-column pty's own width counts; `--wide` shows whole ids
/// and RFC 3339 times.
#[test]
fn tables_fit_an_80_column_terminal_in_colour_unless_no_color() {
    let sb = Sandbox::new();
    let mut run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, execution_id) = ids(&run.next_json()["round"]);
    let listings: [Vec<&str>; 4] = [
        vec!["pending"],
        vec!["rounds"],
        vec!["status", &execution_id],
        vec!["executions"],
    ];
    for args in &listings {
        let coloured = on_terminal(&sb, args, &[("COLUMNS", "80")]);
        assert!(
            coloured.contains("\x1b["),
            "{args:?}: no colour:\n{coloured}"
        );
        let shown = visible(&coloured);
        for line in shown.lines() {
            assert!(
                line.chars().count() <= 80,
                "{args:?}: a line of {} columns:\n{shown}",
                line.chars().count()
            );
        }
        assert!(
            !shown.contains(&execution_id),
            "{args:?}: a whole id:\n{shown}"
        );
        assert!(
            !shown.contains("Z |") && !shown.contains("Z  |"),
            "{args:?}: an RFC 3339 time in a table:\n{shown}"
        );
        let plain = on_terminal(&sb, args, &[("COLUMNS", "80"), ("NO_COLOR", "1")]);
        assert!(
            !plain.contains('\x1b'),
            "{args:?}: escapes with NO_COLOR:\n{plain}"
        );
        assert!(plain.lines().all(|l| l.chars().count() <= 80), "{plain}");
    }
    let pending = visible(&on_terminal(&sb, &["pending"], &[("COLUMNS", "80")]));
    assert!(
        pending.contains("just now") || pending.contains(" s ago"),
        "{pending}"
    );
    assert!(
        pending.contains("in 23 h") || pending.contains("in 24 h"),
        "{pending}"
    );
    // Without COLUMNS the terminal's own width counts: the pty is set to 60 columns by `stty`
    // in the same process, just before it becomes m3.
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg("stty cols 60 rows 24 && exec \"$0\" --db \"$1\" pending")
        .arg(M3)
        .arg(&sb.db)
        .env_remove("M3_DB")
        .env_remove("COLUMNS")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm");
    let options = Options::new()
        .timeout_ms(Some(60_000))
        .strip_ansi_escape_codes(true);
    let mut session = spawn_with_options(command, options).expect("m3 on a pty");
    let narrow = session.exp_eof().expect("m3 ends");
    let bytes: Vec<u8> = narrow.chars().map(|c| c as u32 as u8).collect();
    let narrow = String::from_utf8_lossy(&bytes).replace('\r', "");
    assert!(narrow.contains("exec-"), "{narrow}");
    for line in narrow.lines() {
        assert!(
            line.chars().count() <= 60,
            "wider than the terminal:\n{narrow}"
        );
    }
    let wide = visible(&on_terminal(
        &sb,
        &["pending", "--wide"],
        &[("COLUMNS", "80")],
    ));
    assert!(
        wide.contains(&round_id) && wide.contains(&execution_id),
        "{wide}"
    );
    assert!(wide.contains("Z |"), "RFC 3339 times with --wide:\n{wide}");
    run.guard.kill();
}

/// `pending --watch` on a terminal redraws in place and stops on Ctrl-C with exit 0.
#[test]
fn pending_watch_on_a_terminal_stops_on_ctrl_c() {
    let sb = Sandbox::new();
    let mut run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, _) = ids(&run.next_json()["round"]);
    let mut command = Command::new(M3);
    command
        .arg("--db")
        .arg(&sb.db)
        .args(["pending", "--watch", "--wide"])
        .env_remove("M3_DB")
        .env("COLUMNS", "200")
        .env("TERM", "xterm");
    let options = Options::new()
        .timeout_ms(Some(60_000))
        .strip_ansi_escape_codes(true);
    let mut session = spawn_with_options(command, options).expect("m3 on a pty");
    session.exp_string(&round_id).expect("the round is shown");
    session.exp_string("Ctrl-C to stop").expect("the hint");
    sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "k",
        "--accept",
        &accept_address(),
    ])
    .ok();
    session
        .exp_string("no pending rounds")
        .expect("redrawn after the answer");
    session.send_control('c').expect("Ctrl-C");
    session.exp_eof().expect("m3 ends");
    match session.process().wait() {
        Ok(WaitStatus::Exited(_, 0)) => {}
        other => panic!("pending --watch after Ctrl-C: {other:?}"),
    }
    let (out, _) = run.finish();
    out.ok();
}
