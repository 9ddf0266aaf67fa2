//! The policy-only component in hosts this project did not write (issue 8): the shared vectors of
//! `tests/embedding/vectors.json` run through the same `.wasm` in Rust (wasmtime's dynamic API,
//! below), Node (jco) and Python (wasmtime-py), and every host must meet every expectation and
//! return the same values as the others.

use anyhow::{Context, Result, anyhow, bail, ensure};
use m3_tests::peers;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Func, Instance, Linker, Type, Val};
use wasmtime::{Config, Engine, Store};

/// `tests/embedding/`.
fn embedding_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("embedding")
}

/// The vectors file, parsed.
struct Vectors {
    rounds: Map<String, Value>,
    records: Map<String, Value>,
    cases: Vec<Value>,
}

impl Vectors {
    fn load() -> Result<Self> {
        let path = embedding_dir().join("vectors.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let file: Value = serde_json::from_str(&text).context("vectors.json is not JSON")?;
        ensure!(file["format"] == json!(1), "unknown vectors format");
        let section = |name: &str| -> Result<Map<String, Value>> {
            file[name]
                .as_object()
                .cloned()
                .ok_or_else(|| anyhow!("vectors.json has no `{name}` object"))
        };
        let cases = file["vectors"]
            .as_array()
            .cloned()
            .ok_or_else(|| anyhow!("vectors.json has no `vectors` array"))?;
        Ok(Self {
            rounds: section("rounds")?,
            records: section("records")?,
            cases,
        })
    }

    /// `value` with every `$round` / `$record` reference replaced by its (patched) entry.
    fn resolve(&self, value: &Value) -> Result<Value> {
        match value {
            Value::Object(map) if map.contains_key("$string") => long_string(map),
            Value::Object(map) => {
                for (key, table) in [("$round", &self.rounds), ("$record", &self.records)] {
                    if let Some(name) = map.get(key) {
                        let name = name.as_str().context("a reference names a string")?;
                        let base = table
                            .get(name)
                            .with_context(|| format!("no {key} named {name}"))?;
                        let mut resolved = self.resolve(base)?;
                        if let Some(patch) = map.get("$patch") {
                            merge_patch(&mut resolved, &self.resolve(patch)?);
                        }
                        return Ok(resolved);
                    }
                }
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), self.resolve(v)?)))
                    .collect::<Result<Map<_, _>>>()
                    .map(Value::Object)
            }
            Value::Array(items) => items
                .iter()
                .map(|v| self.resolve(v))
                .collect::<Result<_>>()
                .map(Value::Array),
            other => Ok(other.clone()),
        }
    }
}

/// `{"$string": {"prefix", "repeat", "times", "suffix"}}`: prefix + repeat x times + suffix.
fn long_string(map: &Map<String, Value>) -> Result<Value> {
    let spec = &map["$string"];
    let text = |key: &str| {
        spec[key]
            .as_str()
            .with_context(|| format!("$string needs `{key}`"))
    };
    let times = spec["times"].as_u64().context("$string needs `times`")?;
    Ok(Value::String(format!(
        "{}{}{}",
        text("prefix")?,
        text("repeat")?.repeat(usize::try_from(times)?),
        text("suffix")?
    )))
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// Whether `actual` matches `pattern` (objects: every key of the pattern, recursively; arrays:
/// same length, element by element; anything else: equal).
fn matches(pattern: &Value, actual: &Value) -> bool {
    match (pattern, actual) {
        (Value::Object(p), Value::Object(a)) => p
            .iter()
            .all(|(k, pv)| a.get(k).is_some_and(|av| matches(pv, av))),
        (Value::Array(p), Value::Array(a)) => {
            p.len() == a.len() && p.iter().zip(a).all(|(pv, av)| matches(pv, av))
        }
        _ => pattern == actual,
    }
}

/// The JSON form of `value` as a component value of type `ty` (the encoding of
/// `tests/embedding/README.md`).
fn to_val(value: &Value, ty: &Type) -> Result<Val> {
    let int = |v: &Value| v.as_i64().with_context(|| format!("{v} is not an integer"));
    let uint = |v: &Value| {
        v.as_u64()
            .with_context(|| format!("{v} is not an unsigned integer"))
    };
    Ok(match ty {
        Type::Bool => Val::Bool(value.as_bool().context("not a boolean")?),
        Type::String => Val::String(value.as_str().context("not a string")?.to_string()),
        Type::U8 => Val::U8(uint(value)?.try_into()?),
        Type::U16 => Val::U16(uint(value)?.try_into()?),
        Type::U32 => Val::U32(uint(value)?.try_into()?),
        Type::U64 => Val::U64(uint(value)?),
        Type::S8 => Val::S8(int(value)?.try_into()?),
        Type::S16 => Val::S16(int(value)?.try_into()?),
        Type::S32 => Val::S32(int(value)?.try_into()?),
        Type::S64 => Val::S64(int(value)?),
        Type::List(list) => Val::List(
            value
                .as_array()
                .context("not an array")?
                .iter()
                .map(|v| to_val(v, &list.ty()))
                .collect::<Result<_>>()?,
        ),
        Type::Tuple(tuple) => {
            let items = value.as_array().context("not an array")?;
            ensure!(
                items.len() == tuple.types().len(),
                "tuple of the wrong length"
            );
            Val::Tuple(
                items
                    .iter()
                    .zip(tuple.types())
                    .map(|(v, t)| to_val(v, &t))
                    .collect::<Result<_>>()?,
            )
        }
        Type::Record(record) => {
            let object = value.as_object().context("not an object")?;
            let names: BTreeSet<&str> = record.fields().map(|f| f.name).collect();
            if let Some(unknown) = object.keys().find(|k| !names.contains(k.as_str())) {
                bail!("unknown record field `{unknown}`");
            }
            Val::Record(
                record
                    .fields()
                    .map(|field| {
                        let v = object.get(field.name).unwrap_or(&Value::Null);
                        if v.is_null() && !matches!(field.ty, Type::Option(_)) {
                            bail!("record field `{}` is missing", field.name);
                        }
                        Ok((
                            field.name.to_string(),
                            to_val(v, &field.ty)
                                .with_context(|| format!("field `{}`", field.name))?,
                        ))
                    })
                    .collect::<Result<_>>()?,
            )
        }
        Type::Variant(variant) => {
            let tag = value["tag"].as_str().context("a variant needs a `tag`")?;
            let case = variant
                .cases()
                .find(|c| c.name == tag)
                .with_context(|| format!("no variant case `{tag}`"))?;
            let payload = match (&case.ty, value.get("val")) {
                (Some(ty), Some(v)) => Some(Box::new(to_val(v, ty)?)),
                (None, None) => None,
                _ => bail!("variant case `{tag}` has the wrong payload"),
            };
            Val::Variant(tag.to_string(), payload)
        }
        Type::Enum(names) => {
            let name = value.as_str().context("an enum is a string")?;
            ensure!(names.names().any(|n| n == name), "no enum case `{name}`");
            Val::Enum(name.to_string())
        }
        Type::Option(option) => Val::Option(match value {
            Value::Null => None,
            v => Some(Box::new(to_val(v, &option.ty())?)),
        }),
        other => bail!("the vectors use no {other:?}"),
    })
}

/// The JSON form of a component value.
fn from_val(val: &Val) -> Value {
    match val {
        Val::Bool(b) => json!(b),
        Val::U8(n) => json!(n),
        Val::U16(n) => json!(n),
        Val::U32(n) => json!(n),
        Val::U64(n) => json!(n),
        Val::S8(n) => json!(n),
        Val::S16(n) => json!(n),
        Val::S32(n) => json!(n),
        Val::S64(n) => json!(n),
        Val::String(s) => json!(s),
        Val::List(items) | Val::Tuple(items) => Value::Array(items.iter().map(from_val).collect()),
        Val::Record(fields) => Value::Object(
            fields
                .iter()
                .map(|(name, v)| (name.clone(), from_val(v)))
                .collect(),
        ),
        Val::Variant(tag, payload) => match payload {
            Some(v) => json!({"tag": tag, "val": from_val(v)}),
            None => json!({"tag": tag}),
        },
        Val::Enum(name) => json!(name),
        Val::Option(v) => v.as_deref().map_or(Value::Null, from_val),
        Val::Result(Ok(v)) => json!({"ok": v.as_deref().map_or(Value::Null, from_val)}),
        Val::Result(Err(v)) => json!({"err": v.as_deref().map_or(Value::Null, from_val)}),
        other => json!(format!("unsupported value {other:?}")),
    }
}

/// A wasmtime result as an `anyhow` one (the workspace's wasmtime is built without its `anyhow`
/// feature).
fn wasm<T>(result: wasmtime::Result<T>) -> Result<T> {
    result.map_err(|e| anyhow!("{e:?}"))
}

/// The policy-only component in wasmtime, loaded the way any Rust embedder would: one import to
/// provide (`wasi:random/random.get-random-bytes`), two interfaces to call.
struct PolicyHost {
    engine: Engine,
    component: Component,
    linker: Linker<()>,
}

impl PolicyHost {
    fn new(bytes: &[u8]) -> Result<Self> {
        let engine = wasm(Engine::new(&Config::new()))?;
        let component = wasm(Component::new(&engine, bytes))?;
        let mut linker = Linker::new(&engine);
        wasm(
            wasm(linker.instance("wasi:random/random@0.2.0"))?.func_wrap(
                "get-random-bytes",
                |_, (len,): (u64,)| {
                    let mut bytes = vec![0u8; len as usize];
                    getrandom::fill(&mut bytes)
                        .map_err(|e| wasmtime::format_err!("no randomness: {e}"))?;
                    Ok((bytes,))
                },
            ),
        )?;
        Ok(Self {
            engine,
            component,
            linker,
        })
    }

    /// A fresh instance (a trap poisons an instance; every vector gets its own).
    fn instantiate(&self) -> Result<(Store<()>, Instance)> {
        let mut store = Store::new(&self.engine, ());
        let instance = wasm(self.linker.instantiate(&mut store, &self.component))?;
        Ok((store, instance))
    }

    /// Calls `<interface>.<function>` with JSON arguments; returns the JSON result.
    fn call(&self, call: &str, args: &[Value]) -> Result<Value> {
        let (interface, function) = call.split_once('.').context("call is interface.function")?;
        let (mut store, instance) = self.instantiate()?;
        let interface_index = instance
            .get_export_index(
                &mut store,
                None,
                &format!("m3:managed-input/{interface}@0.1.0"),
            )
            .with_context(|| format!("no exported interface {interface}"))?;
        let function_index = instance
            .get_export_index(&mut store, Some(&interface_index), function)
            .with_context(|| format!("{interface} exports no {function}"))?;
        let func: Func = instance
            .get_func(&mut store, function_index)
            .context("not a function")?;
        let ty = func.ty(&store);
        ensure!(
            ty.params().len() == args.len(),
            "{call} takes {} arguments",
            ty.params().len()
        );
        let params = ty
            .params()
            .zip(args)
            .map(|((name, ty), arg)| to_val(arg, &ty).with_context(|| format!("argument `{name}`")))
            .collect::<Result<Vec<_>>>()?;
        let mut results = vec![Val::Bool(false); ty.results().len()];
        wasm(func.call(&mut store, &params, &mut results))?;
        ensure!(
            results.len() == 1,
            "{call} returns {} values",
            results.len()
        );
        Ok(from_val(&results[0]))
    }
}

/// Lease tokens granted by `create` and `claim` (of a round or an execution) are random: they
/// are compared as "present".
fn mask_random(case: &Value, mut result: Value) -> Value {
    let granting = match case["call"].as_str() {
        Some("round-protocol.decide") => {
            matches!(case["args"][2]["tag"].as_str(), Some("create" | "claim"))
        }
        Some("execution-rules.decide") => case["args"][2]["tag"] == "claim",
        _ => false,
    };
    if granting && let Some(token) = result.pointer_mut("/ok/next/lease/lease-token") {
        *token = json!("<random>");
    }
    result
}

/// Runs every vector in Rust; returns id -> result.
fn run_in_rust(vectors: &Vectors) -> Result<BTreeMap<String, Value>> {
    let host = PolicyHost::new(m3::POLICY_COMPONENT)?;
    let mut results = BTreeMap::new();
    let mut mismatches = Vec::new();
    for case in &vectors.cases {
        let id = case["id"].as_str().context("a vector without an id")?;
        let args = vectors.resolve(&case["args"])?;
        let args = args.as_array().context("args is an array")?;
        let result = host
            .call(case["call"].as_str().context("call")?, args)
            .with_context(|| format!("vector {id}"))?;
        if !matches(&case["expect"], &result) {
            mismatches.push(format!("{id}: expected {} got {result}", case["expect"]));
        }
        ensure!(
            results
                .insert(id.to_string(), mask_random(case, result))
                .is_none(),
            "two vectors are named {id}"
        );
    }
    ensure!(
        mismatches.is_empty(),
        "the Rust host disagrees with {} vectors:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    Ok(results)
}

/// Reads a runner's `out.json` and checks it agrees with Rust on every vector.
fn check_agreement(
    host: &str,
    vectors: &Vectors,
    out: &Path,
    rust: &BTreeMap<String, Value>,
) -> Result<()> {
    let text =
        std::fs::read_to_string(out).with_context(|| format!("reading {}", out.display()))?;
    let file: Value = serde_json::from_str(&text)?;
    ensure!(
        file["host"] == json!(host),
        "{} is not the {host} output",
        out.display()
    );
    let results = file["results"].as_array().context("no results")?;
    let by_id: BTreeMap<&str, &Value> = results
        .iter()
        .map(|r| (r["id"].as_str().unwrap_or_default(), &r["result"]))
        .collect();
    let mut disagreements = Vec::new();
    for case in &vectors.cases {
        let id = case["id"].as_str().unwrap_or_default();
        let Some(theirs) = by_id.get(id) else {
            disagreements.push(format!("{id}: no result from {host}"));
            continue;
        };
        let theirs = mask_random(case, (*theirs).clone());
        if !matches(&case["expect"], &theirs) {
            disagreements.push(format!(
                "{id}: {host} does not meet the expectation: {theirs}"
            ));
        } else if rust.get(id) != Some(&theirs) {
            disagreements.push(format!(
                "{id}: Rust says {}, {host} says {theirs}",
                rust[id]
            ));
        }
    }
    ensure!(
        by_id.len() == vectors.cases.len(),
        "{host} returned {} results for {} vectors",
        by_id.len(),
        vectors.cases.len()
    );
    ensure!(
        disagreements.is_empty(),
        "{host} and Rust disagree on {} vectors:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    Ok(())
}

/// Runs `command`, failing with its output unless it exits 0.
fn run(command: &mut Command, what: &str) -> Result<()> {
    let output = command
        .output()
        .with_context(|| format!("starting {what}"))?;
    ensure!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// The component written to a scratch file, as an embedder would ship it.
fn component_file(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("m3_policy.wasm");
    std::fs::write(&path, m3::POLICY_COMPONENT)?;
    Ok(path)
}

/// The policy-only component's whole interface: it exports `policy`, `round-protocol` and
/// `execution-rules` and
/// imports `wasi:random/random` plus the function-less `types` instance (which a host satisfies
/// by doing nothing), so any component host can run it without the m3 imports.
#[test]
fn the_policy_component_imports_only_wasi_random() -> Result<()> {
    let engine = wasm(Engine::new(&Config::new()))?;
    let component = wasm(Component::new(&engine, m3::POLICY_COMPONENT))?;
    let ty = component.component_type();
    let imports: BTreeSet<String> = ty.imports(&engine).map(|(n, _)| n.to_string()).collect();
    let exports: BTreeSet<String> = ty.exports(&engine).map(|(n, _)| n.to_string()).collect();
    ensure!(
        imports
            == BTreeSet::from([
                "wasi:random/random@0.2.0".to_string(),
                "m3:managed-input/types@0.1.0".to_string()
            ]),
        "the policy-only component imports {imports:?}"
    );
    ensure!(
        exports
            == BTreeSet::from([
                "m3:managed-input/policy@0.1.0".to_string(),
                "m3:managed-input/round-protocol@0.1.0".to_string(),
                "m3:managed-input/execution-rules@0.1.0".to_string()
            ]),
        "the policy-only component exports {exports:?}"
    );
    let types = ty
        .imports(&engine)
        .find(|(n, _)| n.starts_with("m3:"))
        .map(|(_, item)| item.ty)
        .context("no types import")?;
    let ComponentItem::ComponentInstance(instance) = types else {
        bail!("the types import is not an instance");
    };
    ensure!(
        instance
            .exports(&engine)
            .all(|(_, item)| matches!(item.ty, ComponentItem::Type(_))),
        "the types import carries more than types"
    );
    // Built without the engine: far smaller than it.
    ensure!(
        m3::POLICY_COMPONENT.len() * 2 < m3::health::engine_component().len(),
        "the policy-only component ({} bytes) is not well under the engine ({} bytes)",
        m3::POLICY_COMPONENT.len(),
        m3::health::engine_component().len()
    );
    Ok(())
}

#[test]
fn rust_meets_every_vector() -> Result<()> {
    let vectors = Vectors::load()?;
    let results = run_in_rust(&vectors)?;
    ensure!(results.len() == vectors.cases.len());
    Ok(())
}

#[test]
fn node_agrees_with_rust_on_every_vector() -> Result<()> {
    let vectors = Vectors::load()?;
    let rust = run_in_rust(&vectors)?;
    let npm = peers::npm_dir()?;
    let scratch = tempfile::tempdir()?;
    let wasm = component_file(scratch.path())?;
    let out_dir = tempfile::tempdir()?;
    run(
        Command::new(peers::node()?)
            .arg(peers::jco()?)
            .arg("transpile")
            .arg(&wasm)
            .arg("-o")
            .arg(out_dir.path())
            .args(["--name", "m3_policy", "--quiet"]),
        "jco transpile",
    )?;
    let out = scratch.path().join("node.json");
    run(
        Command::new(peers::node()?)
            .env("NODE_PATH", npm.join("node_modules"))
            .arg(embedding_dir().join("node").join("run-vectors.mjs"))
            .arg(out_dir.path().join("m3_policy.js"))
            .arg(embedding_dir().join("vectors.json"))
            .arg(&out),
        "the Node runner",
    )?;
    check_agreement("node", &vectors, &out, &rust)
}

#[test]
fn python_agrees_with_rust_on_every_vector() -> Result<()> {
    let vectors = Vectors::load()?;
    let rust = run_in_rust(&vectors)?;
    let python = peers::python_mcp()?;
    let scratch = tempfile::tempdir()?;
    let wasm = component_file(scratch.path())?;
    let out = scratch.path().join("python.json");
    run(
        Command::new(python)
            .arg(embedding_dir().join("python").join("run_vectors.py"))
            .arg(&wasm)
            .arg(embedding_dir().join("vectors.json"))
            .arg(&out),
        "the Python runner",
    )?;
    check_agreement("wasmtime-py", &vectors, &out, &rust)
}

/// The rejection table's rows (`ARCHITECTURE.md`), first column.
fn rejection_table_rows(heading: &str) -> Result<Vec<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path)?;
    let start = text
        .find(heading)
        .with_context(|| format!("ARCHITECTURE.md has no `{heading}`"))?;
    let rows: Vec<String> = text[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.split('|').nth(1).unwrap_or_default().trim().to_string())
        .collect();
    ensure!(!rows.is_empty(), "the table under `{heading}` has no rows");
    Ok(rows)
}

#[test]
fn the_vectors_cover_every_row_the_component_decides() -> Result<()> {
    let vectors = Vectors::load()?;
    let covered: BTreeSet<&str> = vectors
        .cases
        .iter()
        .filter_map(|c| c["row"].as_str())
        .collect();
    let rows = rejection_table_rows("## Rejection table")?;
    let missing: Vec<&String> = rows
        .iter()
        .filter(|r| !covered.contains(r.as_str()))
        .collect();
    ensure!(
        missing.is_empty(),
        "rows of the rejection table without a vector: {missing:#?}"
    );
    let unknown: Vec<&&str> = covered
        .iter()
        .filter(|c| !rows.iter().any(|r| r == *c))
        .collect();
    ensure!(
        unknown.is_empty(),
        "vectors name rows that are not in the table: {unknown:#?}"
    );
    Ok(())
}

/// The first code block in `lang` under the heading `## {section}` of EMBEDDING.md.
fn guide_snippet(section: &str, lang: &str) -> Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../EMBEDDING.md");
    let guide = std::fs::read_to_string(&path)?;
    let start = guide
        .find(&format!("\n## {section}"))
        .with_context(|| format!("EMBEDDING.md has no section {section}"))?;
    let fence = format!("```{lang}\n");
    let open = start
        + guide[start..]
            .find(&fence)
            .with_context(|| format!("no {lang} block under {section}"))?
        + fence.len();
    let close = open + guide[open..].find("\n```").context("an unclosed block")?;
    Ok(guide[open..=close].to_string())
}

/// The guide's JavaScript example runs as written on the transpiled component and prints what
/// its comments say.
#[test]
fn the_guides_javascript_example_runs() -> Result<()> {
    let npm = peers::npm_dir()?;
    // Inside the install, as in a project that installed the shim: the transpiled module finds
    // `@bytecodealliance/preview2-shim` through ordinary node_modules resolution.
    let project = tempfile::tempdir_in(&npm)?;
    let wasm = component_file(project.path())?;
    run(
        Command::new(peers::node()?)
            .current_dir(project.path())
            .arg(peers::jco()?)
            .arg("transpile")
            .arg(&wasm)
            .args(["-o", "m3_policy", "--name", "m3_policy", "--quiet"]),
        "jco transpile",
    )?;
    let script = project.path().join("example.mjs");
    std::fs::write(&script, guide_snippet("JavaScript", "js")?)?;
    let output = Command::new(peers::node()?)
        .current_dir(project.path())
        .arg(&script)
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success(),
        "the example failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    ensure!(
        stdout == "{\"email\":\"ada@example.com\"}\nvalidation schema-violation contact email\n",
        "the example printed {stdout:?}"
    );
    Ok(())
}

/// The guide's Python example runs as written with the pinned wasmtime-py and prints what its
/// comments say.
#[test]
fn the_guides_python_example_runs() -> Result<()> {
    let python = peers::python_mcp()?;
    let scratch = tempfile::tempdir()?;
    let wasm = component_file(scratch.path())?;
    let script = scratch.path().join("example.py");
    std::fs::write(&script, guide_snippet("Python", "python")?)?;
    let output = Command::new(python).arg(&script).arg(&wasm).output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success(),
        "the example failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    ensure!(
        stdout == "None\nvalidation unsupported-schema\n",
        "the example printed {stdout:?}"
    );
    Ok(())
}
