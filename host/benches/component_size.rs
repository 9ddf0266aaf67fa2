//! The size report (`cargo bench -p m3 --bench component_size`, part of `just bench`).
//!
//! For the two components this crate builds, the engine (`m3::health::engine_component()`, world `engine`) and the
//! policy-only component (`POLICY_COMPONENT`, world `policy-only`, for other hosts), it reports
//! the size in bytes and gzip-compressed (when `gzip` is on PATH), what each imports, the time
//! wasmtime takes to compile it, and for the policy-only component the time to instantiate it
//! and to validate a typical answer through it. It prints a table and writes
//! `target/bench/component-size.json` (under `$CARGO_TARGET_DIR` when set). It never asserts.
//! Without `--bench` (as `cargo test` runs it) or with `--smoke` it times each step once and
//! writes nothing.

use m3::POLICY_COMPONENT;
use m3_bench::stats::quantile;
use m3_bench::{BenchResult, RunArgs, Table, write_report};
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wasmtime::component::{Component, Linker, Val};
use wasmtime::{Config, Engine, Store};

fn wasm<T>(result: wasmtime::Result<T>) -> BenchResult<T> {
    result.map_err(|e| format!("{e:?}").into())
}

/// `gzip -9` size, if gzip is installed.
fn gzip_size(bytes: &[u8]) -> Option<usize> {
    let mut child = Command::new("gzip")
        .arg("-9c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().ok()?;
    writer.join().ok()?.ok()?;
    output.status.success().then_some(output.stdout.len())
}

/// The median time of `repetitions` runs of `step`.
fn time<T>(repetitions: usize, mut step: impl FnMut() -> BenchResult<T>) -> BenchResult<Duration> {
    let mut samples = Vec::with_capacity(repetitions);
    for _ in 0..repetitions {
        let start = Instant::now();
        std::hint::black_box(step()?);
        samples.push(start.elapsed().as_secs_f64());
    }
    let median = quantile(&samples, 0.5).ok_or("no repetitions")?;
    Ok(Duration::from_secs_f64(median))
}

fn imports(engine: &Engine, component: &Component) -> Vec<String> {
    component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect()
}

/// Instantiation and one validation through the policy-only component.
fn policy_calls(
    engine: &Engine,
    component: &Component,
    repetitions: usize,
) -> BenchResult<(Duration, Duration)> {
    let mut linker: Linker<()> = Linker::new(engine);
    wasm(
        wasm(linker.instance("wasi:random/random@0.2.0"))?
            .func_wrap("get-random-bytes", |_, (len,): (u64,)| {
                Ok((vec![4u8; len as usize],))
            }),
    )?;
    let pre = wasm(linker.instantiate_pre(component))?;
    let instantiate = time(repetitions, || {
        let mut store = Store::new(engine, ());
        wasm(pre.instantiate(&mut store))
    })?;

    let mut store = Store::new(engine, ());
    let instance = wasm(pre.instantiate(&mut store))?;
    let policy = instance
        .get_export_index(&mut store, None, "m3:managed-input/policy@0.1.0")
        .ok_or("no policy export")?;
    let index = instance
        .get_export_index(&mut store, Some(&policy), "check-requested-schema")
        .ok_or("no check-requested-schema")?;
    let check = instance
        .get_func(&mut store, index)
        .ok_or("not a function")?;
    let schema = json!({
        "type": "object",
        "properties": {
            "email": {"type": "string", "format": "email"},
            "guests": {"type": "integer", "minimum": 1, "maximum": 8},
            "room": {"type": "string", "enum": ["single", "double"]},
        },
        "required": ["email"],
    })
    .to_string();
    let call = time(repetitions, || {
        let mut results = [Val::Bool(false)];
        wasm(check.call(&mut store, &[Val::String(schema.clone())], &mut results))?;
        match &results[0] {
            Val::Result(Ok(_)) => Ok(()),
            other => Err(format!("the schema was refused: {other:?}").into()),
        }
    })?;
    Ok((instantiate, call))
}

fn main() -> BenchResult<()> {
    let run = RunArgs::from_env();
    let repetitions = if run.full { 5 } else { 1 };
    let engine = wasm(Engine::new(&Config::new()))?;
    let mut table = Table::new(
        &format!(
            "Components (wasmtime, Cranelift; median of {repetitions}; {})",
            run.mode()
        ),
        &["component", "bytes", "gzip -9", "compile", "imports"],
    );
    let mut report = serde_json::Map::new();
    for (name, bytes) in [
        ("engine", m3::health::engine_component()),
        ("policy-only", POLICY_COMPONENT),
    ] {
        let compile = time(repetitions, || wasm(Component::new(&engine, bytes)))?;
        let component = wasm(Component::new(&engine, bytes))?;
        let imports = imports(&engine, &component);
        let gzip = gzip_size(bytes);
        table.row(vec![
            name.to_string(),
            bytes.len().to_string(),
            gzip.map_or("-".into(), |g| g.to_string()),
            format!("{:.0} ms", compile.as_secs_f64() * 1e3),
            imports.len().to_string(),
        ]);
        let mut entry = json!({
            "bytes": bytes.len(),
            "gzip_bytes": gzip,
            "compile_ms": compile.as_secs_f64() * 1e3,
            "imports": imports,
        });
        if name == "policy-only" {
            let (instantiate, call) = policy_calls(&engine, &component, repetitions)?;
            entry["instantiate_us"] = json!(instantiate.as_secs_f64() * 1e6);
            entry["check_requested_schema_us"] = json!(call.as_secs_f64() * 1e6);
            println!(
                "policy-only: instantiate {:.0} us, check-requested-schema {:.0} us",
                instantiate.as_secs_f64() * 1e6,
                call.as_secs_f64() * 1e6
            );
        }
        report.insert(name.to_string(), entry);
    }
    table.print();
    if run.full {
        write_report("component-size", &Value::Object(report))?;
    } else {
        println!("smoke pass: no JSON written (run `cargo bench -p m3 --bench component_size`)");
    }
    Ok(())
}
