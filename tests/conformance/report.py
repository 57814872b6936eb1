"""The generated blocks of docs/conformance.md: each runner rewrites only its own."""

from __future__ import annotations

from pathlib import Path


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
