"""What the m3 package's tests share: the servers they run, the answers they give, and waits.

The programs come from the environment that ``tests/all/python_package.rs`` sets:
``M3_TEST_SHIPPING_SERVER`` (the bundled shipping server), ``M3_TEST_BOOKING_SERVER`` (the Python
MCP SDK's ``tests/peers/booking_server.py``, run on this venv's Python, which has ``mcp``) and
``M3_TEST_CLI`` (the ``m3`` command).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional

import pytest

from m3 import (
    AsyncExecutionHandle,
    ElicitationResponse,
    ExecutionHandle,
    ExecutionResult,
    FormElicitationRequest,
    HumanInput,
    MCPTestKit,
    StdioServer,
)
from m3.types import ExecutionStatus, PendingElicitationRound

#: How long a pending round or a result may take to appear (servers answer in milliseconds; the
#: margin covers a loaded machine and Python's start-up).
WAIT = 60.0

#: The shipping server's request key (both eras).
ADDRESS_KEY = "shipping_address"

#: The specification's answer.
ADDRESS: Dict[str, Any] = {"street": "1 Main Street", "city": "Pune"}

#: The schema of the shipping server's address form, as a test's own rounds use it.
ADDRESS_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "street": {"type": "string", "minLength": 1, "maxLength": 100},
        "city": {"type": "string", "minLength": 1},
    },
    "required": ["street", "city"],
}

#: The booking server's answer, and what its tool then says.
BOOKING: Dict[str, Any] = {
    "name": "Asha",
    "guests": 3,
    "seating": "terrace",
    "deposit": 12.5,
    "high_chair": True,
}
BOOKED = "booked Chez M3 for Asha: guests=3 seating=terrace deposit=12.5 high_chair=True"

#: The Python SDK's request key of the booking form in the modern era (MRTR).
MRTR_KEY = "__main__:ask_booking"

#: Where m3 keeps its compiled component (read when this module is imported, before pytester
#: points ``HOME`` at a temporary directory): a test's own pytest run reuses it.
CACHE_HOME = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")


def program(variable: str) -> str:
    """The program the environment variable ``variable`` names."""
    value = os.environ.get(variable)
    if not value:
        raise RuntimeError(
            f"{variable} is not set: run these tests with "
            "`cargo test --workspace --test all -- python_package`"
        )
    return value


def shipping_server(*args: str, era: str = "auto") -> StdioServer:
    """The bundled shipping server (``shipping:book_shipment``) with ``args``."""
    return StdioServer(
        name="shipping", command=program("M3_TEST_SHIPPING_SERVER"), args=list(args), era=era
    )


def booking_server(era: str) -> StdioServer:
    """The Python MCP SDK's booking server (``booking:book_table``) on this venv's Python."""
    return StdioServer(
        name="booking",
        command=sys.executable,
        args=[program("M3_TEST_BOOKING_SERVER")],
        era=era,
    )


def m3_command() -> str:
    """The ``m3`` command."""
    return program("M3_TEST_CLI")


def booking_script() -> Dict[str, Any]:
    """The scripted harness's script of one shipment booking."""
    return {
        "steps": [
            {"tool": "shipping:book_shipment", "arguments": {"item": "book", "quantity": 1}}
        ]
    }


def scripted(script: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The dict form of a scripted agent running ``script`` (default: one booking)."""
    return {"harness": "scripted", "script": dict(script or booking_script())}


def address(**content: Any) -> Dict[str, ElicitationResponse]:
    """An answer map accepting the address (the specification's, or ``content``)."""
    return {
        ADDRESS_KEY: ElicitationResponse(action="accept", content=dict(content or ADDRESS))
    }


def submit_booking(
    kit: MCPTestKit,
    server: Optional[StdioServer] = None,
    *,
    human_input: HumanInput = "managed",
    round_deadline: Optional[float] = None,
) -> ExecutionHandle:
    """Submits one scripted shipment booking to ``kit``."""
    agent = kit.agents([scripted()])[0]
    return agent.submit(
        "Ask for the delivery address, then book the shipment.",
        server=server or shipping_server(),
        tools=["shipping:book_shipment"],
        human_input=human_input,
        round_deadline=round_deadline,
    )


def wait_pending(handle: ExecutionHandle, timeout: float = WAIT) -> PendingElicitationRound:
    """The execution's pending round, once it has one; fails if it finishes first."""
    deadline = time.monotonic() + timeout
    while True:
        pending = handle.pending_elicitation()
        if pending is not None:
            return pending
        snapshot = handle.snapshot()
        assert snapshot.lifecycle is not ExecutionStatus.FINISHED, (
            f"finished before asking: {snapshot.outcome}"
        )
        assert time.monotonic() < deadline, "no pending round in time"
        time.sleep(0.05)


async def wait_pending_async(
    handle: AsyncExecutionHandle, timeout: float = WAIT
) -> PendingElicitationRound:
    """``wait_pending`` for an asyncio handle."""
    deadline = time.monotonic() + timeout
    while True:
        pending = await handle.pending_elicitation()
        if pending is not None:
            return pending
        snapshot = await handle.snapshot()
        assert snapshot.lifecycle is not ExecutionStatus.FINISHED, (
            f"finished before asking: {snapshot.outcome}"
        )
        assert time.monotonic() < deadline, "no pending round in time"
        await asyncio.sleep(0.05)


def address_round(
    round_id: str,
    execution_id: str = "exec-1",
    *,
    deadline: Optional[datetime] = None,
    keys: Optional[List[str]] = None,
) -> PendingElicitationRound:
    """A first-round tool call asking for the address (under ``keys``, default the shipping
    server's one key), for the store's own tests."""
    return PendingElicitationRound(
        round_id=round_id,
        execution_id=execution_id,
        logical_operation_id=f"{execution_id}-op0",
        server="shipping",
        operation_kind="tool",
        operation_name="book_shipment",
        requests={
            key: FormElicitationRequest(
                message="Where should the shipment be delivered?",
                requested_schema=dict(ADDRESS_SCHEMA),
            )
            for key in (keys or [ADDRESS_KEY])
        },
        created_at=datetime.now(timezone.utc),
        deadline=deadline,
    )


def only_text(result: ExecutionResult) -> str:
    """The text of an execution's one tool result."""
    tools = result.outcome.tool_results
    assert len(tools) == 1, tools
    return tools[0].text()


def new_id(prefix: str) -> str:
    """A round or execution id no other test uses (a PostgreSQL database outlives a test)."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def postgres_url(config: pytest.Config) -> Optional[str]:
    """The ``--m3-postgres-url`` given to this run (the m3 plugin's option), if any."""
    url = config.getoption("m3_postgres_url", default=None)
    return url if isinstance(url, str) and url else None
