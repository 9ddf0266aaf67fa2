//! The compiled component, cached on disk so that a process pays for Cranelift once per build.
//!
//! `Component::deserialize` trusts its input (it loads native code), so the cache lives only in
//! a per-user directory this process created with mode 0700 and owns, under a parent that others
//! cannot write, holding files it wrote itself (mode 0600). Artifacts are named by the engine's
//! compatibility hash and the wasm's SHA-256, and each has a keyed BLAKE3 digest of its bytes in a
//! [`digest_file`] beside it (the key: 32 random bytes in the cache directory, mode 0600). The
//! first load reads the bytes, checks them and loads them from memory, so a flipped or forged
//! byte is never run: the artifact is compiled again and the mismatch reported. Once checked, the
//! file's identity (inode, size, modification and change times) is recorded with the digest;
//! later loads of that same unchanged file map it without reading it again (a write to the file
//! moves its change time, which no process can set back). Anything that does not pass these
//! checks is ignored and the component is compiled in memory instead.

use crate::component::digest_file::{self, FileIdentity};
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;
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
    /// The cached artifact failed its check (for the reason given) and was never loaded;
    /// compiled now and stored again.
    Recompiled(String),
}

impl CacheOutcome {
    /// What a person should know: why the cache was not used, or `None` when it was.
    pub fn notice(&self) -> Option<String> {
        match self {
            Self::Hit(_) | Self::Stored(_) => None,
            Self::Bypassed(why) => Some(format!(
                "the compiled-component cache cannot be used ({why}): every start compiles the \
                 component (a few seconds)"
            )),
            Self::Recompiled(why) => Some(format!(
                "a cached compiled component failed its check ({why}) and was compiled again"
            )),
        }
    }
}

/// The layout of the cache's files (part of every artifact's name): 2 = the artifact as
/// wasmtime wrote it, its digest in a [`digest_file`] beside it.
const LAYOUT: u32 = 2;

/// Where compiled components are cached: `$M3_CACHE_DIR`, else the user's cache directory
/// (`$XDG_CACHE_HOME/m3/components` or `~/.cache/m3/components`).
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("M3_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    dirs::cache_dir().map(|d| d.join("m3").join("components"))
}

/// The file name of a component's compiled artifact for this engine, from the component's
/// SHA-256 (hex) and the engine's compatibility hash.
pub fn artifact_name(engine: &Engine, wasm_sha256: &str) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    env!("CARGO_PKG_VERSION").hash(&mut hasher);
    LAYOUT.hash(&mut hasher);
    let prefix = wasm_sha256.get(..32).unwrap_or(wasm_sha256);
    format!("{prefix}-{:016x}.cwasm", hasher.finish())
}

/// How many compiled artifacts the cache keeps (the newest); older builds' files are removed.
pub const KEEP_ARTIFACTS: usize = 4;

/// Loads `wasm` compiled for `engine`, from the cache at `dir` when possible. `wasm_sha256` must
/// be the SHA-256 (hex) of `wasm` (the embedded component's is computed at build time): it names
/// the artifact.
pub fn load(
    engine: &Engine,
    wasm: &[u8],
    wasm_sha256: &str,
    dir: Option<&Path>,
    compiling: &dyn Fn(),
) -> wasmtime::Result<(Component, CacheOutcome)> {
    let compile = || {
        compiling();
        Component::new(engine, wasm)
    };
    let Some(dir) = dir else {
        return Ok((
            compile()?,
            CacheOutcome::Bypassed("no cache directory".into()),
        ));
    };
    if let Err(reason) = prepare_private_dir(dir) {
        return Ok((compile()?, CacheOutcome::Bypassed(reason)));
    }
    let key = match cache_key(dir) {
        Ok(key) => key,
        Err(reason) => {
            return Ok((compile()?, CacheOutcome::Bypassed(reason)));
        }
    };
    let path = dir.join(artifact_name(engine, wasm_sha256));
    let mut rejected = None;
    if owned_private_file(&path) {
        match load_checked(engine, &key, &path) {
            Ok(component) => return Ok((component, CacheOutcome::Hit(path))),
            Err(why) => rejected = Some(why),
        }
        let _ = fs::remove_file(&path);
        let _ = fs::remove_file(digest_file::path_for(&path));
    }
    compiling();
    let compiled = engine.precompile_component(wasm)?;
    // SAFETY: `compiled` was produced just now by this engine from `wasm`.
    let component = unsafe { Component::deserialize(engine, &compiled)? };
    match store(&path, &key, &compiled) {
        Ok(()) => {
            evict_old_artifacts(dir);
            let outcome = match rejected {
                Some(why) => CacheOutcome::Recompiled(format!("{}: {why}", path.display())),
                None => CacheOutcome::Stored(path),
            };
            Ok((component, outcome))
        }
        Err(e) => Ok((
            component,
            CacheOutcome::Bypassed(format!("cannot write the cache: {e}")),
        )),
    }
}

/// Loads the cached artifact of the component whose SHA-256 (hex) is `wasm_sha256` from the
/// cache at `dir`, as [`load`] does on a hit, and nothing else: no compiling, no artifact
/// stored or evicted (the cache's key is made if it is missing, as [`load`] makes it). `Err`
/// says why it was not loaded. For the engine benchmark, which times a hit's
/// parts without knowing the cache's file layout.
#[cfg(feature = "internals")]
pub fn load_artifact(engine: &Engine, dir: &Path, wasm_sha256: &str) -> Result<Component, String> {
    let key = cache_key(dir)?;
    let path = dir.join(artifact_name(engine, wasm_sha256));
    if !owned_private_file(&path) {
        return Err(format!(
            "{} is not a private file of this user",
            path.display()
        ));
    }
    load_checked(engine, &key, &path)
}

/// The cache's secret key: `dir/key`, 32 random bytes, made on first use (mode 0600).
fn cache_key(dir: &Path) -> Result<[u8; 32], String> {
    let path = dir.join("key");
    if !path.exists() {
        let mut key = [0u8; 32];
        fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key))
            .map_err(|e| format!("no randomness for the cache key: {e}"))?;
        let temporary = dir.join(format!(".key-{}.tmp", std::process::id()));
        let _ = fs::remove_file(&temporary);
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|mut f| f.write_all(&key).and_then(|()| f.sync_all()))
            // Another process may have made it meanwhile: the first one stays.
            .and_then(|()| fs::hard_link(&temporary, &path).or(Ok(())));
        let _ = fs::remove_file(&temporary);
        written.map_err(|e| format!("cannot write the cache key: {e}"))?;
    }
    if !owned_private_file(&path) {
        return Err(format!(
            "{} is not a private file of this user",
            path.display()
        ));
    }
    let bytes = fs::read(&path).map_err(|e| format!("cannot read the cache key: {e}"))?;
    bytes
        .try_into()
        .map_err(|_| format!("{} is not a 32-byte key", path.display()))
}

/// Loads the artifact at `path` if it matches its digest file: mapped straight from the file
/// when the file is the very one (same identity) whose bytes were found to match before,
/// otherwise read, checked and deserialized from those bytes (and the file's identity recorded
/// once it has settled). `Err` says why it was not loaded.
fn load_checked(engine: &Engine, key: &[u8; 32], path: &Path) -> Result<Component, String> {
    let recorded = digest_file::read(key, path)?;
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("it cannot be read: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("it cannot be read: {e}"))?;
    if !private_to_this_user(&meta) {
        return Err("it is not a private file of this user".into());
    }
    let identity = FileIdentity::of(&meta);
    if recorded.checked_identity == Some(identity) {
        // Through the open descriptor, so the file mapped is the file whose identity matched.
        let by_descriptor = format!("/proc/self/fd/{}", file.as_raw_fd());
        // SAFETY: this file's bytes were read and found to carry a digest keyed with a secret
        // only this user can read, so `store` below wrote them from
        // `Engine::precompile_component` for this engine configuration and wasm (both are in
        // the file's name); its identity is unchanged since, so no write has touched it.
        if let Ok(component) = unsafe { Component::deserialize_file(engine, &by_descriptor) } {
            return Ok(component);
        }
    }
    let read_at = SystemTime::now();
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes)
        .map_err(|e| format!("it cannot be read: {e}"))?;
    // `blake3::Hash` compares in constant time.
    if blake3::keyed_hash(key, &bytes) != recorded.digest {
        return Err("its digest does not match its bytes".into());
    }
    // SAFETY: these exact bytes carry a digest keyed with a secret that only this user can
    // read, so they were written by `store` below from `Engine::precompile_component` for the
    // same engine configuration and wasm (both are in the file's name).
    let component = unsafe { Component::deserialize(engine, &bytes) }
        .map_err(|_| "it does not load".to_string())?;
    let unchanged = file
        .metadata()
        .is_ok_and(|m| FileIdentity::of(&m) == identity);
    if unchanged && identity.settled(read_at) {
        // Best effort: without it the next load reads and checks the bytes again.
        let _ = digest_file::write(key, path, &recorded.digest, Some(&identity));
    }
    Ok(component)
}

fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates `dir` (mode 0700) if needed and checks that it is a real directory owned by this user
/// that no one else can write or read, under a parent that no one else can write to (unless it
/// is sticky, like `/tmp`: then others cannot rename or remove what is ours).
fn prepare_private_dir(dir: &Path) -> Result<(), String> {
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        let meta = fs::metadata(parent)
            .map_err(|e| format!("cannot inspect {}: {e}", parent.display()))?;
        let mode = meta.permissions().mode();
        let sticky = mode & 0o1000 != 0;
        if !(meta.uid() == current_uid() || meta.uid() == 0) {
            return Err(format!("{} is owned by another user", parent.display()));
        }
        if mode & 0o022 != 0 && !sticky {
            return Err(format!(
                "{} can be written by other users (mode {:o})",
                parent.display(),
                mode & 0o7777
            ));
        }
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
    fs::symlink_metadata(path).is_ok_and(|m| private_to_this_user(&m))
}

fn private_to_this_user(meta: &fs::Metadata) -> bool {
    meta.file_type().is_file()
        && meta.uid() == current_uid()
        && meta.permissions().mode() & 0o077 == 0
}

/// Writes `compiled` to `path` atomically (mode 0600), its digest file first: a reader never
/// finds the new artifact without its digest.
fn store(path: &Path, key: &[u8; 32], compiled: &[u8]) -> std::io::Result<()> {
    digest_file::write(key, path, &blake3::keyed_hash(key, compiled), None)?;
    digest_file::write_private(path, &[compiled])
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
        let _ = fs::remove_file(digest_file::path_for(&old));
        let _ = fs::remove_file(old);
    }
}
