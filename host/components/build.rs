//! Builds the guest component (`m3-guest`) for `wasm32-wasip2` and hands its path to the crate
//! as `M3_GUEST_WASM_PATH` (and its SHA-256 as `M3_GUEST_WASM_SHA256`). See `m3-build-support` for how; `M3_GUEST_WASM=path` skips the build
//! and embeds a prebuilt component. It also builds the policy-only component (`M3_POLICY_WASM_PATH`;
//! `M3_POLICY_WASM=path` skips that build).

use std::path::Path;

fn main() {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest_dir)
        .ancestors()
        .nth(2)
        .expect("workspace root");
    // The engine and the policy-only component are built at the same time (their nested
    // builds have target directories of their own): each ends in a long single-threaded link
    // step, and built one after the other they were the first build's critical path.
    let (wasm, policy) = std::thread::scope(|scope| {
        let policy = scope.spawn(|| {
            // The same crate without its `engine` feature: the small policy-only component for
            // other hosts.
            m3_build_support::build_component_with(
                root,
                &m3_build_support::ComponentBuild {
                    package: "m3-guest",
                    lib_name: "m3_guest",
                    artifact: "m3_policy",
                    // No WASI but the `wasi:random` the world imports (lease tokens, through
                    // getrandom's custom backend).
                    target: m3_build_support::UNKNOWN,
                    profile: "policy",
                    default_features: false,
                    features: &[],
                    cfgs: &["getrandom_backend=\"custom\""],
                    sources: &["guest/src", "guest/Cargo.toml", "wit"],
                },
            )
        });
        let wasm = m3_build_support::build_component(
            root,
            "m3-guest",
            "m3_guest",
            &["guest/src", "guest/Cargo.toml", "wit"],
        );
        let policy = policy
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (wasm, policy)
    });
    println!("cargo:rustc-env=M3_GUEST_WASM_PATH={}", wasm.display());
    // The digest names the compiled artifact in the component cache; computing it here saves
    // hashing megabytes at every process start.
    let bytes = std::fs::read(&wasm).expect("reading the built component");
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    println!("cargo:rustc-env=M3_GUEST_WASM_SHA256={digest}");
    println!("cargo:rustc-env=M3_POLICY_WASM_PATH={}", policy.display());

    // The test feature `mutations`: one component per broken rule (see the host's
    // `checks/mutation.rs`).
    if std::env::var_os("CARGO_FEATURE_MUTATIONS").is_some() {
        build_mutants(root, &bytes);
    }
}

/// The guest features of the mutation check, each breaking one rule, and the variable naming
/// the built component.
const MUTANTS: [(&str, &str); 4] = [
    (
        "mutate-idempotency-conflict",
        "M3_MUTANT_IDEMPOTENCY_CONFLICT",
    ),
    ("mutate-lease-fencing", "M3_MUTANT_LEASE_FENCING"),
    ("mutate-terminal-refusal", "M3_MUTANT_TERMINAL_REFUSAL"),
    ("mutate-withdrawn-closure", "M3_MUTANT_WITHDRAWN_CLOSURE"),
];

fn build_mutants(root: &Path, engine: &[u8]) {
    let mut seen: Vec<Vec<u8>> = vec![engine.to_vec()];
    for (feature, variable) in MUTANTS {
        let artifact = variable.to_lowercase();
        let path = m3_build_support::build_component_with(
            root,
            &m3_build_support::ComponentBuild {
                package: "m3-guest",
                lib_name: "m3_guest",
                artifact: &artifact,
                target: m3_build_support::WASIP2,
                profile: "mutant",
                default_features: true,
                features: &[feature],
                cfgs: &[],
                sources: &["guest/src", "guest/Cargo.toml", "wit"],
            },
        );
        let bytes = std::fs::read(&path).expect("reading a mutant component");
        // Each mutant differs from the engine and from every other one: a stale copy would
        // make the mutation check test the wrong rule.
        assert!(
            !seen.contains(&bytes),
            "the {feature} component is identical to another one"
        );
        seen.push(bytes);
        println!("cargo:rustc-env={variable}_PATH={}", path.display());
    }
}
