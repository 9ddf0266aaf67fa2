"""The Python contenders of `tests/benches/python_rounds.rs`: the m3 Python package's kit, and the
Python MCP SDK's in-memory client, each answering the booking form of the same server
(`tests/peers/booking_server.py`, tool `book_table`).

    python python_rounds.py kit --mode MODE --era ERA --rounds N --warmup W \\
        --database FILE --server-python PY --server-script booking_server.py [--poll-interval-us U]
    python python_rounds.py sdk --mode MODE --era ERA --rounds N --warmup W \\
        --server-script booking_server.py

`kit` (the package's blocking `m3.MCPTestKit` on a `SQLiteExecutionStore` at FILE, the scripted
harness, `human_input="managed"`; the server a stdio child, `PY booking_server.py`, as the Rust
kit runs it): this thread polls `pending_elicitation()` (in a tight loop, or every U µs) and
answers each round at once through the handle.
`sdk` (`mcp.client.client.Client` on the server object itself, imported from the script: the
SDK's in-process transport, no child process): the elicitation callback answers at once.

MODE `execution`: one round = one execution. The kit: `submit` (the server started, the
session initialised, the tool called), wait for the pending round, `respond_elicitation`,
`result()`. The SDK: open a client session on the server, `call_tool` (the callback answers),
its result, close. `W` rounds first, not reported, then `N`, one after the other; each round's
period is its time from start to result.
MODE `steady`: one execution (the kit: a script of `W + N + 1` tool calls; the SDK: one session,
as many calls); a round's period is the time from the answerer seeing one elicitation to it
seeing the next (the kit: `pending_elicitation()` returning a new round; the SDK: the callback
entered), as in section 1 of BENCHMARKS.md; the first `W` are not reported.

Prints one JSON object on stdout: {"period_ms": [...], "seconds": S, "to_pending_ms": [...],
"to_result_ms": [...], "protocol_version": ...}, `seconds` the wall time of the reported rounds
(execution: first start to last result; steady: first to last elicitation seen); the kit's
execution mode also gives each round's `to_pending_ms` (start to the round seen) and
`to_result_ms` (the answer committed to the result).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import time
from typing import Any, Dict, List, Optional

TOOL = "book_table"
ARGUMENTS = {"restaurant": "Chez M3"}
ANSWER = {"name": "Asha", "guests": 3, "seating": "terrace", "deposit": 12.5, "high_chair": True}
BOOKED = "booked Chez M3 for Asha"
MODERN_VERSION = "2026-07-28"
#: How long any one wait may take before the run gives up (a hang guard).
WAIT_LIMIT = 120.0


def kit(args: argparse.Namespace) -> Dict[str, Any]:
    from m3 import ElicitationResponse, ExecutionStatus, MCPTestKit, StdioServer
    from m3.storage import SQLiteExecutionStore

    poll = args.poll_interval_us / 1e6
    server = StdioServer(
        name="booking", command=args.server_python, args=[args.server_script], era=args.era
    )
    tool = f"booking:{TOOL}"
    step = {"tool": tool, "arguments": dict(ARGUMENTS)}

    def wait_round(handle: Any, last: Optional[str]) -> Any:
        started = time.perf_counter()
        next_check = started + 1.0
        while True:
            pending = handle.pending_elicitation()
            if pending is not None and pending.round_id != last:
                return pending
            now = time.perf_counter()
            if now >= next_check:
                next_check = now + 1.0
                state = handle.snapshot()
                if state.lifecycle == ExecutionStatus.FINISHED:
                    raise RuntimeError(f"the execution finished before asking: {state.outcome}")
                if now - started > WAIT_LIMIT:
                    raise RuntimeError(f"no new pending round within {WAIT_LIMIT} s")
            if poll:
                time.sleep(poll)

    def answer(handle: Any, pending: Any) -> None:
        (key,) = pending.requests
        handle.respond_elicitation(
            pending.round_id,
            {key: ElicitationResponse(action="accept", content=dict(ANSWER))},
            idempotency_key=f"answer-{pending.round_id}",
        )

    def check(result: Any, calls: int) -> None:
        tools = result.outcome.tool_results
        if (
            not result.succeeded
            or len(tools) != calls
            or any(not t.text().startswith(BOOKED) for t in tools)
        ):
            raise RuntimeError(f"the execution did not book {calls} tables: {result.outcome}")

    store = SQLiteExecutionStore(args.database)
    periods: List[float] = []
    to_pending: List[float] = []
    to_result: List[float] = []
    with MCPTestKit(store=store, env={}) as test_kit:
        if args.mode == "execution":
            agent = test_kit.agents([{"harness": "scripted", "script": {"steps": [step]}}])[0]
            first = last_end = 0.0
            for i in range(args.warmup + args.rounds):
                started = time.perf_counter()
                handle = agent.submit(
                    "Book a table.", server=server, tools=[tool], human_input="managed"
                )
                pending = wait_round(handle, None)
                seen = time.perf_counter()
                answer(handle, pending)
                answered = time.perf_counter()
                check(handle.result(timeout=WAIT_LIMIT), 1)
                ended = time.perf_counter()
                if i < args.warmup:
                    continue
                if i == args.warmup:
                    first = started
                last_end = ended
                periods.append((ended - started) * 1e3)
                to_pending.append((seen - started) * 1e3)
                to_result.append((ended - answered) * 1e3)
            seconds = last_end - first
        else:
            calls = args.warmup + args.rounds + 1
            agent = test_kit.agents(
                [{"harness": "scripted", "script": {"steps": [step] * calls}}]
            )[0]
            handle = agent.submit(
                "Book a table each time.", server=server, tools=[tool], human_input="managed"
            )
            seen_at: List[float] = []
            last: Optional[str] = None
            for _ in range(calls):
                pending = wait_round(handle, last)
                seen_at.append(time.perf_counter())
                answer(handle, pending)
                last = pending.round_id
            check(handle.result(timeout=WAIT_LIMIT), calls)
            measured = seen_at[args.warmup :]
            periods = [(b - a) * 1e3 for a, b in zip(measured, measured[1:])]
            seconds = measured[-1] - measured[0]
    store.close()
    return {
        "period_ms": periods,
        "seconds": seconds,
        "to_pending_ms": to_pending,
        "to_result_ms": to_result,
        "protocol_version": None,
    }


async def sdk(args: argparse.Namespace) -> Dict[str, Any]:
    import mcp_types as types
    from mcp.client.client import Client

    # The server object of the very script the kits start as a child (its `main()` does not
    # run: the module is not `__main__`).
    spec = importlib.util.spec_from_file_location("booking_server", args.server_script)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {args.server_script}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = module.server
    mode = MODERN_VERSION if args.era == "modern" else "legacy"

    seen: List[float] = []

    async def answer(_context: Any, _params: Any) -> Any:
        seen.append(time.perf_counter())
        return types.ElicitResult(action="accept", content=dict(ANSWER))

    def check(result: Any, i: int) -> None:
        text = " ".join(getattr(part, "text", "") for part in result.content)
        if result.is_error or not text.startswith(BOOKED):
            raise RuntimeError(f"call {i} did not book: {text}")
        if len(seen) != i + 1:
            raise RuntimeError(f"call {i}: {len(seen)} elicitations seen, expected {i + 1}")

    periods: List[float] = []
    protocol_version = None
    if args.mode == "execution":
        first = last_end = 0.0
        for i in range(args.warmup + args.rounds):
            started = time.perf_counter()
            async with Client(server, mode=mode, elicitation_callback=answer) as client:
                result = await client.call_tool(TOOL, dict(ARGUMENTS))
                protocol_version = client.protocol_version
            ended = time.perf_counter()
            check(result, i)
            if i < args.warmup:
                continue
            if i == args.warmup:
                first = started
            last_end = ended
            periods.append((ended - started) * 1e3)
        seconds = last_end - first
    else:
        calls = args.warmup + args.rounds + 1
        async with Client(server, mode=mode, elicitation_callback=answer) as client:
            for i in range(calls):
                check(await client.call_tool(TOOL, dict(ARGUMENTS)), i)
            protocol_version = client.protocol_version
        measured = seen[args.warmup :]
        periods = [(b - a) * 1e3 for a, b in zip(measured, measured[1:])]
        seconds = measured[-1] - measured[0]
    expected = MODERN_VERSION if args.era == "modern" else "2025"
    if not str(protocol_version).startswith(expected):
        raise RuntimeError(f"the client spoke {protocol_version} in the {args.era} era")
    return {
        "period_ms": periods,
        "seconds": seconds,
        "to_pending_ms": [],
        "to_result_ms": [],
        "protocol_version": protocol_version,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("contender", choices=["kit", "sdk"])
    parser.add_argument("--mode", choices=["execution", "steady"], required=True)
    parser.add_argument("--era", choices=["modern", "legacy"], required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--server-script", required=True)
    parser.add_argument("--server-python")
    parser.add_argument("--database")
    parser.add_argument("--poll-interval-us", type=int, default=0)
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    if args.contender == "kit":
        if not args.server_python or not args.database:
            parser.error("kit needs --server-python and --database")
        report = kit(args)
    else:
        report = asyncio.run(sdk(args))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
