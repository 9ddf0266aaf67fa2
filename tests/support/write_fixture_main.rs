//! Writes the stored-format fixture: a database made by this release through its public API,
//! holding rounds in every status and executions in every lifecycle and outcome, and the JSON of
//! what the API reads back from it. `tests/all/stored_format.rs` reads the committed copy with
//! every later release and must find the same JSON.
//!
//! Usage: `m3-test-write-fixture DIR SHIPPING_SERVER FAULT_WORKER` (writes `DIR/format-N.sqlite`
//! and `DIR/format-N.json`). Run once per stored format (`just fixture`), never to make a
//! failing fixture test pass.

use anyhow::{Context, bail};
use m3::{
    AgentSpec, Deadline, ElicitationRequest, ElicitationResponse, ExecutionStore, FailureCode,
    HumanInput, KitOptions, ManagedInputStore, McpTestKit, NewRound, OperationKind, OwnerClaim,
    Script, SqliteExecutionStore, StdioServer, Submission,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const WAIT: Option<Duration> = Some(Duration::from_secs(60));

fn address_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        "required": ["street", "city"]
    })
}

fn answer() -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )])
}

fn new_round(round_id: &str, owner: Option<&str>) -> NewRound {
    let mut requests = BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationRequest::form("Where should we ship?", address_schema()),
    )]);
    if round_id.ends_with("-url") {
        requests.insert(
            "consent".to_string(),
            ElicitationRequest::url("Sign in to continue.", "https://example.com/consent"),
        );
    }
    let mut round = NewRound::new(
        round_id,
        "fixture-exec",
        "shipping",
        "book_shipment",
        requests,
    );
    round.operation_kind = OperationKind::Tool;
    round.deadline = Deadline::None;
    match owner {
        Some(owner) => round.owned_by(OwnerClaim {
            owner_id: owner.to_string(),
            lease_ttl: Duration::from_secs(60),
        }),
        None => round,
    }
}

/// Rounds in every status, through the store API.
fn rounds(store: &dyn ManagedInputStore) -> anyhow::Result<()> {
    let make = |id: &str, owner: Option<&str>| -> anyhow::Result<Option<m3::ManagedInputLease>> {
        Ok(store.create_round(&new_round(id, owner))?.lease)
    };
    make("fixture-pending-unowned", None)?;
    make("fixture-pending-url", Some("fixture-worker"))?;
    let lease = make("fixture-response-validated", Some("fixture-worker"))?.context("owned")?;
    store.submit_responses("fixture-response-validated", &answer(), "fixture-key-1")?;
    let _ = lease;
    let lease = make("fixture-delivery-started", Some("fixture-worker"))?.context("owned")?;
    store.submit_responses("fixture-delivery-started", &answer(), "fixture-key-2")?;
    store.start_delivery("fixture-delivery-started", &lease, "fixture-delivery-2")?;
    let lease = make("fixture-delivered", Some("fixture-worker"))?.context("owned")?;
    store.submit_responses("fixture-delivered", &answer(), "fixture-key-3")?;
    store.start_delivery("fixture-delivered", &lease, "fixture-delivery-3")?;
    store.mark_delivered("fixture-delivered", &lease)?;
    let lease = make("fixture-resolved", Some("fixture-worker"))?.context("owned")?;
    store.submit_responses("fixture-resolved", &answer(), "fixture-key-4")?;
    store.start_delivery("fixture-resolved", &lease, "fixture-delivery-4")?;
    store.mark_delivered("fixture-resolved", &lease)?;
    store.resolve("fixture-resolved", &lease)?;
    for (id, code) in [
        ("fixture-failed-cancelled", FailureCode::Cancelled),
        ("fixture-failed-server-error", FailureCode::ServerError),
        ("fixture-failed-withdrawn", FailureCode::RequestWithdrawn),
    ] {
        let lease = make(id, Some("fixture-worker"))?.context("owned")?;
        store.fail(id, &lease, code, "fixture failure")?;
    }
    let lease = make("fixture-failed-recovery", Some("fixture-worker"))?.context("owned")?;
    store.fail_recovery("fixture-failed-recovery", Some(&lease), "fixture recovery")?;
    Ok(())
}

fn kit_on(db: &Path) -> anyhow::Result<McpTestKit> {
    let store = Arc::new(SqliteExecutionStore::open(db)?);
    let env = BTreeMap::from([(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_default(),
    )]);
    Ok(McpTestKit::with_options(store, env, KitOptions::default())?)
}

fn submission(server: &str, human_input: HumanInput) -> Submission {
    Submission::new(
        "Book a shipment.",
        StdioServer::new("shipping", server).args(["--era", "legacy"]),
    )
    .tools(["shipping:book_shipment"])
    .human_input(human_input)
}

/// Executions finished in every outcome, and one queued and one running, through the kit.
fn executions(db: &Path, server: &str, fault_worker: &str) -> anyhow::Result<()> {
    let kit = kit_on(db)?;
    let agent = |script| -> anyhow::Result<m3::Agent> {
        Ok(kit.agents([AgentSpec::scripted(script)])?.remove(0))
    };
    let call = || Script::call("shipping:book_shipment", json!({"item": "book"}));
    // Succeeded: answered through its handle.
    let handle = agent(call())?.submit(submission(server, HumanInput::Managed))?;
    let pending = loop {
        if let Some(pending) = handle.pending_elicitation()? {
            break pending;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    handle.respond_elicitation(&pending.round_id, answer(), "fixture-answer")?;
    if !handle.result(WAIT)?.succeeded() {
        bail!("the answered execution did not succeed");
    }
    // Failed: human input mode `fail` declines.
    let handle = agent(call())?.submit(submission(server, HumanInput::Fail))?;
    handle.result(WAIT)?;
    // Cancelled while it waited.
    let handle = agent(call())?.submit(submission(server, HumanInput::Managed))?;
    while handle.pending_elicitation()?.is_none() {
        std::thread::sleep(Duration::from_millis(10));
    }
    handle.cancel()?;
    handle.result(WAIT)?;
    // Queued: stored, never started.
    m3::testing::submit_without_running(&agent(call())?, submission(server, HumanInput::Managed))?;
    drop(kit);
    // Running, with a pending round: a worker killed while it waited (no kit recovers it here).
    let mut child = Command::new(fault_worker)
        .args(["kit", &db.to_string_lossy(), "600000", server])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
    child.kill()?;
    child.wait()?;
    if !line.starts_with("pending ") {
        bail!("the worker did not reach its round: {line:?}");
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: m3-test-write-fixture DIR SHIPPING_SERVER FAULT_WORKER";
    let dir = args.next().context(usage)?;
    let server = args.next().context(usage)?;
    let fault_worker = args.next().context(usage)?;
    let name = format!("format-{}", m3_guest::stored::FORMAT);
    let db = Path::new(&dir).join(format!("{name}.sqlite"));
    if db.exists() {
        bail!(
            "{} exists: a format's fixture is written once",
            db.display()
        );
    }
    {
        let store = SqliteExecutionStore::open(&db)?;
        let managed = store
            .managed_input_store()?
            .context("a managed-input store")?;
        rounds(&*managed)?;
    }
    executions(&db, &server, &fault_worker)?;
    let read = m3_tests::fixture::read_back(&db)?;
    std::fs::write(
        Path::new(&dir).join(format!("{name}.json")),
        serde_json::to_string_pretty(&read)? + "\n",
    )?;
    println!("wrote {} and its JSON", db.display());
    Ok(())
}
