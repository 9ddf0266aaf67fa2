"""m3's pytest plugin, loaded by pytest through the package's ``pytest11`` entry point ``m3``.

Fixtures:

- ``m3_kit``: an ``MCPTestKit`` on ``m3_store``, with ``m3_env`` as its environment; leaving the
  test cancels its running executions, as leaving a ``with MCPTestKit(...)`` block does.
- ``m3_store``: a fresh ``SQLiteExecutionStore`` in the test's ``tmp_path``
  (``executions.sqlite``), or a ``PostgresExecutionStore`` when the test is marked
  ``@pytest.mark.m3_postgres(url)`` or pytest runs with ``--m3-postgres-url URL``; closed after
  the test.
- ``m3_env``: the environment the kit's child processes get: ``{}`` unless a test or a
  ``conftest.py`` overrides the fixture.

When a test that used ``m3_kit`` fails, its report gets a section ``m3: pending rounds and
events``: the store's pending rounds (round id, execution, server, operation and request keys;
never an answer) and, for each execution the kit submitted or attached to, its lifecycle and
outcome, its rounds (status and failure code) and its harness's events (the codex harness
reports them; the scripted harness has none). On PostgreSQL, whose database outlives the test, only the rounds
created since the fixture started are listed.

Example::

    def test_books_a_shipment(m3_kit):
        agent = m3_kit.agents([{"harness": "scripted", "script": {"steps": [...]}}])[0]
        handle = agent.submit("Book it.", server=shipping_server,
                              tools=["shipping:book_shipment"], human_input="managed")
        ...
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import (
    Any,
    Dict,
    Generator,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

import pytest

from m3._kit import Agent, AgentSpec, ExecutionHandle, MCPTestKit, ServerBinding
from m3.storage import (
    ManagedInputStatus,
    PostgresExecutionStore,
    SQLiteExecutionStore,
)
from m3.types import HumanInput

__all__ = [
    "ExecutionStoreFixture",
    "RecordingKit",
    "m3_env",
    "m3_store",
    "m3_kit",
    "pytest_addoption",
    "pytest_configure",
    "pytest_runtest_makereport",
]

#: The name of the report section a failing test gets.
SECTION = "m3: pending rounds and events"

ExecutionStoreFixture = Union[SQLiteExecutionStore, PostgresExecutionStore]
"""What ``m3_store`` gives: a SQLite or a PostgreSQL execution store."""


class _Watched:
    """What the report of a failing test reads: the store, the kit's executions, and when the
    fixture started."""

    def __init__(self, store: ExecutionStoreFixture, postgres: bool) -> None:
        self.store = store
        self.postgres = postgres
        self.started = datetime.now(timezone.utc)
        self.handles: List[ExecutionHandle] = []


_WATCHED = pytest.StashKey[_Watched]()


class _RecordingAgent(Agent):
    """An agent of ``m3_kit`` that remembers the executions it submits."""

    def __init__(self, agent: Agent, handles: List[ExecutionHandle]) -> None:
        super().__init__(agent._native)
        self._handles = handles

    def submit(
        self,
        prompt: str,
        *,
        server: ServerBinding,
        tools: Sequence[str] = (),
        human_input: HumanInput = "fail",
        round_limit: int = 10,
        round_deadline: Optional[float] = None,
    ) -> ExecutionHandle:
        """See ``Agent.submit``; the execution is listed in a failing test's report."""
        handle = super().submit(
            prompt,
            server=server,
            tools=tools,
            human_input=human_input,
            round_limit=round_limit,
            round_deadline=round_deadline,
        )
        self._handles.append(handle)
        return handle


class RecordingKit(MCPTestKit):
    """The kit ``m3_kit`` gives: an ``MCPTestKit`` that remembers every execution it submits or
    attaches to (``handles``), for the report of a failing test."""

    def __init__(
        self,
        store: ExecutionStoreFixture,
        env: Optional[Mapping[str, str]] = None,
        *,
        lease_ttl: float = 15.0,
        lease_renew: float = 5.0,
    ) -> None:
        super().__init__(store=store, env=env, lease_ttl=lease_ttl, lease_renew=lease_renew)
        self.handles: List[ExecutionHandle] = []

    def agents(self, specs: Sequence[Union[AgentSpec, Mapping[str, Any]]]) -> List[Agent]:
        """See ``MCPTestKit.agents``."""
        made: List[Agent] = [_RecordingAgent(a, self.handles) for a in super().agents(specs)]
        return made

    def execution(self, execution_id: str) -> ExecutionHandle:
        """See ``MCPTestKit.execution``."""
        handle = super().execution(execution_id)
        self.handles.append(handle)
        return handle


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds ``--m3-postgres-url``."""
    group = parser.getgroup("m3", "m3 managed elicitation input")
    group.addoption(
        "--m3-postgres-url",
        dest="m3_postgres_url",
        default=None,
        metavar="URL",
        help="give m3_store and m3_kit a PostgresExecutionStore on this database "
        "(postgres://user@host/database) instead of a fresh SQLite file",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Declares the ``m3_postgres`` marker."""
    config.addinivalue_line(
        "markers",
        "m3_postgres(url): m3_store and m3_kit use the PostgreSQL database at url "
        "instead of a fresh SQLite file",
    )


def _postgres_url(request: pytest.FixtureRequest) -> Optional[str]:
    marker = request.node.get_closest_marker("m3_postgres")
    if marker is not None:
        url = marker.kwargs.get("url", marker.args[0] if marker.args else None)
        if not isinstance(url, str) or not url:
            raise pytest.UsageError("@pytest.mark.m3_postgres(url) needs the database's URL")
        return url
    option = request.config.getoption("m3_postgres_url", default=None)
    return option if isinstance(option, str) and option else None


@pytest.fixture
def m3_env() -> Dict[str, str]:
    """The environment of ``m3_kit``'s child processes (servers, harnesses): empty, since a kit
    passes nothing of the test process's own environment. Override this fixture to give
    variables."""
    return {}


@pytest.fixture
def m3_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExecutionStoreFixture]:
    """A fresh ``SQLiteExecutionStore`` in the test's temporary directory, or a
    ``PostgresExecutionStore`` (``@pytest.mark.m3_postgres(url)`` or ``--m3-postgres-url``);
    closed after the test."""
    url = _postgres_url(request)
    store: ExecutionStoreFixture
    if url is not None:
        store = PostgresExecutionStore(url)
    else:
        store = SQLiteExecutionStore(tmp_path / "executions.sqlite")
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def m3_kit(
    request: pytest.FixtureRequest, m3_store: ExecutionStoreFixture, m3_env: Dict[str, str]
) -> Iterator[MCPTestKit]:
    """An ``MCPTestKit`` on ``m3_store`` whose children get ``m3_env``. Leaving the test cancels
    its running executions; a failing test's report lists the store's pending rounds and the
    kit's executions with their events."""
    watched = _Watched(m3_store, isinstance(m3_store, PostgresExecutionStore))
    kit = RecordingKit(m3_store, m3_env)
    watched.handles = kit.handles
    request.node.stash[_WATCHED] = watched
    with kit:
        yield kit


def _pending_rounds(watched: _Watched) -> List[str]:
    records = watched.store.managed_input_store().list_rounds(status=ManagedInputStatus.PENDING)
    since = watched.started - timedelta(seconds=1)
    lines = []
    for record in records:
        pending = record.pending
        if watched.postgres and record.timestamps.created_at < since:
            continue
        lines.append(
            f"  {pending.round_id}  execution {pending.execution_id}  "
            f"{pending.server}: {pending.operation_kind} {pending.operation_name}  "
            f"requests: {', '.join(sorted(pending.requests))}"
        )
    return lines


def _rounds_of(watched: _Watched, execution_id: str) -> List[str]:
    """Every round of one execution, whatever its status: id, status, failure code."""
    try:
        records = watched.store.managed_input_store().list_rounds(execution_id=execution_id)
    except Exception as error:  # a store the test closed, a database gone
        return [f"    rounds: could not be read ({type(error).__name__})"]
    lines = []
    for record in records:
        failure = "" if record.failure_code is None else f" ({record.failure_code})"
        lines.append(f"    round {record.round_id}: {record.status.value}{failure}")
    return lines


def _executions(watched: _Watched) -> Tuple[int, List[str]]:
    lines: List[str] = []
    seen: Set[str] = set()
    for handle in watched.handles:
        if handle.execution_id in seen:
            continue
        seen.add(handle.execution_id)
        try:
            state = handle.snapshot()
            outcome = "" if state.outcome is None else f": {state.outcome}"
            lines.append(f"  {handle.execution_id}  {state.lifecycle.value}{outcome}")
            diagnostics = handle.diagnostics()
        except Exception as error:  # the report must not hide the test's own failure
            lines.append(f"  {handle.execution_id}  (could not be read: {type(error).__name__})")
            continue
        lines.extend(_rounds_of(watched, handle.execution_id))
        if diagnostics.events_dropped:
            lines.append(f"    ({diagnostics.events_dropped} earlier events dropped)")
        for event in diagnostics.events:
            lines.append(f"    event {event.at.isoformat()}  {event.kind}  {event.message}")
        if not diagnostics.events:
            lines.append("    (no harness events)")
    return len(seen), lines


def _describe(watched: _Watched) -> str:
    try:
        rounds = _pending_rounds(watched)
        head = f"pending rounds ({len(rounds)}):"
    except Exception as error:  # a store the test closed, a database gone
        rounds = []
        head = f"pending rounds: could not be read ({type(error).__name__})"
    count, executions = _executions(watched)
    return "\n".join([head, *rounds, f"executions ({count}):", *executions])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Adds the section ``m3: pending rounds and events`` to the report of a failing test that
    used ``m3_kit``."""
    report = yield
    watched = item.stash.get(_WATCHED, None)
    if watched is not None and report.when == "call" and report.failed:
        report.sections.append((SECTION, _describe(watched)))
    return report
