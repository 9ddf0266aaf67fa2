"""A booking MCP server on the official Python SDK (mcp==2.3.0), over stdio.

The tool `book_table` takes a parameter resolved by asking the client for a booking form. The SDK
picks the transport from the negotiated protocol version: on 2026-07-28 the call answers
`input_required` (key `__main__:ask_booking`, sealed `requestState`), on 2025-11-25 and older it
sends `elicitation/create` while the call is in flight. The tool's result echoes the outcome, so
the tests can check what the server received.

The tool `book_table_quickly` (legacy era: `ctx.elicit` works on legacy only) wraps `ctx.elicit` in
`asyncio.wait_for` with a one-second timeout, as a server that will not wait for a person does: it
completes the call while the elicitation is still open.

Run: `python booking_server.py` (stdio; logs on stderr).
"""

import asyncio
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)

server = MCPServer("booking")


class Booking(BaseModel):
    """The form the client is asked to fill in."""

    name: str = Field(min_length=1, max_length=40, description="Who the table is for")
    guests: int = Field(ge=1, le=12, description="How many people")
    seating: Literal["indoor", "terrace"] = Field(description="Where to sit")
    deposit: float = Field(default=0.0, ge=0, le=500, description="Deposit in euros")
    high_chair: bool = Field(default=False, description="A high chair is needed")


def ask_booking(restaurant: str) -> Elicit[Booking]:
    return Elicit(f"Book a table at {restaurant}: who, how many, where?", Booking)


@server.tool()
def book_table(
    restaurant: str,
    booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)],
) -> str:
    """Books a table at a restaurant after asking the user for the details."""
    if isinstance(booking, AcceptedElicitation):
        b = booking.data
        return (
            f"booked {restaurant} for {b.name}: guests={b.guests} seating={b.seating} "
            f"deposit={b.deposit} high_chair={b.high_chair}"
        )
    return f"not booked: {booking.action}"


@server.tool()
async def book_table_quickly(restaurant: str, ctx: Context) -> str:
    """Asks for the booking details but gives up after one second."""
    try:
        booking = await asyncio.wait_for(
            ctx.elicit(f"Book a table at {restaurant}: who, how many, where?", Booking),
            timeout=1.0,
        )
    except asyncio.TimeoutError:
        return f"not booked: no answer within a second for {restaurant}"
    if isinstance(booking, AcceptedElicitation):
        return f"booked {restaurant} for {booking.data.name}"
    return f"not booked: {booking.action}"


if __name__ == "__main__":
    server.run("stdio")
