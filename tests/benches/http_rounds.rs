//! Round latency over Streamable HTTP against stdio, with the same server in the same run: the
//! pinned Python SDK's `tests/peers/booking_server.py`, started by the kit over stdio for each
//! execution, and once over HTTP on loopback (its Streamable HTTP mode) for all of them, in
//! both eras (legacy: `elicitation/create` on the call's stream; 2026-07-28: `input_required`
//! and a retry). Executions alternate between the two transports, so both see the same machine.
//!
//! Per round, from the store's own timestamps: `answer -> delivered` (the commit of the answer
//! to `delivered`: the worker hears it, commits `delivery-started`, sends, and over HTTP waits
//! for the server to accept it) and `answer -> resolved` (to the server's reply to it: the
//! operation's result). And per execution, from the caller's clock, `submit -> pending` (over
//! stdio it includes starting the Python server; over HTTP, connecting to a running one).
//!
//! `cargo bench -p m3-tests --bench http_rounds` (part of `just bench`) writes
//! `target/bench/http_rounds.json`; without `--bench` (as `cargo test` runs it) or
//! with `--smoke` it runs a short smoke pass and writes no JSON. Nothing here fails on a time.

use m3::{
    AgentSpec, ElicitationResponse, ExecutionStore, HttpServer, HumanInput, McpEra, McpTestKit,
    Script, ServerBinding, SqliteExecutionStore, StdioServer, Submission,
};
use m3_bench::stats::{Stats, stats_json};
use m3_bench::{BenchResult, RunArgs, Table, write_report};
use m3_tests::http_server::HttpServer as HttpPeer;
use m3_tests::peers;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The samples of one transport in one era.
#[derive(Default)]
struct Samples {
    delivered_ms: Vec<f64>,
    resolved_ms: Vec<f64>,
    pending_ms: Vec<f64>,
}

fn main() -> BenchResult<()> {
    let run = RunArgs::from_env();
    let rounds = if run.full { 30 } else { 2 };
    let command = peers::booking_server()?;
    let program = command.program.to_str().ok_or("a UTF-8 program path")?;
    let args: Vec<String> = command
        .args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let peer = HttpPeer::start(
        "booking_server.py over HTTP",
        peers::booking_http_server(false, 0)?,
        &[],
        "/mcp",
    )?;
    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteExecutionStore::open(
        dir.path().join("rounds.sqlite"),
    )?);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let agent = kit
        .agents([AgentSpec::scripted(Script::call(
            "booking:book_table",
            json!({"restaurant": "Chez M3"}),
        ))])?
        .remove(0);
    let managed = store
        .managed_input_store()?
        .ok_or("a persistent store has managed input")?;
    let answer = json!({"name": "Asha", "guests": 3, "seating": "terrace"});

    let mut results: BTreeMap<(&str, &str), Samples> = BTreeMap::new();
    for (era, era_name, key) in [
        (McpEra::Legacy, "legacy", "elicitation"),
        (McpEra::Modern, "2026-07-28", "__main__:ask_booking"),
    ] {
        // One warm-up of each, not counted.
        for i in 0..=rounds {
            for transport in ["stdio", "http"] {
                let binding: ServerBinding = match transport {
                    "stdio" => StdioServer::new("booking", program)
                        .args(args.iter().cloned())
                        .era(era)
                        .into(),
                    _ => HttpServer::new("booking", peer.url()).era(era).into(),
                };
                let submitted = Instant::now();
                let handle = agent.submit(
                    Submission::new("Book a table.", binding)
                        .tools(["booking:book_table"])
                        .human_input(HumanInput::Managed),
                )?;
                let until = Instant::now() + Duration::from_secs(60);
                let pending = loop {
                    if let Some(pending) = handle.pending_elicitation()? {
                        break pending;
                    }
                    if Instant::now() > until {
                        return Err(format!("no round over {transport} in time").into());
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                let to_pending = submitted.elapsed();
                handle.respond_elicitation(
                    &pending.round_id,
                    BTreeMap::from([(
                        key.to_string(),
                        ElicitationResponse::accept(answer.clone()),
                    )]),
                    &pending.round_id,
                )?;
                let result = handle.result(Some(Duration::from_secs(60)))?;
                if !result.succeeded() {
                    return Err(format!("{transport} {era_name}: {}", result.outcome).into());
                }
                if i == 0 {
                    continue;
                }
                let record = managed
                    .get_round(&pending.round_id)?
                    .ok_or("the round is gone")?;
                let t = &record.timestamps;
                let (Some(validated), Some(delivered), Some(resolved)) =
                    (t.response_validated_at, t.delivered_at, t.resolved_at)
                else {
                    return Err("a resolved round without its timestamps".into());
                };
                let ms = |d: chrono::Duration| d.num_microseconds().unwrap_or(0) as f64 / 1e3;
                let samples = results.entry((era_name, transport)).or_default();
                samples.delivered_ms.push(ms(delivered - validated));
                samples.resolved_ms.push(ms(resolved - validated));
                samples.pending_ms.push(to_pending.as_secs_f64() * 1e3);
            }
        }
    }

    let mut table = Table::new(
        "booking_server.py (mcp 2.3.0), the same server over stdio and over HTTP",
        &[
            "era",
            "transport",
            "rounds",
            "answer->delivered p50",
            "p99",
            "answer->resolved p50",
            "p99",
            "submit->pending p50",
        ],
    );
    let mut report = Vec::new();
    for ((era, transport), samples) in &results {
        let delivered = Stats::of(&samples.delivered_ms);
        let resolved = Stats::of(&samples.resolved_ms);
        let pending = Stats::of(&samples.pending_ms);
        let cell = |s: &Option<Stats>, p99: bool| {
            s.as_ref()
                .map(|s| format!("{:.2} ms", if p99 { s.p99 } else { s.p50 }))
                .unwrap_or_default()
        };
        table.row(vec![
            era.to_string(),
            transport.to_string(),
            samples.delivered_ms.len().to_string(),
            cell(&delivered, false),
            cell(&delivered, true),
            cell(&resolved, false),
            cell(&resolved, true),
            cell(&pending, false),
        ]);
        report.push(json!({
            "era": era,
            "transport": transport,
            "answer_to_delivered_ms": stats_json(delivered, "ms"),
            "answer_to_resolved_ms": stats_json(resolved, "ms"),
            "submit_to_pending_ms": stats_json(pending, "ms"),
        }));
    }
    table.print();
    drop(kit);
    store.close();

    if run.full {
        let version = peers::installed_python_mcp_version(&peers::python_mcp()?)?;
        let report: Value = json!({
            "benchmark": "http_rounds",
            "server": format!("tests/peers/booking_server.py on mcp {version}"),
            "rounds_per_case": rounds,
            "definitions": {
                "answer_to_delivered": "delivered_at - response_validated_at (store timestamps)",
                "answer_to_resolved": "resolved_at - response_validated_at (store timestamps)",
                "submit_to_pending": "from submit() to pending_elicitation() seeing the round (stdio includes starting the server)",
            },
            "cases": report,
        });
        write_report("http_rounds", &report)?;
    }
    Ok(())
}
