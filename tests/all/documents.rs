//! The documents keep their word: every test RELIABILITY.md, ARCHITECTURE.md, the decision
//! records (`docs/decisions/`) and the folders' code maps name exists (also one cut short with
//! `...`), each folder's code map (the `# Files` section of its module root's `//!`
//! documentation, or of its README.md) names every source file of the folder by one entry and
//! each entry names one file, every `just` recipe is listed, every measured figure outside
//! BENCHMARKS.md is configuration, a copy of a dated BENCHMARKS.md figure or dated itself (the
//! README gives none of its own), and RELIABILITY.md lists exactly the mutation check's
//! mutations and tests.

use anyhow::{Context, Result, bail, ensure};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace")
        .to_path_buf()
}

fn read(relative: &str) -> Result<String> {
    std::fs::read_to_string(root().join(relative)).with_context(|| relative.to_string())
}

/// Where the workspace keeps source: `.rs`, `.wit` and (the Python package's) `.py` and
/// `.pyi` files under these folders.
const SOURCE_DIRS: [&str; 15] = [
    "wit",
    "guest/src",
    "host/src",
    "host/build-support/src",
    "host/components",
    "host/benches",
    "host/cli",
    "tests/all",
    "tests/support",
    "tests/benches",
    "examples",
    "host/python",
    "tests/python",
    "tests/peers",
    "tests/embedding",
];

/// Every source file of the workspace's own, relative to the root, sorted.
fn source_files() -> Result<Vec<String>> {
    let root = root();
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        let mut stack = vec![root.join(dir)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).with_context(|| dir.display().to_string())? {
                let path = entry?.path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if path.is_dir() {
                    if name != "target" && name != "node_modules" && !name.starts_with('.') {
                        stack.push(path);
                    }
                } else if [".rs", ".wit", ".py", ".pyi"]
                    .iter()
                    .any(|e| name.ends_with(e))
                {
                    let relative = path.strip_prefix(&root)?.to_string_lossy().into_owned();
                    files.push(relative);
                }
            }
        }
    }
    files.sort();
    files.dedup();
    Ok(files)
}

/// The backticked spans of `text`.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// One test function: the module path of its file and its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct TestFn {
    module: Vec<String>,
    name: String,
}

/// The module path a test in `file` is named by: the file's path below its crate's test or
/// source folder, without `mod.rs`/`main.rs`/`lib.rs`.
fn module_of(file: &str) -> Vec<String> {
    let trimmed = [
        "tests/all/",
        "host/cli/tests/",
        "guest/src/",
        "host/src/",
        "host/cli/src/",
    ]
    .iter()
    .find_map(|prefix| file.strip_prefix(prefix))
    .unwrap_or(file);
    let without = trimmed.trim_end_matches(".rs");
    without
        .split('/')
        .filter(|s| !matches!(*s, "mod" | "main" | "lib"))
        .map(str::to_string)
        .collect()
}

/// Every `#[test]` / `#[tokio::test]` function in the workspace's Rust source.
fn test_functions() -> Result<BTreeSet<TestFn>> {
    let mut tests = BTreeSet::new();
    for file in source_files()?.iter().filter(|f| f.ends_with(".rs")) {
        let text = read(file)?;
        // The bodies of `on_both_backends!` are tests of the module itself and of its
        // `sqlite` and `postgres` modules; those of `on_both_harnesses!` of its `codex` and
        // `claude_code` modules.
        for (marker, variants) in [
            ("on_both_backends! {", ["sqlite", "postgres"]),
            ("on_both_harnesses! {", ["codex", "claude_code"]),
        ] {
            let Some((_, block)) = text.split_once(marker) else {
                continue;
            };
            for line in block.lines() {
                let Some(after) = line.strip_prefix("    fn ") else {
                    continue;
                };
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                for variant in [None, Some(variants[0]), Some(variants[1])] {
                    let mut module = module_of(file);
                    module.extend(variant.map(str::to_string));
                    tests.insert(TestFn {
                        module,
                        name: name.clone(),
                    });
                }
            }
        }
        let mut marked = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
                marked = true;
                continue;
            }
            if !marked {
                continue;
            }
            let rest = line.strip_prefix("pub ").unwrap_or(line);
            let rest = rest.strip_prefix("async ").unwrap_or(rest);
            if let Some(after) = rest.strip_prefix("fn ") {
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                tests.insert(TestFn {
                    module: module_of(file),
                    name,
                });
                marked = false;
            } else if !(line.starts_with("#[") || line.starts_with("///") || line.is_empty()) {
                marked = false;
            }
        }
    }
    Ok(tests)
}

/// Whether `reference` (`module::test`, `module::*`, `module::prefix_*`, `module::prefix_...`
/// (a name cut short in prose: a prefix like `prefix_*`), a module path, or a bare test name)
/// names something in `tests`.
fn resolves(reference: &str, tests: &BTreeSet<TestFn>) -> bool {
    if let Some(prefix) = reference.strip_suffix("...") {
        return !prefix.is_empty() && resolves(&format!("{prefix}*"), tests);
    }
    let segments: Vec<&str> = reference.split("::").filter(|s| *s != "tests").collect();
    let (last, module) = segments.split_last().expect("split yields one segment");
    let in_module = |t: &TestFn| {
        module.len() <= t.module.len()
            && t.module[t.module.len() - module.len()..]
                .iter()
                .zip(module.iter())
                .all(|(a, b)| a == b)
    };
    if *last == "*" {
        return tests.iter().any(in_module);
    }
    if module.is_empty()
        && tests
            .iter()
            .any(|t| t.module.last().map(String::as_str) == Some(*last))
    {
        // A bare test module's name.
        return true;
    }
    if let Some(prefix) = last.strip_suffix('*') {
        return tests
            .iter()
            .any(|t| in_module(t) && t.name.starts_with(prefix));
    }
    if tests.iter().any(|t| in_module(t) && t.name == *last) {
        return true;
    }
    // A module path: a file with tests whose module path ends with all the segments.
    let whole: Vec<&str> = segments.clone();
    !module.is_empty()
        && tests.iter().any(|t| {
            whole.len() <= t.module.len()
                && t.module[t.module.len() - whole.len()..]
                    .iter()
                    .zip(whole.iter())
                    .all(|(a, b)| a == b)
        })
}

/// Whether a backticked span is shaped like a test reference (identifiers and `::`, optionally
/// ending in `*` or `...`).
fn looks_like_test_path(span: &str) -> bool {
    let span = span.strip_suffix("...").unwrap_or(span);
    span.contains("::")
        && span
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | ':' | '*'))
}

/// The cells of the markdown table rows in `text` (header and separator rows included).
fn table_rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect()
}

/// The stems of the test files (`tests/all/*.rs`, `host/cli/tests/*.rs`): a `stem::...` span in
/// prose names a test.
fn test_file_stems() -> Result<BTreeSet<String>> {
    Ok(source_files()?
        .iter()
        .filter(|f| f.starts_with("tests/all/") || f.starts_with("host/cli/tests/"))
        .filter_map(|f| Path::new(f).file_stem()?.to_str().map(str::to_string))
        .collect())
}

/// The test references of a document: every test-shaped backticked span in a table column
/// headed `test`, `held by` or `caught by` (and a bare name there with three or more
/// underscores, the shape of a test's sentence, or naming a test module), and in prose every
/// test-shaped span that starts with a test file's stem.
fn test_references(text: &str) -> Result<Vec<String>> {
    let stems = test_file_stems()?;
    let mut references: Vec<String> = backticked(text)
        .into_iter()
        .filter(|s| {
            looks_like_test_path(s) && s.split("::").next().is_some_and(|m| stems.contains(m))
        })
        .map(str::to_string)
        .collect();
    let mut columns: Vec<usize> = Vec::new();
    for row in table_rows(text) {
        if row
            .iter()
            .all(|c| c.chars().all(|ch| matches!(ch, '-' | ':')))
        {
            continue;
        }
        let headed: Vec<usize> = row
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(**c, "test" | "held by" | "caught by"))
            .map(|(i, _)| i)
            .collect();
        if !headed.is_empty() {
            columns = headed;
            continue;
        }
        for &column in &columns {
            let Some(cell) = row.get(column) else {
                continue;
            };
            for span in backticked(cell) {
                let bare = span
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                let test_shaped = looks_like_test_path(span)
                    || (bare && (span.matches('_').count() >= 3 || stems.contains(span)));
                if test_shaped {
                    references.push(span.to_string());
                }
            }
        }
    }
    references.sort();
    references.dedup();
    Ok(references)
}

/// The test references of `document` that name no test of `tests`.
fn missing_references(document: &str, tests: &BTreeSet<TestFn>) -> Result<Vec<String>> {
    Ok(test_references(document)?
        .into_iter()
        .filter(|reference| !resolves(reference, tests))
        .collect())
}

/// A group of documents: its name, how many test references it has at least, and each document
/// (its path and text).
type DocumentGroup = (&'static str, usize, Vec<(String, String)>);

/// The documents that name tests and give figures, in groups: RELIABILITY.md, ARCHITECTURE.md,
/// the decision records (`docs/decisions/*.md`) and the folders' code maps ([`code_maps`]),
/// each document with its text, and how many test references a group has at least (fewer means
/// the scan is broken).
fn document_groups() -> Result<Vec<DocumentGroup>> {
    let mut decisions = Vec::new();
    for entry in std::fs::read_dir(root().join("docs/decisions"))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            let path = format!("docs/decisions/{name}");
            decisions.push((path.clone(), read(&path)?));
        }
    }
    decisions.sort();
    ensure!(
        decisions.len() > 50,
        "only {} decision records",
        decisions.len()
    );
    let maps = code_maps()?
        .into_iter()
        .map(|m| (m.holder, m.text))
        .collect();
    Ok(vec![
        (
            "RELIABILITY.md",
            30,
            vec![("RELIABILITY.md".to_string(), read("RELIABILITY.md")?)],
        ),
        (
            "ARCHITECTURE.md",
            30,
            vec![("ARCHITECTURE.md".to_string(), read("ARCHITECTURE.md")?)],
        ),
        ("docs/decisions", 3, decisions),
        ("the code maps", 3, maps),
    ])
}

#[test]
fn every_test_the_documents_name_exists() -> Result<()> {
    let tests = test_functions()?;
    ensure!(
        tests.len() > 300,
        "only {} tests found: the scan is broken",
        tests.len()
    );
    let mut missing = Vec::new();
    let mut checked = 0;
    for (group, least, documents) in document_groups()? {
        let mut found = 0;
        for (document, text) in documents {
            let references = test_references(&text)?;
            found += references.len();
            for reference in missing_references(&text, &tests)? {
                missing.push(format!("{document}: `{reference}`"));
            }
        }
        ensure!(
            found > least,
            "{group}: only {found} test references found: the scan is broken"
        );
        checked += found;
    }
    println!(
        "{checked} test references checked against {} tests",
        tests.len()
    );
    ensure!(
        missing.is_empty(),
        "named tests that do not exist:\n{}",
        missing.join("\n")
    );
    // The check can fail: a renamed test is caught.
    let renamed = "store_contract::terminal_rounds_reject_every_write_renamed";
    ensure!(!resolves(renamed, &tests), "{renamed} resolved");
    ensure!(resolves(
        "store_contract::terminal_rounds_reject_every_write",
        &tests
    ));
    // A name cut short with `...` is a prefix that must match a test: in a made-up document
    // with two good references (a table cell and prose) and one broken one, only the broken
    // one is reported.
    let control = "| # | promise | held by |\n|---|---|---|\n\
                   | 1 | x | `hostile::a_flooding_server_...`, `store_contract::no_test_starts_so_...` |\n\n\
                   Found by `store_contract::terminal_rounds_...` in prose.\n";
    let broken = missing_references(control, &tests)?;
    ensure!(
        broken == ["store_contract::no_test_starts_so_..."],
        "the control document's broken references: {broken:?}"
    );
    ensure!(!resolves("...", &tests), "a bare `...` names every test");
    Ok(())
}

/// The module roots whose `//!` documentation may hold a folder's code map.
const MODULE_ROOTS: [&str; 3] = ["mod.rs", "lib.rs", "main.rs"];

/// The `Files` section of `text` (markdown): from a heading `# Files` (`## Files` in a README)
/// to the next heading of that level or higher, or to the end.
fn files_section(text: &str, level: usize) -> Option<String> {
    let heading = format!("{} Files", "#".repeat(level));
    let mut lines = text.lines().skip_while(|l| l.trim_end() != heading);
    lines.next()?;
    let body: Vec<&str> = lines
        .take_while(|l| {
            let hashes = l.chars().take_while(|c| *c == '#').count();
            !(hashes > 0 && hashes <= level && l[hashes..].starts_with(' '))
        })
        .collect();
    Some(body.join("\n"))
}

/// The `//!` documentation at the top of a Rust file, without the `//!` marks.
fn module_doc(source: &str) -> String {
    source
        .lines()
        .map_while(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One folder's code map: the folder (ending in `/`), the file that holds the map, and the map.
#[derive(Debug)]
struct CodeMap {
    folder: String,
    holder: String,
    text: String,
}

/// Every folder's code map. A map is the `# Files` section of a module root's `//!`
/// documentation ([`MODULE_ROOTS`]: `cargo doc` shows it on the module's page), or the
/// `## Files` section of a folder's `README.md` where the folder has no module root (`wit/`,
/// `tests/python/`, ...). It covers the folder that holds it, and a crate root in `src/`
/// (`lib.rs`, `main.rs`) the crate's folder: `host/cli/src/main.rs` maps `host/cli/` (its
/// `src/`, `tests/` and `benches/`) unless a deeper folder has a map of its own.
fn code_maps() -> Result<Vec<CodeMap>> {
    let root = root();
    let mut holders: Vec<String> = source_files()?
        .into_iter()
        .filter(|f| MODULE_ROOTS.iter().any(|r| f.ends_with(&format!("/{r}"))))
        .collect();
    for dir in SOURCE_DIRS {
        let mut stack = vec![root.join(dir)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).with_context(|| dir.display().to_string())? {
                let path = entry?.path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if path.is_dir()
                    && name != "target"
                    && name != "node_modules"
                    && !name.starts_with('.')
                {
                    stack.push(path);
                } else if name == "README.md" {
                    holders.push(path.strip_prefix(&root)?.to_string_lossy().into_owned());
                }
            }
        }
    }
    holders.sort();
    holders.dedup();
    let mut maps = Vec::new();
    for holder in holders {
        let text = read(&holder)?;
        let section = if holder.ends_with(".md") {
            files_section(&text, 2)
        } else {
            files_section(&module_doc(&text), 1)
        };
        let Some(text) = section else { continue };
        maps.push(CodeMap {
            folder: map_folder(&holder),
            holder,
            text,
        });
    }
    Ok(maps)
}

/// The folder a map held by `holder` covers: its own, or for a crate root in `src/` the crate's.
fn map_folder(holder: &str) -> String {
    let (dir, name) = holder.rsplit_once('/').unwrap_or(("", holder));
    let folder = match dir.strip_suffix("/src") {
        Some(krate) if name != "mod.rs" && name != "README.md" => krate,
        _ => dir,
    };
    format!("{folder}/")
}

/// The file entries (`.rs`, `.wit`, `.py`, `.pyi`) a code-map section names.
fn file_entries(section: &str) -> Vec<&str> {
    backticked(section)
        .into_iter()
        .filter(|s| {
            [".rs", ".wit", ".py", ".pyi"]
                .iter()
                .any(|e| s.ends_with(e))
                && !s.contains(' ')
                && !s.contains("::")
        })
        .collect()
}

/// The section of `sections` a file belongs to: the longest folder prefix.
fn section_of<'a>(file: &str, sections: &'a [(String, String)]) -> Option<&'a (String, String)> {
    sections
        .iter()
        .filter(|(folder, _)| file.starts_with(folder.as_str()))
        .max_by_key(|(folder, _)| folder.len())
}

/// The files a code-map entry of the section for `folder` names. An entry is a path below the
/// section's folder, or below the folder's `src/` or `all/` (where a crate keeps its code, and
/// the test crate its tests); only if none of those is a file, a path from the workspace root
/// (a cross reference to a file of another section). Never a suffix: `mod.rs` names
/// `<folder>mod.rs` or `<folder>src/mod.rs`, not every `mod.rs` below. More than one file is
/// an ambiguous entry.
fn entry_files(entry: &str, folder: &str, files: &BTreeSet<String>) -> Vec<String> {
    let entry = entry.trim_start_matches("./");
    let below: Vec<String> = ["", "src/", "all/"]
        .iter()
        .map(|base| format!("{folder}{base}{entry}"))
        .filter(|file| files.contains(file))
        .collect();
    if !below.is_empty() || !files.contains(entry) {
        return below;
    }
    vec![entry.to_string()]
}

/// What is wrong with a code map (its sections: folder and text) over the source `files`: an
/// entry that names no file or several, and a file that the entries of its own section (the
/// one with the longest folder prefix) name not at all or by two different entries. Other
/// sections may name it too, by a path that resolves to it alone.
fn code_map_problems(
    sections: &[(String, String)],
    files: &[String],
    holders: &BTreeSet<&str>,
) -> Vec<String> {
    let all: BTreeSet<String> = files.iter().cloned().collect();
    let mut problems = Vec::new();
    let mut named_at_home: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for (folder, text) in sections {
        for entry in file_entries(text) {
            match entry_files(entry, folder, &all).as_slice() {
                [] => problems.push(format!("{folder}: `{entry}` names no file")),
                [file] => {
                    if section_of(file, sections).is_some_and(|(home, _)| home == folder) {
                        named_at_home.entry(file.clone()).or_default().insert(entry);
                    }
                }
                several => problems.push(format!("{folder}: `{entry}` names {several:?}")),
            }
        }
    }
    for file in files.iter().filter(|f| !holders.contains(f.as_str())) {
        if section_of(file, sections).is_none() {
            problems.push(format!("{file}: no section for its folder"));
            continue;
        }
        match named_at_home.get(file) {
            None => problems.push(format!("{file}: no entry of its section names it")),
            Some(entries) if entries.len() > 1 => {
                problems.push(format!("{file}: named by several entries {entries:?}"))
            }
            Some(_) => {}
        }
    }
    problems
}

#[test]
fn every_folder_s_code_map_names_each_of_its_files_once_and_only_files_that_exist() -> Result<()> {
    let maps = code_maps()?;
    ensure!(
        maps.len() >= 20,
        "{} code maps found: {maps:#?}",
        maps.len()
    );
    let sections: Vec<(String, String)> = maps
        .iter()
        .map(|m| (m.folder.clone(), m.text.clone()))
        .collect();
    // A file that holds a map is the map: it needs no entry (it may have one).
    let holders: BTreeSet<&str> = maps.iter().map(|m| m.holder.as_str()).collect();
    let files = source_files()?;
    ensure!(files.len() > 100, "only {} source files found", files.len());
    let problems = code_map_problems(&sections, &files, &holders);
    ensure!(
        problems.is_empty(),
        "the folders' code maps (the `# Files` section of a module root's `//!` documentation, \
         or of a README.md) and the source files differ:\n{}",
        problems.join("\n")
    );
    // The check can fail: the real maps with one more source file planted in a folder that has
    // a map (`host/src/worker/`) and one in a folder that has none of its own.
    let mut planted = files.clone();
    planted.push("host/src/worker/planted.rs".to_string());
    planted.push("tests/support/planted/mod.rs".to_string());
    planted.sort();
    ensure!(
        code_map_problems(&sections, &planted, &holders)
            == [
                "host/src/worker/planted.rs: no entry of its section names it",
                "tests/support/planted/mod.rs: no entry of its section names it"
            ],
        "planted files: {:?}",
        code_map_problems(&sections, &planted, &holders)
    );
    ensure!(
        map_folder("host/cli/src/main.rs") == "host/cli/"
            && map_folder("host/cli/src/serve/mod.rs") == "host/cli/src/serve/"
            && map_folder("tests/all/main.rs") == "tests/all/"
            && map_folder("wit/README.md") == "wit/",
        "map_folder"
    );
    let doc = "//! A module.\n//!\n//! # Files\n//!\n//! - `a.rs`: a.\n//!\n\
               //! # Other\n//! - `b.rs`\nfn f() {}\n";
    ensure!(
        files_section(&module_doc(doc), 1).as_deref() == Some("\n- `a.rs`: a.\n"),
        "files_section: {:?}",
        files_section(&module_doc(doc), 1)
    );
    // The check can fail. A made-up map: each entry names one file, and a new file with a
    // name the map already uses elsewhere (`mod.rs`, `watch.rs`) is named by nothing.
    let map = vec![(
        "host/cli/".to_string(),
        "- `main.rs`, `watch.rs`\n- `serve/`: `serve/mod.rs`, `tests/common/mod.rs`".to_string(),
    )];
    let known = [
        "host/cli/src/main.rs",
        "host/cli/src/watch.rs",
        "host/cli/src/serve/mod.rs",
        "host/cli/tests/common/mod.rs",
    ]
    .map(String::from);
    ensure!(
        code_map_problems(&map, &known, &BTreeSet::new()).is_empty(),
        "the made-up map: {:?}",
        code_map_problems(&map, &known, &BTreeSet::new())
    );
    let mut grown = known.to_vec();
    grown.push("host/cli/src/newdir/mod.rs".to_string());
    grown.push("host/cli/src/serve/watch.rs".to_string());
    grown.sort();
    ensure!(
        code_map_problems(&map, &grown, &BTreeSet::new())
            == [
                "host/cli/src/newdir/mod.rs: no entry of its section names it",
                "host/cli/src/serve/watch.rs: no entry of its section names it"
            ],
        "new files with names the map already uses: {:?}",
        code_map_problems(&map, &grown, &BTreeSet::new())
    );
    // A bare `mod.rs` names no file here, and two spellings of one file are refused.
    let bare = vec![(
        "host/cli/".to_string(),
        "`main.rs`, `src/main.rs`, `watch.rs`, `mod.rs`, `serve/mod.rs`, `tests/common/mod.rs`"
            .to_string(),
    )];
    ensure!(
        code_map_problems(&bare, &known, &BTreeSet::new())
            == [
                "host/cli/: `mod.rs` names no file",
                "host/cli/src/main.rs: named by several entries {\"main.rs\", \"src/main.rs\"}"
            ],
        "the bare map: {:?}",
        code_map_problems(&bare, &known, &BTreeSet::new())
    );
    Ok(())
}

/// The recipes of the justfile.
fn just_recipes(justfile: &str) -> Vec<String> {
    justfile
        .lines()
        .filter(|l| !l.starts_with([' ', '\t', '#']) && !l.trim().is_empty())
        .filter_map(|l| {
            let (head, _) = l.split_once(':')?;
            let name = head.split_whitespace().next()?;
            let is_name = name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            (is_name && !l.contains(":=")).then(|| name.to_string())
        })
        .collect()
}

#[test]
fn every_just_recipe_is_listed() -> Result<()> {
    let recipes = just_recipes(&read("justfile")?);
    ensure!(recipes.len() >= 5, "recipes found: {recipes:?}");
    let architecture = read("ARCHITECTURE.md")?;
    let justfile_section = architecture
        .split("\n### ")
        .find(|s| s.lines().next().is_some_and(|h| h.contains("`justfile`")))
        .context("ARCHITECTURE.md has a `justfile` section")?;
    let listed: BTreeSet<&str> = backticked(justfile_section).into_iter().collect();
    let unlisted: Vec<&String> = recipes
        .iter()
        .filter(|r| !listed.contains(r.as_str()))
        .collect();
    ensure!(
        unlisted.is_empty(),
        "recipes ARCHITECTURE.md's `justfile` section does not list: {unlisted:?}"
    );
    ensure!(
        just_recipes("build:\n    cargo build\nnew-recipe arg=\"1\":\n    true\nx := \"1\"\n")
            == ["build", "new-recipe"],
        "the recipe parser is broken"
    );
    Ok(())
}

/// Lines of `text` outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The units of time a measured figure is given in, after its number (with or without a
/// space).
const TIME_UNITS: &[&str] = &[
    "ns", "µs", "us", "ms", "s", "sec", "second", "seconds", "min", "minute", "minutes", "h",
    "hour", "hours", "day", "days",
];

/// The units of size.
const SIZE_UNITS: &[&str] = &["bytes", "kB", "KB", "KiB", "MB", "MiB", "GB", "GiB"];

/// Words that make a statistic of runs; the README uses none.
const STATISTICS: &[&str] = &["p50", "p90", "p95", "p99", "median"];

/// `text` with its backticked spans (code, commands, flags) blanked out.
fn without_code(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 0 { part } else { " " })
        .collect()
}

/// The number that starts at `chars[at]` (digits, thousands grouped with `,`, a fraction, an
/// exponent) and where it ends; `None` where no number starts (inside a word, a date, a
/// version, an anchor or a flag).
fn number_at(chars: &[char], at: usize) -> Option<(String, usize)> {
    let digit = |i: usize| chars.get(i).is_some_and(char::is_ascii_digit);
    let glued = at > 0
        && (chars[at - 1].is_alphanumeric()
            || matches!(chars[at - 1], '.' | ',' | '_' | '-' | '/' | '#' | ':' | '='));
    if !digit(at) || glued {
        return None;
    }
    let mut end = at;
    while digit(end) {
        end += 1;
    }
    while chars.get(end) == Some(&',') && (1..=3).all(|k| digit(end + k)) && !digit(end + 4) {
        end += 4;
    }
    for mark in ['.', 'e'] {
        if chars.get(end) == Some(&mark) && digit(end + 1) {
            end += 1;
            while digit(end) {
                end += 1;
            }
        }
    }
    if matches!(chars.get(end), Some('.' | '-' | ':')) && digit(end + 1) {
        // A version (`1.2.24`), a date or a time of day.
        return None;
    }
    Some((chars[at..end].iter().collect(), end))
}

/// The unit written right after a number that ends at `at`, and where it ends: a speed-up
/// (`x` or `×` touching the number), or after at most one space `%`, a word of
/// [`TIME_UNITS`] or [`SIZE_UNITS`], or a rate (`/s`, `rounds/s`).
fn unit_at(chars: &[char], at: usize) -> Option<(String, usize)> {
    let word_char = |i: usize| {
        chars
            .get(i)
            .is_some_and(|c| c.is_alphanumeric() || *c == '_')
    };
    if matches!(chars.get(at), Some('x' | '×')) && !word_char(at + 1) {
        return Some(("x".to_string(), at + 1));
    }
    let start = if chars.get(at).is_some_and(|c| c.is_whitespace()) {
        at + 1
    } else {
        at
    };
    if chars.get(start) == Some(&'%') {
        return Some(("%".to_string(), start + 1));
    }
    let mut end = start;
    while chars.get(end).is_some_and(|c| c.is_alphabetic()) {
        end += 1;
    }
    let word: String = chars[start..end].iter().collect();
    if chars.get(end) == Some(&'/') && chars.get(end + 1) == Some(&'s') && !word_char(end + 2) {
        return Some((format!("{word}/s"), end + 2));
    }
    let known = TIME_UNITS.contains(&word.as_str()) || SIZE_UNITS.contains(&word.as_str());
    (known && !word_char(end) && chars.get(end) != Some(&'/')).then_some((word, end))
}

/// A figure as the checks compare it: `34.7 ms`, `57 %`, `3.2x`, `145/s`.
fn written(number: &str, unit: &str) -> String {
    if unit == "x" || unit.starts_with('/') {
        format!("{number}{unit}")
    } else {
        format!("{number} {unit}")
    }
}

/// The measured figures of `text` (its prose: backticked spans left out), each a number with
/// its unit, as written: `34.7 ms`, `12 min 31 s` (a duration in two units is one figure),
/// `9.1 minutes`, `31.7 s`, `57 %`, `1.7 MB`, `6,099,683 bytes`, `3.2x`, `154 rounds/s`.
fn figures(text: &str) -> Vec<String> {
    let text = without_code(text);
    let chars: Vec<char> = text.chars().collect();
    let mut found = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let Some((number, end)) = number_at(&chars, at) else {
            at += 1;
            continue;
        };
        let Some((unit, mut next)) = unit_at(&chars, end) else {
            at = end;
            continue;
        };
        let mut figure = written(&number, &unit);
        if ["min", "minute", "minutes", "h", "hour", "hours"].contains(&unit.as_str())
            && chars.get(next).is_some_and(|c| c.is_whitespace())
            && let Some((seconds, after)) = number_at(&chars, next + 1)
            && let Some((smaller, last)) =
                unit_at(&chars, after).filter(|(u, _)| matches!(u.as_str(), "s" | "min"))
        {
            figure = format!("{figure} {}", written(&seconds, &smaller));
            next = last;
        }
        found.push(figure);
        at = next;
    }
    found
}

/// A document's prose in paragraphs (fenced code left out), split at blank lines, headings,
/// list items and the edges of tables (a table is one paragraph). Each comes with its context:
/// itself, and for a table also the paragraph just above it (its caption).
fn paragraphs(text: &str) -> Vec<(String, String)> {
    let mut blocks: Vec<(bool, String)> = Vec::new();
    let mut open = false;
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            open = false;
            continue;
        }
        if fenced || line.trim().is_empty() {
            open = false;
            continue;
        }
        let table = line.starts_with('|');
        let item = line.trim_start();
        let starts = line.starts_with('#')
            || item.starts_with("- ")
            || item
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        match blocks.last_mut() {
            Some((was_table, block)) if open && !starts && *was_table == table => {
                block.push('\n');
                block.push_str(line);
            }
            _ => blocks.push((table, line.to_string())),
        }
        open = !line.starts_with('#');
    }
    (0..blocks.len())
        .map(|i| {
            let (table, text) = &blocks[i];
            let context = match i.checked_sub(1).map(|j| &blocks[j]) {
                Some((false, caption)) if *table => format!("{caption}\n{text}"),
                _ => text.clone(),
            };
            (text.clone(), context)
        })
        .collect()
}

/// Whether `text` holds a date (`YYYY-MM-DD`).
fn has_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.windows(10).any(|w| {
        w.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        }) && w.starts_with(b"20")
    })
}

/// Whether `text` holds the command of a run (`cargo bench ...`, `cargo test ...` or `just ...`
/// in backticks).
fn has_command(text: &str) -> bool {
    backticked(text).iter().any(|s| {
        s.starts_with("cargo bench")
            || s.starts_with("cargo build")
            || s.starts_with("cargo test")
            || s.starts_with("just ")
            || *s == "just bench"
    })
}

/// The figures of BENCHMARKS.md's sections that say when and how they were measured (a date
/// and a command), by section number (`## 6. Start-up` is 6; an unnumbered section is 0).
fn benchmark_sources(benchmarks: &str) -> BTreeMap<u32, BTreeSet<String>> {
    let mut sources: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for section in benchmarks.split("\n## ").skip(1) {
        if !(has_date(section) && has_command(section)) {
            continue;
        }
        let number = section
            .split_once(". ")
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or(0);
        let prose = prose_lines(section).join("\n");
        sources.entry(number).or_default().extend(figures(&prose));
    }
    sources
}

/// The BENCHMARKS.md sections a paragraph cites: `BENCHMARKS section 6`, `BENCHMARKS.md,
/// section 7`, `BENCHMARKS.md#9-m3-serve`.
fn cited_sections(paragraph: &str) -> BTreeSet<u32> {
    let mut cited = BTreeSet::new();
    for (at, _) in paragraph.match_indices("BENCHMARKS") {
        let after: String = paragraph[at..].chars().skip(10).take(16).collect();
        let after = after
            .trim_start_matches(".md")
            .trim_start_matches(',')
            .trim_start();
        let digits = after
            .strip_prefix("section ")
            .or_else(|| after.strip_prefix('#'))
            .map(|rest| {
                rest.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            });
        if let Some(number) = digits.and_then(|d| d.parse().ok()) {
            cited.insert(number);
        }
    }
    cited
}

/// Configuration the documents quote: the code's limits, defaults and intervals (and the
/// relative times the tables print), each a setting and not the result of a run, so a figure
/// with one of these values (number and unit as written) needs no run behind it. Every entry
/// is quoted by some document.
const CONFIGURATION: &[(&str, &str)] = &[
    ("24 hours", "a submission's rounds' default deadline"),
    (
        "7,000 bytes",
        "the most woken ids one PostgreSQL notification carries",
    ),
    (
        "200 ms",
        "how often the claude-code harness asks for a starting server's status",
    ),
    (
        "23 days",
        "the tool-call limit the claude-code harness gives Claude Code",
    ),
    (
        "50 ms",
        "how often a blocking call of the Python package looks for Ctrl-C",
    ),
    (
        "0.1 ms",
        "the first pause between tries for SQLite's write lock",
    ),
    ("4 ms", "the longest pause between those tries"),
    ("5 ms", "the change watcher's poll"),
    ("20 ms", "the oldest a write group gets"),
    (
        "100 ms",
        "SQLite's longest busy sleep, the watch and serve polls, the old CPU budget",
    ),
    ("250 ms", "the worker's look while it parks"),
    ("5000 ms", "the busy timeout"),
    ("0.25 s", "the idle-connection reaper's look"),
    ("0.5 s", "how long a connection waits idle"),
    (
        "1 s",
        "a stream's resumption delay when the server names none",
    ),
    ("2 s", "the probe's wait; the cache's settle time"),
    ("5 s", "the busy timeout; the lease renewal period"),
    (
        "10 s",
        "how old a PostgreSQL store's server-time offset grows; the probe's wait over HTTP",
    ),
    ("15 s", "the lease; the event stream's keep-alive"),
    (
        "30 s",
        "the request timeout; a server's time to answer `initialize`; connecting over HTTP",
    ),
    (
        "60 s",
        "the Codex request timeout; server SDKs' elicitation timeout",
    ),
    ("600 s", "the Codex turn deadline"),
    ("10 minutes", "the Codex turn deadline"),
    ("24 h", "a round's default deadline"),
    ("7 days", "the longest Codex turn"),
    ("366 days", "the furthest deadline and `pending --wait`"),
    ("1 ms", "the nearest deadline"),
    ("23 h", "a relative time as the tables print it"),
    ("4 min", "a relative time as the tables print it"),
    ("512 bytes", "the longest id"),
    (
        "64 bytes",
        "the longest protocol version a server may negotiate",
    ),
    ("256 bytes", "the longest header name of a binding"),
    ("1 KiB", "the longest event id a server may send"),
    (
        "8 KiB",
        "the longest header value of a binding, and of a header the transport reads",
    ),
    ("128 KiB", "where wasi:http traps on a request's headers"),
    (
        "131,071 bytes",
        "the longest variable of a server's environment",
    ),
    (
        "2048 bytes",
        "the longest place a login may lead to (`next`)",
    ),
    ("4 KiB", "the stderr tail; SQLite's page"),
    ("16 KiB", "a schema's longest text"),
    ("64 KiB", "request messages and request states"),
    ("256 KiB", "a schema"),
    ("1 MiB", "an answer"),
    ("4 MiB", "a new round"),
    ("8 MiB", "input files, a server's line, a request body"),
    ("64 MiB", "a guest instance's memory"),
    ("128 MiB", "a server's output per execution"),
    ("400 MiB", "the flood tests' bound on peak memory"),
    ("2 MB", "SQLite's default page cache"),
    ("16 MB", "the store's page cache per connection"),
    ("10x", "the soak factor `just soak` uses"),
    ("100x", "`just soak 100`"),
];

/// The figures of `document` (a document other than BENCHMARKS.md) that stand without a run
/// behind them, each with the start of its paragraph. A figure may stand if it is
/// configuration ([`CONFIGURATION`]); or if it appears, as written, among the figures of a
/// dated BENCHMARKS.md section ([`benchmark_sources`]), of the section its paragraph cites when
/// it cites one; or, where `own_runs` allows, if its paragraph (for a table: with the
/// paragraph above it) gives the date and the command of its run.
fn unsourced_figures(
    document: &str,
    own_runs: bool,
    sources: &BTreeMap<u32, BTreeSet<String>>,
) -> Vec<String> {
    let mut unsourced = Vec::new();
    for (paragraph, context) in paragraphs(document) {
        let dated = own_runs && has_date(&context) && has_command(&context);
        let cited = cited_sections(&context);
        let pool: BTreeSet<&String> = sources
            .iter()
            .filter(|(n, _)| cited.is_empty() || cited.contains(n))
            .flat_map(|(_, figures)| figures)
            .collect();
        for figure in figures(&paragraph) {
            let configuration = CONFIGURATION.iter().any(|(value, _)| *value == figure);
            if !(configuration || dated || pool.contains(&figure)) {
                let start: String = paragraph.chars().take(90).collect();
                unsourced.push(format!("{figure}: {start}..."));
            }
        }
    }
    unsourced
}

/// Where a measured figure may be given, and how it is kept honest (ARCHITECTURE.md,
/// "Figures"). A measured figure is a number with a unit of time (`ms`, `s`, `min`,
/// `minutes`, ...), of size (`KiB`, `MiB`, `MB`, `bytes`, ...), a share (`%`), a speed-up
/// (`3.2x`) or a rate (`/s`). In BENCHMARKS.md every section that gives figures carries the
/// date and the command of its runs. Everywhere else (README.md, ARCHITECTURE.md, EMBEDDING.md,
/// RELIABILITY.md) a figure is either configuration (a limit, default or interval of the code:
/// the short explicit list [`CONFIGURATION`]), or appears as written in a dated section of
/// BENCHMARKS.md (the one its paragraph cites, when it cites one), or carries the date and the
/// command of its own run in its paragraph (not in the README, which gives no figure of its own
/// and names no statistic). So a figure given in two places is given with one value: a copy
/// that drifts from its source no longer matches it.
#[test]
fn figures_live_in_benchmarks_with_the_date_and_command_of_their_run() -> Result<()> {
    // Every section of BENCHMARKS.md that gives figures says when and how they were measured.
    let benchmarks = read("BENCHMARKS.md")?;
    let mut undated = Vec::new();
    let mut sections = 0;
    for section in benchmarks.split("\n## ").skip(1) {
        let title = section.lines().next().unwrap_or("").to_string();
        let gives_figures = !figures(&prose_lines(section).join("\n")).is_empty()
            || section.lines().any(|l| l.starts_with('|'));
        if !gives_figures {
            continue;
        }
        sections += 1;
        if !(has_date(section) && has_command(section)) {
            undated.push(title);
        }
    }
    ensure!(sections >= 5, "only {sections} sections with figures found");
    ensure!(
        undated.is_empty(),
        "BENCHMARKS.md sections with figures but no date or command: {undated:?}"
    );
    let sources = benchmark_sources(&benchmarks);
    ensure!(
        sources.values().map(BTreeSet::len).sum::<usize>() > 200,
        "only {} figures found in BENCHMARKS.md: the scan is broken",
        sources.values().map(BTreeSet::len).sum::<usize>()
    );
    // The other documents.
    let mut unsourced = Vec::new();
    let mut quoted = BTreeSet::new();
    let mut documents = vec![
        ("README.md".to_string(), read("README.md")?, false),
        ("EMBEDDING.md".to_string(), read("EMBEDDING.md")?, true),
    ];
    for (_, _, group) in document_groups()? {
        documents.extend(group.into_iter().map(|(name, text)| (name, text, true)));
    }
    for (document, text, own_runs) in documents {
        quoted.extend(figures(&prose_lines(&text).join("\n")));
        for figure in unsourced_figures(&text, own_runs, &sources) {
            unsourced.push(format!("{document}: {figure}"));
        }
    }
    ensure!(
        unsourced.is_empty(),
        "figures without a run behind them (give them in BENCHMARKS.md, as written there, or \
         with the date and command of their run):\n{}",
        unsourced.join("\n")
    );
    let unused: Vec<&str> = CONFIGURATION
        .iter()
        .map(|(value, _)| *value)
        .filter(|value| !quoted.contains(*value))
        .collect();
    ensure!(
        unused.is_empty(),
        "configuration no document quotes: {unused:?}"
    );
    let readme = read("README.md")?;
    let statistics: Vec<&str> = prose_lines(&readme)
        .into_iter()
        .filter(|l| {
            without_code(l)
                .split(|c: char| !c.is_alphanumeric())
                .any(|w| STATISTICS.contains(&w))
        })
        .collect();
    ensure!(
        statistics.is_empty(),
        "README.md names statistics of runs (they belong in BENCHMARKS.md): {statistics:?}"
    );
    ensure!(
        readme.contains("BENCHMARKS.md"),
        "the README links to BENCHMARKS.md"
    );
    // The reliability figures too.
    let reliability = read("RELIABILITY.md")?;
    let last_run = reliability
        .split("\n## ")
        .find(|s| s.starts_with("Figures of the last run"))
        .context("RELIABILITY.md has its figures")?;
    ensure!(
        has_date(last_run) && has_command(last_run),
        "RELIABILITY.md's figures"
    );

    // The checks can fail. Each unit is seen (one control per unit), and numbers that are no
    // figures are not.
    for (line, expected) in [
        ("a round takes 2.3 ms end to end", "2.3 ms"),
        ("native Rust 5.73 µs", "5.73 µs"),
        ("5.73us", "5.73 us"),
        ("250 ns a call", "250 ns"),
        ("all in 31.7 s.", "31.7 s"),
        ("compiled in 2 seconds", "2 seconds"),
        ("a second: 1 second", "1 second"),
        ("took 9.1 minutes", "9.1 minutes"),
        ("nothing else running: 12 min 31 s.", "12 min 31 s"),
        ("7 min to build", "7 min"),
        ("in 23 h", "23 h"),
        ("for 3 hours", "3 hours"),
        ("at about 57 % of the speed", "57 %"),
        ("99.7% reached the component", "99.7 %"),
        ("peak RSS 37 MiB", "37 MiB"),
        ("a 272 KiB answer", "272 KiB"),
        ("a 24 GiB machine", "24 GiB"),
        ("about 2.4 MB (0.8 MB gzipped)", "2.4 MB"),
        ("a 4.1 GB file", "4.1 GB"),
        ("of 512 kB", "512 kB"),
        ("6,099,683 bytes", "6,099,683 bytes"),
        ("3.4x, per repetition", "3.4x"),
        ("1.75× as long", "1.75x"),
        ("154 rounds/s with 50 clients", "154 rounds/s"),
        ("0.69 s (145/s)", "0.69 s"),
        ("(145/s)", "145/s"),
        ("in 2 days", "2 days"),
    ] {
        let found = figures(line);
        ensure!(
            found.first().map(String::as_str) == Some(expected),
            "{line:?}: {found:?}, not {expected}"
        );
    }
    for line in [
        "6 processes x 8 threads, 96 x `M3_SOAK`",
        "run of 2026-12-03 at 05:24:44",
        "x86_64, wasm32-wasip2, `ajv@8.20.0`, version 1.2.24",
        "`--poll-interval-us=200` and `--parked=3948`",
        "section 7, [BENCHMARKS.md](BENCHMARKS.md#7-component-sizes), 21 WASI interfaces",
        "5.8e8 units of fuel, 0x1f, 128 or more deep",
    ] {
        ensure!(figures(line).is_empty(), "{line:?}: {:?}", figures(line));
    }
    ensure!(!has_date("run of last week") && has_date("run of 2026-11-30"));
    // The rule: a made-up BENCHMARKS.md and document. A drifted copy ("28 ms" for the source's
    // 28.0 ms), a figure found only in a section other than the one cited, and one with no
    // run are caught; configuration, a copy as written and a figure with its own run stand.
    let made_up_benchmarks = "# B\n\n## 6. Start-up\n\nRun of 2026-12-03: `cargo bench -p m3-cli \
                              --bench startup`: warm p50 4.1 ms; within 2 s, 28.0 ms.\n\n\
                              ## 7. Sizes\n\nRun of 2026-12-01: `cargo bench -p m3 --bench \
                              component_size`: 2.4 MB.\n\n## 8. Undated\n\nAbout 9.9 s.\n";
    let made_up_sources = benchmark_sources(made_up_benchmarks);
    ensure!(
        made_up_sources.keys().copied().collect::<Vec<_>>() == [6, 7],
        "{made_up_sources:?}"
    );
    let document = "Warm start-up: 3 ms instead of 28 ms (BENCHMARKS section 6).\n\n\
                    Warm start-up: 4.1 ms (BENCHMARKS.md, section 6); lines up to 8 MiB.\n\n\
                    - About 2.4 MB (BENCHMARKS section 6).\n\
                    - About 2.4 MB.\n\n\
                    The build took about 9.9 s.\n\n\
                    Measured on 2026-12-04 (`cargo test -p m3-tests --test all`), 3.5 s:\n\n\
                    | test | figures |\n|---|---|\n| contention | 5.1 s |\n\n\
                    Not measured:\n\n| test | figures |\n|---|---|\n| contention | 6.2 s |\n";
    let found = unsourced_figures(document, true, &made_up_sources);
    let caught: Vec<&str> = found
        .iter()
        .map(|f| f.split_once(':').map_or(f.as_str(), |(figure, _)| figure))
        .collect();
    ensure!(
        caught == ["3 ms", "28 ms", "2.4 MB", "9.9 s", "6.2 s"],
        "the made-up document: {found:#?}"
    );
    let readme_like = unsourced_figures(
        "Measured on 2026-12-04 (`cargo test -p m3-tests --test all`): 3.5 s.\n",
        false,
        &made_up_sources,
    );
    ensure!(
        readme_like.len() == 1,
        "the README gives a figure of its own"
    );
    Ok(())
}

#[test]
fn reliability_lists_the_mutation_check_as_it_runs() -> Result<()> {
    let reliability = read("RELIABILITY.md")?;
    let section = reliability
        .split("\n## ")
        .find(|s| s.starts_with("Mutation check"))
        .context("RELIABILITY.md has a \"Mutation check\" section")?;
    let rows = table_rows(section);
    let mut listed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in rows.iter().skip(2) {
        let Some(name) = row.first().and_then(|c| backticked(c).first().copied()) else {
            bail!("a mutation row without a backticked name: {row:?}");
        };
        let tests = row
            .iter()
            .skip(1)
            .flat_map(|c| backticked(c))
            .filter(|s| s.contains("::"))
            .map(str::to_string)
            .collect();
        listed.insert(name.to_string(), tests);
    }
    let running: BTreeMap<String, BTreeSet<String>> = crate::mutations::MUTATIONS
        .iter()
        .map(|m| {
            (
                m.name.to_string(),
                m.caught_by.iter().map(|t| t.to_string()).collect(),
            )
        })
        .collect();
    ensure!(
        listed == running,
        "RELIABILITY.md's mutation table differs from tests/all/mutations.rs:\nlisted: {listed:#?}\nrunning: {running:#?}"
    );
    let tests = test_functions()?;
    for name in crate::mutations::named_tests() {
        ensure!(
            resolves(name, &tests),
            "the mutation check names {name}, which does not exist"
        );
    }
    Ok(())
}

/// The fenced blocks of one language in the README section headed `heading`.
fn fenced_blocks(readme: &str, heading: &str, language: &str) -> Vec<String> {
    let Some(start) = readme.find(heading) else {
        return Vec::new();
    };
    let rest = &readme[start + heading.len()..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let fence = format!("```{language}\n");
    let mut blocks = Vec::new();
    let mut text = section;
    while let Some(open) = text.find(&fence) {
        let body = &text[open + fence.len()..];
        let Some(close) = body.find("```") else { break };
        blocks.push(body[..close].to_string());
        text = &body[close + 3..];
    }
    blocks
}

#[test]
fn the_readme_s_python_is_the_python_the_tests_run() -> Result<()> {
    let readme = read("README.md")?;
    let blocks = fenced_blocks(&readme, "## From Python\n", "python");
    assert!(
        !blocks.is_empty(),
        "README.md has no \"From Python\" example"
    );
    for block in &blocks {
        // Each block is a whole test file of `tests/python/`, which pytest runs.
        let found = std::fs::read_dir(root().join("tests/python"))?
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.path().extension().is_some_and(|e| e == "py"))
            .any(|entry| std::fs::read_to_string(entry.path()).is_ok_and(|text| text == *block));
        assert!(
            found,
            "this README \"From Python\" block is not a file of tests/python/:\n{block}"
        );
    }
    let commands = fenced_blocks(&readme, "## From Python\n", "sh");
    assert_eq!(
        commands,
        ["python3 -m venv .venv && .venv/bin/pip install ./host/python\n"],
        "the install command the README gives is the one tests/support/python_package.rs runs"
    );
    Ok(())
}
