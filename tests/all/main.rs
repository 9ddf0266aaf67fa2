//! One test binary for the whole suite (every binary links wasmtime; one keeps builds small).

mod codex;
mod codex_transcripts;
mod component_cache;
mod concurrency;
mod crash;
mod documents;
mod embedding;
mod execution_edges;
mod execution_store;
mod executions;
mod executions_peers;
mod lease_fencing;
mod lifecycle_model;
mod malformed_input;
mod mutations;
mod peers;
mod process;
mod random_kills;
mod redaction;
mod sandbox;
mod scripted_session;
mod store_contract;
mod stored_format;
mod submission;
mod tidy;
mod watch;
