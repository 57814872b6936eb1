"""``gcpolicy.CollectionPause``: automatic collection paused while an HTTP answer is built and
sent, nested holders, the limit, and a collector someone else disabled left alone."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from oxiedge.gcpolicy import CollectionPause


@pytest.fixture(autouse=True)
def _collector_back_on() -> Iterator[None]:
    yield
    gc.enable()


def test_holders_nest_and_the_last_one_resumes() -> None:
    pause = CollectionPause()
    with pause.held():
        assert not gc.isenabled()
        with pause.held():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer answer is still being sent
    assert gc.isenabled() and pause.pauses == 1 and pause.cut == 0


def test_the_limit_ends_a_long_pause() -> None:
    pause = CollectionPause(limit_s=0.0)
    with pause.held():
        pause.check()  # between two chunks of a slow answer
        assert gc.isenabled() and pause.cut == 1
    assert gc.isenabled()
    with pause.held():  # the next answer pauses again
        assert not gc.isenabled()
    assert pause.pauses == 2


def test_a_collector_disabled_elsewhere_stays_disabled() -> None:
    gc.disable()
    pause = CollectionPause(limit_s=0.0)
    with pause.held():
        pause.check()
    assert not gc.isenabled() and pause.pauses == 0


def test_an_exception_resumes_collection() -> None:
    pause = CollectionPause()
    with pytest.raises(RuntimeError), pause.held():
        raise RuntimeError("a handler failed")
    assert gc.isenabled()
