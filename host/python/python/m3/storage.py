"""The specification's stores and store records (``m3.storage``).

``SQLiteExecutionStore`` / ``PostgresExecutionStore`` keep a kit's executions and rounds;
``SQLiteManagedInputStore`` / ``PostgresManagedInputStore`` are the twelve managed-input store
operations of the specification (storage and worker coordination: application code answers
through an execution handle, which wakes the worker). Every call releases the GIL.
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Protocol,
    Tuple,
    Union,
    runtime_checkable,
)

from m3 import _convert, _native
from m3.types import (
    ElicitationRequest,
    ElicitationResponse,
    FormElicitationRequest,
    PendingElicitationRound,
    UrlElicitationRequest,
    _pending,
    _responses_json,
)

__all__ = [
    "ManagedInputStatus",
    "ManagedInputLease",
    "HarnessMetadata",
    "LifecycleTimestamps",
    "RoundFailure",
    "RedactedResponse",
    "ManagedInputRecord",
    "ManagedInputStore",
    "SQLiteManagedInputStore",
    "PostgresManagedInputStore",
    "SQLiteExecutionStore",
    "PostgresExecutionStore",
    "Clock",
]

Clock = Callable[[], datetime]
"""A store clock: returns the current time as a timezone-aware ``datetime``."""

StrPath = Union[str, "os.PathLike[str]"]


class ManagedInputStatus(str, enum.Enum):
    """A round's status: ``PENDING``, ``RESPONSE_VALIDATED``, ``DELIVERY_STARTED``,
    ``DELIVERED``, ``RESOLVED`` or ``FAILED``."""

    PENDING = "pending"
    RESPONSE_VALIDATED = "response_validated"
    DELIVERY_STARTED = "delivery_started"
    DELIVERED = "delivered"
    RESOLVED = "resolved"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ManagedInputLease:
    """The compare-and-set worker lease: every worker write presents it. ``repr()`` hides the
    token."""

    owner_id: str
    lease_token: str = field(repr=False)
    expires_at: datetime

    def __repr__(self) -> str:
        return (
            f"ManagedInputLease(owner_id={self.owner_id!r}, lease_token=<redacted>, "
            f"expires_at={self.expires_at!r})"
        )


@dataclass(frozen=True)
class HarnessMetadata:
    """A native harness's session, resume token and turn, when the round came from one."""

    session_id: Optional[str] = None
    resume_token: Optional[str] = field(default=None, repr=False)
    turn_id: Optional[str] = None


@dataclass(frozen=True)
class LifecycleTimestamps:
    """When a round was created, last changed, and entered each status."""

    created_at: datetime
    updated_at: datetime
    response_validated_at: Optional[datetime] = None
    delivery_started_at: Optional[datetime] = None
    delivered_at: Optional[datetime] = None
    resolved_at: Optional[datetime] = None
    failed_at: Optional[datetime] = None


@dataclass(frozen=True)
class RoundFailure:
    """Why a round failed: a failure code (``"cancelled"``, ``"recovery_unavailable"``, ...)
    and a message."""

    code: str
    message: str


@dataclass(frozen=True)
class RedactedResponse:
    """The diagnostic projection of one answer: its action, the names of its content's
    fields and its size, never the values."""

    request_key: str
    action: str
    content_fields: Tuple[str, ...]
    content_bytes: int


@dataclass(frozen=True)
class ManagedInputRecord:
    """A stored round: the pending request, its position, status, lease, answers and
    lifecycle. ``repr()`` hides the answers, the idempotency keys and the lease token."""

    pending: PendingElicitationRound
    round_index: int
    round_limit: int
    status: ManagedInputStatus
    lease: Optional[ManagedInputLease]
    responses: Optional[Mapping[str, ElicitationResponse]] = field(repr=False)
    idempotency_key: Optional[str] = field(repr=False)
    delivery_idempotency_key: Optional[str] = field(repr=False)
    harness: HarnessMetadata
    operation_parameters: Mapping[str, Any] = field(repr=False)
    delivery_attempts: int
    timestamps: LifecycleTimestamps
    failure: Optional[RoundFailure]

    @property
    def round_id(self) -> str:
        """The round's id (``pending.round_id``)."""
        return self.pending.round_id

    @property
    def failure_code(self) -> Optional[str]:
        """The failure code of a failed round."""
        return None if self.failure is None else self.failure.code

    @property
    def failure_message(self) -> Optional[str]:
        """The failure message of a failed round."""
        return None if self.failure is None else self.failure.message


@runtime_checkable
class ManagedInputStore(Protocol):
    """The specification's managed-input store protocol: the twelve round operations."""

    def create_round(
        self,
        pending: PendingElicitationRound,
        *,
        round_index: int = 0,
        round_limit: int = 10,
        owner_id: Optional[str] = None,
        lease_ttl: float = 15.0,
        operation_parameters: Optional[Mapping[str, Any]] = None,
        harness: Optional[HarnessMetadata] = None,
    ) -> ManagedInputRecord:
        """Persists a new ``pending`` round, owned by ``owner_id`` with a lease if given."""
        ...

    def get_round(self, round_id: str) -> Optional[ManagedInputRecord]:
        """The record of a round, or ``None``."""
        ...

    def list_rounds(
        self,
        *,
        execution_id: Optional[str] = None,
        status: Optional[ManagedInputStatus] = None,
        limit: Optional[int] = None,
    ) -> List[ManagedInputRecord]:
        """Records matching the filter, oldest first."""
        ...

    def claim_round(
        self, round_id: str, owner_id: str, *, lease_ttl: float = 15.0
    ) -> ManagedInputLease:
        """Takes the lease of an unowned round, or rotates the caller's own live lease."""
        ...

    def renew(
        self, round_id: str, lease: ManagedInputLease, *, lease_ttl: float = 15.0
    ) -> ManagedInputLease:
        """Extends the caller's live lease by ``lease_ttl`` seconds from now."""
        ...

    def submit_responses(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse],
        *,
        idempotency_key: str,
    ) -> ManagedInputRecord:
        """Validates and stores answers: ``pending`` -> ``response_validated``."""
        ...

    def start_delivery(
        self, round_id: str, lease: ManagedInputLease, *, delivery_idempotency_key: str
    ) -> ManagedInputRecord:
        """``response_validated`` -> ``delivery_started``, committed before the answer is sent."""
        ...

    def mark_delivered(self, round_id: str, lease: ManagedInputLease) -> ManagedInputRecord:
        """``delivery_started`` -> ``delivered``."""
        ...

    def resolve(self, round_id: str, lease: ManagedInputLease) -> ManagedInputRecord:
        """``delivered`` -> ``resolved``."""
        ...

    def fail(
        self, round_id: str, lease: ManagedInputLease, code: str, message: str
    ) -> ManagedInputRecord:
        """Any non-terminal status -> ``failed`` with ``code``."""
        ...

    def fail_recovery(
        self, round_id: str, lease: Optional[ManagedInputLease] = None, message: str = ""
    ) -> ManagedInputRecord:
        """Fails a round whose worker is gone with ``recovery_unavailable``."""
        ...

    def redacted_responses(self, round_id: str) -> Optional[List[RedactedResponse]]:
        """The diagnostic projection of a round's answers (``None`` before any answer)."""
        ...


# ---- conversions ----


def _lease(value: Mapping[str, Any]) -> ManagedInputLease:
    return ManagedInputLease(
        owner_id=value["owner_id"],
        lease_token=value["lease_token"],
        expires_at=_convert.parse_time(value["expires_at"]),
    )


def _lease_json(lease: ManagedInputLease) -> str:
    if not isinstance(lease, ManagedInputLease):
        raise TypeError(f"lease must be a ManagedInputLease, not {type(lease).__name__}")
    return json.dumps(
        {
            "owner_id": lease.owner_id,
            "lease_token": lease.lease_token,
            "expires_at": _convert.format_time(lease.expires_at, "lease.expires_at"),
        }
    )


def _record(text: str) -> ManagedInputRecord:
    value = json.loads(text)
    stamps = value["timestamps"]
    harness = value.get("harness") or {}
    failure = value.get("failure")
    responses = value.get("responses")
    return ManagedInputRecord(
        pending=_pending(value["pending"]),
        round_index=value["round_index"],
        round_limit=value["round_limit"],
        status=ManagedInputStatus(value["status"]),
        lease=None if value.get("lease") is None else _lease(value["lease"]),
        responses=None
        if responses is None
        else {
            key: ElicitationResponse(action=r["action"], content=r.get("content"))
            for key, r in responses.items()
        },
        idempotency_key=value.get("idempotency_key"),
        delivery_idempotency_key=value.get("delivery_idempotency_key"),
        harness=HarnessMetadata(
            session_id=harness.get("session_id"),
            resume_token=harness.get("resume_token"),
            turn_id=harness.get("turn_id"),
        ),
        operation_parameters=_convert.plain(value.get("operation_parameters")),
        delivery_attempts=value.get("delivery_attempts", 0),
        timestamps=LifecycleTimestamps(
            **{key: _convert.optional_time(stamps.get(key)) for key in (
                "created_at", "updated_at", "response_validated_at", "delivery_started_at",
                "delivered_at", "resolved_at", "failed_at",
            )}  # type: ignore[arg-type]
        ),
        failure=None if failure is None else RoundFailure(failure["code"], failure["message"]),
    )


def _request_json(request: ElicitationRequest) -> Dict[str, Any]:
    if isinstance(request, FormElicitationRequest):
        out: Dict[str, Any] = {
            "mode": "form",
            "message": request.message,
            "requested_schema": request.requested_schema,
        }
    elif isinstance(request, UrlElicitationRequest):
        out = {"mode": "url", "message": request.message, "url": request.url}
        if request.elicitation_id is not None:
            out["elicitation_id"] = request.elicitation_id
    else:
        raise TypeError(
            "each request must be a FormElicitationRequest or a UrlElicitationRequest, "
            f"not {type(request).__name__}"
        )
    for key in ("meta", "task", "server", "operation_kind", "operation_name"):
        if getattr(request, key) is not None:
            out[key] = getattr(request, key)
    return out


def _ttl_ms(lease_ttl: float) -> float:
    value = _convert.seconds(lease_ttl, "lease_ttl")
    assert value is not None
    return value * 1000.0


def _path(database: StrPath, what: str) -> str:
    path = os.fspath(database)
    if not isinstance(path, str):
        raise TypeError(f"{what} must be a str or os.PathLike[str]")
    return path


class _Store:
    """The twelve operations over a native store object."""

    _native: Any

    def create_round(
        self,
        pending: PendingElicitationRound,
        *,
        round_index: int = 0,
        round_limit: int = 10,
        owner_id: Optional[str] = None,
        lease_ttl: float = 15.0,
        operation_parameters: Optional[Mapping[str, Any]] = None,
        harness: Optional[HarnessMetadata] = None,
    ) -> ManagedInputRecord:
        """Persists a new ``pending`` round (every request and schema is validated first).

        The round's ``created_at`` is the store clock's time (the ``created_at`` of
        ``pending`` is not used); ``pending.deadline`` (``None``: no deadline) is stored with
        it. With ``owner_id``, the round is created owned, its lease lasting ``lease_ttl``
        seconds; the lease is the record's ``lease``."""
        if not isinstance(pending, PendingElicitationRound):
            raise TypeError(
                f"pending must be a PendingElicitationRound, not {type(pending).__name__}"
            )
        harness = harness or HarnessMetadata()
        round_json = {
            "round_id": pending.round_id,
            "execution_id": pending.execution_id,
            "logical_operation_id": pending.logical_operation_id,
            "server": pending.server,
            "operation_kind": pending.operation_kind,
            "operation_name": pending.operation_name,
            "requests": {key: _request_json(r) for key, r in pending.requests.items()},
            "request_state": pending.request_state,
            "deadline": None
            if pending.deadline is None
            else _convert.format_time(pending.deadline, "pending.deadline"),
            "round_index": round_index,
            "round_limit": round_limit,
            "owner": None
            if owner_id is None
            else {"owner_id": owner_id, "lease_ttl_ms": _ttl_ms(lease_ttl)},
            "operation_parameters": dict(operation_parameters or {}),
            "harness": {
                "session_id": harness.session_id,
                "resume_token": harness.resume_token,
                "turn_id": harness.turn_id,
            },
        }
        return _record(self._native.create_round(json.dumps(round_json)))

    def get_round(self, round_id: str) -> Optional[ManagedInputRecord]:
        """The record of a round, or ``None`` when there is none."""
        text = self._native.get_round(round_id)
        return None if text is None else _record(text)

    def list_rounds(
        self,
        *,
        execution_id: Optional[str] = None,
        status: Optional[ManagedInputStatus] = None,
        limit: Optional[int] = None,
    ) -> List[ManagedInputRecord]:
        """Records matching every filter given, oldest first."""
        status_text = None if status is None else ManagedInputStatus(status).value
        return [_record(json.dumps(r)) for r in json.loads(
            self._native.list_rounds(execution_id, status_text, limit)
        )]

    def claim_round(
        self, round_id: str, owner_id: str, *, lease_ttl: float = 15.0
    ) -> ManagedInputLease:
        """Takes the lease of an unowned round for ``lease_ttl`` seconds, or rotates the
        caller's own live lease; another owner's live lease is a ``ManagedInputConflict``."""
        return _lease(json.loads(self._native.claim_round(round_id, owner_id, _ttl_ms(lease_ttl))))

    def renew(
        self, round_id: str, lease: ManagedInputLease, *, lease_ttl: float = 15.0
    ) -> ManagedInputLease:
        """Extends the caller's live lease by ``lease_ttl`` seconds from now."""
        return _lease(
            json.loads(self._native.renew(round_id, _lease_json(lease), _ttl_ms(lease_ttl)))
        )

    def submit_responses(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse],
        *,
        idempotency_key: str,
    ) -> ManagedInputRecord:
        """Validates and stores answers in one transaction: ``pending`` ->
        ``response_validated``. The same key with the same answers returns the stored record;
        the same key with other answers is a ``ManagedInputConflict``. This does not wake a
        worker: application code answers through its execution handle."""
        return _record(
            self._native.submit_responses(round_id, _responses_json(responses), idempotency_key)
        )

    def start_delivery(
        self, round_id: str, lease: ManagedInputLease, *, delivery_idempotency_key: str
    ) -> ManagedInputRecord:
        """``response_validated`` -> ``delivery_started``, committed before the answer is sent."""
        return _record(
            self._native.start_delivery(round_id, _lease_json(lease), delivery_idempotency_key)
        )

    def mark_delivered(self, round_id: str, lease: ManagedInputLease) -> ManagedInputRecord:
        """``delivery_started`` -> ``delivered``."""
        return _record(self._native.mark_delivered(round_id, _lease_json(lease)))

    def resolve(self, round_id: str, lease: ManagedInputLease) -> ManagedInputRecord:
        """``delivered`` -> ``resolved``."""
        return _record(self._native.resolve(round_id, _lease_json(lease)))

    def fail(
        self, round_id: str, lease: ManagedInputLease, code: str, message: str
    ) -> ManagedInputRecord:
        """Any non-terminal status -> ``failed`` with a failure ``code`` (``"cancelled"``,
        ``"deadline_exceeded"``, ``"server_error"``, ...; ``"recovery_unavailable"`` only through
        ``fail_recovery``)."""
        return _record(self._native.fail(round_id, _lease_json(lease), code, message))

    def fail_recovery(
        self, round_id: str, lease: Optional[ManagedInputLease] = None, message: str = ""
    ) -> ManagedInputRecord:
        """Fails a round whose worker is gone with ``recovery_unavailable``: refused with
        ``ManagedInputRecoveryError`` while another worker's lease is live."""
        lease_json = None if lease is None else _lease_json(lease)
        return _record(self._native.fail_recovery(round_id, lease_json, message))

    def redacted_responses(self, round_id: str) -> Optional[List[RedactedResponse]]:
        """The diagnostic projection of a round's answers (``None`` before any answer)."""
        text = self._native.redacted_responses(round_id)
        if text is None:
            return None
        return [
            RedactedResponse(
                request_key=r["request_key"],
                action=r["action"],
                content_fields=tuple(r["content_fields"]),
                content_bytes=r["content_bytes"],
            )
            for r in json.loads(text)
        ]


class SQLiteManagedInputStore(_Store):
    """The SQLite implementation of ``ManagedInputStore``, on the database file ``database``.

    One connection per operation and no ``close()``: discard the object. Any number of store
    objects, in any number of processes, may share a file. ``busy_timeout_ms`` is how long a
    write waits for a locked database; ``clock`` (default: current UTC time) must return
    timezone-aware datetimes: a clock that returns a naive one is refused."""

    def __init__(
        self,
        database: StrPath,
        *,
        busy_timeout_ms: int = 5000,
        clock: Optional[Clock] = None,
    ) -> None:
        self._native = _native.ManagedInputStore.sqlite(
            _path(database, "database"), busy_timeout_ms, clock
        )

    def __repr__(self) -> str:
        return f"SQLiteManagedInputStore({self._native.name()!r})"


class PostgresManagedInputStore(_Store):
    """The PostgreSQL implementation of ``ManagedInputStore``, on ``url``
    (``postgres://user@host/database``). Time is the database server's, corrected through
    ``clock`` (default: current UTC time); ``busy_timeout_ms`` bounds the write lock's wait and
    a connection's opening."""

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_ms: int = 5000,
        clock: Optional[Clock] = None,
    ) -> None:
        self._native = _native.ManagedInputStore.postgres(url, busy_timeout_ms, clock)

    def __repr__(self) -> str:
        return "PostgresManagedInputStore(<url>)"


class _ResolvedStore(_Store):
    """The managed-input store an execution store resolved."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def __repr__(self) -> str:
        return "ManagedInputStore(<resolved by an execution store>)"


class _ExecutionStore:
    _native: Any

    def close(self) -> None:
        """Closes the store: its connections are released and later use is an error. What it
        stored stays."""
        self._native.close()

    def managed_input_store(self) -> ManagedInputStore:
        """The managed-input store on the same database, opened on first use."""
        return _ResolvedStore(self._native.managed_input_store())

    def __enter__(self) -> "_ExecutionStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SQLiteExecutionStore(_ExecutionStore):
    """Executions and rounds in the SQLite file ``path``. Nothing is opened until used; the
    managed-input store is resolved lazily on the same file, so a ``SQLiteManagedInputStore``
    on the same path reads what it wrote."""

    def __init__(self, path: StrPath) -> None:
        self._native = _native.ExecutionStore.sqlite(_path(path, "path"))

    def __enter__(self) -> "SQLiteExecutionStore":
        return self


class PostgresExecutionStore(_ExecutionStore):
    """Executions and rounds in the PostgreSQL database at ``url``."""

    def __init__(self, url: str, *, busy_timeout_ms: int = 5000) -> None:
        self._native = _native.ExecutionStore.postgres(url, busy_timeout_ms)

    def __enter__(self) -> "PostgresExecutionStore":
        return self
