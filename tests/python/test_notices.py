"""The library says on stderr when it compiles its component (a machine's first run), and
``m3.set_engine_notices(False)`` silences it; the compile happens either way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = """
import sys

import m3
from m3.storage import SQLiteManagedInputStore

if sys.argv[1] == "quiet":
    m3.set_engine_notices(False)
SQLiteManagedInputStore(sys.argv[2])
"""

NOTICE = "m3: compiling the policy engine component for this machine, once"


@pytest.mark.parametrize("quiet", [False, True])
def test_the_first_compile_is_said_unless_silenced(tmp_path: Path, quiet: bool) -> None:
    cache = tmp_path / "cache"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            PROGRAM,
            "quiet" if quiet else "said",
            str(tmp_path / "rounds.sqlite"),
        ],
        env=dict(os.environ, M3_CACHE_DIR=str(cache)),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    assert (NOTICE in run.stderr) != quiet, run.stderr
    # The compile ran (its result is in the empty cache the run was given).
    assert any(path.is_file() for path in cache.rglob("*")), list(cache.rglob("*"))
