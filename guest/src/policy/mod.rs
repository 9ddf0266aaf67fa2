//! The policy rules: validation and the pure state machines, without storage or time. This is
//! all the policy-only component carries; the engine adds `crate::engine` on top.
//!
//! # Files
//!
//! Every file of this folder is built into both components.
//!
//! - `exports.rs`: the `policy`, `round-protocol` and `execution-rules` exports.
//! - `mutation.rs`: the mutation check's broken rules: each test-only feature `mutate-<rule>`
//!   (built only by the host's test feature `mutations`) breaks one rule (idempotency conflict,
//!   lease fencing, terminal refusal, withdrawn closure); without them every check is a constant
//!   `false`.
//! - `errors.rs`: constructors of the typed errors (messages name ids, keys and fields, never
//!   answers, lease tokens or idempotency keys).
//! - `time.rs`: timestamp arithmetic on the `clock` import's time.
//! - `strict_json.rs`: RFC 8259 parsing that rejects duplicate keys; errors never quote input.
//! - `schema.rs`: the MCP form subset check with size bounds, and the cache of compiled validators.
//! - `responses.rs`: response-map validation (keys, shape, actions, content, schema).
//! - `prepared_round.rs`: the `prepared-round` resource: a round's requests and their compiled
//!   validators kept in the instance, so a validation carries only the answer.
//! - `canonical.rs`: "same response" (sorted keys, `1 == 1.0`, byte-exact strings) and canonical
//!   text.
//! - `lifecycle.rs`: the transition table and the terminal-state checks.
//! - `lease.rs`: lease grant (random 128-bit tokens from `wasi:random`) and the one authorisation
//!   rule (`authorize_held`: owner, token compared in constant time, then expiry) for rounds and
//!   executions alike.
//! - `round_protocol.rs`: every write decision of the store protocol as a pure function of (round
//!   id, stored record, operation, now): argument checks first, then the record; exported as
//!   `round-protocol.decide` and used by `guest/src/engine/store_protocol.rs`. In both components.
//! - `execution_rules.rs`: the execution decisions that need no storage (may a worker take it,
//!   which pending round a handle sees, whose round an answer is), exported as `execution-rules`
//!   and used by `guest/src/engine/runtime/execution.rs`. In both components.
//! - `submission.rs`: submission checks (`ModelValidationError`): human-input values, `managed`
//!   with a plan or without a managed-input store, `server:tool` allow-lists.

pub mod canonical;
pub mod errors;
pub mod execution_rules;
mod exports;
pub mod lease;
pub mod lifecycle;
pub mod mutation;
pub mod prepared_round;
pub mod responses;
pub mod round_protocol;
pub mod schema;
pub mod strict_json;
pub mod submission;
pub mod time;
