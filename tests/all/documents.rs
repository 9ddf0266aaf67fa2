//! The documents keep their word: every test RELIABILITY.md and ARCHITECTURE.md name exists,
//! the code map names every source file and only files that exist, every `just` recipe is
//! listed, the README gives no figure of its own (figures live in BENCHMARKS.md, each with the
//! date and command of its run), and RELIABILITY.md lists exactly the mutation check's
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

/// Where the workspace keeps source: `.rs` and `.wit` files under these folders.
const SOURCE_DIRS: [&str; 10] = [
    "wit",
    "guest/src",
    "host/src",
    "host/build-support/src",
    "host/components",
    "host/benches",
    "host/cli",
    "tests/all",
    "tests/support",
    "examples",
];

/// Every `.rs` and `.wit` file of the workspace's own source, relative to the root, sorted.
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
                } else if name.ends_with(".rs") || name.ends_with(".wit") {
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

/// Whether `reference` (`module::test`, `module::*`, `module::prefix_*`, a module path, or a
/// bare test name) names something in `tests`.
fn resolves(reference: &str, tests: &BTreeSet<TestFn>) -> bool {
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
/// ending in `*`).
fn looks_like_test_path(span: &str) -> bool {
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
    for document in ["RELIABILITY.md", "ARCHITECTURE.md"] {
        let references = test_references(&read(document)?)?;
        ensure!(
            references.len() > 30,
            "{document}: only {} test references found: the scan is broken",
            references.len()
        );
        for reference in references {
            checked += 1;
            if !resolves(&reference, &tests) {
                missing.push(format!("{document}: `{reference}`"));
            }
        }
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
    Ok(())
}

/// The code map's sections: the folder each `### ` heading names and the text below it.
fn code_map_sections(architecture: &str) -> Result<Vec<(String, String)>> {
    let start = architecture.find("## Code map").context("no code map")?;
    let rest = &architecture[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    let map = &rest[..end];
    let mut sections = Vec::new();
    for chunk in map.split("\n### ").skip(1) {
        let heading = chunk.lines().next().unwrap_or("");
        let folder = backticked(heading)
            .first()
            .context("a code-map heading names its folder")?
            .to_string();
        sections.push((folder, chunk.to_string()));
    }
    Ok(sections)
}

/// The file entries (`.rs`, `.wit`) a code-map section names.
fn file_entries(section: &str) -> Vec<&str> {
    backticked(section)
        .into_iter()
        .filter(|s| {
            (s.ends_with(".rs") || s.ends_with(".wit")) && !s.contains(' ') && !s.contains("::")
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

/// Whether `entry` names `file` (relative to its section's `folder`): its path below the folder,
/// below the folder's `src/`, `tests/` or `all/`, or from the workspace root, ends with it.
fn names(entry: &str, file: &str, folder: &str) -> bool {
    let below = file.strip_prefix(folder).unwrap_or(file);
    let entry = entry.trim_start_matches("./");
    below == entry
        || file == entry
        || below.ends_with(&format!("/{entry}"))
        || file.ends_with(&format!("/{entry}"))
}

#[test]
fn the_code_map_names_every_source_file_and_only_files_that_exist() -> Result<()> {
    let architecture = read("ARCHITECTURE.md")?;
    let sections = code_map_sections(&architecture)?;
    ensure!(sections.len() >= 6, "{} code-map sections", sections.len());
    let files = source_files()?;
    ensure!(files.len() > 100, "only {} source files found", files.len());
    let mut unmapped = Vec::new();
    for file in &files {
        let Some((folder, text)) = section_of(file, &sections) else {
            unmapped.push(format!("{file} (no section for its folder)"));
            continue;
        };
        if !file_entries(text).iter().any(|e| names(e, file, folder)) {
            unmapped.push(file.clone());
        }
    }
    ensure!(
        unmapped.is_empty(),
        "source files missing from ARCHITECTURE.md's code map:\n{}",
        unmapped.join("\n")
    );
    let mut dangling = Vec::new();
    for (folder, text) in &sections {
        for entry in file_entries(text) {
            // Below the section's folder, or a path from the workspace root (a cross reference).
            if !files
                .iter()
                .any(|f| f == entry || (f.starts_with(folder.as_str()) && names(entry, f, folder)))
            {
                dangling.push(format!("{folder}: `{entry}`"));
            }
        }
    }
    ensure!(
        dangling.is_empty(),
        "code-map entries naming no file:\n{}",
        dangling.join("\n")
    );
    // The check can fail: a file the map does not name is found.
    let (folder, text) = section_of("tests/all/not_in_the_map.rs", &sections).context("tests")?;
    ensure!(
        !file_entries(text)
            .iter()
            .any(|e| names(e, "tests/all/not_in_the_map.rs", folder))
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
    let sections = code_map_sections(&architecture)?;
    let (_, justfile_section) = sections
        .iter()
        .find(|(_, text)| text.lines().next().is_some_and(|h| h.contains("justfile")))
        .context("the code map has a justfile section")?;
    let listed: BTreeSet<&str> = backticked(justfile_section).into_iter().collect();
    let unlisted: Vec<&String> = recipes
        .iter()
        .filter(|r| !listed.contains(r.as_str()))
        .collect();
    ensure!(
        unlisted.is_empty(),
        "recipes the code map's justfile line does not list: {unlisted:?}"
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

/// A measured figure: a number with a unit of time below a second, a throughput, or a
/// percentile.
fn measured_figure(line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    for (i, word) in words.iter().enumerate() {
        let bare = word.trim_matches(|c: char| !c.is_alphanumeric() && c != '/' && c != '.');
        for unit in ["ms", "µs", "us", "ns", "/s", "rounds/s"] {
            let number = bare
                .strip_suffix(unit)
                .filter(|n| !n.is_empty())
                .or_else(|| {
                    (bare == unit)
                        .then(|| words.get(i.wrapping_sub(1)).copied())
                        .flatten()
                });
            if number.is_some_and(|n| n.chars().any(|c| c.is_ascii_digit())) {
                return Some(format!("{} {}", number.unwrap_or_default(), unit));
            }
        }
        if ["p50", "p90", "p95", "p99", "median"].contains(&bare) {
            return Some(bare.to_string());
        }
    }
    None
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

#[test]
fn figures_live_in_benchmarks_with_the_date_and_command_of_their_run() -> Result<()> {
    // The README gives none of its own (the same figure in two places drifts apart).
    let readme = read("README.md")?;
    let figures: Vec<String> = prose_lines(&readme)
        .into_iter()
        .filter_map(|l| measured_figure(l).map(|f| format!("{f}: {l}")))
        .collect();
    ensure!(
        figures.is_empty(),
        "README.md gives measured figures (they belong in BENCHMARKS.md):\n{}",
        figures.join("\n")
    );
    ensure!(
        readme.contains("BENCHMARKS.md"),
        "the README links to BENCHMARKS.md"
    );
    // Every section of BENCHMARKS.md that gives figures says when and how they were measured.
    let benchmarks = read("BENCHMARKS.md")?;
    let mut undated = Vec::new();
    let mut sections = 0;
    for section in benchmarks.split("\n## ").skip(1) {
        let title = section.lines().next().unwrap_or("").to_string();
        let gives_figures = prose_lines(section)
            .iter()
            .any(|l| measured_figure(l).is_some())
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
    // The checks can fail.
    ensure!(measured_figure("a round takes 2.3 ms end to end").is_some());
    ensure!(measured_figure("the p50 is lower").is_some());
    ensure!(measured_figure("a line of 8 MiB, 30 s to answer").is_none());
    ensure!(!has_date("run of last week") && has_date("run of 2026-11-30"));
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
