"""The GIL is released while m3 waits: other Python threads keep running while ``result()`` waits
in the main thread, and one of them can even answer the round the wait is for."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import List

import pytest

from kit_support import WAIT, address, submit_booking, wait_pending
from m3 import MCPTestKit, OperationTimeout
from m3.storage import SQLiteExecutionStore


class Counter(threading.Thread):
    """A thread that counts in pure Python (it needs the GIL for every step) until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.count = 0
        self.running = True

    def run(self) -> None:
        while self.running:
            self.count += 1


def test_a_python_thread_makes_progress_while_result_waits(tmp_path: Path) -> None:
    with SQLiteExecutionStore(tmp_path / "executions.sqlite") as store, MCPTestKit(
        store=store, env={}
    ) as kit:
        handle = submit_booking(kit)
        wait_pending(handle)
        counter = Counter()
        counter.start()
        try:
            time.sleep(0.1)
            before = counter.count
            started = time.monotonic()
            with pytest.raises(OperationTimeout):
                handle.result(timeout=1.0)  # the main thread waits a whole second in m3
            waited = time.monotonic() - started
            during = counter.count - before
        finally:
            counter.running = False
            counter.join(WAIT)
        assert waited >= 0.9
        # Held, the GIL would let the counter run only in the few instants the main thread
        # spends in Python: a handful of switch intervals. Released, it counts all second long.
        assert during > 100_000, during
        handle.cancel()


def test_another_thread_answers_the_round_result_waits_for(tmp_path: Path) -> None:
    with SQLiteExecutionStore(tmp_path / "executions.sqlite") as store, MCPTestKit(
        store=store, env={}
    ) as kit:
        handle = submit_booking(kit)
        errors: List[BaseException] = []

        def answer() -> None:
            try:
                pending = wait_pending(handle)
                time.sleep(0.2)  # the main thread is in result() by now
                handle.respond_elicitation(
                    pending.round_id, address(), idempotency_key=pending.round_id
                )
            except BaseException as error:  # reported by the main thread
                errors.append(error)

        answerer = threading.Thread(target=answer)
        answerer.start()
        try:
            result = handle.result(timeout=WAIT)
        finally:
            answerer.join(WAIT)
        assert not errors, errors
        assert result.succeeded, str(result.outcome)
