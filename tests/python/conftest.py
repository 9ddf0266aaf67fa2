"""Fixtures of the m3 package's tests (the package's own pytest plugin, ``m3``, is loaded by its
entry point and gives ``m3_kit``, ``m3_store`` and ``m3_env``)."""

from __future__ import annotations

from pathlib import Path
import pytest

from kit_support import postgres_url
from m3.storage import ManagedInputStore, PostgresManagedInputStore, SQLiteManagedInputStore


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking ``backend`` run on SQLite, and on PostgreSQL too with ``--m3-postgres-url``."""
    if "backend" in metafunc.fixturenames:
        backends = ["sqlite"]
        if postgres_url(metafunc.config) is not None:
            backends.append("postgres")
        metafunc.parametrize("backend", backends)


@pytest.fixture
def managed_store(backend: str, tmp_path: Path, pytestconfig: pytest.Config) -> ManagedInputStore:
    """A managed-input store on a fresh SQLite file, or on the run's PostgreSQL database."""
    if backend == "postgres":
        url = postgres_url(pytestconfig)
        assert url is not None
        return PostgresManagedInputStore(url)
    return SQLiteManagedInputStore(tmp_path / "rounds.sqlite")
