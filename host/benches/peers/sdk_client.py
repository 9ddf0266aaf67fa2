"""The Python MCP SDK's own client (mcp==2.3.0) answering elicitations from an in-memory callback:
the floor a user gets today, with no persistence. A contender of `host/benches/peers_rounds.rs`.

It starts the server over stdio, calls its tool `warmup + rounds + 1` times one after another,
and answers every elicitation inside the elicitation callback at once (accept, a fixed booking).
Each callback notes `time.perf_counter()` on entry: that is when the answerer *saw* the
elicitation. A round's period is the time from one elicitation being seen to the next one being
seen (answer, delivery, the tool's result, the next call, the next elicitation), the same
definition the kit's contender uses. The first `warmup` periods are not reported.

Era: `--era modern` adopts 2026-07-28 (the server answers `input_required` and the SDK's
multi-round-trip driver calls the callback), `--era legacy` uses the initialize handshake (the
server sends `elicitation/create` while the call is in flight).

Prints one JSON object on stdout:
  {"era", "protocol_version", "rounds", "warmup", "period_ms": [...], "call_ms": [...],
   "seconds"}
where `period_ms` has `rounds` entries, `call_ms` the duration of each measured `call_tool`
(start to result), and `seconds` the wall time from the first measured elicitation being seen
to the last one.

Run: python sdk_client.py --era modern --rounds 100 --warmup 10 -- <server command...>
"""

import argparse
import asyncio
import json
import sys
import time

import mcp_types as types
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

TOOL = "book_table"
ARGUMENTS = {"restaurant": "Chez M3"}
ANSWER = {"name": "Asha", "guests": 3, "seating": "terrace", "deposit": 12.5, "high_chair": True}
MODERN_VERSION = "2026-07-28"


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--era", choices=["modern", "legacy"], required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("server", nargs="+", help="the server command (after --)")
    args = parser.parse_args()

    seen: list[float] = []

    async def answer(_context, params) -> types.ElicitResult:
        seen.append(time.perf_counter())
        return types.ElicitResult(action="accept", content=dict(ANSWER))

    server = StdioServerParameters(command=args.server[0], args=args.server[1:])
    mode = MODERN_VERSION if args.era == "modern" else "legacy"
    calls: list[float] = []
    total = args.warmup + args.rounds + 1
    async with Client(server, mode=mode, elicitation_callback=answer) as client:
        for i in range(total):
            started = time.perf_counter()
            result = await client.call_tool(TOOL, dict(ARGUMENTS))
            ended = time.perf_counter()
            if i >= args.warmup:
                calls.append((ended - started) * 1e3)
            text = " ".join(getattr(part, "text", "") for part in result.content)
            if result.is_error or not text.startswith("booked"):
                print(f"call {i} did not book: {text}", file=sys.stderr)
                return 1
            if len(seen) != i + 1:
                print(f"call {i}: {len(seen)} elicitations seen, expected {i + 1}", file=sys.stderr)
                return 1
        protocol_version = client.protocol_version

    measured = seen[args.warmup :]
    periods = [(b - a) * 1e3 for a, b in zip(measured, measured[1:])]
    print(
        json.dumps(
            {
                "era": args.era,
                "protocol_version": protocol_version,
                "rounds": len(periods),
                "warmup": args.warmup,
                "period_ms": periods,
                "call_ms": calls[: len(periods)],
                "seconds": measured[-1] - measured[0],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
