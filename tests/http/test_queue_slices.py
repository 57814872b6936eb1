"""The AMQP service hands its queue rows out a slice at a time (``queue_row_slices``), and
the HTTP view drains them with a turn of the event loop between slices."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.amqp.conftest import amqp_service


async def test_queue_rows_come_in_sorted_slices(tmp_path: Path) -> None:
    async with amqp_service(tmp_path) as svc:
        for i in (5, 3, 9, 1, 7):
            svc.broker.new_queue(f"q{i}", 100 + i)
        slices = svc.queue_row_slices(2)
        first = next(slices)
        assert [r["name"] for r in first] == ["q1", "q3"]
        svc.broker.delete_queue(svc.broker.queues["q7"])  # gone before its slice is made
        assert [[r["name"] for r in s] for s in slices] == [["q5"], ["q9"]]
        assert [r["name"] for r in svc.queue_rows()] == ["q1", "q3", "q5", "q9"]
        assert svc.queue_row("q3") == svc.queue_rows()[1]
        assert svc.queue_row("nope") is None


async def test_the_view_lets_the_loop_run_between_slices(tmp_path: Path) -> None:
    from oxiedge.http.wiring import QUEUE_SLICE, ServerView

    async with amqp_service(tmp_path) as svc:
        for i in range(QUEUE_SLICE * 3 + 1):
            svc.broker.new_queue(f"q{i:04d}", 100 + i)
        view = ServerView(svc.app, svc.admin_handlers(), {}, svc)
        turns = 0

        async def count_turns() -> None:
            nonlocal turns
            while True:
                await trio.lowlevel.checkpoint()
                turns += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(count_turns)
            await trio.lowlevel.checkpoint()
            before = turns
            rows = await view.queue_rows()
            nursery.cancel_scope.cancel()
        assert rows is not None and len(rows) == QUEUE_SLICE * 3 + 1
        assert turns - before >= 3  # another task ran between the slices
        assert await ServerView(svc.app, {}, {}, None).queue_rows() is None
