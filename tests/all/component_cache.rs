//! The compiled-component cache: private to the user, keyed on the wasm and the engine, and never
//! loaded from a place someone else could have written.

use m3::component_cache::CacheOutcome;
use m3::engine::{ComponentRuntime, GUEST_WASM, GUEST_WASM_SHA256};
use std::os::unix::fs::PermissionsExt;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_cache_is_private_reused_and_never_trusted_when_others_could_write_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("m3").join("components");

    // First load compiles and stores, in a directory created 0700, a file written 0600.
    let first = ComponentRuntime::new(GUEST_WASM, GUEST_WASM_SHA256, Some(&dir)).unwrap();
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
    let second = ComponentRuntime::new(GUEST_WASM, GUEST_WASM_SHA256, Some(&dir)).unwrap();
    assert_eq!(second.cache, CacheOutcome::Hit(artifact.clone()));

    // An artifact others could have written is not loaded: it is compiled again and replaced.
    std::fs::set_permissions(&artifact, std::fs::Permissions::from_mode(0o644)).unwrap();
    let replaced = ComponentRuntime::new(GUEST_WASM, GUEST_WASM_SHA256, Some(&dir)).unwrap();
    assert_eq!(replaced.cache, CacheOutcome::Stored(artifact.clone()));
    assert_eq!(mode(&artifact), 0o600);

    // A directory others can write is never used at all.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let bypassed = ComponentRuntime::new(GUEST_WASM, GUEST_WASM_SHA256, Some(&dir)).unwrap();
    assert!(
        matches!(&bypassed.cache, CacheOutcome::Bypassed(reason) if reason.contains("other users")),
        "{:?}",
        bypassed.cache
    );

    // A symlink in place of the directory is refused too.
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let via_link = ComponentRuntime::new(GUEST_WASM, GUEST_WASM_SHA256, Some(&link)).unwrap();
    assert!(
        matches!(via_link.cache, CacheOutcome::Bypassed(_)),
        "{:?}",
        via_link.cache
    );
}
