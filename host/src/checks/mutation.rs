//! The mutation check's switch (`tests/all/mutations.rs`). With the test-only cargo feature
//! `mutations`, a process whose environment names a mutation (`M3_MUTATION=lease-fencing`) runs
//! with that one rule broken: a guest rule by loading a component built with the rule broken
//! (`m3-components`' `build.rs`, the guest's `mutation.rs`), a host rule by skipping it here. Without the feature
//! nothing is built and [`broken`] is always `false`.

/// A rule the host itself holds, which the mutation check can break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostRule {
    /// Database paths that are not plain files are refused before SQLite sees them.
    PathRefusals,
}

/// Whether this process runs with `rule` broken.
#[inline]
pub(crate) fn broken(rule: HostRule) -> bool {
    #[cfg(feature = "mutations")]
    return armed::name() == Some(armed::host_rule_name(rule));
    #[cfg(not(feature = "mutations"))]
    {
        let _ = rule;
        false
    }
}

/// The component to run instead of the engine when a guest rule is broken: its bytes (read
/// from the file the build made).
#[inline]
pub(crate) fn component() -> Option<&'static [u8]> {
    #[cfg(feature = "mutations")]
    return armed::component();
    #[cfg(not(feature = "mutations"))]
    None
}

#[cfg(feature = "mutations")]
mod armed {
    use super::HostRule;
    use std::sync::OnceLock;

    /// Every mutation by name, with its component's path (`None`: a host rule).
    const MUTATIONS: [(&str, Option<&str>); 5] = [
        (
            "idempotency-conflict",
            Some(m3_components::mutants::IDEMPOTENCY_CONFLICT),
        ),
        ("lease-fencing", Some(m3_components::mutants::LEASE_FENCING)),
        (
            "terminal-refusal",
            Some(m3_components::mutants::TERMINAL_REFUSAL),
        ),
        (
            "withdrawn-closure",
            Some(m3_components::mutants::WITHDRAWN_CLOSURE),
        ),
        ("path-refusals", None),
    ];

    pub(super) fn host_rule_name(rule: HostRule) -> &'static str {
        match rule {
            HostRule::PathRefusals => "path-refusals",
        }
    }

    /// The mutation this process runs with. An unknown name ends the process: a misspelt
    /// mutation must never look like a caught one.
    pub(super) fn name() -> Option<&'static str> {
        static NAME: OnceLock<Option<&'static str>> = OnceLock::new();
        *NAME.get_or_init(|| {
            let wanted = std::env::var("M3_MUTATION")
                .ok()
                .filter(|n| !n.is_empty())?;
            match MUTATIONS.iter().find(|(name, _)| *name == wanted) {
                Some((name, _)) => Some(*name),
                None => {
                    eprintln!("M3_MUTATION={wanted} names no mutation");
                    std::process::exit(97);
                }
            }
        })
    }

    /// The broken component's bytes, read once. One that cannot be read ends the process
    /// too: the engine must never run in its place, under the name of a mutation that did not
    /// run.
    pub(super) fn component() -> Option<&'static [u8]> {
        static BYTES: OnceLock<Option<Vec<u8>>> = OnceLock::new();
        BYTES
            .get_or_init(|| {
                let name = name()?;
                let path = MUTATIONS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .and_then(|(_, path)| *path)?;
                match std::fs::read(path) {
                    Ok(bytes) => Some(bytes),
                    Err(e) => {
                        eprintln!("M3_MUTATION={name}: cannot read its component {path}: {e}");
                        std::process::exit(97);
                    }
                }
            })
            .as_deref()
    }
}
