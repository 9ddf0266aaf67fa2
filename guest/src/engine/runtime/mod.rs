//! The execution runtime: executions as stored rows, the worker that drives one to its end, and
//! recovery. Each harness session is a state machine written "sans I/O" that speaks the
//! [`session`] protocol; the worker performs its actions against the host's `process`/`events`
//! imports and the store.
//!
//! - `session`: the protocol between a session and the worker (inputs, actions, how it ended).
//! - `scripted`: one MCP server connection driven by the scripted harness: era probe,
//!   handshake, the script's tool calls in order, and elicitation rounds in both eras.
//! - `codex`: one `codex app-server` connection driven by the codex harness.
//! - `claude_code`: one headless Claude Code session driven by the claude-code harness.
//! - `agent_rounds`: what both harnesses with a model do with the elicitations their agent
//!   forwards, written once.
//! - `worker`: `run-execution`: claim, spawn (or connect), wait, deliver, renew, finish.
//! - `http_link`: the Streamable HTTP transport of a server reached over HTTP (`wasi:http`).
//! - `execution`: the executions table (submit, snapshot, cancel requests, leases, outcome).
//! - `plan`: elicitation plans for human input mode `fail`.
//! - `recovery`: `recover`.
//!
//! # Files
//!
//! - `mod.rs` (engine only): the execution runtime's map; the files below.
//! - `session.rs`: the session protocol both harness sessions speak with the worker, sans I/O:
//!   `Input` (server lines, the timer, a committed answer, cancel, deadline, server exit or fault,
//!   unhandled) -> `Action` (lines to send, open / deliver / resolve / fail a round, operation
//!   results, arm the timer, final message, finish), `Finished`, `Operation`, `Mode`.
//! - `scripted.rs`: the scripted harness's session as a sans-I/O state machine speaking that
//!   protocol. Steps are tool calls, prompts (`prompts/get`) or resource reads (`resources/read`),
//!   each one logical operation whose rounds carry its kind; an MRTR retry repeats the step's
//!   method. It encodes the round semantics: the next round resolves its predecessor, the round
//!   limit fails the delivered round with `round_limit_exceeded`, an error reply to a delivery
//!   fails it with `server_error` or `invalid_request_state`, mode `fail` answers `cancel` and
//!   fails the round with `elicitation_unhandled`, cancel and deadline answer a pending legacy
//!   request with `cancel` and send `notifications/cancelled`. Whatever ends a round's wait ends
//!   the round in the same step: `notifications/cancelled` for its `elicitation/create`, or a reply
//!   to the call while it is open, fails it `request_withdrawn` (its answer, if one was committed,
//!   is never delivered; a request still open on the server's side is answered `cancel`); a server
//!   that exits or closes its output fails it `server_error`. `Input::Unhandled` does what mode
//!   `fail` does for one round (a plan without a matching entry).
//! - `worker.rs`: `run-execution`. Claims the queued execution (status `running`, leased), spawns
//!   the server through `process` (or, for a server at a URL, opens its `http_link`), feeds the
//!   session what `events.next` reports (stdout is framed here; an HTTP server's messages come from
//!   its link), and performs its actions: rounds are created owned by the worker, answers are
//!   delivered at most once (`start-delivery` committed, then the line written, or over HTTP the
//!   message sent, then `mark-delivered` once written, or over HTTP once the server accepted it; a
//!   server that does not take it fails the round `server_error`), `ResolveRound`/`FailRound` end
//!   rounds; a destination the host refused is kept as an event (`network`) and fails the execution
//!   `server_error`; results are stored as they arrive. Every store write it makes is checked: one
//!   it cannot make (a resolve, a fail, a renewal, `mark-delivered`) ends the execution failed,
//!   naming the write, never dropped. On `wake` (a commit that concerns its execution) /`timeout`,
//!   and between the child's output events once something is due or a second has passed (a server
//!   that writes without a pause never starves it), it checks the session's timer, renews its
//!   execution and round leases when the host has not (one write transaction that also reads what
//!   it watches, `execution::renew_and_observe`), reads a cancel request, the open round's
//!   committed answer, or its deadline. It parks in `events.next-holding`, handing the host its
//!   leases, and takes back what the host renewed meanwhile (`execution::renew_held` renews many
//!   parked workers' leases in one transaction, each as the worker's own renewal would, and says
//!   which worker should look). The session's timer (probe, request timeouts, the Codex turn
//!   deadline) stands still while a round waits for its answer. A `request_withdrawn` failure's
//!   message says after how long the server gave up. It waits at most until the next timer. At the
//!   end it closes the server's stdin, gives it a second to exit, kills it, and commits the
//!   outcome. Also `check_spec` and `parse_script` (a step is `{"tool": "server:tool"}` in the
//!   allow-list, `{"prompt": "server:name"}` with string arguments, or `{"resource":
//!   "server:uri"}`, always on the binding's server).
//! - `http_link.rs`: the Streamable HTTP transport of a server reached by URL, over `wasi:http`:
//!   one `POST` per message (`Accept: application/json, text/event-stream`), a request's answer
//!   read from its JSON body or its event stream (which also carries the server's own requests and
//!   notifications), `202` for a response or notification; in the legacy era the `Mcp-Session-Id`
//!   of `initialize` and the negotiated `MCP-Protocol-Version` on every later request, and the
//!   standalone `GET` stream opened after `initialize` (requests wait until it is open, so an
//!   elicitation the server sends there is not lost, and until `notifications/initialized` is
//!   accepted: separate requests have no order, and a server may offer some tools only once it has
//!   it; each such wait at most 10 s); in 2026-07-28 no session, the version, `Mcp-Method` and
//!   `Mcp-Name` on every request, the server's tools listed once before the first call to mirror
//!   `x-mcp-header` parameters (`Mcp-Param-*`), and a tool whose annotations break the rules never
//!   called (the call gets an error). Every value the server controls is bounded where it arrives
//!   and no request it sends can reach wasi:http's header trap ("What a server controls is
//!   bounded"); an answer's delivery waits at most the binding's delivery timeout
//!   (`give_up_delivery`, timed by `worker.rs`). Redirects are followed (at most 5; the host
//!   refuses another origin); a stream broken before its answer is resumed with `GET` and
//!   `Last-Event-ID` after the server's `retry` (at most 5 failed attempts in a row; replayed
//!   events already seen are skipped by id), else the server is lost. Nothing blocks: the worker
//!   passes its pollables to `events.next-holding` and calls `progress` after each wait. The
//!   answer's delivery is reported once the server accepted it (`202`, or the retry's response);
//!   what arrives on other exchanges meanwhile is held until then. Errors are words (`connection
//!   refused`, `HTTP 404: the server no longer knows the session`), an error status to a request
//!   becomes that request's JSON-RPC error (the server's own when it sent one).
//! - `codex.rs`: the `codex` harness's session machine (same inputs and actions as the scripted
//!   one): `initialize`/`initialized`, `thread/start` (the server binding as a per-thread MCP
//!   server with `enabled_tools` = the allow-list (its environment is in the private home's
//!   `config.toml`, which Codex merges), `approvalPolicy: on-request`, `sandbox: read-only`, the
//!   scratch directory as `cwd`), `mcpServerStatus/list` (a server that did not start fails
//!   `server-error` with Codex's reason, an allow-listed tool it lacks `tool-not-found`, one still
//!   starting is waited for), `turn/start`, `mcpToolCall` items (operation, tool results),
//!   `agentMessage` (final message), `turn/completed` (a failed turn whose `codexErrorInfo` is the
//!   model endpoint's ends `model-error` with the HTTP status or the connection error; a 401/403
//!   while Codex retries ends it at once); events kept with the execution (`Action::Event`): the
//!   thread's setup, the server's start-up status, approvals given or declined, items other than
//!   the conversation and MCP calls, Codex's `error` notifications, calls of tools Codex does not
//!   offer (`refused`, from raw response items); `mcpServer/elicitation/request` -> a round (tool
//!   approvals, marked `_meta.codex_approval_kind`, are answered, never rounds; the rounds
//!   themselves through `agent_rounds`); every other server
//!   request is declined (or refused with -32601); `turn/interrupt` on cancel, round deadline,
//!   round limit and the turn deadline (which does not count time spent waiting for answers; it
//!   fails a delivered round `cancelled` and times the execution out); a timer on every request. A
//!   round whose wait ends without its answer (`serverRequest/resolved`, the `mcpToolCall` item
//!   completing, the turn ending) fails `request_withdrawn`; the round limit fails the delivered
//!   round `round_limit_exceeded`, as in the scripted harness.
//! - `agent_rounds.rs`: the rounds of a harness with a model, written once for `codex` and
//!   `claude-code`: the tool call in progress, a forwarded elicitation opened as a round of it
//!   (or answered `cancel` when one already waits), the answer delivered once as the harness's
//!   reply (the one thing each harness gives: how that reply is written), the next request or the
//!   call's result resolving the delivered round, withdrawal of a waiting round, the round limit,
//!   mode `fail`, and the open round failed as the session ends.
//! - `claude_code.rs`: the `claude-code` harness's session machine (same inputs and actions):
//!   `mcp_status` until the server is not `pending` (a server that did not start fails
//!   `server-error` with Claude Code's reason, an allow-listed tool it lacks `tool-not-found`),
//!   the server's other tools denied with `apply_flag_settings` so the agent is offered exactly
//!   the allow-list; then the prompt as the one stream-json user message; `system`/`init` starts
//!   the turn (a tool offered beyond the allow-list is named in an event); `tool_use` of an allow-listed tool
//!   (the operation) and its `tool_result` (the call's result, as Claude Code gave it to the
//!   agent); a `control_request` `elicitation` -> a round through `agent_rounds`, answered by the
//!   `control_response`; `can_use_tool` allowed for the allow-list, denied and kept as `refused`
//!   otherwise, as is a call of a tool Claude Code does not offer (its `No such tool` result);
//!   other control requests refused; `control_cancel_request` withdraws the round; `result` ends
//!   the session (an `api_error` is `model-error`, a 401/403 retry interrupts at once); cancel,
//!   round deadline, round limit and the turn deadline send `interrupt`. Also what the host
//!   starts (`spawn_spec`: the command line that confines it, its switches in `fixed-env`, the
//!   private `CLAUDE_CONFIG_DIR`, `HOME` and `CLAUDE_CODE_TMPDIR`, the server's `mcp.json` with
//!   the model's credentials withheld from the server) and `check` (no server working directory,
//!   no 2026-07-28 era).
//! - `execution.rs`: the executions table (one row: indexed columns + the component's document
//!   holding the spec, the cancel flag, the outcome and what the worker started: process group and
//!   scratch directory, for recovery; the harness's events (the first 64, each at most 512 bytes)
//!   and, once it failed, its stderr tail) and its items (each tool result appended as a row of its
//!   own under the worker's lease, so a long execution never rewrites a growing document; gathered
//!   into the outcome once, when it finishes): insert (queued, held by the submitter for one
//!   lease), snapshot, diagnostics, pending round of an execution, respond (only to this
//!   execution's rounds), request cancel, claim, renew (with the open round's lease, in one
//!   transaction that also reads the cancel flag and the round), finish (which fails, in the same
//!   transaction, any round of the execution the worker still owns: the net under every path).
//! - `plan.rs`: elicitation plans (first unused matching entry per request key; a round is answered
//!   by the plan only if every key matches).
//! - `recovery.rs`: `recover` (rounds and running executions whose lease expired, and queued
//!   executions whose submitter's hold expired) and `abandon` (the host's word that a worker's
//!   instance trapped: its execution and the rounds it owns fail at once, `recovery-unavailable`,
//!   in one transaction).

pub mod agent_rounds;
pub mod claude_code;
pub mod codex;
pub mod execution;
pub mod http_link;
pub mod plan;
pub mod recovery;
pub mod scripted;
pub mod session;
pub mod worker;
