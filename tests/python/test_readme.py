import os
import time

import pytest

from m3 import ElicitationResponse, MCPTestKit, StdioServer


@pytest.fixture
def shipping_server() -> StdioServer:
    return StdioServer("shipping", os.environ["M3_TEST_SHIPPING_SERVER"])


def test_books_a_shipment(m3_kit: MCPTestKit, shipping_server: StdioServer) -> None:
    script = {"steps": [{"tool": "shipping:book_shipment"}]}
    agent = m3_kit.agents([{"harness": "scripted", "script": script}])[0]
    handle = agent.submit(
        "Book the shipment.",
        server=shipping_server,
        tools=["shipping:book_shipment"],
        human_input="managed",
    )
    pending = handle.pending_elicitation()
    while pending is None:
        time.sleep(0.05)
        pending = handle.pending_elicitation()
    handle.respond_elicitation(
        pending.round_id,
        {
            "shipping_address": ElicitationResponse(
                action="accept", content={"street": "1 Main Street", "city": "Pune"}
            )
        },
        idempotency_key=f"address-{pending.round_id}",
    )
    assert handle.result(timeout=60).succeeded
