"""A Python process killed (SIGKILL) while its round waits: another process recovers it (a new
kit runs recovery when it first touches the store, and ``kit.recover()`` on demand), the round
fails with ``recovery_unavailable``, the execution finishes failed, and the late answer is
refused with ``ManagedInputRecoveryError``. A live worker's round is left alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Tuple

import pytest

from kit_support import WAIT, address, submit_booking, wait_pending
from m3 import MCPTestKit, ManagedInputRecoveryError
from m3.storage import ManagedInputStatus, SQLiteExecutionStore
from m3.types import ExecutionStatus

#: The child: a kit whose leases last 0.8 s, one execution waiting for its round, its ids
#: printed, then a wait in result() until it is killed.
CHILD = """
import json, sys
from kit_support import submit_booking, wait_pending
from m3 import MCPTestKit
from m3.storage import SQLiteExecutionStore

store = SQLiteExecutionStore(sys.argv[1])
with MCPTestKit(store=store, env={}, lease_ttl=0.8, lease_renew=0.2) as kit:
    handle = submit_booking(kit)
    pending = wait_pending(handle)
    print(json.dumps({"round_id": pending.round_id, "execution_id": handle.execution_id}))
    sys.stdout.flush()
    handle.result()
"""


def child_env() -> Dict[str, str]:
    """This process's environment, with the tests' folder importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(Path(__file__).parent), env.get("PYTHONPATH", "")] if p
    )
    return env


def start_waiting_child(db: Path) -> Tuple["subprocess.Popen[str]", str, str]:
    """A child process whose execution waits for its round; its round and execution ids."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"the child ended before its round was pending: {child.wait()}"
    ids = json.loads(line)
    return child, ids["round_id"], ids["execution_id"]


def test_a_killed_process_s_round_is_recovered_by_another_and_the_late_answer_refused(
    tmp_path: Path,
) -> None:
    db = tmp_path / "executions.sqlite"
    child, round_id, execution_id = start_waiting_child(db)
    try:
        with SQLiteExecutionStore(db) as store, MCPTestKit(store=store, env={}) as live_kit:
            # A live worker in this process, with a round of its own.
            live = submit_booking(live_kit)
            live_round = wait_pending(live)
            # While the child's lease is live, recovery leaves its round alone.
            assert live_kit.recover() == (0, 0)
            managed = store.managed_input_store()
            record = managed.get_round(round_id)
            assert record is not None and record.status is ManagedInputStatus.PENDING

            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=WAIT) == -signal.SIGKILL
            time.sleep(1.5)  # past the child's 0.8 s lease

            # Another process's kit: recovery runs when it first touches the store.
            with SQLiteExecutionStore(db) as other_store, MCPTestKit(
                store=other_store, env={}
            ) as recovering:
                attached = recovering.execution(execution_id)
                result = attached.result(timeout=WAIT)
                assert result.outcome.kind == "failed", str(result.outcome)
                assert result.outcome.failure is not None
                assert "recovery_unavailable" in str(result.outcome)
                assert attached.snapshot().lifecycle is ExecutionStatus.FINISHED
                failed = other_store.managed_input_store().get_round(round_id)
                assert failed is not None and failed.status is ManagedInputStatus.FAILED
                assert failed.failure_code == "recovery_unavailable"
                # The late answer is refused, through the handle and through the store.
                with pytest.raises(ManagedInputRecoveryError) as late:
                    attached.respond_elicitation(round_id, address(), idempotency_key="late")
                assert late.value.code == "recovery_unavailable"
                with pytest.raises(ManagedInputRecoveryError):
                    managed.submit_responses(round_id, address(), idempotency_key="late-2")
                # Nothing is left to recover.
                assert recovering.recover() == (0, 0)

            # The live worker's round is untouched and still answerable.
            still = managed.get_round(live_round.round_id)
            assert still is not None and still.status is ManagedInputStatus.PENDING
            live.respond_elicitation(live_round.round_id, address(), idempotency_key="k")
            assert live.result(timeout=WAIT).succeeded
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_kit_recover_counts_what_a_killed_process_left(tmp_path: Path) -> None:
    db = tmp_path / "executions.sqlite"
    child, round_id, execution_id = start_waiting_child(db)
    try:
        child.kill()
        child.wait(timeout=WAIT)
        time.sleep(1.5)
        with SQLiteExecutionStore(db) as store, MCPTestKit(store=store, env={}) as kit:
            assert kit.recover() == (1, 1)
            record = store.managed_input_store().get_round(round_id)
            assert record is not None and record.failure_code == "recovery_unavailable"
            assert kit.execution(execution_id).snapshot().lifecycle is ExecutionStatus.FINISHED
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
