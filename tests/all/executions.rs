//! The execution API end to end: the kit, handles and the worker in the component, against the
//! bundled shipping server as a real child process and a real SQLite file.

use m3::*;
use m3_tests::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");

fn shipping_server(args: &[&str]) -> StdioServer {
    StdioServer::new("shipping", SHIPPING_SERVER).args(args.iter().copied())
}

fn booking_script() -> Script {
    Script::call(
        "shipping:book_shipment",
        json!({"item": "book", "quantity": 1}),
    )
}

fn address() -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )])
}

fn wait_pending(handle: &ExecutionHandle) -> PendingElicitationRound {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(pending) = handle.pending_elicitation().unwrap() {
            return pending;
        }
        let snapshot = handle.snapshot().unwrap();
        assert_ne!(
            snapshot.lifecycle,
            ExecutionStatus::Finished,
            "finished before asking: {:?}",
            snapshot.outcome
        );
        assert!(Instant::now() < deadline, "no pending round in time");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The specification's example, in Rust, with the blocking API.
#[test]
fn the_spec_example_runs_with_the_blocking_api() {
    let db = TempDb::new();
    let store = Arc::new(SqliteExecutionStore::open(&db.path).unwrap());
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new()).unwrap();
    let agent = kit
        .agents([AgentSpec::scripted(booking_script())])
        .unwrap()
        .remove(0);
    let handle = agent
        .submit(
            Submission::new(
                "Ask for the delivery address, then book the shipment.",
                shipping_server(&[]),
            )
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed),
        )
        .unwrap();
    let pending = wait_pending(&handle);
    assert_eq!(pending.execution_id, handle.execution_id());
    assert_eq!(
        pending.requests.keys().collect::<Vec<_>>(),
        ["shipping_address"]
    );
    handle
        .respond_elicitation(
            &pending.round_id,
            address(),
            &format!("address-{}", pending.round_id),
        )
        .unwrap();
    let result = handle.result(Some(Duration::from_secs(60))).unwrap();
    assert!(result.succeeded(), "{}", result.outcome);
    let text = result.outcome.tool_results[0].text();
    assert!(
        text.contains("1 Main Street") && text.contains("Pune"),
        "{text}"
    );
    let record = db.store().get_round(&pending.round_id).unwrap().unwrap();
    assert_eq!(record.status, ManagedInputStatus::Resolved);
    assert_eq!(record.delivery_attempts, 1);
    assert_eq!(
        handle.snapshot().unwrap().lifecycle,
        ExecutionStatus::Finished
    );
    drop(kit);
    store.close();
}
