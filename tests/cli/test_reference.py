"""docs/cli.md is the commands' own help (``oxiedge.cli.reference``): it may not drift."""

from __future__ import annotations

from pathlib import Path

from oxiedge.cli import app
from oxiedge.cli.reference import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_matches_the_commands() -> None:
    assert DOC.read_text() == render(app), (
        "docs/cli.md is out of date: run `python -m oxiedge.cli.reference > docs/cli.md`")


def test_every_command_has_help() -> None:
    text = render(app)
    sections = text.split("\n## ")[1:]
    assert len(sections) > 60
    for section in sections:
        title, _, body = section.partition("\n")
        assert body.split("```", 2)[2].strip(), f"{title} has no help text"
