//! Repository checks as tests (in the manner of rust-analyzer's `tidy.rs`): architecture
//! invariant 1 (the guest decides, the host does I/O), the WIT contract against the Rust API,
//! and no ignored tests or stubs.

use anyhow::{Context, Result, ensure};
use m3_tests::workspace::{cargo, workspace_root};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The lines of `cargo tree -e normal -p <package> EXTRA... --target all` (normal
/// dependencies of every target).
fn cargo_tree(package: &str, extra: &[&str]) -> Result<Vec<String>> {
    let output = Command::new(cargo())
        .current_dir(workspace_root())
        .args(["tree", "-e", "normal", "-p", package])
        .args(extra)
        // `--locked`, not `--offline`: every target's packages must be known, and a fresh cargo
        // cache holds only the host's (cargo fetches the rest from the registry).
        .args(["--target", "all", "--locked"])
        .output()
        .context("running cargo tree")?;
    ensure!(
        output.status.success(),
        "cargo tree -p {package} {extra:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?
        .lines()
        .map(str::to_string)
        .collect())
}

/// `package`'s normal dependencies for every target, one package per line.
fn normal_dependencies(package: &str) -> Result<Vec<String>> {
    cargo_tree(package, &["--prefix", "none"])
}

fn has_jsonschema(lines: &[String]) -> bool {
    lines.iter().any(|l| l.starts_with("jsonschema "))
}

#[test]
fn host_has_no_normal_dependency_on_jsonschema() -> Result<()> {
    let host = normal_dependencies("m3")?;
    ensure!(
        host.first().is_some_and(|l| l.starts_with("m3 ")),
        "unexpected cargo tree output for m3: {host:?}"
    );
    ensure!(
        !has_jsonschema(&host),
        "the host crate m3 depends on jsonschema: validation belongs in the guest"
    );
    // The check can fail: the same query finds jsonschema under the guest.
    let guest = normal_dependencies("m3-guest")?;
    ensure!(
        has_jsonschema(&guest),
        "the guest should depend on jsonschema; is the query broken? {guest:?}"
    );
    Ok(())
}

/// Crates that speak HTTP or open network connections as clients.
const NETWORK_CLIENTS: &[&str] = &[
    "reqwest ",
    "hyper ",
    "ureq ",
    "curl ",
    "isahc ",
    "surf ",
    "attohttpc ",
];

/// Whether a `cargo tree --prefix none` listing names a network client crate.
fn network_clients(tree: &[String]) -> Vec<&String> {
    tree.iter()
        .filter(|l| NETWORK_CLIENTS.iter().any(|c| l.starts_with(c)))
        .collect()
}

/// What opens a network connection in Rust source: the standard library's and tokio's sockets
/// (TCP, UDP and Unix), a socket made by hand (`socket2`, libc's `socket` and `connect`).
const SOCKET_APIS: &[&str] = &[
    "std::net",
    "tokio::net",
    "os::unix::net",
    "TcpStream",
    "TcpListener",
    "TcpSocket",
    "UdpSocket",
    "UnixStream",
    "UnixListener",
    "UnixDatagram",
    "socket2",
    "libc::socket",
    "libc::connect",
];

/// A call that connects a socket, looked for in files that use a socket API (elsewhere a
/// `connect(` is a database's, and a socket needs one of [`SOCKET_APIS`] first).
const CONNECTING: &str = "connect(";

/// Whether a `file: api` socket use is a child's stdio socket in `host/src/process/child.rs`:
/// the host's end of the socket pair the child was started with (`launch.rs`), wrapped for
/// tokio, never a connecting socket or call.
fn child_stdio_only(usage: &str) -> bool {
    let child = Path::new("host")
        .join("src")
        .join("process")
        .join("child.rs");
    let Some((file, api)) = usage.split_once(": ") else {
        return false;
    };
    file.ends_with(&child.display().to_string())
        && matches!(api, "tokio::net" | "os::unix::net" | "UnixStream")
}

/// Whether a `file: api` socket use is `m3 serve` listening: the listener and address types
/// under `host/cli/src/serve/` (`TcpSocket` builds a listener with its buffer sizes set), never
/// a connecting socket or call.
fn listens_only(usage: &str) -> bool {
    let serve = Path::new("host").join("cli").join("src").join("serve");
    let Some((file, api)) = usage.split_once(": ") else {
        return false;
    };
    let in_serve = file.contains(&format!("{}{}", serve.display(), std::path::MAIN_SEPARATOR));
    in_serve && matches!(api, "std::net" | "tokio::net" | "TcpListener" | "TcpSocket")
}

/// Whether a `file: api` socket use is `m3 serve --notify` posting a notification: a TCP
/// connection to a configured target from `host/cli/src/serve/notify/post.rs` alone (its
/// targets checked by `notify/target.rs`; `notify::*`), never a listener, a UDP or Unix socket
/// or one made by hand.
fn notifies_only(usage: &str) -> bool {
    let post = Path::new("host")
        .join("cli")
        .join("src")
        .join("serve")
        .join("notify")
        .join("post.rs");
    let Some((file, api)) = usage.split_once(": ") else {
        return false;
    };
    file.ends_with(&post.display().to_string())
        && matches!(api, "tokio::net" | "TcpStream" | CONNECTING)
}

/// The socket APIs `code` (comments left out) uses, and [`CONNECTING`] if it uses any.
fn socket_apis_in(code: &str) -> Vec<&'static str> {
    // Tokio's pipes live under `tokio::net` but are no sockets; a socket pair (a child's stdin
    // and stdout, decision 82) is connected to itself alone.
    let code = code
        .replace("tokio::net::unix::pipe", "tokio pipe")
        .replace("libc::socketpair", "socket pair");
    let mut apis: Vec<&'static str> = SOCKET_APIS
        .iter()
        .copied()
        .filter(|api| code.contains(api))
        .collect();
    if !apis.is_empty() && code.contains(CONNECTING) {
        apis.push(CONNECTING);
    }
    apis
}

/// The socket APIs `dir`'s Rust code (comments left out) uses, as `file: api` lines.
fn socket_uses(dir: &Path) -> Result<Vec<String>> {
    let mut uses = Vec::new();
    for file in rust_files(dir)? {
        let code = strip(&std::fs::read_to_string(&file)?).code;
        for api in socket_apis_in(&code) {
            uses.push(format!("{}: {api}", file.display()));
        }
    }
    Ok(uses)
}

/// Who depends on `dependency` directly in `package`'s normal dependency tree.
fn direct_dependents(package: &str, dependency: &str) -> Result<Vec<String>> {
    Ok(
        cargo_tree(package, &["-i", dependency, "--prefix", "depth"])?
            .iter()
            .filter_map(|l| l.strip_prefix('1'))
            .map(str::to_string)
            .collect(),
    )
}

/// An accepted URL answer only records consent: nothing in the kit, the command or the component
/// can fetch a URL an answer or a request names. None of them depends on a network client crate
/// of its own, their code uses no socket API of the standard library, tokio or libc (TCP, UDP
/// or Unix sockets), and the component's WASI socket imports are bound to traps. The
/// exceptions are named: the host's `wasi:http` (`hyper`, through `wasmtime-wasi-http` alone),
/// whose every request goes to the execution's server origin or is refused
/// (`imports/network.rs`; `http_network::*`), and `m3 serve`, which listens: `m3-cli` may
/// depend on `hyper` (the server side under axum) and code under `host/cli/src/serve/` may bind
/// a listener (`TcpListener`, or `TcpSocket` to set its buffers first), but nothing there may
/// connect out (`TcpStream`, `UdpSocket`, `UnixStream`, a `connect(` call, libc's `connect`,
/// client crates) except the notifier, whose one file `serve/notify/post.rs` connects over TCP
/// to the targets `m3 serve --notify` was given (https, or loopback http unless
/// `--notify-insecure`; through hyper's client, which `m3-cli`'s `hyper` exception covers); and a child's stdin and stdout are a socket pair (libc's `socketpair`, whose
/// host end `process/child.rs` alone wraps as a `UnixStream`, connecting nothing). Each check is shown able to fail: the same scan finds the sockets of the
/// test suite's loopback model and a planted connecting line for each name, and the same filter
/// finds a client in a listing.
#[test]
fn nothing_shipped_can_fetch_a_url() -> Result<()> {
    for package in ["m3", "m3-cli", "m3-guest", "m3-shipping-server"] {
        let tree = normal_dependencies(package)?;
        ensure!(
            tree.first().is_some_and(|l| l.starts_with(package)),
            "unexpected cargo tree output for {package}: {tree:?}"
        );
        let clients: Vec<_> = network_clients(&tree)
            .into_iter()
            .filter(|c| !(package == "m3-cli" && c.starts_with("hyper ")))
            .collect();
        if package == "m3" && clients.iter().all(|c| c.starts_with("hyper ")) {
            let dependents = direct_dependents(package, "hyper")?;
            ensure!(
                !dependents.is_empty()
                    && dependents
                        .iter()
                        .all(|d| d.starts_with("wasmtime-wasi-http ")),
                "m3 reaches hyper other than through wasmtime-wasi-http: {dependents:?}"
            );
            continue;
        }
        ensure!(clients.is_empty(), "{package} depends on {clients:?}");
    }
    let control = ["m3 v0.1.0".to_string(), "hyper v1.6.0".to_string()];
    ensure!(
        network_clients(&control).len() == 1,
        "the filter finds no client"
    );

    let root = workspace_root();
    let mut serve_uses = Vec::new();
    let mut stdio_uses = Vec::new();
    let mut notify_uses = Vec::new();
    for shipped in [
        "host/src",
        "host/cli/src",
        "guest/src",
        "examples/shipping-server/src",
    ] {
        let all = socket_uses(&root.join(shipped))?;
        serve_uses.extend(all.iter().filter(|u| listens_only(u)).cloned());
        stdio_uses.extend(all.iter().filter(|u| child_stdio_only(u)).cloned());
        notify_uses.extend(all.iter().filter(|u| notifies_only(u)).cloned());
        let uses: Vec<_> = all
            .into_iter()
            .filter(|u| !listens_only(u) && !child_stdio_only(u) && !notifies_only(u))
            .collect();
        ensure!(uses.is_empty(), "shipped code opens sockets: {uses:?}");
    }
    ensure!(
        notify_uses.iter().any(|u| u.ends_with(": TcpStream")),
        "the scan should find the notifier's connection; is it broken? {notify_uses:?}"
    );
    ensure!(
        notifies_only("host/cli/src/serve/notify/post.rs: TcpStream")
            && !notifies_only("host/cli/src/serve/notify/post.rs: UdpSocket")
            && !notifies_only("host/cli/src/serve/notify/post.rs: UnixStream")
            && !notifies_only("host/cli/src/serve/notify/post.rs: libc::connect")
            && !notifies_only("host/cli/src/serve/notify/post.rs: TcpListener")
            && !notifies_only("host/cli/src/serve/notify/event.rs: TcpStream")
            && !notifies_only("host/cli/src/serve/api.rs: TcpStream")
            && !notifies_only("host/src/process/child.rs: TcpStream"),
        "the notifier's exception is wider than its one file's TCP connection"
    );
    ensure!(
        stdio_uses.iter().any(|u| u.ends_with(": UnixStream")),
        "the scan should find the child's stdio socket; is it broken? {stdio_uses:?}"
    );
    ensure!(
        !child_stdio_only("host/src/process/child.rs: connect(")
            && !child_stdio_only("host/src/process/child.rs: libc::connect")
            && !child_stdio_only("host/src/process/child.rs: TcpStream")
            && !child_stdio_only("host/src/process/child.rs: libc::socket")
            && !child_stdio_only("host/src/imports/process.rs: UnixStream")
            && child_stdio_only("host/src/process/child.rs: UnixStream"),
        "the child stdio exception is wider than the host's end of a socket pair"
    );
    ensure!(
        serve_uses.iter().any(|u| u.ends_with(": TcpListener")),
        "the scan should find `m3 serve`'s listener; is it broken? {serve_uses:?}"
    );
    ensure!(
        !listens_only("host/cli/src/serve/mod.rs: TcpStream")
            && !listens_only("host/cli/src/serve/mod.rs: UnixStream")
            && !listens_only("host/cli/src/serve/mod.rs: connect(")
            && !listens_only("host/cli/src/serve/mod.rs: libc::connect")
            && !listens_only("host/cli/src/run.rs: TcpListener")
            && !listens_only("host/cli/src/run.rs: TcpSocket")
            && listens_only("host/cli/src/serve/mod.rs: TcpListener")
            && listens_only("host/cli/src/serve/mod.rs: TcpSocket"),
        "the listener exception is wider than `m3 serve` binding a listener"
    );
    // Planted lines: each connecting name is found, and so is a connect on a listener's socket
    // type (which the exception alone would let through).
    for (planted, api) in [
        (
            "let s = tokio::net::TcpSocket::new_v4()?; s.connect(addr).await?;",
            "connect(",
        ),
        ("let s = TcpSocket::new_v4()?;", "TcpSocket"),
        (
            "let s = std::os::unix::net::UnixStream::connect(path)?;",
            "UnixStream",
        ),
        ("use std::os::unix::net::UnixDatagram;", "os::unix::net"),
        ("let s = UnixDatagram::unbound()?;", "UnixDatagram"),
        ("let l = UnixListener::bind(path)?;", "UnixListener"),
        ("let fd = unsafe { libc::socket(2, 1, 0) };", "libc::socket"),
        ("unsafe { libc::connect(fd, addr, len) };", "libc::connect"),
        ("use tokio::net::UdpSocket;", "UdpSocket"),
    ] {
        let found = socket_apis_in(planted);
        ensure!(
            found.contains(&api),
            "the scan misses {api} in {planted:?}: {found:?}"
        );
    }
    ensure!(
        socket_apis_in("let conn = db.connect()?;").is_empty(),
        "a database's connect is no socket"
    );
    let loopback = socket_uses(&root.join("tests/support"))?;
    ensure!(
        loopback
            .iter()
            .any(|u| u.contains("fake_model.rs: std::net")),
        "the scan should find the loopback model's sockets; is it broken? {loopback:?}"
    );

    let imports = m3::Policy::new()?.imports();
    ensure!(!imports.is_empty(), "the component lists no imports");
    for binding in &imports {
        // `wasi:http` is the one network import, limited by each execution's grant.
        let expected = if binding.name.starts_with("wasi:http/") {
            m3::sandbox::ImportProvider::WasiHttp
        } else {
            m3::sandbox::ImportProvider::Trap
        };
        if binding.name.starts_with("wasi:sockets") || binding.name.starts_with("wasi:http") {
            ensure!(
                binding.provider == expected,
                "{} is bound to {:?}",
                binding.name,
                binding.provider
            );
        }
    }
    Ok(())
}

/// Every `.rs` file under `dir`, skipping build output and hidden directories.
fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Rust source with comments blanked out (`code_and_strings`), and additionally with the
/// contents of string and character literals blanked out (`code`). Newlines are kept, so line
/// numbers stay right. A small lexer: enough for checks on our own sources.
struct Stripped {
    code: String,
    code_and_strings: String,
}

fn strip(source: &str) -> Stripped {
    let chars: Vec<char> = source.chars().collect();
    let (mut code, mut with_strings) = (String::new(), String::new());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                code.push(' ');
                with_strings.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    code.push_str("  ");
                    with_strings.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    code.push_str("  ");
                    with_strings.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    code.push(blank(chars[i]));
                    with_strings.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == '"' || (c == 'r' && matches!(next, Some('"' | '#'))) {
            // A (raw) string literal: keep the delimiters in `code`, blank its contents.
            let raw = c == 'r';
            let mut hashes = 0;
            let mut j = i + usize::from(raw);
            while raw && chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                // `r#ident`, not a string.
                code.push(c);
                with_strings.push(c);
                i += 1;
                continue;
            }
            for &d in &chars[i..=j] {
                code.push(d);
                with_strings.push(d);
            }
            i = j + 1;
            while i < chars.len() {
                let d = chars[i];
                if !raw && d == '\\' {
                    code.push(' ');
                    with_strings.push(d);
                    if let Some(&e) = chars.get(i + 1) {
                        code.push(blank(e));
                        with_strings.push(e);
                    }
                    i += 2;
                    continue;
                }
                let closes = d == '"' && (0..hashes).all(|k| chars.get(i + 1 + k) == Some(&'#'));
                if closes {
                    for &e in &chars[i..=i + hashes] {
                        code.push(e);
                        with_strings.push(e);
                    }
                    i += 1 + hashes;
                    break;
                }
                code.push(blank(d));
                with_strings.push(d);
                i += 1;
            }
        } else if c == '\'' {
            // A character literal ('x', '\n', '"'), or a lifetime ('a).
            let end = if next == Some('\\') {
                (i + 2..chars.len()).find(|&k| chars[k] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    code.push('\'');
                    with_strings.push('\'');
                    for &d in &chars[i + 1..end] {
                        code.push(' ');
                        with_strings.push(d);
                    }
                    code.push('\'');
                    with_strings.push('\'');
                    i = end + 1;
                }
                None => {
                    code.push(c);
                    with_strings.push(c);
                    i += 1;
                }
            }
        } else {
            code.push(c);
            with_strings.push(c);
            i += 1;
        }
    }
    Stripped {
        code,
        code_and_strings: with_strings,
    }
}

/// Files whose job is to map between equivalent types (public Rust <-> WIT <-> SQL text). They
/// may name statuses and failure codes, but only in arms mapping a variant to the same variant.
const MAPPING_FILES: &[&str] = &[
    "component/convert.rs",
    "component/store_rows.rs",
    "api/record.rs",
];
const STATUSES: &[&str] = &[
    "Pending",
    "ResponseValidated",
    "DeliveryStarted",
    "Delivered",
    "Resolved",
    "Failed",
];
const FAILURE_CODES: &[&str] = &[
    "Cancelled",
    "DeadlineExceeded",
    "RoundLimitExceeded",
    "ServerError",
    "InvalidRequestState",
    "ElicitationUnhandled",
    "RecoveryUnavailable",
];
/// Error codes the host may raise itself: its edge size limits, and a response map serde cannot
/// encode. Every other code is the component's decision.
/// (The storage codes are the host's own faults reading the file, never a decision.)
const HOST_ERROR_CODES: &[&str] = &[
    "PayloadTooLarge",
    "InvalidResponse",
    "StorageBusy",
    "StorageFailure",
];
/// JSON Schema keywords: a host that looks them up is validating schemas.
const SCHEMA_KEYWORDS: &[&str] = &[
    "\"minLength\"",
    "\"maxLength\"",
    "\"minimum\"",
    "\"maximum\"",
    "\"pattern\"",
    "\"enum\"",
    "\"oneOf\"",
    "\"format\"",
    "\"required\"",
    "\"properties\"",
];

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Byte offsets where `needle` occurs as a whole token (not inside a longer identifier after it).
fn token_positions(text: &str, needle: &str) -> Vec<usize> {
    text.match_indices(needle)
        .filter(|(at, _)| {
            !text[at + needle.len()..]
                .chars()
                .next()
                .is_some_and(is_ident_char)
        })
        .map(|(at, _)| at)
        .collect()
}

fn snake_case(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The status and failure-code variants a piece of a line names: as `Status::V`,
/// `FailureCode::V` or `Self::V` paths, or as `"snake_case"` string literals.
fn named_variants(raw: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (prefixes, variants) in [
        (&["Status::", "Self::"][..], STATUSES),
        (&["FailureCode::", "Self::"][..], FAILURE_CODES),
    ] {
        for variant in variants {
            let named_as_path = prefixes
                .iter()
                .any(|p| !token_positions(raw, &format!("{p}{variant}")).is_empty());
            let named_as_text = raw.contains(&format!("\"{}\"", snake_case(variant)));
            if named_as_path || named_as_text {
                found.insert((*variant).to_string());
            }
        }
    }
    found
}

/// The invariant-1 rules for one host source file (`rel` is its path under `host/src`).
///
/// The host does I/O and type mapping; the component validates and decides. Precisely:
///
/// 1. No code mentions `jsonschema` (comments may).
/// 2. Outside the pure type-mapping files ([`MAPPING_FILES`]), no code names a status or a
///    failure code (`...Status::Resolved`, `FailureCode::Cancelled`): naming one is choosing one,
///    and the host never chooses.
/// 3. In the mapping files, a line with a match arm (`=>`) that names a status or failure code
///    must map it to the same variant (`Status::Delivered => wit::Status::Delivered`,
///    `Status::Delivered => "delivered"`); `Status::Delivered => Status::Resolved` is a transition.
/// 4. Nowhere is a `status` field or variable assigned (`record.status = ...`, `*status = ...`,
///    `status = ...`; a `let status = ...` binding is not an assignment): records are built field
///    by field by the mapping code, never moved to a new status by the host.
/// 5. Outside `error.rs` and `convert.rs` (the error types and their mapping), the only error
///    codes the host raises itself are [`HOST_ERROR_CODES`]; every other rejection is the
///    component's.
/// 6. No code looks up JSON Schema keywords ([`SCHEMA_KEYWORDS`] as string literals).
fn host_rule_violations(rel: &str, source: &str) -> Vec<String> {
    let stripped = strip(source);
    let mapping = MAPPING_FILES.contains(&rel);
    let mut violations = Vec::new();
    let code_lines = stripped.code.lines();
    let string_lines = stripped.code_and_strings.lines();
    for (n, (code, with_strings)) in code_lines.zip(string_lines).enumerate() {
        let mut flag = |rule: &str| {
            violations.push(format!(
                "host/src/{rel}:{}: {rule}: {}",
                n + 1,
                with_strings.trim()
            ))
        };
        if code.contains("jsonschema") {
            flag("the host uses jsonschema");
        }
        if !mapping {
            let names_status = STATUSES
                .iter()
                .any(|v| !token_positions(code, &format!("Status::{v}")).is_empty());
            let names_failure = FAILURE_CODES
                .iter()
                .any(|v| !token_positions(code, &format!("FailureCode::{v}")).is_empty());
            if names_status || names_failure {
                flag("the host names a status or failure code outside the mapping files");
            }
        } else if let (Some((lhs, rhs)), true) = (
            with_strings.split_once("=>"),
            !named_variants(code).is_empty(),
        ) {
            // An arm naming a status by path: both sides must name the same variants.
            let (left, right) = (named_variants(lhs), named_variants(rhs));
            if left != right || left.is_empty() {
                flag("a mapping arm maps a status or failure code to a different one");
            }
        }
        for at in token_positions(code, "status") {
            let before = code[..at].trim_end();
            let starts_token = !code[..at].ends_with(is_ident_char);
            // `x.status = ..`, `*status = ..` or a statement `status = ..`; not `let status =`.
            let assigns_place = before.is_empty() || before.ends_with(['.', ';', '{', '}', '*']);
            let rest = code[at + "status".len()..].trim_start();
            if starts_token && assigns_place && rest.starts_with('=') && !rest.starts_with("==") {
                flag("the host assigns a status");
            }
        }
        if rel != "api/error.rs" && rel != "component/convert.rs" {
            for (at, _) in code.match_indices("ErrorCode::") {
                if code[..at].ends_with("rusqlite::") {
                    continue;
                }
                let name: String = code[at + "ErrorCode::".len()..]
                    .chars()
                    .take_while(|c| is_ident_char(*c))
                    .collect();
                if !HOST_ERROR_CODES.contains(&name.as_str()) {
                    flag("the host raises an error code that only the component may decide");
                }
            }
        }
        if SCHEMA_KEYWORDS.iter().any(|k| with_strings.contains(k)) {
            flag("the host looks at JSON Schema keywords");
        }
    }
    violations
}

/// The rules catch what they are meant to catch, and not comments, SQL text or mapping arms.
#[test]
fn host_rules_catch_transitions_and_validation() {
    let caught = |rel: &str, sample: &str| !host_rule_violations(rel, sample).is_empty();
    let transition =
        "fn f(record: &mut Record) {\n    record.status = ManagedInputStatus::Resolved;\n}\n";
    assert!(caught("api/managed_input.rs", transition));
    assert!(
        caught("component/convert.rs", transition),
        "assignment is caught everywhere"
    );
    assert!(caught("api/managed_input.rs", "let s = Status::Delivered;"));
    assert!(caught("api/managed_input.rs", "status = next;"));
    assert!(caught("api/managed_input.rs", "self.status=next;"));
    assert!(caught(
        "api/managed_input.rs",
        "let next = match r.status { ManagedInputStatus::Delivered => ManagedInputStatus::Resolved, s => s };"
    ));
    assert!(caught(
        "component/convert.rs",
        "        wit::Status::Delivered => ManagedInputStatus::Resolved,"
    ));
    assert!(caught(
        "api/record.rs",
        "        Self::Delivered => \"resolved\","
    ));
    assert!(caught(
        "api/managed_input.rs",
        "fail(r, FailureCode::RecoveryUnavailable)"
    ));
    assert!(caught(
        "component/instance.rs",
        "use jsonschema::Validator;"
    ));
    assert!(caught(
        "api/managed_input.rs",
        "edge_validation(ErrorCode::SchemaViolation, m)"
    ));
    assert!(caught(
        "api/round.rs",
        "if schema.get(\"minLength\").is_some() {}"
    ));

    let clean = |rel: &str, sample: &str| host_rule_violations(rel, sample);
    let none: Vec<String> = Vec::new();
    assert_eq!(
        clean(
            "api/managed_input.rs",
            "// record.status = ManagedInputStatus::Resolved;\n/* Status::Failed */"
        ),
        none
    );
    assert_eq!(
        clean(
            "store/sqlite/transaction.rs",
            "let sql = \"UPDATE t SET status = ?3 WHERE version = ?11\";"
        ),
        none
    );
    assert_eq!(
        clean(
            "component/convert.rs",
            "        ManagedInputStatus::Pending => wit::Status::Pending,"
        ),
        none
    );
    assert_eq!(
        clean(
            "component/store_rows.rs",
            "        \"delivery_started\" => Status::DeliveryStarted,"
        ),
        none
    );
    assert_eq!(
        clean("api/record.rs", "            Self::Failed => \"failed\","),
        none
    );
    assert_eq!(
        clean("api/managed_input.rs", "if rec.status == other.status {}"),
        none
    );
    assert_eq!(
        clean("api/managed_input.rs", "let status = child.wait()?;"),
        none
    );
    assert_eq!(
        clean(
            "store/sqlite/transaction.rs",
            "if let Some(status) = filter.status {}"
        ),
        none
    );
    assert_eq!(
        clean("api/managed_input.rs", "let substatus = 1; my_status = 2;"),
        none
    );
    assert_eq!(
        clean(
            "store/sqlite/database.rs",
            "Some(rusqlite::ErrorCode::DatabaseBusy)"
        ),
        none
    );
    assert_eq!(
        clean(
            "api/managed_input.rs",
            "edge_validation(ErrorCode::PayloadTooLarge, m)"
        ),
        none
    );
    assert_eq!(
        clean("api/managed_input.rs", "let c = '\"'; let s = \"a\\\"b\";"),
        none
    );
}

#[test]
fn host_source_holds_no_transition_or_validation_logic() -> Result<()> {
    let src = workspace_root().join("host/src");
    let files = rust_files(&src)?;
    ensure!(
        files.len() >= 10,
        "found only {} files under {}",
        files.len(),
        src.display()
    );
    let mut violations = Vec::new();
    let mut mapping_seen = BTreeSet::new();
    for file in &files {
        let rel = file
            .strip_prefix(&src)?
            .to_string_lossy()
            .replace('\\', "/");
        if MAPPING_FILES.contains(&rel.as_str()) {
            mapping_seen.insert(rel.clone());
        }
        let source = std::fs::read_to_string(file)?;
        violations.extend(host_rule_violations(&rel, &source));
    }
    ensure!(
        mapping_seen.len() == MAPPING_FILES.len(),
        "a mapping file moved; update MAPPING_FILES (found {mapping_seen:?})"
    );
    ensure!(
        violations.is_empty(),
        "decision or validation logic in the host (it belongs in the guest):\n{}",
        violations.join("\n")
    );
    Ok(())
}

/// The functions of one WIT interface, in snake_case.
fn wit_functions(wit: &str, interface: &str) -> Result<Vec<String>> {
    let header = format!("interface {interface} {{");
    let start = wit
        .find(&header)
        .with_context(|| format!("no `{header}` in the WIT"))?;
    let body = &wit[start + header.len()..];
    let end = body.find("\n}").context("the interface never closes")?;
    let functions: Vec<String> = body[..end]
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//"))
        .filter_map(|l| l.split_once(": func("))
        .map(|(name, _)| name.trim().trim_start_matches('%').replace('-', "_"))
        .collect();
    ensure!(!functions.is_empty(), "no functions in {interface}");
    Ok(functions)
}

/// The `fn` names declared in the block that starts at `header` in `source`.
fn block_fns(source: &str, header: &str) -> Result<BTreeSet<String>> {
    let start = source
        .find(header)
        .with_context(|| format!("no `{header}`"))?;
    let body = &source[start..];
    let end = body.find("\n}").context("the block never closes")?;
    Ok(body[..end]
        .split("fn ")
        .skip(1)
        .filter_map(|rest| rest.split(['(', '<']).next())
        .map(|name| name.trim().to_string())
        .collect())
}

#[test]
fn every_wit_function_of_managed_input_is_a_method_of_the_store_trait() -> Result<()> {
    let root = workspace_root();
    let wit = std::fs::read_to_string(root.join("wit/exports.wit"))?;
    let store_rs = std::fs::read_to_string(root.join("host/src/api/managed_input.rs"))?;
    let policy_rs = std::fs::read_to_string(root.join("host/src/api/policy.rs"))?;

    let protocol = wit_functions(&wit, "managed-input")?;
    ensure!(
        protocol.len() == 12,
        "the spec's store protocol has twelve methods, the WIT has {}: {protocol:?}",
        protocol.len()
    );
    let trait_methods = block_fns(&store_rs, "pub trait ManagedInputStore")?;
    for function in &protocol {
        ensure!(
            trait_methods.contains(function),
            "WIT managed-input.{function} is not a method of ManagedInputStore ({trait_methods:?})"
        );
    }
    for method in &trait_methods {
        let base = method.strip_suffix("_json").unwrap_or(method);
        ensure!(
            protocol.iter().any(|f| f == base),
            "ManagedInputStore::{method} is not in the WIT managed-input interface"
        );
    }

    let policy = wit_functions(&wit, "policy")?;
    let policy_methods = block_fns(&policy_rs, "impl Policy")?;
    for function in &policy {
        ensure!(
            policy_methods.contains(function)
                || policy_methods.contains(&format!("{function}_json")),
            "WIT policy.{function} is not a method of m3::Policy ({policy_methods:?})"
        );
    }
    Ok(())
}

/// `missing_docs` is a workspace lint that CI turns into an error (clippy `-D warnings`); this
/// checks that the host still opts in and silences it nowhere new.
#[test]
fn every_public_item_of_the_host_has_docs() -> Result<()> {
    let root = workspace_root();
    let workspace = std::fs::read_to_string(root.join("Cargo.toml"))?;
    ensure!(
        workspace
            .lines()
            .any(|l| l.replace(' ', "") == "missing_docs=\"warn\""
                || l.replace(' ', "") == "missing_docs=\"deny\""),
        "the workspace no longer lints missing_docs"
    );
    let host = std::fs::read_to_string(root.join("host/Cargo.toml"))?;
    ensure!(
        host.contains("[lints]\nworkspace = true"),
        "host/Cargo.toml does not use the workspace lints"
    );
    let src = root.join("host/src");
    let mut silenced = Vec::new();
    for file in rust_files(&src)? {
        let rel = file
            .strip_prefix(&src)?
            .to_string_lossy()
            .replace('\\', "/");
        let code = strip(&std::fs::read_to_string(&file)?).code;
        // Generated bindings; the error-code variants, documented by their `snake_case` name
        // and the rejection table.
        if code.contains("missing_docs")
            && !["component/bindings.rs", "api/error.rs"].contains(&rel.as_str())
        {
            silenced.push(rel);
        }
    }
    ensure!(
        silenced.is_empty(),
        "missing_docs is allowed in {silenced:?}"
    );
    Ok(())
}

#[test]
fn no_ignored_tests_or_stubs() -> Result<()> {
    // Built from pieces so that this file does not match itself.
    let needles = [
        concat!("#[", "ignore"),
        concat!("todo", "!("),
        concat!("unimplemented", "!("),
    ];
    let root = workspace_root();
    let mut hits = Vec::new();
    let mut scanned = 0;
    for dir in ["host", "guest", "tests"] {
        for file in rust_files(&root.join(dir))? {
            scanned += 1;
            let text = std::fs::read_to_string(&file)?;
            for (n, line) in text.lines().enumerate() {
                if needles.iter().any(|needle| line.contains(needle)) {
                    hits.push(format!(
                        "{}:{}: {}",
                        file.strip_prefix(&root)?.display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    ensure!(scanned >= 20, "scanned only {scanned} files");
    ensure!(
        hits.is_empty(),
        "ignored tests or stubs:\n{}",
        hits.join("\n")
    );
    Ok(())
}

/// MCP and Codex protocol words that only the component may know.
const PROTOCOL_WORDS: &[&str] = &[
    "elicitation/create",
    "server/discover",
    "tools/call",
    "prompts/get",
    "resources/read",
    "inputRequests",
    "inputResponses",
    "requestState",
    "input_required",
    "notifications/cancelled",
    "notifications/initialized",
    "requestedSchema",
    "mcpServer/elicitation/request",
    "turn/start",
];

/// The MCP client lives in the component: the host's source (comments aside) names no protocol
/// method or field. Test fixtures (tests/, the bundled server) may.
#[test]
fn host_source_holds_no_mcp_protocol_names() -> Result<()> {
    let src = workspace_root().join("host/src");
    let mut found = Vec::new();
    for file in rust_files(&src)? {
        let source = std::fs::read_to_string(&file)?;
        let code = strip(&source).code_and_strings;
        for word in PROTOCOL_WORDS {
            if code.contains(word) {
                found.push(format!("{}: {word}", file.display()));
            }
        }
    }
    ensure!(
        found.is_empty(),
        "protocol knowledge in the host:\n{}",
        found.join("\n")
    );
    // The check can fail: the component's MCP client does use these words.
    let guest = std::fs::read_to_string(workspace_root().join("guest/src/engine/mcp/mrtr.rs"))?;
    ensure!(strip(&guest).code_and_strings.contains("requestState"));
    Ok(())
}

/// The names a source file gives to generated binding types and modules: whatever its `use`
/// statements bring in from `crate::component::bindings` (a module alias such as `wit`, or the
/// types themselves), plus the paths through `bindings::`.
fn generated_names(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::from(["bindings".to_string()]);
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(path) = statement
            .strip_prefix("use ")
            .or_else(|| statement.strip_prefix("pub use "))
            .or_else(|| statement.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let path: String = path.split_whitespace().collect::<Vec<_>>().join(" ");
        let generated = [
            "crate::component::bindings",
            "crate::bindings",
            "bindings::",
        ]
        .iter()
        .any(|prefix| path.starts_with(prefix));
        if !generated {
            continue;
        }
        let tail = path.rsplit("::").next().unwrap_or_default();
        let items = tail.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            let name = match item.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => item,
            };
            if !name.is_empty() && name != "self" && name != "*" {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// Public signatures in `code` (items, methods and fields declared `pub`, not `pub(crate)`)
/// that name a generated type: `(line, signature)`.
fn generated_in_public_signatures(code: &str) -> Vec<(usize, String)> {
    let names = generated_names(code);
    let mut found = Vec::new();
    let lines: Vec<&str> = code.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if !trimmed.starts_with("pub ")
            || trimmed.starts_with("pub use")
            || trimmed.starts_with("pub mod")
        {
            continue;
        }
        // The signature: up to the body, the end of a declaration, or a field's end.
        let mut signature = String::new();
        for next in &lines[i..] {
            signature.push_str(next.trim());
            signature.push(' ');
            if next.contains('{')
                || next.trim_end().ends_with(';')
                || next.trim_end().ends_with(',')
            {
                break;
            }
        }
        let head = signature.split('{').next().unwrap_or_default();
        // A module name counts where a path goes through it; a type name anywhere.
        let leaks = names.iter().any(|name| {
            let is_module = name.chars().all(|c| c.is_ascii_lowercase() || c == '_');
            token_positions(head, name).into_iter().any(|at| {
                let whole = !head[..at].chars().next_back().is_some_and(is_ident_char);
                whole && (!is_module || head[at + name.len()..].starts_with("::"))
            })
        });
        if leaks {
            found.push((i + 1, head.trim().to_string()));
        }
    }
    found
}

/// The host files that define the public API: the modules `lib.rs` re-exports from (`pub use
/// a::b::{..}` is the module `a::b`, `pub use a::b;` the module or item `b` of `a`) and its public
/// modules (`testing` aside, which is outside the API); for a folder module, its `mod.rs` and the
/// files it re-exports from.
fn public_api_files(src: &Path) -> Result<Vec<PathBuf>> {
    // The file of the longest prefix of `segments` that is a module.
    let module_file = |segments: &[&str]| -> Option<PathBuf> {
        (1..=segments.len()).rev().find_map(|k| {
            let base = src.join(segments[..k].join("/"));
            [base.with_extension("rs"), base.join("mod.rs")]
                .into_iter()
                .find(|f| f.exists())
        })
    };
    let lib = strip(&std::fs::read_to_string(src.join("lib.rs"))?).code;
    let mut files = vec![src.join("lib.rs")];
    for statement in lib.split(';') {
        let statement = statement.trim();
        // A re-export at the top, or inside one of lib.rs's inline modules (`pub mod sandbox {
        // pub use crate::...; }`), whose paths start with `crate::`.
        let path = if let Some(at) = statement.rfind("pub use ") {
            let path = &statement[at + "pub use ".len()..];
            path.split('{')
                .next()
                .unwrap_or_default()
                .trim()
                .trim_start_matches("crate::")
                .to_string()
        } else if let Some(name) = statement.rsplit("pub mod ").next()
            && statement.contains("pub mod ")
            && name != "testing"
            && !name.contains('{')
        {
            name.trim().to_string()
        } else {
            continue;
        };
        let segments: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
        let file = module_file(&segments)
            .with_context(|| format!("lib.rs re-exports from {path}, which has no file"))?;
        if files.contains(&file) {
            continue;
        }
        // A folder module: also the files its `mod.rs` re-exports from.
        if file.ends_with("mod.rs") {
            let folder = file.parent().unwrap_or(src).to_path_buf();
            let code = strip(&std::fs::read_to_string(&file)?).code;
            for statement in code.split(';') {
                if let Some(path) = statement.trim().strip_prefix("pub use ") {
                    let sub = folder.join(format!(
                        "{}.rs",
                        path.split("::").next().unwrap_or_default().trim()
                    ));
                    if sub.exists() && !files.contains(&sub) {
                        files.push(sub);
                    }
                }
            }
        }
        files.push(file);
    }
    Ok(files)
}

/// Planted leaks are found: a generated type through a module alias, through a type imported by
/// name, and through the full path; private items and plain types are not flagged.
#[test]
fn the_generated_type_check_finds_a_planted_leak() {
    let planted = "use crate::component::bindings::exports::m3::managed_input::runtime as wit;\n\
                   use crate::component::bindings::m3::managed_input::types::{Timestamp, Status as WitStatus};\n\
                   pub struct Public {\n    pub at: Timestamp,\n    pub name: String,\n}\n\
                   impl Public {\n    pub fn state(&self) -> wit::ExecutionState {\n        todo()\n    }\n\
                   pub(crate) fn inner(&self) -> wit::ExecutionSpec {\n        todo()\n    }\n\
                   pub fn status(&self) -> Option<WitStatus> {\n        None\n    }\n\
                   pub fn full(&self) -> crate::component::bindings::m3::managed_input::types::Cursor {\n        todo()\n    }\n\
                   pub fn plain(&self) -> ExecutionState {\n        todo()\n    }\n}\n";
    let found: Vec<usize> = generated_in_public_signatures(planted)
        .into_iter()
        .map(|(line, _)| line)
        .collect();
    assert_eq!(
        found,
        vec![4, 8, 14, 17],
        "{:#?}",
        generated_in_public_signatures(planted)
    );
}

/// No generated binding type in the public API. `lib.rs` denies `private_interfaces`,
/// `private_bounds` and `unnameable_types`, which keeps the host's own internal types out of
/// public signatures; but the generated types are `pub` inside the private `bindings` module,
/// which those lints let through (a planted `pub fn` returning `wit::ExecutionState` builds), so
/// this scan is what holds them out: every public signature of the files that define the API.
#[test]
fn no_generated_type_in_the_public_api() -> Result<()> {
    let src = workspace_root().join("host/src");
    let lib = strip(&std::fs::read_to_string(src.join("lib.rs"))?).code;
    ensure!(
        lib.contains("#![deny(private_interfaces, private_bounds, unnameable_types)]"),
        "lib.rs no longer denies private types in public signatures"
    );
    let component = strip(&std::fs::read_to_string(src.join("component/mod.rs"))?).code;
    ensure!(
        lib.lines().any(|l| l.trim() == "mod component;")
            && component.lines().any(|l| l.trim() == "pub mod bindings;"),
        "the generated bindings are no longer inside the private `component` module"
    );
    let mut leaks = Vec::new();
    for file in public_api_files(&src)? {
        let code = strip(&std::fs::read_to_string(&file)?).code;
        for (line, signature) in generated_in_public_signatures(&code) {
            leaks.push(format!("{}:{line}: {signature}", file.display()));
        }
    }
    ensure!(
        leaks.is_empty(),
        "generated types in the public API:\n{}",
        leaks.join("\n")
    );
    Ok(())
}

/// The module a host file is (`kit/mod.rs` is `kit`, `imports/process.rs` is
/// `imports::process`).
fn host_module(rel: &str) -> String {
    rel.trim_end_matches(".rs")
        .trim_end_matches("/mod")
        .replace('/', "::")
}

/// Which host modules each host module uses (`crate::a::b` and `super::x` paths, tests aside),
/// the generated bindings left out (their resource types name the host's on purpose).
fn host_module_uses(src: &Path) -> Result<std::collections::BTreeMap<String, BTreeSet<String>>> {
    let mut sources = std::collections::BTreeMap::new();
    for file in rust_files(src)? {
        let rel = file.strip_prefix(src)?.to_string_lossy().replace('\\', "/");
        let module = host_module(&rel);
        if module == "lib" || module == "component::bindings" {
            continue;
        }
        let code = strip(&std::fs::read_to_string(&file)?).code;
        let code = code
            .split("#[cfg(test)]")
            .next()
            .unwrap_or_default()
            .to_string();
        sources.insert(module, code);
    }
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    let mut uses = std::collections::BTreeMap::new();
    for (module, code) in &sources {
        let mut used = BTreeSet::new();
        let parent = module.rsplit_once("::").map(|(p, _)| p.to_string());
        for (prefix, base) in [("crate::", None), ("super::", parent.clone())] {
            for (at, _) in code.match_indices(prefix) {
                if code[..at].chars().next_back().is_some_and(is_ident_char) {
                    continue;
                }
                let path: String = code[at + prefix.len()..]
                    .chars()
                    .take_while(|c| is_ident_char(*c) || *c == ':')
                    .collect();
                let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
                let full: Vec<String> = match (&base, prefix) {
                    (Some(base), "super::") => std::iter::once(base.clone())
                        .chain(parts.iter().map(|p| p.to_string()))
                        .collect(),
                    (None, "super::") => continue,
                    _ => parts.iter().map(|p| p.to_string()).collect(),
                };
                // The longest prefix of the path that is a module.
                for k in (1..=full.len()).rev() {
                    let candidate = full[..k].join("::");
                    if modules.contains(&candidate) {
                        let inside =
                            module == &candidate || module.starts_with(&format!("{candidate}::"));
                        if !inside {
                            used.insert(candidate);
                        }
                        break;
                    }
                }
            }
        }
        uses.insert(module.clone(), used);
    }
    Ok(uses)
}

/// Groups of modules that use each other in a circle.
fn circles(uses: &std::collections::BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Reachability by repeated expansion: small graphs, plain code.
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<String> = uses[from].iter().cloned().collect();
        while let Some(next) = todo.pop() {
            if seen.insert(next.clone()) {
                todo.extend(uses.get(&next).into_iter().flatten().cloned());
            }
        }
        seen
    };
    let reached: std::collections::BTreeMap<&String, BTreeSet<String>> =
        uses.keys().map(|m| (m, reach(m))).collect();
    let mut groups: Vec<Vec<String>> = Vec::new();
    for module in uses.keys() {
        if !reached[module].contains(module) || groups.iter().any(|g| g.contains(module)) {
            continue;
        }
        let group: Vec<String> = uses
            .keys()
            .filter(|other| reached[module].contains(*other) && reached[*other].contains(module))
            .cloned()
            .collect();
        groups.push(group);
    }
    groups
}

/// `host/src` reads top-down: no two host modules use each other, directly or through others.
#[test]
fn host_modules_use_each_other_in_no_circle() -> Result<()> {
    let uses = host_module_uses(&workspace_root().join("host/src"))?;
    ensure!(uses.len() > 20, "the host's modules were not found");
    let found = circles(&uses);
    ensure!(found.is_empty(), "host modules in a circle: {found:?}");
    // The check sees a circle when there is one.
    let mut planted = uses.clone();
    planted
        .get_mut("api::round")
        .context("no api::round")?
        .insert("api::record".into());
    planted
        .get_mut("api::record")
        .context("no api::record")?
        .insert("api::round".into());
    ensure!(
        circles(&planted) == vec![vec!["api::record".to_string(), "api::round".to_string()]],
        "a planted circle was not found: {:?}",
        circles(&planted)
    );
    Ok(())
}

/// Which host folders (a module's first segment: `store`, `api`, ...) each folder uses.
fn host_folder_uses(
    uses: &std::collections::BTreeMap<String, BTreeSet<String>>,
) -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let folder = |module: &str| module.split("::").next().unwrap_or_default().to_string();
    let mut folders: std::collections::BTreeMap<String, BTreeSet<String>> = uses
        .keys()
        .map(|module| (folder(module), BTreeSet::new()))
        .collect();
    for (module, used) in uses {
        for other in used {
            if folder(other) != folder(module) {
                folders
                    .entry(folder(module))
                    .or_default()
                    .insert(folder(other));
            }
        }
    }
    folders
}

/// The folders of `host/src` that use each other in a circle are exactly the known ones, and
/// the store is in none: `store/` uses no other folder but `checks/` (the reliability switches,
/// which use nothing), and inside it SQLite's and PostgreSQL's folders never use each other
/// (issue 42: the storage layer was one circle with the API, the component, the imports and
/// the workers). The known circle is a ratchet: it may shrink, never grow. The check sees a
/// circle when there is one: the store planted as using the API is in one.
#[test]
fn host_folders_in_circles_are_only_the_known_ones() -> Result<()> {
    let uses = host_module_uses(&workspace_root().join("host/src"))?;
    let folders = host_folder_uses(&uses);
    let known = vec![vec![
        "api".to_string(),
        "component".into(),
        "imports".into(),
        "process".into(),
        "worker".into(),
    ]];
    let found = circles(&folders);
    ensure!(found == known, "host folders in circles: {found:?}");
    let store = folders.get("store").context("no store folder")?;
    ensure!(
        store.iter().all(|f| f == "checks"),
        "the store uses other folders: {store:?}"
    );
    ensure!(
        folders.get("checks").is_some_and(BTreeSet::is_empty),
        "checks/ uses other folders: {:?}",
        folders.get("checks")
    );
    for (module, used) in &uses {
        for (from, to) in [
            ("store::sqlite", "store::postgres"),
            ("store::postgres", "store::sqlite"),
        ] {
            ensure!(
                !module.starts_with(from) || !used.iter().any(|u| u.starts_with(to)),
                "{module} uses {used:?}: one backend's folder uses the other's"
            );
        }
    }
    let mut planted = folders.clone();
    planted
        .get_mut("store")
        .context("no store folder")?
        .insert("api".into());
    ensure!(
        circles(&planted)
            .iter()
            .any(|group| group.contains(&"store".to_string())),
        "a planted circle through the store was not found: {:?}",
        circles(&planted)
    );
    Ok(())
}

/// Database client types (`rusqlite`, `tokio_postgres`) named by `code`'s public items: each
/// `pub` signature, and a `pub struct`'s or `pub enum`'s whole body (a variant's payload is
/// public too).
fn client_types_in_public_items(code: &str) -> Vec<(usize, String)> {
    let clients = ["rusqlite::", "tokio_postgres::"];
    // Names imported from the clients (`use rusqlite::{Connection, Row};`).
    let mut names: Vec<String> = Vec::new();
    for statement in code.split(';') {
        let statement = statement.trim();
        for client in clients {
            if let Some(rest) = statement.strip_prefix(&format!("use {client}")) {
                for name in rest
                    .split(|c: char| c == '{' || c == '}' || c == ',' || c.is_whitespace())
                    .filter(|n| !n.is_empty() && *n != "self")
                {
                    let name = name.rsplit("::").next().unwrap_or(name);
                    names.push(name.to_string());
                }
            }
        }
    }
    let mentions = |text: &str| {
        clients.iter().any(|c| text.contains(c))
            || names.iter().any(|name| {
                token_positions(text, name).into_iter().any(|at| {
                    !text[..at].chars().next_back().is_some_and(is_ident_char)
                        && !text[at + name.len()..]
                            .chars()
                            .next()
                            .is_some_and(is_ident_char)
                })
            })
    };
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        if !trimmed.starts_with("pub ")
            || trimmed.starts_with("pub use")
            || trimmed.starts_with("pub mod")
        {
            i += 1;
            continue;
        }
        let whole_body = trimmed.starts_with("pub struct") || trimmed.starts_with("pub enum");
        let mut item = String::new();
        let mut depth = 0i32;
        let mut j = i;
        while j < lines.len() {
            let line = lines[j].trim();
            item.push_str(line);
            item.push(' ');
            depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            let ended = if whole_body {
                depth == 0 && (line.contains('}') || line.ends_with(';'))
            } else {
                line.contains('{') || line.ends_with(';') || line.ends_with(',')
            };
            if ended {
                break;
            }
            j += 1;
        }
        let head = if whole_body {
            item.as_str()
        } else {
            item.split('{').next().unwrap_or_default()
        };
        if mentions(head) {
            found.push((i + 1, head.trim().to_string()));
        }
        i += 1;
    }
    found
}

/// The client-type scan finds planted leaks: a variant's payload, a return type by path and by an
/// imported name; private items and plain types are not flagged.
#[test]
fn the_client_type_check_finds_a_planted_leak() {
    let planted = "use rusqlite::{Connection, params};\n\
                   pub enum OpenError {\n    Sqlite(rusqlite::Error),\n    Other(String),\n}\n\
                   pub fn open() -> Connection {\n    todo()\n}\n\
                   pub fn health() -> tokio_postgres::Row {\n    todo()\n}\n\
                   pub(crate) fn inner() -> Connection {\n    todo()\n}\n\
                   pub fn plain(connections: u32) -> String {\n    todo()\n}\n";
    let found: Vec<usize> = client_types_in_public_items(planted)
        .into_iter()
        .map(|(line, _)| line)
        .collect();
    assert_eq!(
        found,
        vec![2, 6, 9],
        "{:#?}",
        client_types_in_public_items(planted)
    );
}

/// No `rusqlite` or `tokio_postgres` type in the public API (issue 42): the store's errors and
/// health are its own types; the files that define the API, and the files of the items they
/// re-export, are scanned.
#[test]
fn no_database_client_type_in_the_public_api() -> Result<()> {
    let src = workspace_root().join("host/src");
    let mut files = public_api_files(&src)?;
    // Items re-exported by the API's files from elsewhere in the crate.
    for file in files.clone() {
        let code = strip(&std::fs::read_to_string(&file)?).code;
        for statement in code.split(';') {
            let Some(path) = statement.trim().strip_prefix("pub use crate::") else {
                continue;
            };
            let segments: Vec<&str> = path.split("::").map(str::trim).collect();
            for k in (1..segments.len()).rev() {
                let base = src.join(segments[..k].join("/"));
                if let Some(found) = [base.with_extension("rs"), base.join("mod.rs")]
                    .into_iter()
                    .find(|f| f.exists())
                {
                    if !files.contains(&found) {
                        files.push(found);
                    }
                    break;
                }
            }
        }
    }
    let mut leaks = Vec::new();
    for file in &files {
        let code = strip(&std::fs::read_to_string(file)?).code;
        for (line, item) in client_types_in_public_items(&code) {
            leaks.push(format!("{}:{line}: {item}", file.display()));
        }
    }
    ensure!(
        leaks.is_empty(),
        "database client types in the public API:\n{}",
        leaks.join("\n")
    );
    Ok(())
}

/// Regression (issue 22): `m3-cli` gained a second binary (`m3-conformance-client`), and the
/// README's first command, `cargo run --release -p m3-cli -- demo`, stopped working ("could not
/// determine which binary to run"). Every `cargo run -p PACKAGE` the README's opening block
/// gives must name a package that has one binary or says which one runs (`default-run`): cargo
/// itself answers, asked for the binary it would run.
#[test]
fn the_readme_s_cargo_run_commands_each_run_one_binary() -> Result<()> {
    let readme = std::fs::read_to_string(workspace_root().join("README.md"))?;
    let block = readme
        .split("```sh")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .context("README.md opens with a sh block")?;
    let metadata = Command::new(cargo())
        .current_dir(workspace_root())
        .args(["metadata", "--no-deps", "--format-version", "1", "--locked"])
        .output()?;
    ensure!(metadata.status.success(), "cargo metadata failed");
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout)?;
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata lists no packages")?;
    let mut checked = 0;
    for line in block
        .lines()
        .filter(|l| l.trim_start().starts_with("cargo run"))
    {
        let words: Vec<&str> = line.split_whitespace().collect();
        let package = words
            .windows(2)
            .find(|w| w[0] == "-p")
            .map(|w| w[1])
            .with_context(|| format!("`{line}` names no package"))?;
        let manifest = packages
            .iter()
            .find(|p| p["name"] == package)
            .with_context(|| format!("`{line}`: no workspace package {package}"))?;
        let binaries = manifest["targets"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter(|t| {
                        t["kind"]
                            .as_array()
                            .is_some_and(|k| k.iter().any(|k| k == "bin"))
                    })
                    .count()
            })
            .unwrap_or(0);
        ensure!(
            binaries == 1 || manifest["default_run"].is_string(),
            "`{line}`: {package} has {binaries} binaries and no default-run, so cargo cannot \
             tell which to run"
        );
        checked += 1;
    }
    ensure!(
        checked >= 1,
        "the README's opening block runs nothing with cargo run"
    );
    Ok(())
}

/// Where statement text may be written in the host outside `store/statements/`, each with why:
/// what is not a statement on the store's rows, or is one database's own.
const SQL_ELSEWHERE: &[(&str, &str)] = &[
    (
        "store/sqlite/migrations.rs",
        "SQLite's schema and its version",
    ),
    (
        "store/postgres/migrations.rs",
        "PostgreSQL's schema and its version",
    ),
    (
        "store/sqlite/wakeups.rs",
        "SQLite's wake-up numbers, the next one under its one writer",
    ),
    (
        "store/postgres/transaction.rs",
        "PostgreSQL's locks, wake-up sequence and notification",
    ),
    ("store/postgres/database.rs", "PostgreSQL's server version"),
    ("api/server_clock.rs", "the PostgreSQL server's clock"),
    (
        "api/migrate.rs",
        "`m3 migrate` copies every table by the schema's description",
    ),
];

/// The lines of `source` (comments and test modules left out) whose text holds a statement.
fn sql_lines(source: &str) -> Vec<usize> {
    let text = strip(source).code_and_strings;
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(tests) => &text[..tests],
        None => &text[..],
    };
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            ["SELECT ", "INSERT INTO ", "UPDATE ", "DELETE FROM "]
                .iter()
                .any(|keyword| line.contains(keyword))
        })
        .map(|(i, _)| i + 1)
        .collect()
}

/// The statement scan sees statements in code, not in comments or test modules.
#[test]
fn the_statement_scan_finds_a_planted_statement() {
    let planted = "// SELECT in a comment\n\
                   const A: &str = \"SELECT x FROM t\";\n\
                   fn f() {}\n\
                   const B: &str = \"UPDATE t SET x = 1\";\n\
                   #[cfg(test)]\nmod tests {\n    const C: &str = \"DELETE FROM t\";\n}\n";
    assert_eq!(sql_lines(planted), vec![2, 4]);
}

/// Each statement on the store's rows is written once, in `host/src/store/statements/`, for both
/// databases (issue 42: the SQL was written twice, once per database); statement text elsewhere
/// is only in the files [`SQL_ELSEWHERE`] names, and each of those still holds some (the list
/// can only shrink).
#[test]
fn sql_is_written_in_one_place() -> Result<()> {
    let src = workspace_root().join("host/src");
    let mut stray = Vec::new();
    let mut holding = BTreeSet::new();
    for file in rust_files(&src)? {
        let rel = file
            .strip_prefix(&src)?
            .to_string_lossy()
            .replace('\\', "/");
        let lines = sql_lines(&std::fs::read_to_string(&file)?);
        if lines.is_empty() || rel.starts_with("store/statements/") {
            continue;
        }
        if SQL_ELSEWHERE.iter().any(|(allowed, _)| *allowed == rel) {
            holding.insert(rel);
            continue;
        }
        stray.extend(lines.iter().map(|line| format!("{rel}:{line}")));
    }
    ensure!(
        stray.is_empty(),
        "statements outside host/src/store/statements/:\n{}",
        stray.join("\n")
    );
    let stale: Vec<&str> = SQL_ELSEWHERE
        .iter()
        .map(|(file, _)| *file)
        .filter(|file| !holding.contains(*file))
        .collect();
    ensure!(
        stale.is_empty(),
        "listed as holding statements but holding none (take them off the list): {stale:?}"
    );
    let statements = rust_files(&src.join("store/statements"))?;
    ensure!(
        statements
            .iter()
            .any(|file| std::fs::read_to_string(file).is_ok_and(|s| !sql_lines(&s).is_empty())),
        "no statement found in host/src/store/statements/"
    );
    Ok(())
}
