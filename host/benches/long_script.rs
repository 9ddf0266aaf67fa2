//! A long script: one execution whose script calls the bundled shipping server's tool `N` times,
//! each call asking once for the address (the scripted harness, managed input,
//! `synchronous=FULL`), answered in this process as soon as its round is pending. The period of
//! round `i` is the time from seeing round `i - 1` pending to seeing round `i` pending (answer,
//! delivery, the tool result stored, the next call, the next round). If anything the execution
//! keeps grew with its history (its tool results rewritten with every result, say), later rounds
//! would cost more: the figure is the median period of the last hundred rounds over the median of
//! the first hundred (goal: flat, about 1.0).
//!
//! `cargo bench -p m3 --bench long_script` runs 1,000 steps and writes
//! `target/bench/long_script.json`; `--steps=N` changes the count (no JSON). Without `--bench`
//! (as `cargo test` runs it) or with `--smoke` it runs 30 steps and writes no JSON.

use chrono::Utc;
use m3::{
    AgentSpec, AsyncMcpTestKit, HumanInput, McpEra, OutcomeKind, Script, SqliteExecutionStore,
    StdioServer, Submission,
};
use m3_bench::fixture::{address, path_text};
use m3_bench::stats::{Stats, stats_json};
use m3_bench::{BenchResult, RunArgs, Table, shipping_server_binary, write_report};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest the benchmark waits for any one round.
const WAIT_LIMIT: Duration = Duration::from_secs(60);

fn main() -> BenchResult<()> {
    let run = RunArgs::from_env();
    let steps_arg = run.number("steps").map(|n| n as usize);
    let steps = steps_arg
        .unwrap_or(if run.full { 1_000 } else { 30 })
        .max(2);
    let write_json = run.full && steps_arg.is_none();
    let window = (steps / 10).clamp(1, 100);

    let server = shipping_server_binary()?;
    let scratch = tempfile::tempdir()?;
    let store = Arc::new(SqliteExecutionStore::open(
        scratch.path().join("long.sqlite"),
    )?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (periods, outcome, total) = runtime.block_on(async {
        let kit = AsyncMcpTestKit::new(store.clone(), BTreeMap::<String, String>::new());
        let call = json!({"item": "book", "quantity": 1});
        let mut script = Script::call("shipping:book_shipment", call.clone());
        for _ in 1..steps {
            script = script.then("shipping:book_shipment", call.clone());
        }
        let agent = kit.agents([AgentSpec::scripted(script)])?.remove(0);
        let binding = StdioServer::new("shipping", path_text(&server)?)
            .args(["--era", "modern", "--ask-rounds", "1"])
            .era(McpEra::Modern);
        let submission = Submission::new("Book many shipments.", binding)
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed)
            .round_limit(1);
        let handle = agent.submit(submission).await?;
        let started = Instant::now();
        let mut periods = Vec::with_capacity(steps);
        let mut last_seen: Option<Instant> = None;
        for i in 0..steps {
            let waiting = Instant::now();
            let round = loop {
                if let Some(round) = handle.pending_elicitation().await? {
                    break round;
                }
                if waiting.elapsed() > WAIT_LIMIT {
                    return Err(format!("round {i} never became pending").into());
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            };
            let seen = Instant::now();
            if let Some(previous) = last_seen {
                periods.push((seen - previous).as_secs_f64() * 1e3);
            }
            last_seen = Some(seen);
            handle
                .respond_elicitation(&round.round_id, address(), &format!("step-{i}"))
                .await?;
        }
        let result = handle.result(Some(WAIT_LIMIT)).await?;
        BenchResult::Ok((periods, result.outcome, started.elapsed()))
    })?;
    store.close();
    if outcome.kind != OutcomeKind::Succeeded || outcome.tool_results.len() != steps {
        return Err(format!(
            "the execution ended {} with {} tool results of {steps}",
            outcome,
            outcome.tool_results.len()
        )
        .into());
    }
    let first = Stats::of_nonempty(&periods[..window.min(periods.len())]);
    let last = Stats::of_nonempty(&periods[periods.len().saturating_sub(window)..]);
    let ratio = last.p50 / first.p50;

    let mut table = Table::new(
        &format!("One execution, {steps} script steps, one round each (synchronous=FULL)"),
        &["rounds", "period p50", "p90", "p99"],
    );
    let row = |label: String, s: &Stats| {
        vec![
            label,
            format!("{:.2} ms", s.p50),
            format!("{:.2} ms", s.p90),
            format!("{:.2} ms", s.p99),
        ]
    };
    table.row(row(format!("first {window}"), &first));
    table.row(row(format!("last {window}"), &last));
    table.row(vec![
        "last / first (p50)".into(),
        format!("{ratio:.2}"),
        String::new(),
        String::new(),
    ]);
    table.print();
    println!(
        "{steps} steps in {:.1} s; {} tool results",
        total.as_secs_f64(),
        outcome.tool_results.len()
    );

    if write_json {
        let document = json!({
            "benchmark": "long_script",
            "date": Utc::now().to_rfc3339(),
            "command": "cargo bench -p m3 --bench long_script",
            "steps": steps,
            "synchronous": "FULL",
            "window": window,
            "first_rounds_period_ms": stats_json(Some(first), "ms"),
            "last_rounds_period_ms": stats_json(Some(last), "ms"),
            "last_over_first_p50": ratio,
            "total_seconds": total.as_secs_f64(),
            "goal": {"last_over_first_p50_at_most": 1.1, "met": ratio <= 1.1},
        });
        write_report("long_script", &document)?;
    }
    Ok(())
}
