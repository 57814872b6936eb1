"""Every place an operator reads about the options agrees with their declarations.

The declarations (``oxiedge/options/``, listed in ``oxiedge.config.OPTIONS``) are the one
source: README's option table, the example ``systemd/oxiedge.env``, ``oxiedge serve --help``
and the bound rows of docs/limits.md must name every option with its flag, variable and
default, and nothing else. A failure says which row or line to add, fix or remove.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from oxiedge.config import OPTIONS, Config, Option

REPO = Path(__file__).resolve().parents[2]


def _plain(cell: str) -> str:
    return cell.replace("`", "").replace("*", "").strip()


def readme_rows() -> list[list[str]]:
    """The cells of each row of README's ``oxiedge serve`` option table."""
    text = (REPO / "README.md").read_text()
    section = text.split("## `oxiedge serve`", 1)[1]
    table = section.split("| flag | env | default |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.strip().splitlines()[1:] if line.startswith("|")]
    return [[c.strip() for c in row.strip().strip("|").split(" | ")] for row in rows]


def test_readme_option_table_is_the_declarations() -> None:
    rows = readme_rows()
    by_env = {}
    for cells in rows:
        assert len(cells) == 3, f"README row with {len(cells)} cells: {cells}"
        env = re.match(r"`(OXIEDGE_[A-Z0-9_]+)`", cells[1])
        assert env, f"README row without a variable first in its env cell: {cells}"
        assert env.group(1) not in by_env, f"README: two rows for {env.group(1)}"
        by_env[env.group(1)] = cells
    declared = {opt.env: opt for opt in OPTIONS}
    assert not by_env.keys() - declared.keys(), \
        f"README rows for undeclared options: {sorted(by_env.keys() - declared.keys())}"
    missing = [f"| `{o.flag}{' ' + o.metavar if o.metavar else ''}` | `{o.env}` | "
               f"{o.shown_default} |" for o in OPTIONS if o.env not in by_env]
    assert not missing, "README lacks rows like:\n" + "\n".join(missing)
    for env, (flag_cell, _env_cell, default_cell) in by_env.items():
        opt = declared[env]
        flag = f"`{opt.flag}{' ' + opt.metavar if opt.metavar else ''}`"
        assert flag_cell.startswith(flag), f"README {env}: flag cell should start {flag}"
        assert _plain(default_cell).startswith(opt.shown_default), \
            f"README {env}: default cell should start with {opt.shown_default!r}"


def _unit_environment() -> dict[str, str]:
    """What the unit and the image's drop-ins set (``Environment=``), as the appliance runs."""
    found: dict[str, str] = {}
    units = [REPO / "systemd/oxiedge.service",
             *sorted((REPO / "image/rootfs/etc/systemd/system").glob("oxiedge.service.d/*"))]
    for unit in units:
        for name, value in re.findall(r"^Environment=(OXIEDGE_\w+)=(.*)$",
                                      unit.read_text(), re.M):
            found[name] = value.strip()
    return found


def test_env_example_has_every_option_once_with_its_default() -> None:
    """Each variable appears once, commented out, showing what applies while it stays so:
    the default, or what the unit / the image sets; an option without a default shows an
    example that parses."""
    text = (REPO / "systemd/oxiedge.env").read_text()
    lines = re.findall(r"^#?(OXIEDGE_\w+)=(.*)$", text, re.M)
    declared = {opt.env: opt for opt in OPTIONS}
    names = [name for name, _ in lines]
    assert not set(names) - declared.keys(), f"undeclared: {sorted(set(names) - declared.keys())}"
    assert len(names) == len(set(names)), "a variable appears twice"
    missing = [f"#{o.env}={o.default}" for o in OPTIONS if o.env not in names]
    assert not missing, "systemd/oxiedge.env lacks:\n" + "\n".join(missing)
    assert not re.search(r"^OXIEDGE_", text, re.M), "the example sets a variable: comment it"
    unit = _unit_environment()
    for name, value in lines:
        opt = declared[name]
        if opt.default == "":
            opt.parse(value)  # an example: it must be valid
        else:
            assert value in (opt.default, unit.get(name)), \
                f"systemd/oxiedge.env: #{name}={value}, but the default is {opt.default!r}" \
                + (f" and the unit sets {unit[name]!r}" if name in unit else "")


def serve_help() -> str:
    env = {**os.environ, "TERMINAL_WIDTH": "1000", "COLUMNS": "1000", "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", "oxiedge", "serve", "--help"], env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout


def test_serve_help_lists_every_option_as_declared() -> None:
    rows = {}
    for line in serve_help().splitlines():
        line = line.strip("│ \t")
        if line.startswith("--"):
            rows[line.split()[0]] = " ".join(line.split())
    rows.pop("--help", None)
    flags = {opt.flag.split("/")[0]: opt for opt in OPTIONS}
    assert rows.keys() == flags.keys(), (
        f"--help has {sorted(rows.keys() - flags.keys())} undeclared, "
        f"lacks {sorted(flags.keys() - rows.keys())}")
    for flag, row in rows.items():
        opt = flags[flag]
        tail = " ".join(opt.help_text().split())
        assert row.endswith(tail), f"--help for {flag}: {row!r} should end {tail!r}"
        if opt.metavar:
            assert row.split()[1] == opt.metavar, f"--help for {flag}: placeholder {opt.metavar}"
        else:  # a switch: its off form second
            assert row.split()[1] == opt.flag.split("/")[1], f"--help for {flag}"


def limits_rows() -> dict[str, tuple[str, str]]:
    """Rows of docs/limits.md that document a serve option: variable -> (row, section)."""
    found: dict[str, tuple[str, str]] = {}
    section = ""
    for line in (REPO / "docs/limits.md").read_text().splitlines():
        if line.startswith("## "):
            section = line[3:]
        cells = line.strip("|").split(" | ")
        env = re.match(r" ?`--[a-z-]+` / `(OXIEDGE_\w+)`", cells[1]) if len(cells) > 4 else None
        if env:
            assert env.group(1) not in found, f"docs/limits.md: two rows for {env.group(1)}"
            found[env.group(1)] = (line, section)
    return found


def test_limits_rows_are_the_declared_bounds() -> None:
    rows = limits_rows()
    declared = {opt.env: opt for opt in OPTIONS}
    extra = [env for env in rows if env not in declared or declared[env].limits is None]
    assert not extra, f"docs/limits.md has rows for options that declare none: {extra}"
    for opt in OPTIONS:
        want, bound = opt.limits_row(), opt.limits
        if want is None or bound is None:
            continue
        row, section = rows.get(opt.env, ("", ""))
        assert row == want, f"docs/limits.md: the row of {opt.env} should read\n{want}"
        assert section.startswith(bound.section), \
            f"docs/limits.md: {opt.env} belongs under '## {bound.section}'"


def test_defaults_are_one_value() -> None:
    """``Config()`` (tests build it directly) is what an empty environment resolves to."""
    assert Config() == Config.resolve({}, env={})


@pytest.mark.parametrize("opt", OPTIONS, ids=lambda o: o.name)
def test_each_declaration_is_whole(opt: Option) -> None:
    assert opt.flag.startswith("--") and opt.env.startswith("OXIEDGE_")
    assert opt.help and not opt.help.endswith(".")
    assert "default" not in opt.help.lower(), "the default goes into default / shown_default"
    if opt.kind.shape == "switch":
        assert opt.flag == f"{opt.flag.split('/')[0]}/--no-{opt.flag.split('/')[0][2:]}"
