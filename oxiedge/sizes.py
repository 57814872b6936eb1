"""Byte sizes and memory limits as operators write them (``200MB``, ``0.4`` of the memory).

Units, as RabbitMQ reads them: ``kB``/``MB``/``GB``/``TB`` are powers of ten (10³, 10⁶, …);
``KiB``/``MiB``/``GiB``/``TiB`` and the one-letter ``k``/``M``/``G``/``T`` (systemd's
``MemoryMax=512M``) are powers of two; a bare number is bytes. Case does not matter.

The memory a watermark fraction is taken of is the smaller of the RAM and the process's cgroup
limit (cgroup v2 ``memory.max`` and ``memory.high``, v1 ``memory.limit_in_bytes``, of the
process's cgroup and its ancestors): under the unit's ``MemoryMax=512M`` on a 4 GB Pi, 0.4
means 0.4 of 512 MiB, so the alarm throttles publishers before the kernel kills the broker.
``OXIEDGE_CGROUP_ROOT`` (default ``/sys/fs/cgroup``) points the reader at another cgroup
mount; the tests use it with a fake directory.

Free of trio and RocksDB so the configuration and the CLI can parse them cheaply.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4}
#: The smallest absolute memory watermark: below it a broker cannot run, so a small number
#: is a mistake (``1`` would block every publisher), not a setting.
MIN_MEMORY_WATERMARK = 32_000_000
#: A limit at or above this is "no limit" (cgroup v1 writes 2^63 rounded to a page).
_UNLIMITED = 1 << 60


def _multiplier(unit: str) -> int | None:
    u = unit.lower()
    if u in ("", "b"):
        return 1
    power = _POWERS.get(u[:1])
    if power is None:
        return None
    rest = u[1:]
    if rest in ("", "i", "ib"):  # k, Ki, KiB: binary (systemd's M, ls -h)
        return 1 << (10 * power)
    if rest == "b":  # kB, MB: decimal, as RabbitMQ and the SI mean them
        return 1000 ** power
    return None


def parse_size(text: str) -> int:
    """``"200MB"`` (200·10⁶), ``"64KiB"`` (64·2¹⁰), ``"1.5G"``, ``"4096"`` → bytes;
    raises ``ValueError``."""
    m = _SIZE.match(str(text))
    mult = _multiplier(m.group(2)) if m else None
    if m is None or mult is None:
        raise ValueError(f"invalid size {text!r} (e.g. 200MB = 200·10⁶ bytes, 64KiB = "
                         "64·2¹⁰, 4096)")
    return int(float(m.group(1)) * mult)


def format_size(n: int) -> str:
    """Bytes → ``"512.0 MiB"`` (for log and status lines)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def total_memory() -> int:
    """Physical RAM in bytes."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        return 1 << 30


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 < value < _UNLIMITED else None


def cgroup_limits(root: Path | None = None, proc_cgroup: str | None = None
                  ) -> list[tuple[int, str]]:
    """Every memory limit that applies to this process: ``(bytes, file)`` for the files of
    its cgroup and of each ancestor (v2 ``memory.max``/``memory.high``, v1
    ``memory.limit_in_bytes``). ``root`` and ``proc_cgroup`` (the text of
    ``/proc/self/cgroup``) are parameters for the tests."""
    if root is None:
        root = Path(os.environ.get("OXIEDGE_CGROUP_ROOT") or "/sys/fs/cgroup")
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return []
    found: list[tuple[int, str]] = []
    for line in proc_cgroup.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, rel = rest.partition(":")
        if not rel.startswith("/"):
            continue
        if hier == "0" and controllers == "":  # cgroup v2 (unified) hierarchy
            bases = [root, root / "unified"]
            names: tuple[str, ...] = ("memory.max", "memory.high")
        elif "memory" in controllers.split(","):  # cgroup v1 memory controller
            bases = [root / "memory"]
            names = ("memory.limit_in_bytes",)
        else:
            continue
        for base in bases:
            directory = base / rel.lstrip("/")
            while True:
                for name in names:
                    value = _read_limit(directory / name)
                    if value is not None:
                        found.append((value, str(directory / name)))
                if directory == base or base not in directory.parents:
                    break
                directory = directory.parent
    return found


def memory_limit(root: Path | None = None, proc_cgroup: str | None = None) -> tuple[int, str]:
    """The memory this process may use and where that figure comes from: the smallest
    cgroup limit when it is below the RAM (``"cgroup /sys/fs/cgroup/…/memory.max"``), else
    the RAM (``"RAM"``)."""
    ram = total_memory()
    limits = [item for item in cgroup_limits(root, proc_cgroup) if item[0] < ram]
    if not limits:
        return ram, "RAM"
    value, path = min(limits)
    return value, f"cgroup {path}"


def parse_memory_watermark(text: str, limit: int | None = None) -> int:
    """A fraction of the memory limit (``0.4``; see ``memory_limit``) or an absolute size
    (``512MB``, at least 32 MB) → bytes; raises ``ValueError``."""
    value = str(text).strip()
    try:
        fraction = float(value)
    except ValueError:
        size = parse_size(value)
    else:
        if 0 < fraction < 1:
            return int((memory_limit()[0] if limit is None else limit) * fraction)
        if fraction <= 0 or fraction != int(fraction):
            raise ValueError(f"invalid memory watermark {text!r} (a fraction like 0.4, or a "
                             "size like 512MB)")
        size = int(fraction)
    if size < MIN_MEMORY_WATERMARK:
        raise ValueError(f"memory watermark {text!r} is {size} bytes, below the 32 MB minimum "
                         "(a fraction like 0.4, or a size like 512MB)")
    return size


#: ``--max-backlog-bytes`` as a size is at least this much.
MIN_BACKLOG_BUDGET = 1_000_000


def check_backlog_budget(text: str) -> str:
    """``--max-backlog-bytes``: a fraction of the data filesystem's size (``0.5``) or a size
    (``8GB``, at least 1 MB); returns it as written, raises ``ValueError``."""
    value = str(text).strip()
    try:
        fraction = float(value)
    except ValueError:
        if parse_size(value) < MIN_BACKLOG_BUDGET:
            raise ValueError(f"backlog budget {text!r} is below the 1 MB minimum") from None
        return value
    if not 0 < fraction < 1:
        raise ValueError(f"invalid backlog budget {text!r} (a fraction like 0.5 of the data "
                         "filesystem, or a size like 8GB)")
    return value


def backlog_budget(text: str, data_dir: Path) -> tuple[int, str]:
    """``(bytes, where they come from)`` of a ``check_backlog_budget`` value: a fraction is
    of the size of the filesystem holding ``data_dir`` (its nearest existing parent)."""
    value = check_backlog_budget(text)
    try:
        fraction = float(value)
    except ValueError:
        return parse_size(value), "--max-backlog-bytes"
    where = Path(data_dir)
    while not where.exists() and where != where.parent:
        where = where.parent
    st = os.statvfs(where)
    total = st.f_blocks * st.f_frsize
    return int(total * fraction), f"{value} of the data filesystem ({format_size(total)})"
