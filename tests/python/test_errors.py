"""Every typed error class of the specification raised from Python, each with the Rust error's
``code``, in a hierarchy a Python caller can ``except``: ``ManagedInputValidationError`` and
``ModelValidationError`` are ``ValueError``s, ``OperationTimeout`` is a ``TimeoutError``. A
refused call changes nothing, and no message carries an answer."""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Dict, cast

import pytest

from kit_support import (
    ADDRESS_KEY,
    WAIT,
    address,
    address_round,
    booking_script,
    new_id,
    shipping_server,
    submit_booking,
    wait_pending,
)
from m3 import (
    AgentSpec,
    ElicitationResponse,
    EngineError,
    FormElicitationRequest,
    ManagedInputConflict,
    ManagedInputError,
    ManagedInputRecoveryError,
    ManagedInputStateError,
    ManagedInputValidationError,
    MCPTestKit,
    ModelValidationError,
    OperationTimeout,
    StorageError,
)
from m3.errors import M3Error
from m3.storage import (
    ManagedInputStatus,
    ManagedInputStore,
    SQLiteExecutionStore,
    SQLiteManagedInputStore,
)
from m3.types import ExecutionResult, ExecutionStatus


class ManualClock:
    """A store clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


def test_the_hierarchy_is_the_one_a_python_caller_expects() -> None:
    for cls in (
        ManagedInputValidationError,
        ManagedInputConflict,
        ManagedInputStateError,
        ManagedInputRecoveryError,
        StorageError,
    ):
        assert issubclass(cls, ManagedInputError) and issubclass(cls, M3Error)
    assert issubclass(ManagedInputValidationError, ValueError)
    assert issubclass(ModelValidationError, ValueError)
    assert issubclass(OperationTimeout, TimeoutError)
    assert issubclass(EngineError, M3Error)
    for cls in (ManagedInputConflict, ManagedInputStateError, ManagedInputRecoveryError):
        assert not issubclass(cls, ValueError)
    assert not issubclass(ModelValidationError, ManagedInputError)


def pending_store(path: Path) -> ManagedInputStore:
    store = SQLiteManagedInputStore(path)
    store.create_round(address_round("r1"), owner_id="worker-1")
    return store


def assert_still_pending(store: ManagedInputStore, round_id: str = "r1") -> None:
    record = store.get_round(round_id)
    assert record is not None
    assert record.status is ManagedInputStatus.PENDING
    assert record.responses is None and record.idempotency_key is None


def test_validation_errors_name_the_rule_and_change_nothing(
    managed_store: ManagedInputStore,
) -> None:
    round_id = new_id("round")
    managed_store.create_round(address_round(round_id), owner_id="worker-1")
    secret_street = "SECRET-STREET-" + "x" * 100
    cases: Dict[str, Any] = {
        "response_keys_mismatch": {"wrong_key": ElicitationResponse(action="decline")},
        "schema_violation": address(street=secret_street, city="Pune"),
        "invalid_action": {ADDRESS_KEY: ElicitationResponse(action=cast(Any, "maybe"))},
        "content_not_allowed": {
            ADDRESS_KEY: ElicitationResponse(action="decline", content={"street": "x"})
        },
        "content_required": {ADDRESS_KEY: ElicitationResponse(action="accept")},
    }
    for code, responses in cases.items():
        with pytest.raises(ManagedInputValidationError) as caught:
            managed_store.submit_responses(round_id, responses, idempotency_key=f"key-{code}")
        error = caught.value
        assert isinstance(error, ValueError)
        assert error.code == code, (code, error)
        assert "SECRET-STREET" not in str(error) and "SECRET-STREET" not in repr(error)
        if code == "schema_violation":
            assert error.request_key == ADDRESS_KEY and error.field == "street"
        assert_still_pending(managed_store, round_id)
    with pytest.raises(ManagedInputValidationError) as empty_round:
        managed_store.submit_responses("", address(), idempotency_key="k")
    assert empty_round.value.code == "empty_round_id"
    with pytest.raises(ManagedInputValidationError) as empty_key:
        managed_store.submit_responses(round_id, address(), idempotency_key="")
    assert empty_key.value.code == "empty_idempotency_key"
    with pytest.raises(ManagedInputValidationError) as not_a_response:
        managed_store.submit_responses(
            round_id, cast(Any, {ADDRESS_KEY: {"action": "accept"}}), idempotency_key="k"
        )
    assert not_a_response.value.code == "invalid_response"
    assert_still_pending(managed_store, round_id)


def test_create_round_validates_what_it_stores(tmp_path: Path) -> None:
    store = SQLiteManagedInputStore(tmp_path / "rounds.sqlite")
    with pytest.raises(ManagedInputValidationError) as out_of_range:
        store.create_round(address_round("r1"), round_index=3, round_limit=3)
    assert out_of_range.value.code == "round_index_out_of_range"
    past = datetime.now(timezone.utc) - timedelta(minutes=1)
    with pytest.raises(ManagedInputValidationError) as deadline:
        store.create_round(address_round("r1", deadline=past))
    assert deadline.value.code == "invalid_deadline"
    schema = {"type": "object", "properties": {"street": {"type": "string", "pattern": "^x"}}}
    unsupported = dataclasses.replace(
        address_round("r1"),
        requests={ADDRESS_KEY: FormElicitationRequest(message="m", requested_schema=schema)},
    )
    with pytest.raises(ManagedInputValidationError) as schema_error:
        store.create_round(unsupported)
    assert schema_error.value.code == "unsupported_schema"
    with pytest.raises(ManagedInputValidationError) as no_requests:
        store.create_round(dataclasses.replace(unsupported, requests={}))
    assert no_requests.value.code == "invalid_round"
    assert store.get_round("r1") is None, "nothing was stored"
    lease = store.create_round(address_round("r1"), owner_id="w").lease
    assert lease is not None
    with pytest.raises(ManagedInputValidationError) as recovery_code:
        store.fail("r1", lease, "recovery_unavailable", "only fail_recovery may")
    assert recovery_code.value.code == "invalid_failure"


def test_conflicts_idempotency_and_leases(tmp_path: Path) -> None:
    store = pending_store(tmp_path / "rounds.sqlite")
    store.submit_responses("r1", address(), idempotency_key="key-1")
    with pytest.raises(ManagedInputConflict) as other_answer:
        store.submit_responses(
            "r1", address(street="1 Main Street", city="Delhi"), idempotency_key="key-1"
        )
    assert other_answer.value.code == "idempotency_conflict"
    assert "Delhi" not in str(other_answer.value)
    record = store.get_round("r1")
    assert record is not None and record.responses == address(), "the first answer stays"
    with pytest.raises(ManagedInputConflict) as held:
        store.claim_round("r1", "worker-2")
    assert held.value.code == "lease_held"
    with pytest.raises(ManagedInputConflict) as live:
        store.fail_recovery("r1", message="is the worker gone?")
    assert live.value.code == "lease_held"
    with pytest.raises(ManagedInputConflict) as exists:
        store.create_round(address_round("r1"))
    assert exists.value.code == "round_exists"


def test_state_errors_name_the_transition(tmp_path: Path) -> None:
    store = pending_store(tmp_path / "rounds.sqlite")
    record = store.get_round("r1")
    assert record is not None and record.lease is not None
    lease = record.lease
    with pytest.raises(ManagedInputStateError) as early:
        store.start_delivery("r1", lease, delivery_idempotency_key="d1")
    assert early.value.code == "invalid_transition"
    with pytest.raises(ManagedInputStateError) as missing:
        store.submit_responses("no-such-round", address(), idempotency_key="k")
    assert missing.value.code == "round_not_found"
    store.submit_responses("r1", address(), idempotency_key="key-1")
    with pytest.raises(ManagedInputStateError) as another_key:
        store.submit_responses("r1", address(), idempotency_key="key-2")
    assert another_key.value.code == "invalid_transition"
    assert_not_value_error(another_key.value)


def assert_not_value_error(error: BaseException) -> None:
    assert not isinstance(error, ValueError)


def test_recovery_errors_refuse_what_cannot_be_safely_resumed(tmp_path: Path) -> None:
    clock = ManualClock()
    store = SQLiteManagedInputStore(tmp_path / "rounds.sqlite", clock=clock)
    store.create_round(address_round("r1"), owner_id="worker-1", lease_ttl=5.0)
    store.create_round(address_round("r2"), owner_id="worker-1", lease_ttl=5.0)
    clock.now += timedelta(seconds=10)
    # The worker's lease expired: its round cannot be answered or taken over.
    with pytest.raises(ManagedInputRecoveryError) as expired:
        store.submit_responses("r2", address(), idempotency_key="k")
    assert expired.value.code == "recovery_unavailable"
    with pytest.raises(ManagedInputRecoveryError) as reclaim:
        store.claim_round("r2", "worker-2")
    assert reclaim.value.code == "reclaim_unsafe"
    store.fail_recovery("r1", message="the worker is gone")
    with pytest.raises(ManagedInputRecoveryError) as after:
        store.submit_responses("r1", address(), idempotency_key="late")
    assert after.value.code == "recovery_unavailable"


def test_storage_errors_for_a_closed_store_and_a_foreign_file(tmp_path: Path) -> None:
    executions = SQLiteExecutionStore(tmp_path / "executions.sqlite")
    executions.managed_input_store().create_round(address_round("r1"))
    executions.close()
    with pytest.raises(StorageError) as closed:
        executions.managed_input_store()
    assert closed.value.code == "storage_failure"
    foreign = tmp_path / "foreign.sqlite"
    foreign.write_bytes(b"this is not a database, and not m3's" * 100)
    with pytest.raises(StorageError) as incompatible:
        SQLiteManagedInputStore(foreign).get_round("r1")
    assert isinstance(incompatible.value.code, str)
    assert foreign.read_bytes().startswith(b"this is not a database"), "left as it is"
    # A path that cannot be a database file is an invalid argument, not a storage failure.
    with pytest.raises(ManagedInputValidationError):
        SQLiteManagedInputStore(tmp_path)


def test_model_validation_errors_at_submission(tmp_path: Path) -> None:
    with SQLiteExecutionStore(tmp_path / "executions.sqlite") as store, MCPTestKit(
        store=store, env={}
    ) as kit:
        agent = kit.agents([{"harness": "scripted", "script": booking_script()}])[0]
        with pytest.raises(ModelValidationError) as bogus:
            agent.submit(
                "Book.",
                server=shipping_server(),
                tools=["shipping:book_shipment"],
                human_input=cast(Any, "bogus"),
            )
        assert isinstance(bogus.value, ValueError) and bogus.value.code is None
        planned = kit.agents(
            [
                AgentSpec(
                    harness="scripted",
                    script=booking_script(),
                    elicitation_plan=[
                        {
                            "match": {"request_key": ADDRESS_KEY},
                            "response": ElicitationResponse(action="decline"),
                        }
                    ],
                )
            ]
        )[0]
        with pytest.raises(ModelValidationError):
            planned.submit(
                "Book.",
                server=shipping_server(),
                tools=["shipping:book_shipment"],
                human_input="managed",
            )
        with pytest.raises(ModelValidationError):
            kit.agents([{"harness": "scripted", "models": ["m"], "script": booking_script()}])
        with pytest.raises(ModelValidationError):
            kit.agents([{"harness": "codex", "models": []}])
        with pytest.raises(ModelValidationError):
            kit.agents([{"harness": "scripted", "unknown_key": 1}])
        # The claude-code harness's settings reach the kit; a program that is not Claude Code
        # is refused at submission, naming it.
        not_claude = kit.agents(
            [
                AgentSpec(
                    harness="claude-code",
                    models=["m"],
                    claude_code={"binary": "/bin/true", "credentials": "none"},
                )
            ]
        )[0]
        with pytest.raises(ModelValidationError) as refused:
            not_claude.submit(
                "Book.",
                server=shipping_server(),
                tools=["shipping:book_shipment"],
                human_input="managed",
            )
        assert "is not the Claude Code CLI" in str(refused.value)
        with pytest.raises(ModelValidationError):
            kit.agents([{"harness": "claude-code", "models": ["m"], "codex": {}}])
        with pytest.raises(ModelValidationError):
            kit.submit(AgentSpec(harness="scripted", script=booking_script()))
        with pytest.raises(ModelValidationError):
            agent.submit("Book.", server=shipping_server(), tools=cast(Any, "shipping:book"))
    # Managed input needs a persistent store.
    with MCPTestKit(store=None, env={}) as memory:
        agent = memory.agents([{"harness": "scripted", "script": booking_script()}])[0]
        with pytest.raises(ModelValidationError):
            agent.submit(
                "Book.",
                server=shipping_server(),
                tools=["shipping:book_shipment"],
                human_input="managed",
            )


def test_operation_timeout_from_a_wait_and_from_a_round_deadline(tmp_path: Path) -> None:
    with SQLiteExecutionStore(tmp_path / "executions.sqlite") as store, MCPTestKit(
        store=store, env={}
    ) as kit:
        handle = submit_booking(kit)
        pending = wait_pending(handle)
        started = time.monotonic()
        with pytest.raises(OperationTimeout) as waited:
            handle.result(timeout=0.1)
        assert time.monotonic() - started < 5
        error = waited.value
        assert isinstance(error, TimeoutError)
        assert error.execution_id == handle.execution_id
        assert error.result is None, "only the wait ran out"
        assert handle.snapshot().lifecycle is ExecutionStatus.WAITING_FOR_INPUT
        handle.respond_elicitation(
            pending.round_id, address(), idempotency_key=f"address-{pending.round_id}"
        )
        assert handle.result(timeout=WAIT).succeeded

        late = submit_booking(kit, round_deadline=1.0)
        round_id = wait_pending(late).round_id
        with pytest.raises(OperationTimeout) as deadline:
            late.result(timeout=WAIT)
        result = deadline.value.result
        assert isinstance(result, ExecutionResult), "the execution ended on the deadline"
        assert result.outcome.kind == "failed"
        record = store.managed_input_store().get_round(round_id)
        assert record is not None and record.status is ManagedInputStatus.FAILED
        assert record.failure_code == "deadline_exceeded"


def test_handle_errors_ambiguous_rounds_unknown_executions_and_other_rounds(
    tmp_path: Path,
) -> None:
    with SQLiteExecutionStore(tmp_path / "executions.sqlite") as store, MCPTestKit(
        store=store, env={}
    ) as kit:
        handle = submit_booking(kit)
        wait_pending(handle)
        managed = store.managed_input_store()
        managed.create_round(address_round("extra-round", handle.execution_id))
        with pytest.raises(ManagedInputStateError) as ambiguous:
            handle.pending_elicitation()
        assert ambiguous.value.code == "ambiguous_pending_round"
        managed.create_round(address_round("other-round", "other-execution"))
        with pytest.raises(ManagedInputStateError) as other:
            handle.respond_elicitation("other-round", address(), idempotency_key="k")
        assert other.value.code == "round_not_found"
        with pytest.raises(ManagedInputValidationError) as empty:
            handle.respond_elicitation("", address(), idempotency_key="k")
        assert empty.value.code == "empty_round_id"
        with pytest.raises(ManagedInputValidationError) as no_key:
            handle.respond_elicitation("extra-round", address(), idempotency_key="")
        assert no_key.value.code == "empty_idempotency_key"
        with pytest.raises(ManagedInputStateError) as unknown:
            kit.execution("exec-that-does-not-exist")
        assert unknown.value.code == "execution_not_found"
        handle.cancel()
        assert handle.result(timeout=WAIT).outcome.kind == "cancelled"
