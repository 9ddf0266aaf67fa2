//! Submission checks through the real component: each bad submission is a
//! `ModelValidationError` (the specification's "Typed errors" section).

use m3::*;

fn tools(list: &[&str]) -> Vec<String> {
    list.iter().map(|t| t.to_string()).collect()
}

#[test]
fn an_unknown_human_input_value_is_a_model_validation_error() {
    let policy = Policy::new().unwrap();
    assert_eq!(
        policy.parse_human_input("managed").unwrap(),
        Ok(HumanInput::Managed)
    );
    assert_eq!(
        policy.parse_human_input("fail").unwrap(),
        Ok(HumanInput::Fail)
    );
    assert_eq!(
        HumanInput::default(),
        HumanInput::Fail,
        "the default preserves existing behaviour"
    );
    for bad in ["MANAGED", "auto", "", "managed\n"] {
        let err = policy.parse_human_input(bad).unwrap().unwrap_err();
        assert!(
            err.to_string()
                .starts_with("ModelValidationError: unknown human_input"),
            "{err}"
        );
    }
}

#[test]
fn managed_input_with_a_plan_or_without_a_managed_input_store_is_refused() {
    let policy = Policy::new().unwrap();
    let in_memory_resolves = InMemoryExecutionStore::default()
        .managed_input_store()
        .unwrap()
        .is_some();
    let db = m3_tests::TempDb::new();
    let sqlite_resolves = SqliteExecutionStore::open(&db.path)
        .unwrap()
        .managed_input_store()
        .unwrap()
        .is_some();
    assert!(
        policy
            .check_human_input(HumanInput::Managed, false, sqlite_resolves)
            .unwrap()
            .is_ok()
    );
    let with_plan = policy
        .check_human_input(HumanInput::Managed, true, sqlite_resolves)
        .unwrap()
        .unwrap_err();
    assert!(
        with_plan.message.contains("elicitation plan"),
        "{with_plan}"
    );
    let in_memory = policy
        .check_human_input(HumanInput::Managed, false, in_memory_resolves)
        .unwrap()
        .unwrap_err();
    assert!(in_memory.message.contains("persistent"), "{in_memory}");
    assert!(
        policy
            .check_human_input(HumanInput::Fail, true, in_memory_resolves)
            .unwrap()
            .is_ok()
    );
}

#[test]
fn tool_allow_lists_must_name_the_submission_server() {
    let policy = Policy::new().unwrap();
    let checked = policy
        .check_tool_allow_list("shipping", &tools(&["shipping:book_shipment"]))
        .unwrap();
    assert_eq!(checked, Ok(tools(&["book_shipment"])));
    for bad in [
        &["book_shipment"][..],
        &["billing:charge"],
        &["shipping:"],
        &[":book"],
        &["shipping:a:b"],
    ] {
        let err = policy
            .check_tool_allow_list("shipping", &tools(bad))
            .unwrap()
            .unwrap_err();
        assert!(
            err.to_string().starts_with("ModelValidationError: "),
            "{bad:?}: {err}"
        );
    }
}
