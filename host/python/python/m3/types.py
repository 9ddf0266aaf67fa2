"""The specification's execution and round types (``m3.types``).

Records are immutable (frozen dataclasses); times are timezone-aware ``datetime`` objects in
UTC; mappings are plain ``dict`` objects. ``repr()`` never shows an answer.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, Literal, Mapping, Optional, Tuple, Union

from m3 import _convert

__all__ = [
    "HumanInput",
    "ExecutionStatus",
    "OperationKind",
    "ExecutionFailure",
    "ToolResult",
    "ExecutionOutcome",
    "ExecutionState",
    "ExecutionResult",
    "ExecutionEvent",
    "ExecutionDiagnostics",
    "FormElicitationRequest",
    "UrlElicitationRequest",
    "ElicitationRequest",
    "PendingElicitationRound",
    "ElicitationResponse",
]

HumanInput = Literal["fail", "managed"]
"""How a submission handles an MCP elicitation: ``"fail"`` (the default) or ``"managed"``."""

OperationKind = Literal["tool", "prompt", "resource"]
"""The MCP operation a round belongs to."""


class ExecutionStatus(str, enum.Enum):
    """An execution's lifecycle: ``QUEUED``, ``RUNNING``, ``WAITING_FOR_INPUT``, ``FINISHED``."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_INPUT = "waiting_for_input"
    FINISHED = "finished"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ExecutionFailure:
    """Why a finished execution failed: ``kind`` (``"round_failed"``, ``"operation_timeout"``,
    ...), the round's failure ``code`` if a round failed, and a message."""

    kind: str
    code: Optional[str]
    message: str


@dataclass(frozen=True)
class ToolResult:
    """One operation's result, as the server returned it (``result`` is its JSON object)."""

    tool: str
    kind: OperationKind
    result: Any = field(repr=False)

    def text(self) -> str:
        """The text blocks of the result, one per line."""
        key = {"tool": "content", "prompt": "messages", "resource": "contents"}[self.kind]
        blocks = self.result.get(key) if isinstance(self.result, dict) else None
        texts = []
        for block in blocks or []:
            if self.kind == "prompt" and isinstance(block, dict):
                block = block.get("content")
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                texts.append(block["text"])
        return "\n".join(texts)


@dataclass(frozen=True)
class ExecutionOutcome:
    """How a finished execution ended: ``kind`` is ``"succeeded"``, ``"failed"`` or
    ``"cancelled"``; ``str()`` gives one line (``failed (round_failed, cancelled): ...``)."""

    kind: Literal["succeeded", "failed", "cancelled"]
    failure: Optional[ExecutionFailure]
    tool_results: Tuple[ToolResult, ...]
    final_message: Optional[str]

    def __str__(self) -> str:
        if self.kind == "failed" and self.failure is not None:
            code = self.failure.code
            extra = f", {code}" if code is not None and code != self.failure.kind else ""
            return f"failed ({self.failure.kind}{extra}): {self.failure.message}"
        return self.kind


@dataclass(frozen=True)
class ExecutionState:
    """An execution's lifecycle and, once finished, its outcome (``handle.snapshot()``)."""

    execution_id: str
    lifecycle: ExecutionStatus
    outcome: Optional[ExecutionOutcome]
    cancel_requested: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class ExecutionResult:
    """A finished execution's result (``handle.result()``)."""

    execution_id: str
    outcome: ExecutionOutcome

    @property
    def succeeded(self) -> bool:
        """Whether the execution succeeded."""
        return self.outcome.kind == "succeeded"


@dataclass(frozen=True)
class ExecutionEvent:
    """One thing an execution's harness did or reported."""

    at: datetime
    kind: str
    message: str


@dataclass(frozen=True)
class ExecutionDiagnostics:
    """An execution's harness events and, once it failed, its harness's stderr tail."""

    events: Tuple[ExecutionEvent, ...]
    events_dropped: int
    stderr_tail: Optional[str]


@dataclass(frozen=True)
class FormElicitationRequest:
    """A form request: a message and the JSON schema its ``accept`` content must match, with
    the optional context the server sent."""

    message: str
    requested_schema: Dict[str, Any]
    meta: Optional[Any] = None
    task: Optional[Any] = None
    server: Optional[str] = None
    operation_kind: Optional[OperationKind] = None
    operation_name: Optional[str] = None

    @property
    def mode(self) -> Literal["form"]:
        """``"form"``."""
        return "form"


@dataclass(frozen=True)
class UrlElicitationRequest:
    """A URL request: a message and a URL; an ``accept`` records consent only (m3 does not
    browse to it)."""

    message: str
    url: str
    elicitation_id: Optional[str] = None
    meta: Optional[Any] = None
    task: Optional[Any] = None
    server: Optional[str] = None
    operation_kind: Optional[OperationKind] = None
    operation_name: Optional[str] = None

    @property
    def mode(self) -> Literal["url"]:
        """``"url"``."""
        return "url"


ElicitationRequest = Union[FormElicitationRequest, UrlElicitationRequest]
"""One request of a round."""


@dataclass(frozen=True)
class PendingElicitationRound:
    """A durable request round: what a server asked, keyed by request key. It never holds a
    worker's lease token."""

    round_id: str
    execution_id: str
    logical_operation_id: str
    server: str
    operation_kind: OperationKind
    operation_name: str
    requests: Mapping[str, ElicitationRequest]
    created_at: datetime
    request_state: Optional[str] = field(default=None, repr=False)
    deadline: Optional[datetime] = None


@dataclass(frozen=True)
class ElicitationResponse:
    """An answer to one request: ``action`` is ``"accept"``, ``"decline"`` or ``"cancel"``;
    ``content`` is the form's answer for a form ``accept`` and ``None`` otherwise. Checked by
    m3 when submitted, not here. ``repr()`` hides the content."""

    action: Literal["accept", "decline", "cancel"]
    content: Optional[Mapping[str, Any]] = field(default=None, repr=False)

    def __repr__(self) -> str:
        shown = "None" if self.content is None else "<redacted>"
        return f"ElicitationResponse(action={self.action!r}, content={shown})"


# ---- from the engine's JSON ----


def _request(value: Mapping[str, Any]) -> ElicitationRequest:
    context = {
        "meta": value.get("meta"),
        "task": value.get("task"),
        "server": value.get("server"),
        "operation_kind": value.get("operation_kind"),
        "operation_name": value.get("operation_name"),
    }
    if value.get("mode") == "url":
        return UrlElicitationRequest(
            message=value["message"],
            url=value["url"],
            elicitation_id=value.get("elicitation_id"),
            **context,
        )
    return FormElicitationRequest(
        message=value["message"], requested_schema=dict(value["requested_schema"]), **context
    )


def _pending(value: Mapping[str, Any]) -> PendingElicitationRound:
    return PendingElicitationRound(
        round_id=value["round_id"],
        execution_id=value["execution_id"],
        logical_operation_id=value["logical_operation_id"],
        server=value["server"],
        operation_kind=value["operation_kind"],
        operation_name=value["operation_name"],
        requests={key: _request(request) for key, request in value["requests"].items()},
        created_at=_convert.parse_time(value["created_at"]),
        request_state=value.get("request_state"),
        deadline=_convert.optional_time(value.get("deadline")),
    )


def _outcome(value: Optional[Mapping[str, Any]]) -> Optional[ExecutionOutcome]:
    if value is None:
        return None
    failure = value.get("failure")
    return ExecutionOutcome(
        kind=value["kind"],
        failure=None
        if failure is None
        else ExecutionFailure(kind=failure["kind"], code=failure.get("code"), message=failure["message"]),
        tool_results=tuple(
            ToolResult(tool=t["tool"], kind=t["kind"], result=t["result"])
            for t in value.get("tool_results", [])
        ),
        final_message=value.get("final_message"),
    )


def _state(value: Mapping[str, Any]) -> ExecutionState:
    return ExecutionState(
        execution_id=value["execution_id"],
        lifecycle=ExecutionStatus(value["lifecycle"]),
        outcome=_outcome(value.get("outcome")),
        cancel_requested=bool(value["cancel_requested"]),
        created_at=_convert.parse_time(value["created_at"]),
        updated_at=_convert.parse_time(value["updated_at"]),
    )


def _result(value: Mapping[str, Any]) -> ExecutionResult:
    outcome = _outcome(value["outcome"])
    assert outcome is not None
    return ExecutionResult(execution_id=value["execution_id"], outcome=outcome)


def _diagnostics(value: Mapping[str, Any]) -> ExecutionDiagnostics:
    return ExecutionDiagnostics(
        events=tuple(
            ExecutionEvent(at=_convert.parse_time(e["at"]), kind=e["kind"], message=e["message"])
            for e in value["events"]
        ),
        events_dropped=int(value["events_dropped"]),
        stderr_tail=value.get("stderr_tail"),
    )


def _responses_json(responses: Mapping[str, ElicitationResponse]) -> str:
    """An answer map -> the engine's JSON text. Only the Python types are checked here (a
    mapping of ``ElicitationResponse``, JSON-encodable content); the engine checks the rest."""
    from m3.errors import ManagedInputValidationError

    if not isinstance(responses, Mapping):
        raise ManagedInputValidationError(
            "responses must be a mapping of request key to ElicitationResponse, "
            f"not {type(responses).__name__}",
            code="invalid_response",
        )
    out: Dict[str, Any] = {}
    for key, response in responses.items():
        if not isinstance(response, ElicitationResponse):
            raise ManagedInputValidationError(
                f"the response for a request key is a {type(response).__name__}, "
                "not an ElicitationResponse",
                code="invalid_response",
                request_key=str(key),
            )
        item: Dict[str, Any] = {"action": response.action}
        if response.content is not None:
            item["content"] = response.content
        out[key] = item
    try:
        return json.dumps(out, allow_nan=False)
    except (TypeError, ValueError):
        raise ManagedInputValidationError(
            "responses could not be encoded as JSON", code="invalid_response"
        ) from None
