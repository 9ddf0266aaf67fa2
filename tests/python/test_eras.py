"""Both MCP elicitation eras from Python: legacy ``elicitation/create`` and modern
``input_required`` (MRTR, with a sealed ``requestState``), each against the repository's shipping
server and a real third-party server, the Python MCP SDK's booking server
(``tests/peers/booking_server.py`` on ``mcp==2.3.0``), over stdio and, through ``HttpServer``,
over Streamable HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Union

import pytest

from kit_support import (
    ADDRESS_KEY,
    BOOKED,
    BOOKING,
    MRTR_KEY,
    WAIT,
    address,
    booking_server,
    only_text,
    program,
    shipping_server,
    submit_booking,
    wait_pending,
)
from m3 import ElicitationResponse, FormElicitationRequest, HttpServer, MCPTestKit, StdioServer
from m3.storage import ManagedInputStatus, SQLiteExecutionStore

ERAS = ["legacy", "modern"]


@pytest.mark.parametrize("era", ERAS)
def test_the_shipping_server_in_each_era(era: str, tmp_path: Path) -> None:
    with SQLiteExecutionStore(tmp_path / "executions.sqlite") as store, MCPTestKit(
        store=store, env={}
    ) as kit:
        handle = submit_booking(kit, shipping_server("--era", era, era=era))
        pending = wait_pending(handle)
        assert list(pending.requests) == [ADDRESS_KEY]
        if era == "modern":
            assert pending.request_state, "an MRTR round keeps the server's requestState"
        else:
            assert pending.request_state is None, "a legacy round has no requestState"
        handle.respond_elicitation(pending.round_id, address(), idempotency_key="k")
        result = handle.result(timeout=WAIT)
        assert result.succeeded, str(result.outcome)
        assert "1 Main Street" in only_text(result)
        record = store.managed_input_store().get_round(pending.round_id)
        assert record is not None and record.status is ManagedInputStatus.RESOLVED


@pytest.fixture
def booking_over_http() -> Iterator[str]:
    """The booking server over Streamable HTTP on a free loopback port: its endpoint's URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, program("M3_TEST_BOOKING_SERVER"), "--http", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + WAIT
        while True:
            assert server.poll() is None, "the booking server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the booking server did not listen"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize("era", ERAS)
def test_the_python_sdk_s_booking_server_in_each_era(era: str, tmp_path: Path) -> None:
    book_a_table(booking_server(era), era, tmp_path)


@pytest.mark.parametrize("era", ERAS)
def test_the_python_sdk_s_booking_server_over_streamable_http(
    era: str, tmp_path: Path, booking_over_http: str
) -> None:
    server = HttpServer(name="booking", url=booking_over_http, era=era)
    assert booking_over_http in repr(server)
    book_a_table(server, era, tmp_path)


def book_a_table(server: Union[StdioServer, HttpServer], era: str, tmp_path: Path) -> None:
    """Books a table through ``server`` in ``era``: the form accepted, then another declined."""
    with SQLiteExecutionStore(tmp_path / "executions.sqlite") as store, MCPTestKit(
        store=store, env={}
    ) as kit:
        agent = kit.agents(
            [
                {
                    "harness": "scripted",
                    "script": {
                        "steps": [
                            {"tool": "booking:book_table", "arguments": {"restaurant": "Chez M3"}}
                        ]
                    },
                }
            ]
        )[0]
        handle = agent.submit(
            "Book a table.",
            server=server,
            tools=["booking:book_table"],
            human_input="managed",
        )
        pending = wait_pending(handle)
        assert pending.server == "booking"
        assert pending.operation_name == "book_table"
        [key] = list(pending.requests)
        if era == "modern":
            assert key == MRTR_KEY
            assert pending.request_state, "the SDK seals a requestState"
        else:
            assert pending.request_state is None
        form = pending.requests[key]
        assert isinstance(form, FormElicitationRequest)
        assert "Chez M3" in form.message
        assert form.requested_schema["required"] == ["name", "guests", "seating"]
        handle.respond_elicitation(
            pending.round_id,
            {key: ElicitationResponse(action="accept", content=BOOKING)},
            idempotency_key=f"booking-{pending.round_id}",
        )
        result = handle.result(timeout=WAIT)
        assert result.succeeded, str(result.outcome)
        assert only_text(result) == BOOKED
        record = store.managed_input_store().get_round(pending.round_id)
        assert record is not None and record.status is ManagedInputStatus.RESOLVED

        # A declined form in the same era: the server's own words come back.
        declined = agent.submit(
            "Book a table.",
            server=server,
            tools=["booking:book_table"],
            human_input="managed",
        )
        round_ = wait_pending(declined)
        declined.respond_elicitation(
            round_.round_id,
            {key: ElicitationResponse(action="decline")},
            idempotency_key="declined",
        )
        result = declined.result(timeout=WAIT)
        assert result.succeeded, str(result.outcome)
        assert only_text(result) == "not booked: decline"
