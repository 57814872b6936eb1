"""Progress of a long operation: a streaming operation (docs/operations.md) sends
``{"done", "total", ...}`` events while it works; on a terminal they drive a rich progress
bar on stderr (count, rate, time left). ``--quiet`` or a stderr that is not a terminal
draws nothing; the result is the same."""

from __future__ import annotations

import sys
import time
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
    started = 0.0

    def on_event(event: Any) -> None:
        nonlocal bar, task, started
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
            started = time.monotonic()
        bar.update(task, completed=event["done"], total=event.get("total"))
        # The average since the bar appeared: rich's own estimate needs samples spread
        # over time, and an operation's events can come in one burst at the end.
        elapsed = time.monotonic() - started
        bar.update(task, rate=f"{event['done'] / elapsed:,.0f}/s" if elapsed > 0.2 else "")

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
