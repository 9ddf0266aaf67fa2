"""The blocking kit, ``MCPTestKit``, with the scripted harness against the repository's shipping
server: the specification's flow with the dict form and with ``AgentSpec`` objects, several
rounds, two keys, decline, cancel, fail mode and plans, an in-memory kit, re-attaching to an
execution by id, and handles used from several threads."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Dict, List

from kit_support import (
    ADDRESS,
    ADDRESS_KEY,
    WAIT,
    address,
    booking_script,
    only_text,
    scripted,
    shipping_server,
    submit_booking,
    wait_pending,
)
from m3 import (
    AgentSpec,
    ElicitationResponse,
    ExecutionHandle,
    FormElicitationRequest,
    MCPTestKit,
    ManagedInputValidationError,
)
from m3.storage import ManagedInputStatus, ManagedInputStore, SQLiteExecutionStore
from m3.types import ExecutionState, ExecutionStatus, PendingElicitationRound


def wait_status(
    store: ManagedInputStore, round_id: str, *leaving: ManagedInputStatus
) -> ManagedInputStatus:
    """The round's status once it is none of ``leaving``."""
    deadline = time.monotonic() + WAIT
    while True:
        record = store.get_round(round_id)
        assert record is not None
        if record.status not in leaving:
            return record.status
        assert time.monotonic() < deadline, f"{round_id} stayed {record.status}"
        time.sleep(0.02)


def test_the_specification_s_flow_with_the_dict_form(tmp_path: Path) -> None:
    store = SQLiteExecutionStore(tmp_path / "executions.sqlite")
    try:
        with MCPTestKit(store=store, env={}) as kit:
            assert kit.owner_id
            agent = kit.agents([scripted()])[0]
            assert agent.model is None
            handle = agent.submit(
                "Ask for the delivery address, then book the shipment.",
                server=shipping_server(),
                tools=["shipping:book_shipment"],
                human_input="managed",
            )
            pending = wait_pending(handle)
            assert isinstance(pending, PendingElicitationRound)
            assert pending.execution_id == handle.execution_id
            assert pending.server == "shipping"
            assert pending.operation_kind == "tool"
            assert pending.operation_name == "book_shipment"
            assert pending.logical_operation_id
            assert list(pending.requests) == [ADDRESS_KEY]
            request = pending.requests[ADDRESS_KEY]
            assert isinstance(request, FormElicitationRequest)
            assert request.requested_schema["required"] == ["street", "city"]
            assert pending.created_at.utcoffset() == timedelta(0)
            state = handle.snapshot()
            assert isinstance(state, ExecutionState)
            assert state.lifecycle is ExecutionStatus.WAITING_FOR_INPUT
            assert state.outcome is None and not state.cancel_requested
            handle.respond_elicitation(
                pending.round_id, address(), idempotency_key=f"address-{pending.round_id}"
            )
            result = handle.result(timeout=WAIT)
            assert result.succeeded, str(result.outcome)
            assert result.execution_id == handle.execution_id
            text = only_text(result)
            assert "1 Main Street" in text and "Pune" in text, text
            assert result.outcome.tool_results[0].tool == "shipping:book_shipment"
            finished = handle.snapshot()
            assert finished.lifecycle is ExecutionStatus.FINISHED
            assert finished.outcome is not None and finished.outcome.kind == "succeeded"
            assert handle.pending_elicitation() is None
            # A repeat with the same key and answers is safe, and delivers nothing again.
            handle.respond_elicitation(
                pending.round_id, address(), idempotency_key=f"address-{pending.round_id}"
            )
            record = store.managed_input_store().get_round(pending.round_id)
            assert record is not None
            assert record.status is ManagedInputStatus.RESOLVED
            assert record.delivery_attempts == 1
            diagnostics = handle.diagnostics()
            assert diagnostics.events_dropped == 0 and diagnostics.stderr_tail is None
    finally:
        store.close()


def test_agent_spec_objects_kit_submit_and_a_declined_round(tmp_path: Path) -> None:
    with SQLiteExecutionStore(tmp_path / "executions.sqlite") as store, MCPTestKit(
        store=store, env={}
    ) as kit:
        spec = AgentSpec(
            harness="scripted",
            script=booking_script(),
            prompt="Ask for the delivery address, then book the shipment.",
            server=shipping_server(),
            tools=["shipping:book_shipment"],
        )
        handle = kit.submit(spec, human_input="managed")
        pending = wait_pending(handle)
        handle.respond_elicitation(
            pending.round_id,
            {ADDRESS_KEY: ElicitationResponse(action="decline")},
            idempotency_key="decline-1",
        )
        result = handle.result(timeout=WAIT)
        assert result.succeeded, str(result.outcome)
        assert "not booked" in only_text(result)
        # An AgentSpec in kit.agents() makes agents; its submission fields are for kit.submit.
        agents = kit.agents([AgentSpec(harness="scripted", script=booking_script())])
        assert len(agents) == 1
        record = store.managed_input_store().get_round(pending.round_id)
        assert record is not None and record.status is ManagedInputStatus.RESOLVED


def test_several_rounds_of_one_operation_and_a_round_with_two_keys(tmp_path: Path) -> None:
    with SQLiteExecutionStore(tmp_path / "executions.sqlite") as store, MCPTestKit(
        store=store, env={}
    ) as kit:
        managed = store.managed_input_store()
        handle = submit_booking(
            kit, shipping_server("--era", "modern", "--ask-rounds", "3", era="modern")
        )
        rounds: List[str] = []
        for _ in range(3):
            pending = wait_pending(handle)
            assert pending.round_id not in rounds
            assert pending.request_state is not None, "MRTR rounds keep requestState"
            handle.respond_elicitation(
                pending.round_id, address(), idempotency_key=pending.round_id
            )
            wait_status(managed, pending.round_id, ManagedInputStatus.RESPONSE_VALIDATED)
            rounds.append(pending.round_id)
        assert handle.result(timeout=WAIT).succeeded
        records = [managed.get_round(r) for r in rounds]
        for index, record in enumerate(records):
            assert record is not None
            assert record.status is ManagedInputStatus.RESOLVED
            assert record.round_index == index and record.round_limit == 10
            first = records[0]
            assert first is not None
            assert record.pending.logical_operation_id == first.pending.logical_operation_id

        two = submit_booking(kit, shipping_server("--era", "modern", "--two-keys", era="modern"))
        pending = wait_pending(two)
        assert sorted(pending.requests) == ["contact_email", ADDRESS_KEY]
        try:
            two.respond_elicitation(pending.round_id, address(), idempotency_key="k")
            raise AssertionError("one key of two was accepted")
        except ManagedInputValidationError as error:
            assert error.code == "response_keys_mismatch"
        both: Dict[str, ElicitationResponse] = {
            **address(),
            "contact_email": ElicitationResponse(
                action="accept", content={"email": "asha@example.com"}
            ),
        }
        two.respond_elicitation(pending.round_id, both, idempotency_key="k")
        result = two.result(timeout=WAIT)
        assert result.succeeded, str(result.outcome)
        assert result.outcome.tool_results[0].result["structuredContent"]["email"] == (
            "asha@example.com"
        )


def test_cancel_fails_the_open_round_and_finishes_cancelled(tmp_path: Path) -> None:
    with SQLiteExecutionStore(tmp_path / "executions.sqlite") as store, MCPTestKit(
        store=store, env={}
    ) as kit:
        handle = submit_booking(kit)
        pending = wait_pending(handle)
        handle.cancel()
        result = handle.result(timeout=WAIT)
        assert result.outcome.kind == "cancelled"
        assert str(result.outcome) == "cancelled"
        record = store.managed_input_store().get_round(pending.round_id)
        assert record is not None and record.status is ManagedInputStatus.FAILED
        assert record.failure_code == "cancelled"
        assert handle.snapshot().lifecycle is ExecutionStatus.FINISHED


def test_fail_mode_plans_and_an_in_memory_kit() -> None:
    with MCPTestKit(store=None, env={}) as kit:
        unanswered = submit_booking(kit, human_input="fail")
        result = unanswered.result(timeout=WAIT)
        assert result.outcome.kind == "failed"
        assert result.outcome.failure is not None
        assert result.outcome.failure.code == "elicitation_unhandled"
        assert "elicitation_unhandled" in str(result.outcome)
        planned = kit.agents(
            [
                {
                    "harness": "scripted",
                    "script": booking_script(),
                    "elicitation_plan": [
                        {
                            "match": {"request_key": ADDRESS_KEY},
                            "response": ElicitationResponse(
                                action="accept", content={"street": "2 Plan Road", "city": "Pune"}
                            ),
                        }
                    ],
                }
            ]
        )[0]
        handle = planned.submit(
            "Book a shipment.", server=shipping_server(), tools=["shipping:book_shipment"]
        )
        result = handle.result(timeout=WAIT)
        assert result.succeeded, str(result.outcome)
        assert "2 Plan Road" in only_text(result)


def test_an_execution_is_re_attached_by_id_from_another_kit(tmp_path: Path) -> None:
    path = tmp_path / "executions.sqlite"
    with SQLiteExecutionStore(path) as store, MCPTestKit(store=store, env={}) as kit:
        handle = submit_booking(kit)
        pending = wait_pending(handle)
        assert kit.execution(handle.execution_id).execution_id == handle.execution_id
        with SQLiteExecutionStore(path) as other_store, MCPTestKit(
            store=other_store, env={}
        ) as other:
            attached = other.execution(handle.execution_id)
            assert isinstance(attached, ExecutionHandle)
            seen = attached.pending_elicitation()
            assert seen is not None and seen.round_id == pending.round_id
            assert attached.snapshot().lifecycle is ExecutionStatus.WAITING_FOR_INPUT
            attached.respond_elicitation(
                pending.round_id, address(**ADDRESS), idempotency_key="from-the-other-kit"
            )
            # Its result waits through the store: the worker runs in the first kit.
            assert attached.result(timeout=WAIT).succeeded
        assert handle.result(timeout=WAIT).succeeded


def test_a_handle_is_usable_from_several_threads(tmp_path: Path) -> None:
    with SQLiteExecutionStore(tmp_path / "executions.sqlite") as store, MCPTestKit(
        store=store, env={}
    ) as kit:
        handle = submit_booking(kit)
        pending = wait_pending(handle)
        errors: List[BaseException] = []
        seen: List[str] = []
        lock = threading.Lock()

        def reader() -> None:
            try:
                for _ in range(20):
                    state = handle.snapshot()
                    round_ = handle.pending_elicitation()
                    with lock:
                        seen.append(state.lifecycle.value)
                        if round_ is not None:
                            assert round_.round_id == pending.round_id
            except BaseException as error:  # reported by the main thread
                errors.append(error)

        def answerer() -> None:
            try:
                handle.respond_elicitation(pending.round_id, address(), idempotency_key="k1")
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=reader) for _ in range(4)]
        threads += [threading.Thread(target=answerer) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        assert not errors, errors
        assert len(seen) == 80
        assert handle.result(timeout=WAIT).succeeded
