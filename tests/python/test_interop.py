"""Python and the ``m3`` command on one database: a round created from Python is answered by
``m3 respond``, and a round created by ``m3 run`` is answered from Python (a handle re-attached
by execution id)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List

from kit_support import (
    ADDRESS,
    ADDRESS_KEY,
    WAIT,
    address,
    booking_script,
    m3_command,
    only_text,
    program,
    submit_booking,
    wait_pending,
)
from m3 import MCPTestKit
from m3.storage import ManagedInputStatus, SQLiteExecutionStore
from m3.types import ExecutionStatus


def m3(*args: str, timeout: float = WAIT) -> "subprocess.CompletedProcess[str]":
    """Runs the ``m3`` command to its end, its output kept."""
    return subprocess.run(
        [m3_command(), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_round_created_from_python_is_answered_by_m3_respond(tmp_path: Path) -> None:
    db = tmp_path / "executions.sqlite"
    with SQLiteExecutionStore(db) as store, MCPTestKit(store=store, env={}) as kit:
        handle = submit_booking(kit)
        pending = wait_pending(handle)
        listed = m3("pending", "--db", str(db), "--json")
        assert listed.returncode == 0, listed.stderr
        assert pending.round_id in listed.stdout
        answered = m3(
            "respond",
            pending.round_id,
            "--db",
            str(db),
            "--idempotency-key",
            "from-the-command",
            "--accept",
            f"{ADDRESS_KEY}={json.dumps(ADDRESS)}",
            "--wait",
            str(int(WAIT)),
        )
        assert answered.returncode == 0, (answered.stdout, answered.stderr)
        # The worker in this process delivered it once.
        result = handle.result(timeout=WAIT)
        assert result.succeeded, str(result.outcome)
        assert "1 Main Street" in only_text(result)
        record = store.managed_input_store().get_round(pending.round_id)
        assert record is not None and record.status is ManagedInputStatus.RESOLVED
        assert record.idempotency_key == "from-the-command"
        assert record.delivery_attempts == 1
        # The command's typed error for a repeat with other answers, as Python would get it.
        conflict = m3(
            "respond",
            pending.round_id,
            "--db",
            str(db),
            "--json",
            "--idempotency-key",
            "from-the-command",
            "--accept",
            f"{ADDRESS_KEY}={json.dumps({'street': '2 Other Road', 'city': 'Pune'})}",
        )
        assert conflict.returncode != 0
        error: Dict[str, Any] = json.loads(conflict.stderr.strip().splitlines()[-1])["error"]
        assert error["type"] == "ManagedInputConflict"
        assert error["code"] == "idempotency_conflict"


def test_a_round_created_by_m3_run_is_answered_from_python(tmp_path: Path) -> None:
    db = tmp_path / "executions.sqlite"
    script = tmp_path / "script.json"
    script.write_text(json.dumps(booking_script()))
    run = subprocess.Popen(
        [
            m3_command(),
            "run",
            "--db",
            str(db),
            "--no-prompt",
            "--json",
            "--script",
            str(script),
            "--human-input",
            "managed",
            "--server-name",
            "shipping",
            "--server-command",
            program("M3_TEST_SHIPPING_SERVER"),
            "--tool",
            "shipping:book_shipment",
            "Ask for the delivery address, then book the shipment.",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None
        events: List[Dict[str, Any]] = []
        deadline = time.monotonic() + WAIT
        while not any(e.get("event") == "pending" for e in events):
            assert time.monotonic() < deadline, "m3 run printed no pending round"
            line = run.stdout.readline()
            assert line, f"m3 run ended early: {run.wait()} {run.stderr.read() if run.stderr else ''}"
            events.append(json.loads(line))
        round_json = next(e for e in events if e.get("event") == "pending")["round"]
        round_id, execution_id = round_json["round_id"], round_json["execution_id"]

        with SQLiteExecutionStore(db) as store, MCPTestKit(store=store, env={}) as kit:
            handle = kit.execution(execution_id)
            assert handle.snapshot().lifecycle is ExecutionStatus.WAITING_FOR_INPUT
            pending = handle.pending_elicitation()
            assert pending is not None and pending.round_id == round_id
            assert list(pending.requests) == [ADDRESS_KEY]
            handle.respond_elicitation(
                round_id, address(), idempotency_key=f"address-{round_id}"
            )
            # m3 run's worker delivers it; this handle's result waits through the store.
            result = handle.result(timeout=WAIT)
            assert result.succeeded, str(result.outcome)
            assert "Pune" in only_text(result)
            record = store.managed_input_store().get_round(round_id)
            assert record is not None and record.status is ManagedInputStatus.RESOLVED
        out, err = run.communicate(timeout=WAIT)
        assert run.returncode == 0, (out, err)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
