"""Fixtures of the transport-loop tests: a real store, running its committer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from oxiedge.store import Store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store.open(tmp_path / "db")
    try:
        async with s.running():
            yield s
    finally:
        s.close()
