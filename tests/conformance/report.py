"""The generated blocks of docs/conformance.md: each runner rewrites only its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

#: The code an MQTT suite runs against: the whole package, since the listener bound
#: (connections.py), the hot loop (net/), sessions (store/) and start-up all take part.
MQTT_BROKER_PATHS = ("oxiedge",)


def code_revision(repo: Path, paths: tuple[str, ...] = MQTT_BROKER_PATHS) -> str:
    """The last commit of ``paths`` in ``repo``, '+dirty' if the working tree differs there
    (the broker is developed while the suites run)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL).stdout.strip()
    rev = git("log", "-1", "--format=%h", "--", *paths)
    return rev + ("+dirty" if git("status", "--porcelain", "--", *paths) else "")


def replace_block(path: Path, block: str, begin: str, end: str) -> None:
    """Put ``block`` (which starts with ``begin`` and ends with ``end``) where the old block
    of ``path`` stands, keeping everything around it; append it if there is none yet."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block + "\n"
    path.write_text(text, encoding="utf-8")
