//! One test binary for the whole suite (every binary links wasmtime; one keeps builds small).
//!
//! # Files
//!
//! - `main.rs`: the one test binary (every binary links wasmtime; one keeps builds small),
//!   declaring the modules below.
//! - `store_contract.rs`: one test per rule of the specification's store sections; those that hold
//!   whatever the backend run on both (`on_both_backends!`: `store_contract::sqlite::*` on a SQLite
//!   file, `store_contract::postgres::*` on a PostgreSQL database), the rest (paths, files,
//!   SQLite's own schema) on SQLite.
//! - `notification_ledger.rs`: the notification ledger of `m3 serve --notify` on both backends:
//!   a target's start kept, an event queued once per target, claims exclusive until their lease
//!   ends, a round's events in order, settled by the claimer alone, retries after their backoff,
//!   pruned events never queued again, the report.
//! - `benchmarks.rs`: every benchmark runs its smoke pass in the README's test command (`test =
//!   true`, a bare run is a smoke pass through `m3_bench::RunArgs`) and is in a `just` recipe.
//! - `clock_skew.rs`: on PostgreSQL, workers whose clocks are 5 s ahead and behind agree on leases
//!   (none recovered live, none missed past expiry by more than the allowance); the control, the
//!   same skew read from each machine's clock, recovers a live lease.
//! - `postgres_faults.rs`: many machines on one database: 8 worker processes and 32 answering
//!   threads contend for 12 rounds (on both backends: one claim, one acknowledged answer and one
//!   delivery per round); on PostgreSQL, a write whose connection the server terminates while it
//!   waits in its transaction writes nothing and its retry succeeds, idle connections the server
//!   closed are never lent, and the server restarted while an execution's round waits: the worker
//!   survives it, the answer given after it is delivered exactly once and the database is intact.
//!   The contending workers are `m3-test-helper contend` processes.
//! - `postgres_races.rs`: on PostgreSQL, a write locks the executions it touches (decision
//!   0077): one execution's lock held elsewhere leaves other executions' writes alone, and the
//!   write lock held exclusively (the planted control) stops them all; 8 connections' writers of
//!   8 executions all succeed; one execution's writers on 8 connections stay one sequence (one
//!   answer of 8 wins, the rest refused by the round's state); recovery from 4 kits racing a live
//!   worker fails only the killed worker's execution, once; a listener the server dropped still
//!   hears the answer.
//! - `postgres_server.rs`: the throwaway PostgreSQL server of `tests/support/postgres_server.rs`
//!   itself.
//! - `embedding.rs`: the policy-only component in other hosts. The shared vectors
//!   (`tests/embedding/vectors.json`, format in `tests/embedding/README.md`) run in Rust
//!   (wasmtime's dynamic API), Node (`tests/embedding/node/run-vectors.mjs` on jco's transpile) and
//!   Python (`tests/embedding/python/run_vectors.py` on wasmtime-py); every host meets every
//!   expectation and agrees with Rust; the vectors cover every row of the rejection table's first
//!   part; the component's imports and exports; EMBEDDING.md's JavaScript and Python examples run
//!   as written.
//! - `lifecycle_model.rs`: proptest, random operation sequences against an independent reference
//!   model comparing kinds and codes; a fresh seed each run (printed with the command that
//!   replays exactly this test, `tests/support/replay.rs`), 96 x `M3_SOAK` sequences, every status
//!   reached.
//! - `concurrency.rs`: idempotent-submit races across threads and OS processes (`m3-test-helper
//!   race`), contention, no
//!   process-wide lock (writers seen sleeping in the host's retries for SQLite's write lock, not
//!   slept for), and a write lock held past the busy timeout as a typed `storage_busy` that changes
//!   nothing.
//! - `sandbox.rs`: imports and their bindings, traps for forbidden imports, compute (fuel) and
//!   memory bounds with their defaults, traps through the policy's, the store's and
//!   `run-execution`'s instances (a trapped worker fails its execution and round at once), edge
//!   size limits, hostile schemas (exact codes, bounded fuel).
//! - `tidy.rs`: repository checks (no `jsonschema` in the host's normal dependencies, no decisions
//!   in host source, WIT and trait agree, no ignored tests or stubs, nothing shipped can open a
//!   socket or connect one).
//! - `documents.rs`: the documents keep their word (every named test exists, also one cut short
//!   with `...`; the code map names every source file by one entry and each entry one file; every
//!   `just` recipe is listed; every figure is configuration, a copy of a dated BENCHMARKS.md figure
//!   or dated itself, "Figures" under "Decisions"; the mutation table is the one that runs).
//! - `mutations.rs`: the mutation check: each central rule broken on purpose (`M3_MUTATION`, the
//!   test feature `mutations`), this binary run again on the tests named for it, which must all
//!   fail, while one unrelated test passes; RELIABILITY.md lists them.
//! - `component_cache.rs`: the compiled-artifact cache is private, reused, and never trusted when
//!   others could have written it.
//! - `delivery_facts.rs`: what a repeated answer says about its delivery, in every state of a round
//!   through the execution API, and with the Python SDK's server that reads the answer and exits
//!   (`book_table_then_exit`) over stdio in both eras and over Streamable HTTP.
//! - `crash.rs`: a worker process (`tests/support/fault_worker_main.rs`, built with `fault-points`)
//!   is killed at each named point; a fresh store finds exactly what was committed, an
//!   unacknowledged answer's retry gets the stored record, and recovery fails the dead worker's
//!   round once.
//! - `process.rs`: children see only the given environment (the bundled server's `report_env`), are
//!   killed with their process group and reaped, run in the private scratch directory.
//! - `scripted_session.rs`: the guest's scripted-session machine against the real bundled server
//!   over real pipes (host process capability), in both eras: probe, multi-round, two keys, round
//!   limit, server error after the answer, mode `fail`, decline.
//! - `submission.rs`: the `ModelValidationError` cases through the real component.
//! - `execution_store.rs`: lazy resolution on the same file, `close()`, in-memory stores resolve
//!   nothing, bad paths refused at open.
//! - `watch.rs`: the worker's one change path (the host's `DatabaseChanges`, through
//!   `m3::testing::ChangeSignal` and `ExecutionWaiter`): a commit by another store object or
//!   another process wakes it; reads and rejected submissions do not; a waiter on one execution
//!   wakes for that execution's answer or failed round and sleeps through renewals, creations,
//!   repeats and other executions' answers.
//! - `executions.rs`: the execution API end to end with the bundled server as a real child: the
//!   spec's example (blocking and async), multi-round MRTR, two keys, an answer committed by
//!   another store object, cancel, round deadline (no child left), `server_error`,
//!   `invalid_request_state`, `round_limit_exceeded`, the child's environment, mode `fail` and
//!   plans, refusals, in-memory stores, `OperationTimeout` from `result`, ambiguous pending rounds,
//!   and a worker process killed with SIGKILL (`m3-test-fault-worker kit`) whose round recovery
//!   fails while a live worker's round is untouched.
//! - `harnesses.rs`: the harness conformance cases, one body each run on both harnesses with a
//!   model (`on_both_harnesses!`: `harnesses::codex::*` on the real Codex CLI,
//!   `harnesses::claude_code::*` on the real Claude Code CLI, each with its loopback model): the
//!   specification's flow delivering the answer once, decline and cancel answers, cancel
//!   mid-round, fail mode, a silent model and the turn deadline, the turn deadline standing still
//!   while a round waits, a server that stops waiting (the TypeScript SDK's timeout) withdrawing
//!   its round, URL consent with server-everything.
//! - `codex.rs`: the codex harness with the real pinned Codex CLI (`@openai/codex@0.171.0`,
//!   installed on first use from `tests/peers/`) and the loopback model
//!   `tests/support/fake_model.rs` (binary `m3-test-fake-model`,
//!   `tests/support/fake_model_main.rs`): approvals that never become rounds (an unsandboxed
//!   command is declined), a killed worker recovered,
//!   confinement and credentials, and the schema drift check against `tests/peers/codex-schema/`.
//! - `claude_code.rs`: the claude-code harness with the real pinned Claude Code CLI
//!   (`@anthropic-ai/claude-code-linux-x64@2.1.332`, installed on first use from
//!   `tests/peers/claude-code/`) and the loopback Messages API `tests/support/fake_anthropic.rs`:
//!   confinement (Bash, a file write, a web fetch, a sub-agent and a server tool outside the
//!   allow-list each refused, no marker written, Claude Code's own tools never offered, the
//!   server's secret in the server's environment alone, never Claude Code's or a model
//!   request), the model key reaching Claude Code alone (the server sees it empty, and the
//!   caller's `HOME`), a copied sign-in used (its token sent, the original untouched), fast, named failures (a refused key, a
//!   misspelled tool, a server that does not start, a program that is not Claude Code, a
//!   failing endpoint after the retries asked for), the
//!   Python SDK's booking server answered through Claude Code, and a worker process killed while
//!   its round waits, over PostgreSQL (`m3-test-fault-worker kit ... claude-code`), recovered.
//! - `codex_models.rs`: several models: an agent spec read from the dict form with two models gives
//!   two agents, whose executions succeed each on its own model (the loopback model logs every
//!   request's `model`).
//! - `codex_transcripts.rs`: error paths replayed by a fake app-server
//!   (`tests/support/fake_codex_main.rs`): `willRetry` errors, unknown requests, a withdrawn
//!   request, a late answer after interrupt, a failed turn.
//! - `executions_peers.rs`: the same API against real peers: server-everything (every primitive
//!   kind, URL consent, the -32042 path, decline and cancel, invalid answers rejected locally) and
//!   the Python SDK server in the modern (sealed `requestState`), auto and legacy eras.
//! - `http_peers.rs`: servers reached over Streamable HTTP: the Python SDK's
//!   `tests/peers/booking_server.py` (`--http`, with and without an event store), server-everything
//!   (`streamableHttp`) and the TypeScript SDK 1.x's `withdrawing_server.mjs` (`--http`; its
//!   elicitations travel on the standalone GET stream) on loopback: rounds answered, declined,
//!   cancelled and withdrawn in both eras, a two-round `requestState` flow, and a restart mid-round
//!   failing a legacy round `server_error` (no event id to resume; or the restarted server refusing
//!   to resume) and a modern one `invalid_request_state`, each visibly and for good.
//! - `http_network.rs`: what crosses the network: a server that redirects to another origin is
//!   refused by the host (the other origin sees no connection), the refusal kept as an event and
//!   failing the execution; the binding's header reaches the server and never the database; an
//!   unreachable server's failure says where and why; bindings the host cannot grant (URLs,
//!   headers, the Codex harness) refused at submission, nothing stored; hostile servers (oversized
//!   values, an answer's POST never answered or reset, and one that ends the stream asking for
//!   the answer before it accepts the answer: recorded delivered once, then failed, and not waited
//!   for past the delivery timeout).
//! - `execution_edges.rs`: the edges of an execution's life: servers that stop waiting (the
//!   TypeScript SDK 1.x's request timeout and a server that exits or completes without waiting,
//!   `tests/peers/withdrawing_server.mjs`; a Python tool wrapping `ctx.elicit` in a timeout), an
//!   answer committed too late (forced: the worker, `m3-test-fault-worker ask`, paused at the
//!   fault point `server_output.matched` on `notifications/cancelled` while the answer is
//!   committed), an answer racing the server's timeout (delivered once or its round says why), a
//!   deadline as `OperationTimeout`, a killed worker recovered by a live kit, a queued execution whose submitter died, a handle attached from a second process
//!   (`tests/support/second_process_main.rs`), programs and directories resolved as given, prompts
//!   and resources that elicit, in both eras.
//! - Reliability catalogue (see RELIABILITY.md; `M3_SOAK` multiplies iterations, `just soak`):
//!   `malformed_input.rs` (10,400 generated submissions + 1,200 hostile schemas),
//!   `lease_fencing.rs` (injected clock, 8 workers), `random_kills.rs` (SIGKILLs of worker
//!   processes, `m3-test-helper kill-worker`, under load, until kills have landed between rounds and in every status a live round
//!   passes through); each draws a fresh seed every run, printed with the command that replays
//!   exactly that test (`M3_SEED`, `tests/support/replay.rs`), `redaction.rs` (random secrets in errors, Debug and child output; the command's
//!   in `host/cli/tests/redaction.rs`).
//! - `peers.rs`: the guest's MCP protocol functions against real peers (server-everything, Python
//!   `mcp==2.3.0` in both eras), installed on first use (`tests/support/peers.rs`) from the pinned
//!   files in `tests/peers/` into the ignored `tests/.peers/`; an install failure fails the tests.
//!   The Python SDK's server is `tests/peers/booking_server.py`.
//! - `python_package.rs`: the Python package (`host/python/`) under its pytest suite,
//!   `tests/python/` (a test per pytest file, each run with the venv's Python, the bundled shipping
//!   server, the Python SDK's booking server and the `m3` command; PostgreSQL through the plugin's
//!   `--m3-postgres-url` where a file takes it; each run must pass having collected tests and
//!   skipped none); mypy in strict mode (`tests/python/mypy.ini`) over the suite and the example,
//!   and over the package's own source; and the example file checked against the specification's
//!   example character for character (kept in `tests/fixtures/specification-example.txt`, itself
//!   checked against `../shared/spec/` where a checkout has the specification beside it). The
//!   suite's files, a file per concept, are listed in `tests/python/README.md`.
//! - `python_spec_example.rs`: `tests/python/spec_example.py` run as a program by the venv's
//!   Python, in a fresh directory with a clean environment, must exit 0 having left its round
//!   resolved with the example's answer and the shipment booked to it: as written, with the real
//!   Codex CLI on `PATH`, `M3_DOCS_CODEX_MODEL` and an API-key sign-in (`auth.json` in
//!   `CODEX_HOME`) that Codex's system configuration (`openai_base_url` in
//!   `/etc/codex/config.toml`, an overlay in a mount namespace of that run alone) sends to the
//!   loopback model (which refuses any other key); and with only the agent's dict replaced by a
//!   scripted one.
//! - `integrity.rs`: the integrity check itself (`tests/support/integrity.rs`): on a store with
//!   real executions it is ok, and each corruption planted by raw SQL (orphans, version rows out of
//!   step, an open round under an execution its worker finished, unknown statuses, a dropped index
//!   on PostgreSQL) is reported, on both backends.
//! - `replay.rs`: every printed replay command lists exactly the test that printed it (the filter
//!   run through this binary with `--list`), and every random test is registered in
//!   `tests/support/replay.rs`, the only source of seeds.
//! - `shipped.rs`: what ships is what CI builds: no test-only feature of `m3` reaches `m3-cli`,
//!   `m3-python` or the library (`cargo tree` without dev-dependencies), the words `.ci/run` scans
//!   the release `m3` for are in the test build's, and `.ci/run` runs the README's two commands as
//!   written.
//! - `stored_format.rs`: the committed fixture database (`tests/fixtures/format-1.sqlite`) reads
//!   back through the public API exactly as its JSON (`format-1.json`) records; a renamed stored
//!   field or a newer format is refused by name.

mod benchmarks;
mod claude_code;
mod clock_skew;
mod codex;
mod codex_models;
mod codex_transcripts;
mod component_cache;
mod concurrency;
mod crash;
mod delivery_facts;
mod documents;
mod embedding;
mod execution_edges;
mod execution_store;
mod executions;
mod executions_peers;
mod harnesses;
mod http_network;
mod http_peers;
mod integrity;
mod lease_fencing;
mod lifecycle_model;
mod malformed_input;
mod mutations;
mod notification_ledger;
mod peers;
mod postgres_faults;
mod postgres_races;
mod postgres_server;
mod process;
mod python_package;
mod python_spec_example;
mod random_kills;
mod redaction;
mod replay;
mod sandbox;
mod scripted_session;
mod shipped;
mod store_contract;
mod stored_format;
mod submission;
mod tidy;
mod watch;
