//! The README's walkthrough, run exactly as written: every `$ ` command between the
//! `<!-- walkthrough -->` markers, through `bash`, in order, in a fresh directory whose `PATH`
//! starts with this build's `m3`. The `m3 run` command is terminal 1: it runs in the background
//! while the others (terminal 2) run; a `console` block without commands is more of its output.
//!
//! Only the ids differ from run to run: an id of the sample output (`exec-<32 hex>`, and any
//! prefix of one that a command uses) stands for the id at the same place of the real output.
//! Each command's output must then match its sample line by line, with ids, timestamps, relative
//! times and the opaque `request_state` set aside, and table borders and spacing ignored: a sample
//! from an older era (another header, message or JSON field) fails the test.

mod common;

use common::*;
use regex::Regex;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// One `$ ` command of the walkthrough with the output shown after it.
#[derive(Debug)]
struct Step {
    /// The command line, continuation lines joined.
    command: String,
    /// Its sample output, one entry per line.
    sample: Vec<String>,
    /// How many of the sample lines are in the command's own block (the rest come later).
    own_lines: usize,
    /// Terminal 1's `m3 run`: started in the background.
    background: bool,
}

/// The walkthrough's steps, in order.
fn steps(readme: &str) -> Vec<Step> {
    let start = readme
        .find("<!-- walkthrough -->")
        .expect("README.md marks its walkthrough with <!-- walkthrough -->");
    let end = readme
        .find("<!-- /walkthrough -->")
        .expect("README.md ends its walkthrough with <!-- /walkthrough -->");
    let mut steps: Vec<Step> = Vec::new();
    let mut in_console = false;
    let mut pending_command: Option<String> = None;
    let mut block_has_command = false;
    for line in readme[start..end].lines() {
        if !in_console {
            in_console = line.trim_start() == "```console";
            block_has_command = false;
            continue;
        }
        if line.trim_start() == "```" {
            in_console = false;
            continue;
        }
        if let Some(command) = pending_command.as_mut() {
            // A continuation line of the command above.
            let continues = line.ends_with('\\');
            command.push(' ');
            command.push_str(line.trim_end_matches('\\').trim());
            if !continues {
                push_step(&mut steps, pending_command.take().unwrap_or_default());
            }
            continue;
        }
        if let Some(command) = line.strip_prefix("$ ") {
            block_has_command = true;
            if command.ends_with('\\') {
                pending_command = Some(command.trim_end_matches('\\').trim().to_string());
            } else {
                push_step(&mut steps, command.trim().to_string());
            }
            continue;
        }
        if block_has_command && let Some(step) = steps.last_mut() {
            step.own_lines += 1;
        }
        let target = if block_has_command {
            steps.last_mut()
        } else {
            steps.iter_mut().rev().find(|s| s.background)
        };
        target
            .expect("output in the walkthrough before any command")
            .sample
            .push(line.to_string());
    }
    steps
}

fn push_step(steps: &mut Vec<Step>, command: String) {
    let background = command.starts_with("m3 run ");
    steps.push(Step {
        command,
        sample: Vec::new(),
        own_lines: 0,
        background,
    });
}

static EXEC_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"exec-([0-9a-f]{32})").expect("a regex"));
static ID_IN_COMMAND: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"exec-([0-9a-f]{1,32})").expect("a regex"));
static VOLATILE: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        (r"exec-[0-9a-f]+(…|\.\.\.)?(-r\d+|-op\d+)?", "ID"),
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", "TIME"),
        (r"v1\.[0-9.]+\.[0-9a-f]+", "STATE"),
        (
            r"\b(in )?\d+(\.\d+)? ?(ms|s|sec|secs|min|mins|h|d|days?|hours?|minutes?|seconds?)( ago)?\b",
            "REL",
        ),
        (r"\bjust now\b", "REL"),
        (r"[|+=─│┌┐└┘├┤┬┴┼═╪╞╡╒╕╘╛╤╧]", " "),
        (r"-{3,}", " "),
        (r"\s+", " "),
    ]
    .into_iter()
    .map(|(pattern, to)| (Regex::new(pattern).expect("a regex"), to))
    .collect()
});

/// A line with what differs between runs set aside.
fn normalize(line: &str) -> String {
    let mut text = line.to_string();
    for (pattern, to) in VOLATILE.iter() {
        text = pattern.replace_all(&text, *to).into_owned();
    }
    text.trim().to_string()
}

/// The lines that carry something, normalized.
fn meaningful(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| normalize(l))
        .filter(|l| !l.is_empty())
        .collect()
}

/// Learns which real id each sample id stands for, pairing them in order of appearance.
fn learn_ids(ids: &mut BTreeMap<String, String>, sample: &[String], real: &[String]) {
    let found = |lines: &[String]| -> Vec<String> {
        let mut seen = Vec::new();
        for line in lines {
            for c in EXEC_ID.captures_iter(line) {
                let hex = c[1].to_string();
                if !seen.contains(&hex) {
                    seen.push(hex);
                }
            }
        }
        seen
    };
    for (sample_hex, real_hex) in found(sample).into_iter().zip(found(real)) {
        ids.entry(sample_hex).or_insert(real_hex);
    }
}

/// The command with each sample id (or prefix of one) replaced by the real one's.
fn with_real_ids(command: &str, ids: &BTreeMap<String, String>) -> String {
    ID_IN_COMMAND
        .replace_all(command, |c: &regex::Captures<'_>| {
            let prefix = &c[1];
            let real = ids
                .iter()
                .find(|(sample, _)| sample.starts_with(prefix))
                .map(|(_, real)| real[..prefix.len()].to_string())
                .unwrap_or_else(|| {
                    panic!("the README command `{command}` uses exec-{prefix}, an id no earlier output showed")
                });
            format!("exec-{real}")
        })
        .into_owned()
}

/// What `m3 respond` prints when the worker was quicker: it reads the round back after
/// committing the answer, and a worker that delivered it and heard the server's reply in
/// between makes it say `resolved` where the sample says `response_validated`. Both are true;
/// the README shows the usual one (seen once in a quiet CI run).
const RESPOND_RESOLVED: &str =
    "round ID is resolved: the answers were delivered and the server replied";
const RESPOND_VALIDATED: &str = "round ID is response_validated: the answers are stored and wait \
    for its worker, which delivers them once or fails the round saying why (`m3 show ID`)";

fn assert_matches(step: &Step, real: &[String]) {
    let expected = meaningful(&step.sample);
    let mut got = meaningful(real);
    if step.command.starts_with("m3 respond --") || step.command.starts_with("m3 respond exec") {
        assert_eq!(
            expected,
            [RESPOND_VALIDATED],
            "the README's `m3 respond` sample is not the sentence this test knows"
        );
    }
    if step.command.starts_with("m3 respond") && expected == [RESPOND_VALIDATED] {
        for line in &mut got {
            if line == RESPOND_RESOLVED {
                *line = RESPOND_VALIDATED.to_string();
            }
        }
    }
    assert_eq!(
        expected,
        got,
        "the README's sample output of `{}` is not what it prints now.\nREADME:\n{}\nnow:\n{}",
        step.command,
        step.sample.join("\n"),
        real.join("\n")
    );
}

#[test]
fn the_readme_walkthrough_runs_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let steps = steps(&readme);
    assert!(
        steps.iter().filter(|s| s.background).count() == 1 && steps.len() >= 4,
        "the walkthrough has one `m3 run` and the commands that answer it: {steps:#?}"
    );
    for line in readme.lines() {
        assert!(
            !line.contains("](../") && !line.contains("`../"),
            "README.md points outside the repository: {line}"
        );
    }
    let sb = Sandbox::new();
    let bin = sb.dir.path().join("bin");
    std::fs::create_dir(&bin).expect("a bin directory");
    std::os::unix::fs::symlink(M3, bin.join("m3")).expect("m3 on the PATH");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let work = sb.dir.path().join("work");
    std::fs::create_dir(&work).expect("a working directory");
    let bash = |command: &str| {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(command)
            .current_dir(&work)
            .env("PATH", &path)
            .env_remove("M3_DB")
            .env_remove("COLUMNS")
            .env_remove("NO_COLOR");
        cmd
    };
    let mut ids = BTreeMap::new();
    let mut terminal_1: Option<(Running, &Step)> = None;
    let mut answered = false;
    for step in &steps {
        let command = with_real_ids(&step.command, &ids);
        if step.background {
            let mut cmd = bash(&command);
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().expect("bash starts terminal 1's command");
            let lines = read_lines(child.stdout.take().expect("piped stdout"));
            let stderr = read_all(child.stderr.take().expect("piped stderr"));
            let mut running = Running {
                guard: ChildGuard { child },
                lines,
                stderr,
                seen: Vec::new(),
            };
            // Its first block's lines (the pending round) come before terminal 2 acts.
            let first_block = step.own_lines;
            let until = Instant::now() + RUN_TIMEOUT;
            while running.seen.len() < first_block {
                let left = until.saturating_duration_since(Instant::now());
                match running.lines.recv_timeout(left) {
                    Ok(line) => running.seen.push(line),
                    Err(_) => panic!(
                        "`{command}` printed {:?}, not the {first_block} line(s) the README shows",
                        running.seen
                    ),
                }
            }
            learn_ids(&mut ids, &step.sample[..first_block], &running.seen);
            terminal_1 = Some((running, step));
            continue;
        }
        // The README's narrative: once the round is answered, terminal 1 ends with the result,
        // and the commands after it read what happened. They run once it has ended (else a
        // quick `m3 status` may find the worker still finishing: `running`).
        if answered && let Some((running, _)) = terminal_1.as_mut() {
            running
                .guard
                .wait_for(RUN_TIMEOUT)
                .expect("terminal 1's `m3 run` ends once answered");
        }
        answered |= step.command.starts_with("m3 respond");
        let out = finish(bash(&command), None, COMMAND_TIMEOUT);
        assert!(
            out.status.success(),
            "`{command}` failed as written in the README:\nstdout: {}\nstderr: {}",
            out.stdout,
            out.stderr
        );
        let real: Vec<String> = out.stdout.lines().map(str::to_string).collect();
        learn_ids(&mut ids, &step.sample, &real);
        assert_matches(step, &real);
    }
    let (mut running, step) = terminal_1.expect("the walkthrough's `m3 run`");
    let status = running
        .guard
        .wait_for(RUN_TIMEOUT)
        .expect("terminal 1's `m3 run` ends once answered");
    while let Ok(line) = running.lines.recv_timeout(Duration::from_secs(5)) {
        running.seen.push(line);
    }
    assert!(
        status.success(),
        "terminal 1's `m3 run` failed: {:?}",
        running.seen
    );
    assert_matches(step, &running.seen);
}
