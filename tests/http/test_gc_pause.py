"""``gcpolicy.CollectionPause``: automatic collection paused while an HTTP answer is built and
sent, nested holders, the limit, and a collector someone else disabled left alone."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import trio

from oxiedge.gcpolicy import CollectionPause, watch


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


def test_a_holder_coming_or_going_ends_an_overlong_pause() -> None:
    pause = CollectionPause(limit_s=0.0)
    pause.enter()  # a login waiting out its delay, say
    assert not gc.isenabled()
    pause.enter()  # another answer begins: the first pause is over its limit
    assert gc.isenabled() and pause.cut == 1
    pause.leave()
    pause.leave()
    assert gc.isenabled() and pause.holders == 0


def test_the_listener_task_ends_a_pause_nobody_touches() -> None:
    pause = CollectionPause(limit_s=0.0)
    pause.enter()

    async def main() -> None:
        with trio.move_on_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, pause)
                while not gc.isenabled():
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()

    trio.run(main)
    assert gc.isenabled() and pause.cut == 1
    pause.leave()
