//! The compiled component, cached on disk so that a process pays for Cranelift once per build.
//!
//! `Component::deserialize_file` trusts its input (it maps native code), so the cache lives only
//! in a per-user directory this process created with mode 0700 and owns, holding files it wrote
//! itself (mode 0600). Artifacts are keyed on the engine's compatibility hash and the wasm's
//! SHA-256. Anything that does not pass these checks is ignored and the component is compiled in
//! memory instead.

use sha2::{Digest, Sha256};
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// How a component was obtained, for diagnostics and benchmarks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a compiled artifact in the cache.
    Hit(PathBuf),
    /// Compiled now and written to the cache.
    Stored(PathBuf),
    /// Compiled now; the cache could not be used, for the reason given.
    Bypassed(String),
}

/// Where compiled components are cached: `$M3_CACHE_DIR`, else the user's cache directory
/// (`$XDG_CACHE_HOME/m3/components` or `~/.cache/m3/components`).
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("M3_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    dirs::cache_dir().map(|d| d.join("m3").join("components"))
}

/// The SHA-256 of a component, hex.
pub fn sha256_hex(wasm: &[u8]) -> String {
    hex::encode(Sha256::digest(wasm))
}

/// The file name of a component's compiled artifact for this engine, from the component's
/// SHA-256 (hex) and the engine's compatibility hash.
pub fn artifact_name(engine: &Engine, wasm_sha256: &str) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    env!("CARGO_PKG_VERSION").hash(&mut hasher);
    let prefix = wasm_sha256.get(..32).unwrap_or(wasm_sha256);
    format!("{prefix}-{:016x}.cwasm", hasher.finish())
}

/// How many compiled artifacts the cache keeps (the newest); older builds' files are removed.
pub const KEEP_ARTIFACTS: usize = 4;

/// Loads `wasm` compiled for `engine`, from the cache at `dir` when possible. `wasm_sha256` must
/// be [`sha256_hex`] of `wasm` (the embedded component's is computed at build time): it names
/// the artifact.
pub fn load(
    engine: &Engine,
    wasm: &[u8],
    wasm_sha256: &str,
    dir: Option<&Path>,
) -> wasmtime::Result<(Component, CacheOutcome)> {
    let Some(dir) = dir else {
        return Ok((
            Component::new(engine, wasm)?,
            CacheOutcome::Bypassed("no cache directory".into()),
        ));
    };
    if let Err(reason) = prepare_private_dir(dir) {
        return Ok((
            Component::new(engine, wasm)?,
            CacheOutcome::Bypassed(reason),
        ));
    }
    let path = dir.join(artifact_name(engine, wasm_sha256));
    if owned_private_file(&path) {
        // SAFETY: the file is a regular file owned by this user, mode 0600, in a 0700 directory
        // owned by this user: only this user (running this code) can have written it, and it was
        // written by `store` below from `Engine::precompile_component` for the same engine
        // configuration and wasm (both are in its name).
        if let Ok(component) = unsafe { Component::deserialize_file(engine, &path) } {
            return Ok((component, CacheOutcome::Hit(path)));
        }
    }
    let compiled = engine.precompile_component(wasm)?;
    // SAFETY: `compiled` was produced just now by this engine from `wasm`.
    let component = unsafe { Component::deserialize(engine, &compiled)? };
    match store(dir, &path, &compiled) {
        Ok(()) => {
            evict_old_artifacts(dir);
            Ok((component, CacheOutcome::Stored(path)))
        }
        Err(e) => Ok((
            component,
            CacheOutcome::Bypassed(format!("cannot write the cache: {e}")),
        )),
    }
}

fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates `dir` (mode 0700) if needed and checks that it is a real directory owned by this user
/// that no one else can write or read.
fn prepare_private_dir(dir: &Path) -> Result<(), String> {
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let meta =
        fs::symlink_metadata(dir).map_err(|e| format!("cannot inspect {}: {e}", dir.display()))?;
    if !meta.file_type().is_dir() {
        return Err(format!(
            "{} is not a directory (or is a symlink)",
            dir.display()
        ));
    }
    if meta.uid() != current_uid() {
        return Err(format!("{} is owned by another user", dir.display()));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{} is accessible to other users (mode {:o})",
            dir.display(),
            meta.permissions().mode() & 0o777
        ));
    }
    Ok(())
}

fn owned_private_file(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| {
        m.file_type().is_file() && m.uid() == current_uid() && m.permissions().mode() & 0o077 == 0
    })
}

fn store(dir: &Path, path: &Path, compiled: &[u8]) -> std::io::Result<()> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let unique = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temporary = dir.join(format!(".{}-{unique}.tmp", std::process::id()));
    let _ = fs::remove_file(&temporary);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(compiled)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temporary, path)
}

/// Removes all but the [`KEEP_ARTIFACTS`] newest `.cwasm` files of the cache directory.
fn evict_old_artifacts(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut artifacts: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    artifacts.sort_by_key(|a| std::cmp::Reverse(a.0));
    for (_, old) in artifacts.into_iter().skip(KEEP_ARTIFACTS) {
        let _ = fs::remove_file(old);
    }
}
