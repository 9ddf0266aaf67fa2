"""m3: durable, sandboxed managed elicitation input for MCP agent tests.

With ``human_input="managed"``, an agent's action pauses at an MCP elicitation while m3 stores
the pending round; any caller (this process, another one, ``m3 respond``, ``m3 serve``) reads
it and answers; m3 validates the answer and delivers it to the waiting server once::

    from m3 import ElicitationResponse, MCPTestKit
    from m3.storage import SQLiteExecutionStore

    store = SQLiteExecutionStore("executions.sqlite")
    with MCPTestKit(store=store, env={}) as kit:
        agent = kit.agents([{"harness": "codex", "models": ["gpt-5"]}])[0]
        handle = agent.submit("Book the shipment.", server=shipping_server,
                              tools=["shipping:book_shipment"], human_input="managed")
        pending = handle.pending_elicitation()
        ...

Every decision (validation, the round's state machine, leases, idempotency, recovery) is made
by m3's WebAssembly component, the same one the Rust crate and the ``m3`` command run.

Where this package differs from the specification, and why:

- A submission's rounds have a deadline of 24 hours unless ``agent.submit(...,
  round_deadline=SECONDS)`` gives another (the specification's ``deadline`` is optional): a
  round nobody answers would otherwise keep a worker, a server process and a lease alive
  without end. A round made with ``store.create_round`` follows the specification: a
  ``pending.deadline`` of ``None`` is no deadline.
- A legacy ``elicitation/create`` request without ``_meta["m3/request_key"]`` is keyed
  ``elicitation`` (the legacy era has one request per round and no key of its own).
- ``create_round(pending, *, round_index, round_limit, owner_id, lease_ttl,
  operation_parameters, harness)``: the specification names the method, not its arguments;
  the round's ``created_at`` is the store clock's time, as every other timestamp is.
- Durations (``lease_ttl``, ``timeout``, ``round_deadline``) are seconds, as Python's own
  APIs take them.
"""

from __future__ import annotations

from m3._kit import (
    Agent,
    AgentSpec,
    AsyncAgent,
    AsyncExecutionHandle,
    AsyncMCPTestKit,
    ExecutionHandle,
    HttpServer,
    MCPTestKit,
    StdioServer,
)
from m3.errors import (
    EngineError,
    ManagedInputConflict,
    ManagedInputError,
    ManagedInputRecoveryError,
    ManagedInputStateError,
    ManagedInputValidationError,
    ModelValidationError,
    OperationTimeout,
    StorageError,
)
from m3.types import (
    ElicitationResponse,
    ExecutionResult,
    ExecutionState,
    ExecutionStatus,
    FormElicitationRequest,
    HumanInput,
    PendingElicitationRound,
    UrlElicitationRequest,
)

from m3 import _native


def set_engine_notices(on: bool) -> None:
    """Whether m3 says on stderr when it compiles its WebAssembly component for this machine
    (once, on the first run; the result is cached) and when that cache cannot be used. On by
    default; ``set_engine_notices(False)`` silences both for a program with its own display.
    """
    _native.set_engine_notices(on)


__all__ = [
    "MCPTestKit",
    "AsyncMCPTestKit",
    "Agent",
    "AsyncAgent",
    "AgentSpec",
    "ExecutionHandle",
    "AsyncExecutionHandle",
    "StdioServer",
    "HttpServer",
    "ElicitationResponse",
    "ExecutionResult",
    "ExecutionState",
    "ExecutionStatus",
    "FormElicitationRequest",
    "UrlElicitationRequest",
    "PendingElicitationRound",
    "HumanInput",
    "ManagedInputError",
    "ManagedInputValidationError",
    "ManagedInputConflict",
    "ManagedInputStateError",
    "ManagedInputRecoveryError",
    "StorageError",
    "EngineError",
    "ModelValidationError",
    "OperationTimeout",
    "set_engine_notices",
]
