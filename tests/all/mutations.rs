//! The mutation check: each central rule is broken on purpose and the tests named for it must
//! fail, so a test that would pass without its rule cannot hide behind its name.
//!
//! A guest rule is broken by running a component built with one `mutate-<rule>` feature (built
//! only with the host's test feature `mutations`); a host rule by a switch in the host. Each
//! check runs this test binary again with `M3_MUTATION=<name>` on the named tests plus one test
//! the rule does not touch, which must still pass (so the broken build itself runs). The list
//! and its last result are in RELIABILITY.md ("Mutation check").

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;

/// One broken rule and the tests that must catch it.
pub(crate) struct Mutation {
    /// The value of `M3_MUTATION`.
    pub(crate) name: &'static str,
    /// Tests that must fail with the rule broken.
    pub(crate) caught_by: &'static [&'static str],
    /// A test the rule does not touch: it must pass with the rule broken.
    pub(crate) unaffected: &'static str,
}

const IDEMPOTENCY_CONFLICT: Mutation = Mutation {
    name: "idempotency-conflict",
    caught_by: &[
        "store_contract::sqlite::same_key_with_a_different_response_is_a_conflict_and_changes_nothing",
        "store_contract::sqlite::same_response_means_equal_after_canonicalisation",
        "concurrency::sqlite::idempotent_submit_race_across_threads",
        "concurrency::sqlite::idempotent_submit_race_across_processes",
        "lifecycle_model::sqlite::the_store_follows_the_reference_lifecycle_model",
    ],
    unaffected: "store_contract::sqlite::the_lifecycle_runs_through_all_six_statuses",
};

const LEASE_FENCING: Mutation = Mutation {
    name: "lease-fencing",
    caught_by: &[
        "lease_fencing::eight_workers_contend_for_rounds_and_paused_workers_are_fenced_off",
        "store_contract::sqlite::expired_leases_reject_stale_writes",
        "store_contract::sqlite::a_replaced_worker_owner_cannot_write",
        "lifecycle_model::sqlite::the_store_follows_the_reference_lifecycle_model",
    ],
    unaffected: "store_contract::sqlite::same_key_with_a_different_response_is_a_conflict_and_changes_nothing",
};

const TERMINAL_REFUSAL: Mutation = Mutation {
    name: "terminal-refusal",
    caught_by: &[
        "store_contract::sqlite::terminal_rounds_reject_every_write",
        "store_contract::sqlite::fail_recovery_fails_the_round_for_good",
        "lifecycle_model::sqlite::the_store_follows_the_reference_lifecycle_model",
        "lease_fencing::eight_workers_contend_for_rounds_and_paused_workers_are_fenced_off",
        "execution_edges::a_server_that_exits_or_does_not_wait_ends_its_round",
        "crash::sqlite::killed_after_the_round_insert_the_round_survives_and_recovery_fails_it_once",
        "executions::cancel_fails_the_open_round_and_tells_the_server",
        "codex_transcripts::a_late_answer_after_interrupt_is_refused_and_never_sent",
    ],
    unaffected: "store_contract::sqlite::the_lifecycle_runs_through_all_six_statuses",
};

const WITHDRAWN_CLOSURE: Mutation = Mutation {
    name: "withdrawn-closure",
    caught_by: &[
        "execution_edges::a_typescript_sdk_server_that_times_out_withdraws_its_round",
        "execution_edges::a_server_that_exits_or_does_not_wait_ends_its_round",
        "execution_edges::a_python_tool_that_stops_waiting_withdraws_its_round",
        "execution_edges::an_answer_committed_too_late_is_kept_but_never_delivered",
        "codex_transcripts::retries_unknown_requests_and_a_withdrawn_request",
        "harnesses::codex::a_server_that_stops_waiting_withdraws_its_round",
        "harnesses::claude_code::a_server_that_stops_waiting_withdraws_its_round",
    ],
    unaffected: "executions::the_spec_example_runs_with_the_blocking_api",
};

const PATH_REFUSALS: Mutation = Mutation {
    name: "path-refusals",
    caught_by: &[
        "store_contract::opening_refuses_paths_that_are_not_plain_database_files",
        "execution_store::an_execution_store_refuses_bad_paths_at_open",
    ],
    unaffected: "store_contract::sqlite::the_lifecycle_runs_through_all_six_statuses",
};

/// Every mutation of the check (RELIABILITY.md lists the same).
pub(crate) const MUTATIONS: [&Mutation; 5] = [
    &IDEMPOTENCY_CONFLICT,
    &LEASE_FENCING,
    &TERMINAL_REFUSAL,
    &WITHDRAWN_CLOSURE,
    &PATH_REFUSALS,
];

/// The names of the tests the mutation check runs, for the documents check.
pub(crate) fn named_tests() -> impl Iterator<Item = &'static str> {
    MUTATIONS
        .iter()
        .flat_map(|m| m.caught_by.iter().copied().chain([m.unaffected]))
}

/// One mutation run at a time: each runs several heavy tests of its own.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs this binary's tests `names` with `M3_MUTATION=mutation`; returns the exit code and each
/// test's reported result (`ok` or `FAILED`).
fn run_with(mutation: &str, names: &[&str]) -> (Option<i32>, BTreeMap<String, String>, String) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // A broken rule may let a test create files where it runs (a path it should have refused):
    // never in the source tree.
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "--test-threads", "2"])
        .args(names)
        .current_dir(scratch.path())
        .env("M3_MUTATION", mutation)
        .output()
        .expect("running the test binary again");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let results = stdout
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("test ")?;
            let (name, result) = rest.rsplit_once(" ... ")?;
            Some((name.to_string(), result.trim().to_string()))
        })
        .collect();
    (output.status.code(), results, stdout)
}

fn check(mutation: &Mutation) {
    let mut names: Vec<&str> = mutation.caught_by.to_vec();
    names.push(mutation.unaffected);
    let (code, results, stdout) = run_with(mutation.name, &names);
    assert_ne!(
        code,
        Some(97),
        "the host does not know the mutation {}",
        mutation.name
    );
    for name in &names {
        assert!(
            results.contains_key(*name),
            "{name} did not run with {}:\n{stdout}",
            mutation.name
        );
    }
    let survivors: Vec<&&str> = mutation
        .caught_by
        .iter()
        .filter(|name| results[**name] != "FAILED")
        .collect();
    assert!(
        survivors.is_empty(),
        "with the rule {} broken these tests still pass: {survivors:?}\n{stdout}",
        mutation.name
    );
    assert_eq!(
        results[mutation.unaffected], "ok",
        "{} must pass with {} broken (the broken build must run):\n{stdout}",
        mutation.unaffected, mutation.name
    );
    assert_eq!(code, Some(101), "the caught tests fail the run");
    println!(
        "mutation {}: caught by all {} named tests; {} still passes",
        mutation.name,
        mutation.caught_by.len(),
        mutation.unaffected
    );
}

#[test]
fn breaking_the_idempotency_conflict_is_caught() {
    check(&IDEMPOTENCY_CONFLICT);
}

#[test]
fn breaking_lease_fencing_is_caught() {
    check(&LEASE_FENCING);
}

#[test]
fn breaking_the_terminal_round_refusal_is_caught() {
    check(&TERMINAL_REFUSAL);
}

#[test]
fn breaking_the_withdrawn_request_closure_is_caught() {
    check(&WITHDRAWN_CLOSURE);
}

#[test]
fn breaking_the_path_refusals_is_caught() {
    check(&PATH_REFUSALS);
}

/// A misspelt mutation ends the run with its own exit code: it can never look like a caught one.
#[test]
fn an_unknown_mutation_is_refused() {
    let (code, results, stdout) = run_with(
        "no-such-rule",
        &["store_contract::sqlite::the_lifecycle_runs_through_all_six_statuses"],
    );
    assert_eq!(code, Some(97), "{stdout}");
    assert!(!results.values().any(|r| r == "ok"), "{stdout}");
}
