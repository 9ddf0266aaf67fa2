"""The asyncio kit, ``AsyncMCPTestKit``: several executions at once under ``asyncio.gather``, every
handle method awaited, and the event loop never blocked (a ticker keeps ticking while the
results are awaited)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from kit_support import (
    WAIT,
    address,
    booking_script,
    only_text,
    scripted,
    shipping_server,
    wait_pending_async,
)
from m3 import AgentSpec, AsyncExecutionHandle, AsyncMCPTestKit, OperationTimeout
from m3.storage import ManagedInputStatus, SQLiteExecutionStore
from m3.types import ExecutionStatus

#: How many executions run at once.
EXECUTIONS = 4


class Ticker:
    """A coroutine that ticks every 10 ms while it runs: the event loop's pulse."""

    def __init__(self) -> None:
        self.ticks = 0
        self.longest_gap = 0.0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.longest_gap = max(self.longest_gap, now - last)
            last = now
            self.ticks += 1

    def stop(self) -> None:
        self._stop.set()


async def book(kit: AsyncMCPTestKit, city: str) -> Tuple[AsyncExecutionHandle, str]:
    agent = kit.agents([scripted()])[0]
    handle = await agent.submit(
        "Ask for the delivery address, then book the shipment.",
        server=shipping_server(),
        tools=["shipping:book_shipment"],
        human_input="managed",
    )
    pending = await wait_pending_async(handle)
    assert pending.execution_id == handle.execution_id
    # The answer waits a moment, so the results below are awaited while executions still run.
    await asyncio.sleep(0.3)
    await handle.respond_elicitation(
        pending.round_id,
        address(street="1 Main Street", city=city),
        idempotency_key=f"address-{pending.round_id}",
    )
    return handle, pending.round_id


def test_several_executions_at_once_without_blocking_the_loop(tmp_path: Path) -> None:
    cities = [f"City {n}" for n in range(EXECUTIONS)]

    async def main() -> None:
        store = SQLiteExecutionStore(tmp_path / "executions.sqlite")
        ticker = Ticker()
        pulse = asyncio.ensure_future(ticker.run())
        try:
            async with AsyncMCPTestKit(store=store, env={}) as kit:
                booked = await asyncio.gather(*(book(kit, city) for city in cities))
                handles = [handle for handle, _ in booked]
                ids = {handle.execution_id for handle in handles}
                assert len(ids) == EXECUTIONS
                before = ticker.ticks
                started = time.monotonic()
                results = await asyncio.gather(*(h.result(timeout=WAIT) for h in handles))
                waited = time.monotonic() - started
                for city, result in zip(cities, results):
                    assert result.succeeded, str(result.outcome)
                    assert city in only_text(result)
                for handle in handles:
                    state = await handle.snapshot()
                    assert state.lifecycle is ExecutionStatus.FINISHED
                    assert await handle.pending_elicitation() is None
                    assert (await handle.diagnostics()).events_dropped == 0
                managed = store.managed_input_store()
                for _, round_id in booked:
                    record = managed.get_round(round_id)
                    assert record is not None and record.status is ManagedInputStatus.RESOLVED
                # The loop ran all along: it ticked while results were awaited, and no tick
                # waited long (a blocked loop stops ticking for the whole wait).
                if waited > 0.2:
                    assert ticker.ticks - before >= 5, (ticker.ticks - before, waited)
                assert ticker.ticks > 20
                assert ticker.longest_gap < 2.0, ticker.longest_gap
        finally:
            ticker.stop()
            await pulse
            store.close()

    asyncio.run(main())


def test_a_long_await_leaves_the_loop_free_and_cancelling_it_stops_the_wait(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        store = SQLiteExecutionStore(tmp_path / "executions.sqlite")
        ticker = Ticker()
        pulse = asyncio.ensure_future(ticker.run())
        try:
            async with AsyncMCPTestKit(store=store, env={}) as kit:
                spec = AgentSpec(
                    harness="scripted",
                    script=booking_script(),
                    prompt="Book.",
                    server=shipping_server(),
                    tools=["shipping:book_shipment"],
                )
                handle = await kit.submit(spec, human_input="managed")
                pending = await wait_pending_async(handle)
                # A wait that runs out: one second of loop time, the ticker ticking through it.
                before = ticker.ticks
                with pytest.raises(OperationTimeout):
                    await handle.result(timeout=1.0)
                assert ticker.ticks - before >= 30, ticker.ticks - before
                # A wait cancelled by asyncio stops; the execution goes on.
                waiting = asyncio.ensure_future(handle.result())
                await asyncio.sleep(0.2)
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                assert (await handle.snapshot()).lifecycle is ExecutionStatus.WAITING_FOR_INPUT
                # Re-attached by id, answered, finished.
                attached = await kit.execution(handle.execution_id)
                await attached.respond_elicitation(
                    pending.round_id, address(), idempotency_key="k"
                )
                assert (await attached.result(timeout=WAIT)).succeeded
                assert await kit.recover() == (0, 0)
                # Cancel, awaited.
                other = await kit.submit(spec, human_input="managed")
                await wait_pending_async(other)
                await other.cancel()
                assert (await other.result(timeout=WAIT)).outcome.kind == "cancelled"
        finally:
            ticker.stop()
            await pulse
            store.close()

    asyncio.run(main())


def test_leaving_the_async_kit_cancels_what_still_runs(tmp_path: Path) -> None:
    handles: List[AsyncExecutionHandle] = []

    async def main() -> None:
        store = SQLiteExecutionStore(tmp_path / "executions.sqlite")
        try:
            async with AsyncMCPTestKit(store=store, env={}) as kit:
                agent = kit.agents([scripted()])[0]
                handle = await agent.submit(
                    "Book.",
                    server=shipping_server(),
                    tools=["shipping:book_shipment"],
                    human_input="managed",
                )
                handles.append(handle)
                pending = await wait_pending_async(handle)
            record = store.managed_input_store().get_round(pending.round_id)
            assert record is not None and record.status is ManagedInputStatus.FAILED
            assert record.failure_code == "cancelled"
        finally:
            store.close()

    asyncio.run(main())
    assert len(handles) == 1
