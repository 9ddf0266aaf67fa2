//! The component plumbing: the generated bindings, the conversions between them and the public
//! types, the compiled engine and its instances, the compiled-code cache, and the sandbox linker
//! that grants the component its imports and nothing else.
//!
//! # Files
//!
//! - `bindings.rs`: the host bindings generated from `wit/` (world `engine`); `events.next`,
//!   `process.write-line` and `runtime.run-execution` are async; `wasi:io/poll` is
//!   `wasmtime-wasi`'s (so `events` takes the same `pollable` as `wasi:http`).
//! - `convert.rs`: WIT <-> public types, field by field.
//! - `engine.rs`: the process-wide engine (fuel on), the embedded component, the `InstancePre`.
//!   `cache.rs`: the on-disk compiled artifact; `digest_file.rs`: its keyed digest and checked
//!   identity beside it.
//! - `notice.rs`: what the library says while a person waits (the first compile, a slow
//!   compile in a debug build naming the profile overrides, an unusable cache): `log` records
//!   and, unless turned off, a line on stderr.
//! - `instance.rs`: per-store pools of live instances (`bounded_store` is the one way a store is
//!   made, used by the benchmark too); every call under a memory limit and a compute budget in
//!   fuel, refilled by a call hook when the host calls in and when an m3 import returns (never for
//!   a runtime library call or `wasi:random`, so a loop on those cannot refill it); a trapped
//!   instance is discarded.
//! - `store_rows.rs`: the `store` import's WIT records as the store's own rows and back (times as
//!   nanoseconds, statuses as the text stored: the one place a status is spelled for the database).
//! - `sandbox.rs`: the linker policy (m3 imports + `wasi:random`, every other import traps) and the
//!   import listing (`ImportBinding`, `ImportProvider`), and `SandboxProbe`, the probes
//!   `Policy::probe` runs. Each m3 import is linked to its own context by a projection of the
//!   instance state. Every function of a forbidden interface is defined to trap and to record which
//!   one was called in the instance's state (`HostState::forbidden_import`): a trap is classified a
//!   `ForbiddenImport` by that record, never by its message. `link` (every m3 import, async
//!   `events`/`process`, and `wasi:http` with `wasi:io`, limited by the execution's grant: for
//!   `run-execution`) and `link_sync` (no `process`/`events`/`wasi:http`: they trap; the store
//!   API's synchronous calls). A forbidden interface's own resources are defined inertly; one it
//!   names from a linked interface (`wasi:cli/stdout`'s `output-stream` is `wasi:io`'s) is left to
//!   that interface, so the two agree.

pub mod bindings;
pub mod cache;
pub mod convert;
pub(crate) mod digest_file;
pub mod engine;
pub mod instance;
pub(crate) mod notice;
pub mod sandbox;
pub mod store_rows;
