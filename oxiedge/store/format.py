"""The data dir's format version: refuse a newer one, migrate an older one.

The version is the ``meta`` key ``v`` (4 bytes BE). Data dirs written before it existed
have no such key: format 0, whose layout is format 1's without the marker and without the
``quarantine`` column family, so the migration 0 -> 1 creates the family (the open does) and
writes the marker. Format 2 adds the user entry of MQTT session records; 1 -> 2 converts
nothing (a record without it still decodes). A version above ``FORMAT_VERSION`` was
written by a newer oxiedge whose records this one may misread: the open fails with
``StoreFormatError`` (``serve`` exits 2 naming both versions) and nothing is written. A
marker that is itself unreadable is quarantined and treated as format 0 (every record is
still checked as it is decoded).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from . import quarantine
from .raw import QuarantineState

FORMAT_VERSION = 2  # 2: MQTT session records carry their user
KEY = b"v"
_U32 = struct.Struct(">I")


class StoreFormatError(RuntimeError):
    """The data dir was written by a newer oxiedge (or cannot be migrated)."""


def _0_to_1(store: QuarantineState) -> None:
    """Nothing to convert: the open created the ``quarantine`` family."""


def _1_to_2(store: QuarantineState) -> None:
    """Nothing to convert: a format-1 MQTT session record (no user entry) still decodes
    (``mqtt/persist.py``: its user is unknown until its client reconnects). The marker moves
    so that an older oxiedge refuses a data dir whose session records carry the entry,
    instead of quarantining every such session as undecodable."""


#: from-version -> the step to from-version + 1 (staged; committed with the marker)
MIGRATIONS: dict[int, Callable[[QuarantineState], None]] = {0: _0_to_1, 1: _1_to_2}


def read_version(store: QuarantineState) -> int:
    raw = store.get_raw("meta", KEY)
    if raw is None:
        return 0
    if len(raw) != _U32.size:
        quarantine.stage(store, "meta", KEY, raw, "unreadable format version marker")
        return 0
    return int(_U32.unpack(raw)[0])


def check_and_migrate(store: QuarantineState) -> int:
    """Refuse a newer format; stage the migration of an older one. Returns the version found."""
    found = read_version(store)
    if found > FORMAT_VERSION:
        raise StoreFormatError(
            f"data dir {store.path.parent} has format version {found}, written by a newer "
            f"oxiedge; this version reads format {FORMAT_VERSION} and older: upgrade oxiedge "
            "(nothing was changed)")
    if found < FORMAT_VERSION and not store.read_only:
        for version in range(found, FORMAT_VERSION):
            MIGRATIONS[version](store)
        store.stage_put("meta", KEY, _U32.pack(FORMAT_VERSION))
    return found
