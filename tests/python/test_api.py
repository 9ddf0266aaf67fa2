"""The specification's names, exactly, in the modules the specification uses; a docstring on every
public name; ``help(m3.MCPTestKit)`` reads like the specification; the package is typed."""

from __future__ import annotations

import inspect
import io
import pydoc
import typing
from pathlib import Path
from types import ModuleType
from typing import List

import m3
import m3.errors
import m3.pytest_plugin
import m3.storage
import m3.types

SPEC_NAMES = {
    m3: [
        "MCPTestKit",
        "AsyncMCPTestKit",
        "ElicitationResponse",
        "StdioServer",
        "HttpServer",
        "AgentSpec",
        "ManagedInputValidationError",
        "ManagedInputConflict",
        "ManagedInputStateError",
        "ManagedInputRecoveryError",
        "ModelValidationError",
        "OperationTimeout",
        "StorageError",
    ],
    m3.storage: [
        "SQLiteExecutionStore",
        "SQLiteManagedInputStore",
        "ManagedInputStore",
        "ManagedInputLease",
        "ManagedInputRecord",
        "ManagedInputStatus",
        "PostgresExecutionStore",
        "PostgresManagedInputStore",
    ],
    m3.types: [
        "ExecutionStatus",
        "ExecutionState",
        "ExecutionResult",
        "PendingElicitationRound",
        "FormElicitationRequest",
        "UrlElicitationRequest",
        "HumanInput",
    ],
}

STORE_METHODS = [
    "create_round",
    "get_round",
    "list_rounds",
    "claim_round",
    "renew",
    "submit_responses",
    "start_delivery",
    "mark_delivered",
    "resolve",
    "fail",
    "fail_recovery",
    "redacted_responses",
]

HANDLE_METHODS = ["pending_elicitation", "respond_elicitation", "snapshot", "result", "cancel"]


def test_the_specification_s_names_are_where_it_imports_them() -> None:
    for module, names in SPEC_NAMES.items():
        for name in names:
            assert hasattr(module, name), f"{module.__name__}.{name}"
            assert name in getattr(module, "__all__"), f"{module.__name__}.__all__ lacks {name}"
    assert typing.get_args(m3.types.HumanInput) == ("fail", "managed")
    assert m3.types.ExecutionStatus.FINISHED.value == "finished"
    for cls in (m3.storage.SQLiteManagedInputStore, m3.storage.PostgresManagedInputStore):
        for method in STORE_METHODS:
            assert callable(getattr(cls, method, None)), f"{cls.__name__}.{method}"
    for method in STORE_METHODS:
        assert hasattr(m3.storage.ManagedInputStore, method)
    for handle in (m3.ExecutionHandle, m3.AsyncExecutionHandle):
        for method in HANDLE_METHODS:
            assert callable(getattr(handle, method, None)), f"{handle.__name__}.{method}"
    for method in HANDLE_METHODS:
        assert inspect.iscoroutinefunction(getattr(m3.AsyncExecutionHandle, method)), method
    respond = inspect.signature(m3.ExecutionHandle.respond_elicitation)
    assert respond.parameters["idempotency_key"].kind is inspect.Parameter.KEYWORD_ONLY
    result = inspect.signature(m3.ExecutionHandle.result)
    assert result.parameters["timeout"].default is None
    submit = inspect.signature(m3.Agent.submit)
    assert submit.parameters["human_input"].default == "fail"
    for keyword in ("server", "tools", "human_input"):
        assert submit.parameters[keyword].kind is inspect.Parameter.KEYWORD_ONLY
    store = inspect.signature(m3.storage.SQLiteManagedInputStore.__init__)
    assert store.parameters["busy_timeout_ms"].default == 5000
    assert store.parameters["busy_timeout_ms"].kind is inspect.Parameter.KEYWORD_ONLY
    assert store.parameters["clock"].kind is inspect.Parameter.KEYWORD_ONLY
    kit_submit = inspect.signature(m3.MCPTestKit.submit)
    assert kit_submit.parameters["human_input"].default == "fail"
    assert not hasattr(m3.storage.SQLiteManagedInputStore, "close"), (
        "the managed-input store has no close(): one connection per operation"
    )


def public_names(module: ModuleType) -> List[str]:
    return list(getattr(module, "__all__"))


def test_every_public_name_has_a_docstring() -> None:
    missing = []
    for module in (m3, m3.storage, m3.types, m3.errors, m3.pytest_plugin):
        assert inspect.getdoc(module), module.__name__
        for name in public_names(module):
            value = getattr(module, name)
            if not (inspect.isclass(value) or inspect.isfunction(value)):
                continue
            if not inspect.getdoc(value):
                missing.append(f"{module.__name__}.{name}")
            if inspect.isclass(value) and value.__module__.startswith("m3"):
                for attr, member in vars(value).items():
                    if attr.startswith("_") or not (
                        inspect.isfunction(member) or isinstance(member, property)
                    ):
                        continue
                    if not inspect.getdoc(member):
                        missing.append(f"{module.__name__}.{name}.{attr}")
    assert not missing, missing


def help_text(value: object) -> str:
    """What ``help(value)`` prints."""
    out = io.StringIO()
    pydoc.Helper(output=out).help(value)
    return out.getvalue()


def test_help_of_the_kit_reads_like_the_specification() -> None:
    text = help_text(m3.MCPTestKit)
    for words in ("MCPTestKit", "store", "env", "agents", "submit", "execution", "close"):
        assert words in text, words
    handle = help_text(m3.ExecutionHandle)
    for words in ("pending_elicitation", "respond_elicitation", "idempotency_key", "result"):
        assert words in handle, words


def test_the_package_is_typed() -> None:
    package = Path(m3.__file__).parent
    assert (package / "py.typed").is_file()
    assert (package / "_native.pyi").is_file()
