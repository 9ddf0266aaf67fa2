"""The package's pytest plugin (entry point ``m3``), used by tests of its own: ``m3_kit`` on
``m3_store`` (a fresh SQLite file in the test's temporary directory, or PostgreSQL with
``--m3-postgres-url`` or ``@pytest.mark.m3_postgres(url)``), and the report of a failing test,
which lists the store's pending rounds and the executions' events and never an answer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

import pytest

from kit_support import CACHE_HOME, WAIT, address, postgres_url, submit_booking, wait_pending
from m3 import MCPTestKit
from m3.pytest_plugin import SECTION, ExecutionStoreFixture
from m3.storage import ManagedInputStatus, PostgresExecutionStore, SQLiteExecutionStore


def test_the_plugin_is_loaded_by_its_entry_point(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.has_plugin("m3")
    assert any(
        "m3_postgres" in line for line in pytestconfig.getini("markers")
    ), "the marker is declared"


def test_m3_kit_runs_an_execution_on_m3_store(
    m3_kit: MCPTestKit,
    m3_store: ExecutionStoreFixture,
    m3_env: Dict[str, str],
    tmp_path: Path,
    pytestconfig: pytest.Config,
) -> None:
    assert m3_env == {}
    if postgres_url(pytestconfig) is not None:
        assert isinstance(m3_store, PostgresExecutionStore)
    else:
        assert isinstance(m3_store, SQLiteExecutionStore)
    handle = submit_booking(m3_kit)
    pending = wait_pending(handle)
    if isinstance(m3_store, SQLiteExecutionStore):
        assert (tmp_path / "executions.sqlite").is_file(), "the store is in the test's tmp_path"
    managed = m3_store.managed_input_store()
    [listed] = managed.list_rounds(execution_id=handle.execution_id)
    assert listed.round_id == pending.round_id
    handle.respond_elicitation(pending.round_id, address(), idempotency_key="k")
    assert handle.result(timeout=WAIT).succeeded
    record = managed.get_round(pending.round_id)
    assert record is not None and record.status is ManagedInputStatus.RESOLVED


INNER_TEST = """
import json, os
from pathlib import Path

from kit_support import address, submit_booking, wait_pending


def test_fails_while_a_round_waits(m3_kit):
    answered = submit_booking(m3_kit)
    first = wait_pending(answered)
    answered.respond_elicitation(
        first.round_id,
        address(street=os.environ["M3_INNER_STREET"], city=os.environ["M3_INNER_CITY"]),
        idempotency_key=os.environ["M3_INNER_KEY"],
    )
    assert answered.result(timeout=60).succeeded
    waiting = submit_booking(m3_kit)
    pending = wait_pending(waiting)
    Path(os.environ["M3_INNER_IDS"]).write_text(json.dumps({
        "answered": answered.execution_id,
        "answered_round": first.round_id,
        "waiting": waiting.execution_id,
        "round": pending.round_id,
    }))
    assert False, "the test fails while its round waits"


def test_passes(m3_kit):
    assert m3_kit.owner_id
"""


def test_a_failing_test_s_report_shows_pending_rounds_and_events(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pytestconfig: pytest.Config
) -> None:
    ids_file = pytester.path / "ids.json"
    monkeypatch.setenv("M3_INNER_IDS", str(ids_file))
    # The answer and its key: not in the inner test's source, which its traceback shows.
    secrets = {
        "M3_INNER_STREET": "SECRET-STREET 9",
        "M3_INNER_CITY": "SECRET-CITY",
        "M3_INNER_KEY": "SECRET-IDEMPOTENCY-KEY",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    # pytester's HOME is a fresh directory: m3's compiled component is taken from the usual
    # cache rather than compiled again.
    monkeypatch.setenv("XDG_CACHE_HOME", CACHE_HOME)
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join(p for p in [str(Path(__file__).parent), os.environ.get("PYTHONPATH")] if p),
    )
    pytester.makepyfile(test_inner=INNER_TEST)
    args = ["-p", "no:cacheprovider"]
    url = postgres_url(pytestconfig)
    if url is not None:
        args += ["--m3-postgres-url", url]
    result = pytester.runpytest_subprocess(*args, "--durations=0", timeout=120)
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    ids: Dict[str, Any] = json.loads(ids_file.read_text())
    assert SECTION in out, out
    section = out[out.index(SECTION) :]
    assert "pending rounds (1):" in section, section
    assert ids["round"] in section
    pending_part = section[: section.index("executions (")]
    assert ids["answered_round"] not in pending_part, "only pending rounds are listed there"
    assert f"execution {ids['waiting']}" in section
    assert "shipping: tool book_shipment" in section
    assert "requests: shipping_address" in section
    assert "executions (2):" in section
    assert f"{ids['waiting']}  waiting_for_input" in section
    assert f"{ids['answered']}  finished: succeeded" in section
    # Each execution's rounds, whatever their status, and its harness's events (the scripted
    # harness reports none, and says so).
    assert f"round {ids['round']}: pending" in section
    assert f"round {ids['answered_round']}: resolved" in section
    assert section.count("(no harness events)") == 2, section
    for secret in secrets.values():
        assert secret not in out, f"{secret} shown in the report"
    # Only the failing test's report has the section.
    assert out.count(SECTION) == 1
