"""The specification's typed errors, as Python exception classes.

Every error carries ``code``: the same code the Rust error has (``"schema_violation"``,
``"idempotency_conflict"``, ``"recovery_unavailable"``, ...), or ``None`` where the Rust error has
none. Messages never carry an answer, a lease token or an idempotency key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from m3.types import ExecutionResult

__all__ = [
    "M3Error",
    "ManagedInputError",
    "ManagedInputValidationError",
    "ManagedInputConflict",
    "ManagedInputStateError",
    "ManagedInputRecoveryError",
    "StorageError",
    "EngineError",
    "ModelValidationError",
    "OperationTimeout",
]


class M3Error(Exception):
    """Every error m3 raises. ``code`` is the Rust error's code, or ``None``."""

    code: Optional[str]

    def __init__(self, message: str, *, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.code = code

    @property
    def message(self) -> str:
        """The error's text (the same as ``str(error)``)."""
        return str(self.args[0]) if self.args else ""


class ManagedInputError(M3Error):
    """A managed-input error: validation, conflict, state, recovery or storage.

    ``request_key`` and ``field`` name the request and schema field an answer failed on.
    """

    request_key: Optional[str]
    field: Optional[str]

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        request_key: Optional[str] = None,
        field: Optional[str] = None,
    ) -> None:
        super().__init__(message, code=code)
        self.request_key = request_key
        self.field = field


class ManagedInputValidationError(ManagedInputError, ValueError):
    """Malformed IDs, response maps, actions or schema content. Nothing was changed."""


class ManagedInputConflict(ManagedInputError):
    """Stale ownership, an idempotency key reused for another answer, or a concurrent update."""


class ManagedInputStateError(ManagedInputError):
    """A transition or response that is invalid for the round's current state."""


class ManagedInputRecoveryError(ManagedInputError):
    """The store cannot safely recover or reclaim a round (``recovery_unavailable``, ...)."""


class StorageError(ManagedInputError):
    """The database failed, is busy past its timeout, is closed, or holds a corrupt record."""


class EngineError(M3Error):
    """m3's own engine failed (the component trapped or ran out of its budget, a worker died)."""


class ModelValidationError(M3Error, ValueError):
    """A submission that cannot run: an invalid ``human_input``, managed input with an
    elicitation plan or without a persistent store, a malformed tool list or agent spec."""


class OperationTimeout(M3Error, TimeoutError):
    """A wait ran out, or the execution ended because a deadline passed.

    ``execution_id`` names the execution; ``result`` is its terminal result when the execution
    itself ended on a deadline (a round's, or a Codex turn's), ``None`` when only the wait ran
    out (the execution goes on).
    """

    execution_id: str
    result: Optional["ExecutionResult"]

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        execution_id: str = "",
        result: Optional["ExecutionResult"] = None,
    ) -> None:
        super().__init__(message, code=code)
        self.execution_id = execution_id
        self.result = result
