//! Runs the built `minimal-host` binary and checks what it prints.

use chrono::{DateTime, SubsecRound, Utc};
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_minimal-host"))
        .args(args)
        .output()
        .expect("running minimal-host")
}

/// Checks that `output` is exactly `round <round> waits for `<key>` as of <time>\n`, with an
/// RFC 3339 UTC time taken between `before` and now.
fn assert_description(output: &Output, round: &str, key: &str, before: DateTime<Utc>) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "minimal-host failed: {stderr}");
    let stdout = String::from_utf8(output.stdout.clone()).expect("UTF-8 output");
    let line = stdout
        .strip_suffix('\n')
        .expect("one line ending in a newline");
    assert!(!line.contains('\n'), "more than one line: {stdout:?}");
    let prefix = format!("round {round} waits for `{key}` as of ");
    let time = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{line:?} does not start with {prefix:?}"));
    assert!(time.ends_with('Z'), "not a UTC `Z` time: {time:?}");
    let parsed = DateTime::parse_from_rfc3339(time)
        .unwrap_or_else(|e| panic!("{time:?} is not RFC 3339: {e}"));
    assert_eq!(parsed.offset().local_minus_utc(), 0, "not UTC: {time:?}");
    let parsed = parsed.with_timezone(&Utc);
    assert!(
        before.trunc_subsecs(0) <= parsed && parsed <= Utc::now(),
        "{time} is not the time of the run (started {before})"
    );
}

#[test]
fn no_arguments_describe_the_default_round() {
    let before = Utc::now();
    let output = run(&[]);
    assert_description(&output, "r1", "shipping_address", before);
}

#[test]
fn arguments_name_the_round_and_the_request() {
    let before = Utc::now();
    let output = run(&["r42", "billing_email"]);
    assert_description(&output, "r42", "billing_email", before);
}

#[test]
fn a_third_argument_is_a_usage_error() {
    let output = run(&["r1", "shipping_address", "extra"]);
    assert!(!output.status.success(), "extra arguments were accepted");
    assert!(output.stdout.is_empty(), "printed a description anyway");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("usage: minimal-host"), "stderr: {stderr}");
}
