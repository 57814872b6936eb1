"""Progress of a long operation: a streaming operation (docs/operations.md) sends
``{"done", "total", ...}`` events while it works; on a terminal they drive a rich progress
bar on stderr (count, rate, time left). ``--quiet`` or a stderr that is not a terminal
draws nothing; the result is the same."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..admin.client import ServerNotRunning, call_stream
from ..admin.protocol import AdminError
from .base import Settings, _exit_code, _fail


def run_with_progress(socket: Path, op: str, args: dict[str, Any], label: str,
                      offline: Callable[[], Any] | None = None) -> Any:
    """Run the streaming operation ``op``; its final result (a refusal exits as
    ``_request`` does). With no server running: ``offline()`` if given (it does the work
    on the data dir, without progress)."""
    from ..admin import client

    draw = sys.stderr.isatty() and not Settings.quiet
    bar: Any = None
    task: Any = None

    def on_event(event: Any) -> None:
        nonlocal bar, task
        if not draw or not isinstance(event, dict) or "done" not in event:
            return
        if bar is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            bar = Progress(TextColumn("{task.description}"), BarColumn(),
                           MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                           TimeRemainingColumn(), transient=True)
            bar.start()
            task = bar.add_task(label, total=event.get("total"), rate="")
        bar.update(task, completed=event["done"], total=event.get("total"))
        speed = bar.tasks[0].speed  # (rich's estimate over its recent samples)
        bar.update(task, rate="" if speed is None else f"{speed:,.0f}/s")

    try:
        return call_stream(socket, op, args, on_event, timeout=client.DEFAULT_TIMEOUT)
    except ServerNotRunning:
        if offline is not None:
            return offline()
        _fail(f"no server is running on {socket.parent}: start it with `oxiedge serve` or "
              "pass --data")
    except AdminError as exc:
        _fail(str(exc), _exit_code(exc))
    except TimeoutError:
        _fail(f"the server on {socket.parent} did not answer within --timeout")
    finally:
        if bar is not None:
            bar.stop()
