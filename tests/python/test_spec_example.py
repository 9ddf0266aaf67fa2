"""The specification's example (``spec_example.py``, character for character) with the scripted
harness in place of Codex: the same code, with only its agent's dict replaced, runs against the
bundled shipping server in a fresh directory and succeeds. (Its Codex run, with a loopback model
server, is another test's; ``tests/all/python_package.rs`` checks the file against the
specification and runs mypy --strict on it.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest

from kit_support import only_text, shipping_server
from m3.storage import ManagedInputStatus, SQLiteManagedInputStore
from m3.types import ExecutionResult

SPEC_EXAMPLE = Path(__file__).with_name("spec_example.py")

#: The example's agent, as the specification writes it.
CODEX_AGENT = """                {
                    "harness": "codex",
                    "models": [os.environ["M3_DOCS_CODEX_MODEL"]],
                }"""

#: The scripted harness's agent: one call of the tool the example allows.
SCRIPTED_AGENT = """                {
                    "harness": "scripted",
                    "script": {
                        "steps": [
                            {
                                "tool": "shipping:book_shipment",
                                "arguments": {"item": "book", "quantity": 1},
                            }
                        ]
                    },
                }"""


def test_the_specification_s_example_runs_with_the_scripted_harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = SPEC_EXAMPLE.read_text(encoding="utf-8")
    example = text[text.index("import os\n") :]
    assert example.rstrip().endswith("store.close()")
    assert example.count(CODEX_AGENT) == 1, "the example's agent is where it was"
    code = example.replace(CODEX_AGENT, SCRIPTED_AGENT)
    monkeypatch.chdir(tmp_path)  # the example's store is "executions.sqlite", relative
    namespace: Dict[str, Any] = {"__name__": "spec_example", "shipping_server": shipping_server()}
    exec(compile(code, "spec_example.py (scripted harness)", "exec"), namespace)
    result = namespace["result"]
    assert isinstance(result, ExecutionResult)
    assert result.succeeded, str(result.outcome)
    text = only_text(result)
    assert "1 Main Street" in text and "Pune" in text, text
    pending = namespace["pending"]
    record = SQLiteManagedInputStore(tmp_path / "executions.sqlite").get_round(pending.round_id)
    assert record is not None and record.status is ManagedInputStatus.RESOLVED
    assert record.idempotency_key == f"address-{pending.round_id}"
    assert record.delivery_attempts == 1
