"""Ctrl-C during ``result()``: a child Python process blocked in ``result()`` gets SIGINT, the wait
raises ``KeyboardInterrupt`` at once, the ``with`` block's exit cancels the execution, and the
process exits promptly. Afterwards its round is not left answerable: it failed ``cancelled``, as
the parent sees through a store on the same file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from kit_support import WAIT, address
from m3 import MCPTestKit, ManagedInputStateError
from m3.storage import ManagedInputStatus, SQLiteExecutionStore
from m3.types import ExecutionStatus

CHILD = """
import json, signal, sys, time
# As on a terminal: Ctrl-C raises KeyboardInterrupt (a process started in the background by a
# shell without job control would inherit SIGINT ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)
from kit_support import submit_booking, wait_pending
from m3 import MCPTestKit
from m3.storage import SQLiteExecutionStore

def say(**what):
    print(json.dumps(what))
    sys.stdout.flush()

store = SQLiteExecutionStore(sys.argv[1])
try:
    with MCPTestKit(store=store, env={}) as kit:
        handle = submit_booking(kit)
        pending = wait_pending(handle)
        say(round_id=pending.round_id, execution_id=handle.execution_id)
        try:
            handle.result()
        except KeyboardInterrupt:
            say(interrupted_at=time.monotonic())
            raise
        say(returned=True)
except KeyboardInterrupt:
    say(exited_at=time.monotonic())
    sys.exit(130)
finally:
    store.close()
"""


def test_ctrl_c_interrupts_result_promptly_and_leaves_no_answerable_round(
    tmp_path: Path,
) -> None:
    db = tmp_path / "executions.sqlite"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).parent)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first, f"the child ended early: {child.communicate()}"
        ids = json.loads(first)
        time.sleep(0.5)  # the child is in result() by now
        sent_at = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
        ended = time.monotonic() - sent_at
        said: List[Dict[str, Any]] = [json.loads(line) for line in out.splitlines()]
        assert child.returncode == 130, (child.returncode, out, err)
        assert not any("returned" in s for s in said), said
        interrupted = next(s["interrupted_at"] for s in said if "interrupted_at" in s)
        assert interrupted - sent_at < 3.0, "the wait was interrupted promptly"
        assert ended < 12.0, f"the process took {ended:.1f} s to exit"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    with SQLiteExecutionStore(db) as store, MCPTestKit(store=store, env={}) as kit:
        record = store.managed_input_store().get_round(ids["round_id"])
        assert record is not None
        assert record.status is ManagedInputStatus.FAILED, record.status
        assert record.failure_code == "cancelled"
        handle = kit.execution(ids["execution_id"])
        state = handle.snapshot()
        assert state.lifecycle is ExecutionStatus.FINISHED
        assert state.outcome is not None and state.outcome.kind == "cancelled"
        with pytest.raises(ManagedInputStateError) as late:
            handle.respond_elicitation(ids["round_id"], address(), idempotency_key="after")
        assert late.value.code == "round_terminal"
