"""A booking MCP server on the official Python SDK (mcp==2.3.0), over stdio.

The tool `book_table` takes a parameter resolved by asking the client for a booking form. The SDK
picks the transport from the negotiated protocol version: on 2026-07-28 the call answers
`input_required` (key `__main__:ask_booking`, sealed `requestState`), on 2025-11-25 and older it
sends `elicitation/create` while the call is in flight. The tool's result echoes the outcome, so
the tests can check what the server received.

The tool `book_table_quickly` (legacy era: `ctx.elicit` works on legacy only) wraps `ctx.elicit` in
`asyncio.wait_for` with a one-second timeout, as a server that will not wait for a person does: it
completes the call while the elicitation is still open.

The tool `book_table_confirmed` asks twice, the second question depending on the first answer:
the booking form (the resolver `ask_booking`, as for `book_table`), then a confirmation form (one
boolean `confirmed`) whose message names the booked person. Its resolver `ask_confirmation` depends
on `ask_booking` through `Resolve`, so the SDK asks the two one after the other. On 2026-07-28 that
is two rounds: the call answers `input_required` with key `__main__:ask_booking`, the retry answers
`input_required` again with key `__main__:ask_confirmation` (its `requestState` carries the booking
answer), and the second retry completes. On 2025-11-25 and older the call sends two
`elicitation/create` requests one after the other, then completes. Result:
`confirmed booking at <restaurant> for <name>`, or `not booked: <why>` (`booking <action>`,
`confirmation <action>`, `<name> did not confirm`); the confirmation is not asked when the booking
form was not accepted.

The tool `book_table_then_exit` asks the booking form (as `book_table`), and once the answer has
arrived the whole process exits at once with code 3, before it replies: a server that received the
answer and died before acting on it (the answer was delivered, the round then fails).

Run: `python booking_server.py` (stdio; logs on stderr), or over Streamable HTTP on loopback:
`python booking_server.py --http PORT [--event-store] [--retry-ms N]` (endpoint
`http://127.0.0.1:PORT/mcp`, sessions and SSE responses, the SDK's defaults). `--event-store` keeps
every stream's events in memory, so SSE events carry ids and a broken stream can be resumed with
`Last-Event-ID`; `--retry-ms` is the reconnection delay the server announces then.
"""

import argparse
import asyncio
import itertools
import os
import sys
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from mcp.server.streamable_http import EventMessage, EventStore

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
def book_table_then_exit(
    restaurant: str,
    booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)],
) -> str:
    """Asks for the booking details, then exits (code 3) without replying."""
    sys.stderr.write(f"booking_server: got the {booking.action} for {restaurant}; exiting\n")
    sys.stderr.flush()
    os._exit(3)


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


class Confirmation(BaseModel):
    """The second form: confirm the booking made with the first."""

    confirmed: bool = Field(description="Yes, book it")


def ask_confirmation(
    restaurant: str,
    booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)],
) -> Elicit[Confirmation] | None:
    # Depends on the booking form: asked only once that form was answered, and only if accepted
    # (None = nothing to confirm; the tool then reports the booking form's outcome).
    if not isinstance(booking, AcceptedElicitation):
        return None
    b = booking.data
    return Elicit(
        f"Confirm the table at {restaurant} for {b.name} ({b.guests} guests, {b.seating})?",
        Confirmation,
    )


@server.tool()
def book_table_confirmed(
    restaurant: str,
    booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)],
    confirmation: Annotated[ElicitationResult[Confirmation], Resolve(ask_confirmation)],
) -> str:
    """Books a table after asking for the details, then for a confirmation of them."""
    if not isinstance(booking, AcceptedElicitation):
        return f"not booked: booking {booking.action}"
    if not isinstance(confirmation, AcceptedElicitation):
        return f"not booked: confirmation {confirmation.action}"
    if not confirmation.data.confirmed:
        return f"not booked: {booking.data.name} did not confirm"
    return f"confirmed booking at {restaurant} for {booking.data.name}"


class MemoryEventStore(EventStore):
    """Every stream's events in memory, for resumption (the SDK defines the interface only).

    Event ids are `<stream>:<n>`; a replay sends the events of that stream after the given id.
    """

    def __init__(self):
        self.events = {}  # stream id -> [(event id, message)]
        self.counter = itertools.count(1)

    async def store_event(self, stream_id, message):
        event_id = f"{stream_id}:{next(self.counter)}"
        self.events.setdefault(stream_id, []).append((event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id, send_callback):
        stream_id = last_event_id.rsplit(":", 1)[0]
        events = self.events.get(stream_id)
        if events is None or all(e != last_event_id for e, _ in events):
            return None
        after = False
        for event_id, message in events:
            if after and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream_id


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    parser.add_argument("--event-store", action="store_true")
    parser.add_argument("--retry-ms", type=int)
    args = parser.parse_args()
    if args.http is None:
        server.run("stdio")
        return
    options = {"host": "127.0.0.1", "port": args.http, "streamable_http_path": "/mcp"}
    if args.event_store:
        options["event_store"] = MemoryEventStore()
        options["retry_interval"] = args.retry_ms
    server.run("streamable-http", **options)


if __name__ == "__main__":
    main()
