"""The test kits, agents, server bindings and execution handles (exported by ``m3``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from m3 import _convert, _native
from m3.errors import ModelValidationError
from m3.types import (
    ElicitationResponse,
    ExecutionDiagnostics,
    ExecutionResult,
    ExecutionState,
    HumanInput,
    PendingElicitationRound,
    _diagnostics,
    _pending,
    _responses_json,
    _result,
    _state,
)

__all__ = [
    "StdioServer",
    "HttpServer",
    "AgentSpec",
    "MCPTestKit",
    "AsyncMCPTestKit",
    "Agent",
    "AsyncAgent",
    "ExecutionHandle",
    "AsyncExecutionHandle",
]

#: How long leaving a kit waits for its cancelled workers, in seconds.
SHUTDOWN_GRACE = 10.0


@dataclass(frozen=True)
class StdioServer:
    """A stdio MCP server the kit starts for an execution: ``command`` with ``args``, in a
    private scratch directory (``cwd`` is relative to it), with the kit's ``env`` plus this
    binding's ``env`` and nothing of this process's environment. ``name`` is the ``server`` of
    ``server:tool`` entries; ``era`` is ``"auto"``, ``"legacy"`` or ``"modern"``. ``repr()``
    shows the names of ``env``, never its values."""

    name: str
    command: str
    args: Sequence[str] = ()
    env: Optional[Mapping[str, str]] = field(default=None, repr=False)
    cwd: Optional[str] = None
    era: str = "auto"

    def __repr__(self) -> str:
        names = sorted(self.env or {})
        return (
            f"StdioServer(name={self.name!r}, command={self.command!r}, args={list(self.args)!r}, "
            f"env={names!r}, cwd={self.cwd!r}, era={self.era!r})"
        )

    def _json(self) -> Dict[str, Any]:
        return {
            "kind": "stdio",
            "name": self.name,
            "command": self.command,
            "args": list(self.args),
            "env": dict(self.env or {}),
            "cwd": self.cwd,
            "era": self.era,
        }


@dataclass(frozen=True)
class HttpServer:
    """An MCP server reached over Streamable HTTP at ``url``. ``headers`` are added to every
    request to that origin (only their names ever show); ``delivery_timeout`` (seconds,
    default 30) bounds the wait for the server's response to a delivered answer."""

    name: str
    url: str
    headers: Optional[Mapping[str, str]] = field(default=None, repr=False)
    era: str = "auto"
    delivery_timeout: Optional[float] = None

    def __repr__(self) -> str:
        names = sorted(self.headers or {})
        return f"HttpServer(name={self.name!r}, url={self.url!r}, headers={names!r}, era={self.era!r})"

    def _json(self) -> Dict[str, Any]:
        return {
            "kind": "http",
            "name": self.name,
            "url": self.url,
            "headers": dict(self.headers or {}),
            "era": self.era,
            "delivery_timeout_secs": _convert.seconds(self.delivery_timeout, "delivery_timeout"),
        }


ServerBinding = Union[StdioServer, HttpServer]


def _plain_json(value: Any) -> Any:
    """Turns ``ElicitationResponse`` objects (in an elicitation plan) into their dict form."""
    if isinstance(value, ElicitationResponse):
        out: Dict[str, Any] = {"action": value.action}
        if value.content is not None:
            out["content"] = value.content
        return out
    if isinstance(value, Mapping):
        return {k: _plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_json(v) for v in value]
    return value


@dataclass(frozen=True)
class AgentSpec:
    """An agent: its ``harness`` (``"codex"``, ``"claude-code"`` or ``"scripted"``), ``models``
    (one agent each), a ``script`` for the scripted harness (``{"steps": [...]}``), an
    ``elicitation_plan`` for ``human_input="fail"``, the codex harness's settings (``codex``:
    ``binary``, ``model_provider``, ``turn_deadline_secs``, ``permission_policy``, ...) and the
    claude-code harness's (``claude_code``: ``binary``, ``base_url``, ``turn_deadline_secs``,
    ``request_timeout_secs``, ``credentials``, ``max_retries``). The same as the dict form ``kit.agents()``
    takes. ``prompt``, ``server`` and ``tools`` are for ``kit.submit(spec)``, which submits the
    spec's one agent's work directly."""

    harness: str = "codex"
    models: Sequence[str] = ()
    script: Optional[Mapping[str, Any]] = None
    elicitation_plan: Optional[Sequence[Mapping[str, Any]]] = field(default=None, repr=False)
    codex: Optional[Mapping[str, Any]] = None
    prompt: Optional[str] = None
    server: Optional[ServerBinding] = None
    tools: Sequence[str] = ()
    claude_code: Optional[Mapping[str, Any]] = None

    def _agent_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"harness": self.harness, "models": list(self.models)}
        if self.script is not None:
            out["script"] = _plain_json(self.script)
        if self.elicitation_plan is not None:
            out["elicitation_plan"] = _plain_json(self.elicitation_plan)
        if self.codex is not None:
            out["codex"] = _plain_json(self.codex)
        if self.claude_code is not None:
            out["claude_code"] = _plain_json(self.claude_code)
        return out


def _spec_text(spec: Union[AgentSpec, Mapping[str, Any]]) -> str:
    if isinstance(spec, AgentSpec):
        if spec.prompt is not None or spec.server is not None or spec.tools:
            raise ModelValidationError(
                "agent spec: `prompt`, `server` and `tools` are for kit.submit(spec); "
                "kit.agents() makes agents, and agent.submit() takes the work",
            )
        value: Any = spec._agent_json()
    elif isinstance(spec, Mapping):
        value = _plain_json(spec)
    else:
        raise ModelValidationError(
            f"agent spec: an AgentSpec or a dict, not {type(spec).__name__}"
        )
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise ModelValidationError("agent spec: not JSON-encodable") from None


def _submission_text(
    prompt: str,
    server: ServerBinding,
    tools: Sequence[str],
    human_input: Any,
    round_limit: int,
    round_deadline: Optional[float],
) -> str:
    if not isinstance(server, (StdioServer, HttpServer)):
        raise ModelValidationError(
            f"server must be a StdioServer or an HttpServer, not {type(server).__name__}"
        )
    if isinstance(tools, str):
        raise ModelValidationError("tools must be a list of `server:tool` strings, not a str")
    return json.dumps(
        {
            "prompt": prompt,
            "server": server._json(),
            "tools": list(tools),
            "human_input": human_input,
            "round_limit": round_limit,
            "round_deadline_secs": _convert.seconds(round_deadline, "round_deadline"),
        }
    )


def _kit_store(store: Any) -> Any:
    if store is None:
        return _native.ExecutionStore.in_memory()
    native = getattr(store, "_native", None)
    if not isinstance(native, _native.ExecutionStore):
        raise TypeError(
            "store must be an execution store (SQLiteExecutionStore, PostgresExecutionStore) "
            f"or None, not {type(store).__name__}"
        )
    return native


def _env(env: Optional[Mapping[str, str]]) -> Dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a mapping of str to str, not {type(env).__name__}")
    return dict(env)


# ---- blocking ----


class ExecutionHandle:
    """An execution, for blocking callers. Every method releases the GIL while it waits;
    Ctrl-C interrupts a wait (the execution goes on, and leaving the kit cancels it)."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def __repr__(self) -> str:
        return f"ExecutionHandle(execution_id={self.execution_id!r})"

    @property
    def execution_id(self) -> str:
        """The execution's id."""
        return str(self._native.execution_id)

    def pending_elicitation(self) -> Optional[PendingElicitationRound]:
        """The execution's single pending round, or ``None``. More than one pending round is a
        ``ManagedInputStateError``."""
        text = self._native.pending_elicitation()
        return None if text is None else _pending(json.loads(text))

    def respond_elicitation(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse],
        *,
        idempotency_key: str,
    ) -> None:
        """Validates and commits answers to one of this execution's rounds (exactly its request
        keys), then wakes its worker, which delivers them once. ``round_id`` and
        ``idempotency_key`` must be non-empty; repeating the same key with the same answers is
        safe, the same key with other answers is a ``ManagedInputConflict``."""
        self._native.respond_elicitation(round_id, _responses_json(responses), idempotency_key)

    def snapshot(self) -> ExecutionState:
        """The execution's lifecycle and, once finished, its outcome."""
        return _state(json.loads(self._native.snapshot()))

    def diagnostics(self) -> ExecutionDiagnostics:
        """The harness's events and, once failed, its stderr tail."""
        return _diagnostics(json.loads(self._native.diagnostics()))

    def result(self, timeout: Optional[float] = None) -> ExecutionResult:
        """Waits for the terminal result. ``OperationTimeout`` when ``timeout`` seconds pass
        first, and when the execution ended because a deadline passed (its ``result`` then
        holds the execution's result)."""
        return _result(json.loads(self._native.result(_convert.seconds(timeout, "timeout"))))

    def cancel(self) -> None:
        """Cancels the execution: its open round fails with ``cancelled`` and the server is told."""
        self._native.cancel()


class Agent:
    """An agent of an ``MCPTestKit``: one harness with one model."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def __repr__(self) -> str:
        return f"Agent(model={self.model!r})"

    @property
    def model(self) -> Optional[str]:
        """The agent's model, if its harness has models."""
        model = self._native.model
        return None if model is None else str(model)

    def submit(
        self,
        prompt: str,
        *,
        server: ServerBinding,
        tools: Sequence[str] = (),
        human_input: HumanInput = "fail",
        round_limit: int = 10,
        round_deadline: Optional[float] = None,
    ) -> ExecutionHandle:
        """Submits work; it starts at once on the kit's workers. ``tools`` are the only
        ``server:tool`` entries the agent may call; ``human_input="managed"`` pauses at each
        elicitation until it is answered (``"fail"``, the default, fails it). ``round_limit``
        bounds the rounds of one operation; ``round_deadline`` (seconds) bounds each round's
        wait (``None``: 24 hours, see the package's notes)."""
        return ExecutionHandle(
            self._native.submit(
                _submission_text(prompt, server, tools, human_input, round_limit, round_deadline)
            )
        )


class MCPTestKit:
    """The blocking test kit: ``MCPTestKit(store=..., env=...)``, best used as a context
    manager. Child processes (servers, harnesses) get exactly ``env`` plus each server
    binding's own ``env``, nothing of this process's environment. Leaving the ``with`` block
    (or ``close()``) cancels the kit's running executions and waits for their workers.

    ``store`` is a ``SQLiteExecutionStore`` or ``PostgresExecutionStore`` (``None``: executions
    in memory, without managed input). ``lease_ttl`` and ``lease_renew`` (seconds) are the
    workers' lease settings."""

    def __init__(
        self,
        store: Any = None,
        env: Optional[Mapping[str, str]] = None,
        *,
        lease_ttl: float = 15.0,
        lease_renew: float = 5.0,
    ) -> None:
        self._native = _native.Kit(_kit_store(store), _env(env), lease_ttl, lease_renew)

    def __repr__(self) -> str:
        return f"MCPTestKit(owner_id={self.owner_id!r})"

    def __enter__(self) -> "MCPTestKit":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def owner_id(self) -> str:
        """The id this kit's workers own rounds under."""
        return str(self._native.owner_id)

    def close(self) -> None:
        """Cancels the kit's running executions and waits (up to 10 s) for their workers."""
        self._native.shutdown(SHUTDOWN_GRACE)

    def agents(self, specs: Sequence[Union[AgentSpec, Mapping[str, Any]]]) -> List[Agent]:
        """One agent per model of each spec (exactly one for the scripted harness). A spec is
        an ``AgentSpec`` or its dict form: ``{"harness": "codex", "models": [...]}``."""
        return [Agent(a) for a in self._native.agents([_spec_text(s) for s in specs])]

    def submit(self, spec: AgentSpec, human_input: HumanInput = "fail") -> ExecutionHandle:
        """Submits an ``AgentSpec`` with one model and its ``prompt``, ``server`` and
        ``tools``."""
        bare, prompt, server = _submit_parts(spec)
        agent = _only(self.agents([bare]))
        return agent.submit(prompt, server=server, tools=spec.tools, human_input=human_input)

    def execution(self, execution_id: str) -> ExecutionHandle:
        """A handle on any execution of the store, submitted by any process."""
        return ExecutionHandle(self._native.execution(execution_id))

    def recover(self) -> Tuple[int, int]:
        """Fails what dead workers left (``recovery_unavailable``): (rounds, executions)."""
        rounds, executions = self._native.recover()
        return int(rounds), int(executions)


def _submit_parts(spec: AgentSpec) -> Tuple[AgentSpec, str, ServerBinding]:
    """``kit.submit(spec)``'s parts: the agent alone, the prompt and the server."""
    if not isinstance(spec, AgentSpec):
        raise ModelValidationError(f"submit takes an AgentSpec, not {type(spec).__name__}")
    if spec.prompt is None or spec.server is None:
        raise ModelValidationError("submit(spec): the AgentSpec needs a `prompt` and a `server`")
    bare = AgentSpec(
        spec.harness,
        spec.models,
        spec.script,
        spec.elicitation_plan,
        spec.codex,
        claude_code=spec.claude_code,
    )
    return bare, spec.prompt, spec.server


_Made = TypeVar("_Made")


def _only(made: List[_Made]) -> _Made:
    """The one agent ``kit.submit(spec)`` needs."""
    if len(made) != 1:
        raise ModelValidationError(
            f"submit(spec): the AgentSpec makes {len(made)} agents; give it one model"
        )
    return made[0]


# ---- asyncio ----


class AsyncExecutionHandle:
    """An execution, for asyncio callers: every method is awaitable and runs on the kit's
    workers, never blocking the event loop. Cancelling an await stops the wait (not the
    execution)."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def __repr__(self) -> str:
        return f"AsyncExecutionHandle(execution_id={self.execution_id!r})"

    @property
    def execution_id(self) -> str:
        """The execution's id."""
        return str(self._native.execution_id)

    async def pending_elicitation(self) -> Optional[PendingElicitationRound]:
        """See ``ExecutionHandle.pending_elicitation``."""
        text = await self._native.pending_elicitation_async()
        return None if text is None else _pending(json.loads(text))

    async def respond_elicitation(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse],
        *,
        idempotency_key: str,
    ) -> None:
        """See ``ExecutionHandle.respond_elicitation``."""
        await self._native.respond_elicitation_async(
            round_id, _responses_json(responses), idempotency_key
        )

    async def snapshot(self) -> ExecutionState:
        """See ``ExecutionHandle.snapshot``."""
        return _state(json.loads(await self._native.snapshot_async()))

    async def diagnostics(self) -> ExecutionDiagnostics:
        """See ``ExecutionHandle.diagnostics``."""
        return _diagnostics(json.loads(await self._native.diagnostics_async()))

    async def result(self, timeout: Optional[float] = None) -> ExecutionResult:
        """See ``ExecutionHandle.result``."""
        text = await self._native.result_async(_convert.seconds(timeout, "timeout"))
        return _result(json.loads(text))

    async def cancel(self) -> None:
        """See ``ExecutionHandle.cancel``."""
        await self._native.cancel_async()


class AsyncAgent:
    """An agent of an ``AsyncMCPTestKit``."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def __repr__(self) -> str:
        return f"AsyncAgent(model={self.model!r})"

    @property
    def model(self) -> Optional[str]:
        """The agent's model, if its harness has models."""
        model = self._native.model
        return None if model is None else str(model)

    async def submit(
        self,
        prompt: str,
        *,
        server: ServerBinding,
        tools: Sequence[str] = (),
        human_input: HumanInput = "fail",
        round_limit: int = 10,
        round_deadline: Optional[float] = None,
    ) -> AsyncExecutionHandle:
        """See ``Agent.submit``."""
        text = _submission_text(prompt, server, tools, human_input, round_limit, round_deadline)
        return AsyncExecutionHandle(await self._native.submit_async(text))


class AsyncMCPTestKit:
    """The asyncio test kit: ``async with AsyncMCPTestKit(store=..., env=...) as kit``. The same
    behaviour as ``MCPTestKit``, with awaitable submissions and handles."""

    def __init__(
        self,
        store: Any = None,
        env: Optional[Mapping[str, str]] = None,
        *,
        lease_ttl: float = 15.0,
        lease_renew: float = 5.0,
    ) -> None:
        self._native = _native.Kit(_kit_store(store), _env(env), lease_ttl, lease_renew)

    def __repr__(self) -> str:
        return f"AsyncMCPTestKit(owner_id={self.owner_id!r})"

    async def __aenter__(self) -> "AsyncMCPTestKit":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def owner_id(self) -> str:
        """The id this kit's workers own rounds under."""
        return str(self._native.owner_id)

    async def close(self) -> None:
        """Cancels the kit's running executions and waits (up to 10 s) for their workers."""
        await self._native.shutdown_async(SHUTDOWN_GRACE)

    def agents(self, specs: Sequence[Union[AgentSpec, Mapping[str, Any]]]) -> List[AsyncAgent]:
        """See ``MCPTestKit.agents``."""
        return [AsyncAgent(a) for a in self._native.agents([_spec_text(s) for s in specs])]

    async def submit(
        self, spec: AgentSpec, *, human_input: HumanInput = "fail"
    ) -> AsyncExecutionHandle:
        """See ``MCPTestKit.submit``."""
        bare, prompt, server = _submit_parts(spec)
        agent = _only(self.agents([bare]))
        return await agent.submit(prompt, server=server, tools=spec.tools, human_input=human_input)

    async def execution(self, execution_id: str) -> AsyncExecutionHandle:
        """See ``MCPTestKit.execution``."""
        return AsyncExecutionHandle(await self._native.execution_async(execution_id))

    async def recover(self) -> Tuple[int, int]:
        """See ``MCPTestKit.recover``."""
        rounds, executions = await self._native.recover_async()
        return int(rounds), int(executions)
