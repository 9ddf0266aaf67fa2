//! What the library says while a person may be waiting for it: the component's first compile
//! on a machine (seconds in a release build, a minute or more in a debug build whose Cranelift
//! is unoptimised) and a compiled-code cache it cannot use. Each is a `log` record (`info` and
//! `warn`, target `m3`) and, unless the embedder turned them off
//! ([`crate::health::set_engine_notices`], as the `m3` command does for its own spinner), one
//! line on stderr, so that a first run is never a silent minute.

use crate::component::cache::CacheOutcome;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Whether the notices go to stderr too (on unless turned off).
static ON_STDERR: AtomicBool = AtomicBool::new(true);

/// A compile slower than this in a debug build is blamed on an unoptimised Cranelift (with the
/// profile overrides, about 6 s on the machine of BENCHMARKS.md; without them, about 70 s).
const SLOW: Duration = Duration::from_secs(20);

/// The packages whose `opt-level = 3` in a dependent's `[profile.dev.package.NAME]` makes the
/// debug compile fast (the ones this workspace's `Cargo.toml` sets).
pub(crate) const OPTIMISED_PACKAGES: &[&str] = &[
    "cranelift-codegen",
    "cranelift-frontend",
    "cranelift-assembler-x64",
    "cranelift-entity",
    "cranelift-bforest",
    "regalloc2",
    "wasmparser",
    "wasmtime-environ",
    "wasmtime-internal-cranelift",
];

/// Turns the stderr lines on or off (the `log` records stay).
pub(crate) fn set_on_stderr(on: bool) {
    ON_STDERR.store(on, Ordering::Relaxed);
}

fn say(text: &str) {
    if ON_STDERR.load(Ordering::Relaxed) {
        eprintln!("m3: {text}");
    }
}

/// Before compiling: what is happening, and that it happens once.
pub(crate) fn compiling(cache_dir: Option<&std::path::Path>) {
    let text = match cache_dir {
        Some(dir) => format!(
            "compiling the policy engine component for this machine, once (its code is then \
             cached in {})",
            dir.display()
        ),
        None => "compiling the policy engine component for this machine".to_string(),
    };
    log::info!(target: "m3", "{text}");
    say(&text);
}

/// After compiling: a warning when it was slow in a debug build (naming the profile
/// overrides), and when the cache could not be used.
pub(crate) fn compiled(took: Duration, outcome: &CacheOutcome) {
    log::info!(target: "m3", "compiled the policy engine component in {took:?}");
    if let Some(text) = slow_warning(took, cfg!(debug_assertions)) {
        log::warn!(target: "m3", "{text}");
        say(&text);
    }
    if let Some(text) = outcome.notice() {
        log::warn!(target: "m3", "{text}");
        say(&text);
    }
}

/// The warning for a compile that took `took`, if it was slow in a debug build.
fn slow_warning(took: Duration, debug_build: bool) -> Option<String> {
    if !debug_build || took < SLOW {
        return None;
    }
    Some(format!(
        "that took {:.0} s because this debug build's Cranelift is unoptimised; `opt-level = 3` \
         for {} (each under `[profile.dev.package.NAME]` in your Cargo.toml, as m3's README \
         shows) makes it a few seconds",
        took.as_secs_f64(),
        OPTIMISED_PACKAGES.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_compile_in_a_debug_build_names_the_profile_overrides() {
        let slow = slow_warning(Duration::from_secs(71), true).unwrap();
        assert!(slow.starts_with("that took 71 s"), "{slow}");
        for package in OPTIMISED_PACKAGES {
            assert!(slow.contains(package), "{slow}");
        }
        assert_eq!(slow_warning(Duration::from_secs(6), true), None);
        assert_eq!(slow_warning(Duration::from_secs(71), false), None);
    }

    /// The overrides the warning names are the ones this workspace sets and the README gives
    /// a dependent, no more and no fewer.
    #[test]
    fn the_warning_s_packages_are_the_workspace_s_and_the_readme_s_overrides() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for file in ["Cargo.toml", "README.md"] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            let mut set: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("[profile.dev.package."))
                .filter_map(|l| l.strip_suffix(']'))
                .map(|name| name.trim_matches('"'))
                .filter(|name| *name != "*" && !name.starts_with("jsonschema"))
                .filter(|name| *name != "libsqlite3-sys")
                .collect();
            set.sort_unstable();
            let mut expected = OPTIMISED_PACKAGES.to_vec();
            expected.sort_unstable();
            assert_eq!(set, expected, "{file}");
        }
    }
}
