"""LangGraph's durable pause/resume on SQLite: a contender of `host/benches/peers_rounds.rs`.

A `StateGraph` with one node that calls `interrupt()` with a booking form (the same form the
kit's lifecycle stores) and keeps the answer it is resumed with. One cycle, on a fresh thread
id: `invoke(input)` runs until the interrupt (checkpointed), then `invoke(Command(resume=...))`
resumes it to the end. The checkpointer is `SqliteSaver` (langgraph-checkpoint-sqlite) on one
connection to a SQLite file (`SqliteSaver.setup` puts it in WAL mode), with
`PRAGMA synchronous` set on that connection before it is handed over. The graph runs with
LangGraph's default durability (`async`: `invoke` returns once its checkpoints are written).

Two ways to run it:

- one shot: `python langgraph_bench.py --db FILE --sync FULL --cycles 200 --warmup 20`
  prints `{"sync", "cycles", "seconds", "cycles_per_s", "commits_per_cycle", ...}` (the
  SQL transactions one cycle commits, counted once with the connection's trace callback);
- `--serve --dir DIR`: keeps one database per synchronous mode (`DIR/langgraph-full.sqlite`,
  `DIR/langgraph-normal.sqlite`) open and reads commands from stdin, one per line:
  `run FULL|NORMAL <cycles>` runs that many cycles and prints one JSON line as above; `quit`
  (or end of input) exits. The benchmark uses this to alternate with the kit without paying
  Python's start-up for each batch.
"""

import argparse
import json
import sqlite3
import sys
import time
from typing import Any, Optional, TypedDict

from importlib.metadata import version

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

FORM = {
    "message": "Book a table at Chez M3: who, how many, where?",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 40, "description": "Who the table is for"},
            "guests": {"type": "integer", "minimum": 1, "maximum": 12, "description": "How many people"},
            "seating": {"type": "string", "enum": ["indoor", "terrace"], "description": "Where to sit"},
            "deposit": {"type": "number", "minimum": 0, "maximum": 500, "default": 0.0},
            "high_chair": {"type": "boolean", "default": False},
        },
        "required": ["name", "guests", "seating"],
    },
}
ANSWER = {"name": "Asha", "guests": 3, "seating": "terrace", "deposit": 12.5, "high_chair": True}
SYNC_VALUES = {"FULL": 2, "NORMAL": 1}


class State(TypedDict):
    restaurant: str
    booking: Optional[dict]


def ask(state: State) -> dict:
    booking = interrupt(FORM)
    return {"booking": booking}


class Contender:
    """One database, connection, checkpointer and compiled graph."""

    def __init__(self, path: str, sync: str) -> None:
        self.sync = sync
        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.conn.execute(f"PRAGMA synchronous={sync}")
        saver = SqliteSaver(self.conn)
        saver.setup()
        got = self.conn.execute("PRAGMA synchronous").fetchone()[0]
        mode = self.conn.execute("PRAGMA journal_mode").fetchone()[0]
        if got != SYNC_VALUES[sync] or mode.lower() != "wal":
            raise SystemExit(f"the connection runs synchronous={got} journal_mode={mode}")
        builder = StateGraph(State)
        builder.add_node("ask", ask)
        builder.add_edge(START, "ask")
        builder.add_edge("ask", END)
        self.graph = builder.compile(checkpointer=saver)
        self.next = 0
        self.commits_per_cycle: Optional[int] = None

    def cycle(self) -> None:
        self.next += 1
        # The second cycle is traced once, to count the SQL transactions a cycle commits.
        statements: list[str] = []
        if self.next == 2:
            self.conn.set_trace_callback(statements.append)
        config: Any = {"configurable": {"thread_id": f"cycle-{self.next}"}}
        paused = self.graph.invoke({"restaurant": "Chez M3", "booking": None}, config)
        if "__interrupt__" not in paused:
            raise SystemExit(f"cycle {self.next} did not pause: {paused}")
        done = self.graph.invoke(Command(resume=dict(ANSWER)), config)
        if done.get("booking") != ANSWER:
            raise SystemExit(f"cycle {self.next} did not resume: {done}")
        if self.next == 2:
            self.conn.set_trace_callback(None)
            self.commits_per_cycle = sum(1 for s in statements if s.strip().upper() == "COMMIT")

    def run(self, cycles: int) -> dict:
        started = time.perf_counter()
        for _ in range(cycles):
            self.cycle()
        seconds = time.perf_counter() - started
        return {
            "sync": self.sync,
            "cycles": cycles,
            "seconds": seconds,
            "cycles_per_s": cycles / seconds if seconds > 0 else 0.0,
            "durability": "async (default)",
            "commits_per_cycle": self.commits_per_cycle,
            "langgraph": version("langgraph"),
        }


def serve(directory: str) -> int:
    contenders: dict[str, Contender] = {}
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] != "run" or len(words) != 3 or words[1] not in SYNC_VALUES:
            print(json.dumps({"error": f"unknown command: {line.strip()}"}), flush=True)
            continue
        sync, cycles = words[1], int(words[2])
        if sync not in contenders:
            contenders[sync] = Contender(f"{directory}/langgraph-{sync.lower()}.sqlite", sync)
        print(json.dumps(contenders[sync].run(cycles)), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--dir")
    parser.add_argument("--db")
    parser.add_argument("--sync", choices=list(SYNC_VALUES), default="FULL")
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    if args.serve:
        if not args.dir:
            parser.error("--serve needs --dir")
        return serve(args.dir)
    if not args.db:
        parser.error("--db is required (or --serve --dir)")
    contender = Contender(args.db, args.sync)
    contender.run(args.warmup)
    print(json.dumps(contender.run(args.cycles)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
