//! The Python package `m3` (`host/python/`, PyO3 and maturin), built and installed on first use
//! into a private virtual environment, for the Python tests (`tests/python/`, run by
//! `tests/all/python_package.rs`).
//!
//! - [`python_package()`]: the venv `tests/.peers/python-package/venv/` (ignored by git, beside
//!   the peers'), holding the pinned test requirements (`tests/python/requirements.txt`: pytest,
//!   mypy, and the Python MCP SDK with its dependencies, as the peers pin it) and the package
//!   itself, installed the way the README tells a user to (`pip install ./host/python`: pip
//!   fetches maturin, the package's PEP 517 build backend), with `MATURIN_PEP517_ARGS=--profile
//!   dev --locked` (cargo runs locked everywhere in CI) so that the build reuses the workspace's debug profile and `CARGO_TARGET_DIR` set to
//!   the workspace's target directory (the variable if set, else `<workspace>/target`).
//! - The requirements are installed again when their file changes (the marker in the venv holds
//!   the file's text); the package is built and installed again when any source it is built
//!   from changes (the marker `tests/.peers/python-package/.m3-installed` holds the length and a
//!   hash of every file under `host/python/`, `host/src/`, `host/components/`,
//!   `host/build-support/`, `guest/` and `wit/`, and of the workspace's manifests and lock file),
//!   so a no-change run costs a hash of a few hundred files; cargo's own caching makes a rebuild
//!   after a change incremental.
//! - Everything runs once per test process and under the exclusive file lock
//!   `tests/.peers/python-package.lock`, so parallel tests and test processes build once. A
//!   failed venv, install or build is an error naming its log and how to run it by hand: the
//!   tests that need the package fail, they never skip.
//! - [`python_package_release()`]: the same in the venv `tests/.peers/python-package-release/venv/`
//!   (its own marker and lock, `python-package-release`), with the package built the way `pip
//!   install ./host/python` builds it for a user: maturin's default, the release profile (into
//!   `<target>/release`), locked. For the benchmark `tests/benches/python_rounds.rs`.
//! - [`m3_command()`]: the `m3` command of the workspace (`host/cli`), built once per test
//!   process in the same profile and target directory as this test binary, by the cargo command
//!   that builds it for the `m3` command's own tests (`cargo test --workspace --locked --no-run
//!   --test readme`): the same features as this test binary's build, so no dependency is built a second
//!   time (`cargo build --workspace --bin m3` resolves features without dev-dependencies and
//!   rebuilds wasmtime). The Python tests answer rounds with `m3 respond` and start them with `m3
//!   run`.

use crate::peers::{
    self, CHECK_TIMEOUT, install_root, installed, lock, new_venv, retrying, run_logged,
    venv_python, write_marker,
};
use crate::workspace::{cargo, target_dir, workspace_root};
use anyhow::{Context, Result, anyhow, ensure};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// How long building and installing the package may take (the first build compiles the m3
/// crate and wasmtime for the package's feature set: many minutes on a 2-core machine).
const BUILD_TIMEOUT: Duration = Duration::from_secs(3600);

/// The sources the package is built from, relative to the workspace root: a change to any file
/// below them means a new build.
const PACKAGE_SOURCES: [&str; 10] = [
    "Cargo.toml",
    "Cargo.lock",
    "rust-toolchain.toml",
    "host/Cargo.toml",
    "host/src",
    "host/components",
    "host/build-support",
    "host/python",
    "guest",
    "wit",
];

/// `tests/python/`: the Python tests, their requirements and their configuration.
pub fn python_tests_dir() -> PathBuf {
    workspace_root().join("tests").join("python")
}

/// `tests/.peers/python-package/`: the venv and the package's install marker.
pub fn install_dir() -> PathBuf {
    install_root().join("python-package")
}

/// The cargo profile the package is built in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Profile {
    /// The workspace's debug profile (`MATURIN_PEP517_ARGS=--profile dev`): the tests.
    Dev,
    /// maturin's default, release: what `pip install ./host/python` gives a user.
    Release,
}

impl Profile {
    /// The install's name: its folder under `tests/.peers/` and its lock.
    fn name(self) -> &'static str {
        match self {
            Self::Dev => "python-package",
            Self::Release => "python-package-release",
        }
    }
}

/// The profile directory this test binary was built into (`<target>/debug` or
/// `<target>/release`): the test binary is `<target>/<profile>/deps/all-<hash>`.
pub fn profile_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("the test binary's path")?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .with_context(|| format!("{} is not in <target>/<profile>/deps", exe.display()))
}

/// The venv's Python with the test requirements and the package installed, built on first use
/// (once per test process; again whenever the package's sources changed).
pub fn python_package() -> Result<PathBuf> {
    static INSTALL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let venv = peers::once(&INSTALL, || install_python_package(Profile::Dev))?;
    Ok(venv_python(&venv))
}

/// [`python_package()`] with the package built in release, as a user's `pip install` builds
/// it, in a venv of its own (`tests/.peers/python-package-release/venv/`).
pub fn python_package_release() -> Result<PathBuf> {
    static INSTALL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let venv = peers::once(&INSTALL, || install_python_package(Profile::Release))?;
    Ok(venv_python(&venv))
}

/// The `m3` command of this workspace, built on first use (once per test process).
pub fn m3_command() -> Result<PathBuf> {
    static BUILD: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    peers::once(&BUILD, build_m3_command)
}

fn build_m3_command() -> Result<PathBuf> {
    let profile = profile_dir()?;
    let target = profile
        .parent()
        .context("the profile directory has a parent")?
        .to_path_buf();
    let mut command = Command::new(cargo());
    command
        .current_dir(workspace_root())
        .args([
            "test",
            "--workspace",
            "--locked",
            "--no-run",
            "--test",
            "readme",
        ])
        .env("CARGO_TARGET_DIR", &target);
    if profile.file_name().is_some_and(|name| name == "release") {
        command.arg("--release");
    }
    fs::create_dir_all(install_dir())
        .with_context(|| format!("creating {}", install_dir().display()))?;
    let log = install_dir().join(format!("m3-build-{}.log", std::process::id()));
    run_logged(&mut command, BUILD_TIMEOUT, &log).with_context(|| {
        format!(
            "building the m3 command failed; to run it by hand: cd {} && CARGO_TARGET_DIR={} \
             cargo test --workspace --locked --no-run --test readme",
            workspace_root().display(),
            target.display()
        )
    })?;
    let binary = profile.join("m3");
    ensure!(
        binary.is_file(),
        "cargo built the m3 command, but {} is missing",
        binary.display()
    );
    Ok(binary)
}

/// The 64-bit FNV-1a hash of `bytes` (a change detector, not a security measure).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Every file below `dir` (or `dir` itself if it is a file), relative to `root`, skipping build
/// output, caches and hidden entries.
fn source_files(root: &Path, dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    if dir.is_file() {
        files.push(dir.strip_prefix(root)?.to_path_buf());
        return Ok(());
    }
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.')
            || matches!(name, "target" | "__pycache__" | "node_modules")
            || name.ends_with(".pyc")
            || name.ends_with(".so")
        {
            continue;
        }
        source_files(root, &path, files)?;
    }
    Ok(())
}

/// What the package's install marker records: each source file's path, length and hash.
fn package_stamp() -> Result<String> {
    let root = workspace_root();
    let mut files = Vec::new();
    for source in PACKAGE_SOURCES {
        source_files(&root, &root.join(source), &mut files)?;
    }
    files.sort();
    let mut stamp = String::from("m3 Python package, built from these sources:\n");
    for file in files {
        let bytes =
            fs::read(root.join(&file)).with_context(|| format!("reading {}", file.display()))?;
        stamp.push_str(&format!(
            "{} {} {:016x}\n",
            file.display(),
            bytes.len(),
            fnv1a(&bytes)
        ));
    }
    Ok(stamp)
}

/// What the venv's marker records: the requirements file it was installed from, verbatim.
fn requirements_stamp(requirements: &Path) -> Result<String> {
    let text = fs::read_to_string(requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    Ok(format!(
        "m3 Python package tests, installed from {}:\n{text}",
        requirements.display()
    ))
}

fn install_python_package(profile: Profile) -> Result<PathBuf> {
    let dir = install_root().join(profile.name());
    let venv = dir.join("venv");
    let python = venv_python(&venv);
    let requirements = python_tests_dir().join("requirements.txt");
    let package = workspace_root().join("host").join("python");
    let target = target_dir();
    let by_hand = format!(
        "rm -rf {venv} && python3 -m venv {venv} && {venv}/bin/python -m pip install -r \
         {requirements} && {args}CARGO_TARGET_DIR={target} \
         {venv}/bin/python -m pip install --force-reinstall --no-deps {package} (needs python3 \
         with the venv module, the PyPI registry, and the Rust toolchain)",
        args = match profile {
            Profile::Dev => "MATURIN_PEP517_ARGS='--profile dev --locked' ",
            Profile::Release => "MATURIN_PEP517_ARGS=--locked ",
        },
        venv = venv.display(),
        requirements = requirements.display(),
        target = target.display(),
        package = package.display(),
    );
    let _lock = lock(profile.name())?;
    let result = (|| {
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let requirements_stamp = requirements_stamp(&requirements)?;
        if !installed(&venv, &requirements_stamp, &python) {
            // A new venv: the package's marker no longer holds for it.
            let _ = fs::remove_file(dir.join(".m3-installed"));
            new_venv(&venv, &requirements, &dir, "requirements-install")?;
            write_marker(&venv, &requirements_stamp)?;
        }
        let package_stamp = package_stamp()?;
        if installed(&dir, &package_stamp, &python) {
            return Ok(());
        }
        // Built afresh every time the sources changed: --force-reinstall, since the version
        // does not change with the sources; --no-deps, the requirements are pinned above.
        retrying("pip install ./host/python", |attempt| {
            let mut command = Command::new(&python);
            command
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                    "--force-reinstall",
                    "--no-deps",
                ])
                .arg(&package)
                .current_dir(workspace_root())
                .env("CARGO_TARGET_DIR", &target);
            match profile {
                Profile::Dev => command.env("MATURIN_PEP517_ARGS", "--profile dev --locked"),
                Profile::Release => command.env("MATURIN_PEP517_ARGS", "--locked"),
            };
            run_logged(
                &mut command,
                BUILD_TIMEOUT,
                &dir.join(format!("package-install-{attempt}.log")),
            )
            .map(drop)
        })?;
        // The package imports, native module included, on the venv's Python.
        let mut check = Command::new(&python);
        check.args([
            "-c",
            "import m3, m3._native, m3.storage, m3.types, m3.errors; print(m3.__file__)",
        ]);
        run_logged(&mut check, CHECK_TIMEOUT, &dir.join("package-check.log"))?;
        write_marker(&dir, &package_stamp)
    })();
    result
        .map_err(|e| {
            anyhow!(
                "building and installing the m3 Python package failed: {e:#}\nTo run it by \
                 hand: {by_hand}"
            )
        })
        .map(|()| venv)
}
