//! The compiled-component cache: private to the user, keyed on the wasm and the engine, and never
//! loaded from a place someone else could have written.

use m3::health::{CacheOutcome, ENGINE_COMPONENT_SHA256 as GUEST_WASM_SHA256};
use m3::testing::compile_engine;
use std::os::unix::fs::PermissionsExt;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_cache_is_private_reused_and_never_trusted_when_others_could_write_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("m3").join("components");

    // First load compiles and stores, in a directory created 0700, a file written 0600.
    let first = compile_engine(Some(&dir)).unwrap();
    let CacheOutcome::Stored(artifact) = first.cache.clone() else {
        panic!("{:?}", first.cache)
    };
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&artifact), 0o600);
    assert!(
        artifact
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(&GUEST_WASM_SHA256[..32])
    );

    // Second load maps the stored artifact.
    let second = compile_engine(Some(&dir)).unwrap();
    assert_eq!(second.cache, CacheOutcome::Hit(artifact.clone()));

    // An artifact others could have written is not loaded: it is compiled again and replaced.
    std::fs::set_permissions(&artifact, std::fs::Permissions::from_mode(0o644)).unwrap();
    let replaced = compile_engine(Some(&dir)).unwrap();
    assert_eq!(replaced.cache, CacheOutcome::Stored(artifact.clone()));
    assert_eq!(mode(&artifact), 0o600);

    // A directory others can write is never used at all.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let bypassed = compile_engine(Some(&dir)).unwrap();
    assert!(
        matches!(&bypassed.cache, CacheOutcome::Bypassed(reason) if reason.contains("other users")),
        "{:?}",
        bypassed.cache
    );

    // A symlink in place of the directory is refused too, even to a private, valid cache (so
    // only the symlink check can refuse it).
    let private = root.path().join("private");
    let direct = compile_engine(Some(&private)).unwrap();
    assert!(
        matches!(direct.cache, CacheOutcome::Stored(_)),
        "{:?}",
        direct.cache
    );
    assert_eq!(mode(&private), 0o700);
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&private, &link).unwrap();
    let via_link = compile_engine(Some(&link)).unwrap();
    assert!(
        matches!(&via_link.cache, CacheOutcome::Bypassed(reason) if reason.contains("symlink")),
        "{:?}",
        via_link.cache
    );
}

/// A cached artifact whose bytes changed (64 flipped bytes) is never loaded: its keyed digest
/// does not match, so it is compiled again, stored again, and the mismatch is reported; one
/// written with another key is refused the same way.
#[test]
fn a_tampered_artifact_is_never_loaded() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("components");
    let first = compile_engine(Some(&dir)).unwrap();
    let CacheOutcome::Stored(artifact) = first.cache.clone() else {
        panic!("{:?}", first.cache)
    };
    let mut bytes = std::fs::read(&artifact).unwrap();
    let middle = bytes.len() / 2;
    for byte in &mut bytes[middle..middle + 64] {
        *byte ^= 0xff;
    }
    std::fs::write(&artifact, &bytes).unwrap();
    let again = compile_engine(Some(&dir)).unwrap();
    assert!(
        matches!(&again.cache, CacheOutcome::Recompiled(why) if why.contains("digest")),
        "{:?}",
        again.cache
    );
    assert!(again.cache.notice().is_some());
    assert_ne!(std::fs::read(&artifact).unwrap(), bytes, "stored again");
    let third = compile_engine(Some(&dir)).unwrap();
    assert_eq!(third.cache, CacheOutcome::Hit(artifact.clone()));

    // A new key (as if another installation wrote the artifact): refused, compiled again.
    std::fs::remove_file(dir.join("key")).unwrap();
    let rekeyed = compile_engine(Some(&dir)).unwrap();
    assert!(
        matches!(&rekeyed.cache, CacheOutcome::Recompiled(_)),
        "{:?}",
        rekeyed.cache
    );
    assert_eq!(mode(&dir.join("key")), 0o600);
}

/// Once an artifact has been checked and has settled, its identity is recorded beside its digest
/// and later loads map it without reading it; a write to it (even one that puts the
/// modification time back, keeps its size and flips bytes in place) changes that identity, so
/// it is read and checked again, refused, compiled again and reported.
#[test]
fn an_artifact_changed_after_its_identity_was_recorded_is_never_loaded() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("components");
    let first = compile_engine(Some(&dir)).unwrap();
    let CacheOutcome::Stored(artifact) = first.cache.clone() else {
        panic!("{:?}", first.cache)
    };
    let digest_file = artifact.with_extension("digest");
    let length = |path: &std::path::Path| std::fs::metadata(path).unwrap().len();
    // Just written: checked, but too fresh for its identity to be recorded.
    assert_eq!(length(&digest_file), 40);
    assert_eq!(
        compile_engine(Some(&dir)).unwrap().cache,
        CacheOutcome::Hit(artifact.clone())
    );
    assert_eq!(length(&digest_file), 40);

    // Settled: the next load checks the bytes and records the identity; the one after maps it.
    std::thread::sleep(std::time::Duration::from_millis(2_100));
    assert_eq!(
        compile_engine(Some(&dir)).unwrap().cache,
        CacheOutcome::Hit(artifact.clone())
    );
    assert_eq!(length(&digest_file), 128);
    let mapped = compile_engine(Some(&dir)).unwrap();
    assert_eq!(mapped.cache, CacheOutcome::Hit(artifact.clone()));
    // The mapped code runs: it accepts a one-field form and refuses a duplicate key.
    assert!(mapped.accepts_schema(r#"{"type":"object","properties":{"n":{"type":"string"}}}"#));
    assert!(!mapped.accepts_schema(r#"{"type":"object","type":"object"}"#));

    // Flipped in place, the modification time put back: still refused.
    let modified = std::fs::metadata(&artifact).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&artifact).unwrap();
    let middle = bytes.len() / 2;
    for byte in &mut bytes[middle..middle + 64] {
        *byte ^= 0xff;
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&artifact)
        .unwrap();
    std::io::Write::write_all(&mut &file, &bytes).unwrap();
    file.set_modified(modified).unwrap();
    drop(file);
    assert_eq!(
        std::fs::metadata(&artifact).unwrap().modified().unwrap(),
        modified
    );
    let again = compile_engine(Some(&dir)).unwrap();
    assert!(
        matches!(&again.cache, CacheOutcome::Recompiled(why) if why.contains("digest")),
        "{:?}",
        again.cache
    );
    assert_ne!(std::fs::read(&artifact).unwrap(), bytes, "stored again");
    assert_eq!(length(&digest_file), 40);
}

/// A cache directory under a parent that others can write (and that is not sticky) is never
/// used: someone else could swap it.
#[test]
fn a_cache_under_a_parent_others_can_write_is_not_used() {
    let root = tempfile::tempdir().unwrap();
    let parent = root.path().join("shared");
    std::fs::create_dir(&parent).unwrap();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o777)).unwrap();
    let runtime = compile_engine(Some(&parent.join("components"))).unwrap();
    assert!(
        matches!(&runtime.cache, CacheOutcome::Bypassed(why) if why.contains("other users")),
        "{:?}",
        runtime.cache
    );
    // A sticky one (like /tmp) is fine: others cannot rename what is ours.
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let runtime = compile_engine(Some(&parent.join("components"))).unwrap();
    assert!(
        matches!(runtime.cache, CacheOutcome::Stored(_)),
        "{:?}",
        runtime.cache
    );
}

/// A dependent's first run says what it is doing while the component compiles (one stderr
/// line naming the cache), a run with the cache warm says nothing, and a cache others could
/// write is reported by the library itself; the `m3` command turns these lines off for its
/// own spinner.
#[test]
fn the_library_says_when_it_compiles_the_component_and_when_its_cache_is_unusable() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("cache");
    let run = |cache: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_m3-test-second-process"))
            .arg("engine")
            .env("M3_CACHE_DIR", cache)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (first, said) = run(&dir);
    assert!(first.starts_with("Stored("), "{first}");
    assert!(
        said.contains(&format!(
            "m3: compiling the policy engine component for this machine, once (its code is \
             then cached in {})",
            dir.display()
        )),
        "{said}"
    );
    let (second, said) = run(&dir);
    assert!(second.starts_with("Hit("), "{second}");
    assert!(!said.contains("m3:"), "a warm start is quiet: {said}");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (third, said) = run(&dir);
    assert!(third.starts_with("Bypassed("), "{third}");
    assert!(
        said.contains("m3: the compiled-component cache cannot be used"),
        "{said}"
    );
}
