//! A worker process for crash tests: runs one round through its lifecycle on the database given
//! as the first argument (a SQLite file's path or a PostgreSQL URL), printing `acknowledged <operation>` after each acknowledged step. Run
//! with `M3_FAULT_POINT` (and `M3_FAULT_HIT`) it is killed with SIGKILL at that point.
//!
//! Usage: `m3-test-fault-worker DB LEASE_TTL_MS` (with `M3_FAULT_RENEW` set it also renews its
//! lease once after creating the round).
//!
//! `m3-test-fault-worker kit DB LEASE_TTL_MS SHIPPING_SERVER [BINARY MODEL_BASE_URL [HARNESS]]`
//! instead runs a kit whose worker waits on a managed round of the shipping server (on the
//! scripted harness, or on HARNESS, `codex` (the default) or `claude-code`, with its program
//! BINARY, when one is given): it prints `pending ROUND EXECUTION` once the
//! round is pending, then waits (renewing its lease) until it is killed. When SHIPPING_SERVER
//! is an `http://` URL it is a Streamable HTTP server instead, `booking_server.py`'s HTTP mode:
//! the round is `book_table`'s, in the 2026-07-28 era.
//!
//! `m3-test-fault-worker ask DB PROGRAM [ARG...]` runs a kit whose scripted agent calls
//! `ts:ask_with_timeout` on the legacy-era stdio server `PROGRAM ARG...` (the withdrawing
//! server, `tests/peers/withdrawing_server.mjs`): it prints `pending ROUND EXECUTION` once the
//! round is pending, then `ended KIND` once the execution has finished, and exits. Armed with
//! `M3_FAULT_POINT=server_output.matched`, `M3_FAULT_MATCH=notifications/cancelled` and
//! `M3_FAULT_PAUSE=DIR`, its worker pauses when the server's withdrawal is about to reach the
//! component (`host/src/checks/fault.rs`).

use m3::{ElicitationResponse, ManagedInputStore, NewRound, OwnerClaim, StoreOptions};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

fn kit(mut args: impl Iterator<Item = String>) -> anyhow::Result<()> {
    let usage = || {
        anyhow::anyhow!(
            "usage: kit DB LEASE_TTL_MS SHIPPING_SERVER [BINARY MODEL_URL [codex|claude-code]]"
        )
    };
    let db = args.next().ok_or_else(usage)?;
    let ttl = Duration::from_millis(args.next().ok_or_else(usage)?.parse()?);
    let server = args.next().ok_or_else(usage)?;
    let binary = args.next();
    let model_url = args.next();
    let harness = args.next().unwrap_or_else(|| "codex".into());
    let store: std::sync::Arc<dyn m3::ExecutionStore> =
        if db.starts_with("postgres://") || db.starts_with("postgresql://") {
            std::sync::Arc::new(m3::PostgresExecutionStore::open(
                &db,
                StoreOptions::default(),
            )?)
        } else {
            std::sync::Arc::new(m3::SqliteExecutionStore::open(&db)?)
        };
    let options = m3::KitOptions {
        lease_ttl: ttl,
        lease_renew: ttl / 4,
    };
    let mut env = BTreeMap::from([(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_default(),
    )]);
    if harness == "claude-code" {
        env.insert("ANTHROPIC_API_KEY".into(), "sk-ant-loopback".into());
    }
    let kit = m3::McpTestKit::with_options(store, env, options)?;
    let spec = match (binary, model_url) {
        (Some(binary), Some(url)) if harness == "claude-code" => m3::AgentSpec::claude_code(
            ["fake-model"],
            m3::ClaudeCodeOptions {
                binary,
                base_url: Some(url),
                credentials: m3::ClaudeCodeCredentials::None,
                ..m3::ClaudeCodeOptions::default()
            },
        ),
        (Some(binary), Some(url)) => m3::AgentSpec::codex(
            ["fake-model"],
            m3::CodexOptions {
                binary,
                model_provider: Some(m3::ModelProvider::responses("fake", url)),
                ..m3::CodexOptions::default()
            },
        ),
        _ => m3::AgentSpec::scripted(m3::Script::call(
            "shipping:book_shipment",
            json!({"item": "book"}),
        )),
    };
    let submission = if server.starts_with("http://") {
        let spec = m3::AgentSpec::scripted(m3::Script::call(
            "booking:book_table",
            json!({"restaurant": "Chez M3"}),
        ));
        let agent = kit.agents([spec])?.remove(0);
        agent.submit(
            m3::Submission::new(
                "Book a table.",
                m3::HttpServer::new("booking", server).era(m3::McpEra::Modern),
            )
            .tools(["booking:book_table"])
            .human_input(m3::HumanInput::Managed),
        )
    } else {
        let agent = kit.agents([spec])?.remove(0);
        agent.submit(
            m3::Submission::new(
                "Book a shipment.",
                m3::StdioServer::new("shipping", server).args(["--era", "legacy"]),
            )
            .tools(["shipping:book_shipment"])
            .human_input(m3::HumanInput::Managed),
        )
    };
    let handle = submission?;
    loop {
        if let Some(pending) = handle.pending_elicitation()? {
            println!("pending {} {}", pending.round_id, pending.execution_id);
            std::io::stdout().flush()?;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// `ask DB PROGRAM [ARG...]`: one execution asking through the withdrawing server's
/// `ask_with_timeout`, reported on stdout until it ends.
fn ask(mut args: impl Iterator<Item = String>) -> anyhow::Result<()> {
    let usage = || anyhow::anyhow!("usage: ask DB PROGRAM [ARG...]");
    let db = args.next().ok_or_else(usage)?;
    let program = args.next().ok_or_else(usage)?;
    let store = std::sync::Arc::new(m3::SqliteExecutionStore::open(&db)?);
    let env = BTreeMap::from([(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_default(),
    )]);
    let kit = m3::McpTestKit::new(store, env)?;
    let agent = kit
        .agents([m3::AgentSpec::scripted(m3::Script::call(
            "ts:ask_with_timeout",
            json!({}),
        ))])?
        .remove(0);
    let handle = agent.submit(
        m3::Submission::new(
            "Ask, then act.",
            m3::StdioServer::new("ts", program)
                .args(args)
                .era(m3::McpEra::Legacy),
        )
        .tools(["ts:ask_with_timeout"])
        .human_input(m3::HumanInput::Managed),
    )?;
    let pending = loop {
        if let Some(pending) = handle.pending_elicitation()? {
            break pending;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    println!("pending {} {}", pending.round_id, pending.execution_id);
    std::io::stdout().flush()?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    println!("ended {:?}", result.outcome.kind);
    std::io::stdout().flush()?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("kit") {
        args.next();
        return kit(args);
    }
    if args.peek().map(String::as_str) == Some("ask") {
        args.next();
        return ask(args);
    }
    let db = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: DB LEASE_TTL_MS"))?;
    let ttl: u64 = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: DB LEASE_TTL_MS"))?
        .parse()?;
    let store = m3::DatabaseStore::open(&db, StoreOptions::default())?;
    let acknowledged = |op: &str| {
        println!("acknowledged {op}");
        let _ = std::io::stdout().flush();
    };
    let owner = OwnerClaim {
        owner_id: "crash-worker".into(),
        lease_ttl: Duration::from_millis(ttl),
    };
    let round = NewRound::new(
        "r1",
        "exec-1",
        "shipping",
        "book_shipment",
        m3_tests::address_requests(),
    )
    .owned_by(owner);
    let mut lease = store.create_round(&round)?.lease.expect("owned");
    acknowledged("create_round");
    if std::env::var_os("M3_FAULT_RENEW").is_some() {
        // The worker renews its lease while it waits (the crash matrix kills it there too).
        lease = store.renew("r1", &lease, Duration::from_millis(ttl))?;
        acknowledged("renew");
    }
    let answer = BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )]);
    store.submit_responses("r1", &answer, "address-r1")?;
    acknowledged("submit_responses");
    store.start_delivery("r1", &lease, "delivery-r1")?;
    acknowledged("start_delivery");
    store.mark_delivered("r1", &lease)?;
    acknowledged("mark_delivered");
    store.resolve("r1", &lease)?;
    acknowledged("resolve");
    Ok(())
}
