"""Opening the one RocksDB that holds everything, with options sized for a 1 GB board.

Theory of operation
-------------------
oxiedge keeps a single RocksDB in ``<data>/db`` in raw mode (keys and values are bytes; no
pickle). Column families group records by *kind*, never by queue or collection (many column
families multiply memtables and RSS, see docs/storage.md):

``meta``  collection catalog, id high-water marks, index definitions, the format version
``docs``  JSON documents, key = collection id (4 bytes BE) + ``_id`` (8 bytes BE)
``idx``   secondary index entries (``index.py``)
``mqtt``  the MQTT broker's records (sessions, queued / in-flight messages, QoS 2, retained)
``amqp``  the AMQP broker's hot records (persistent messages of durable queues)
``uplink`` the uplinks' outboxes (messages waiting for the upstream's confirm)
``quarantine`` records recovery could not decode, moved aside (``quarantine.py``)

Column families on disk that this version does not know (written by a newer one, or by a
tool) are opened with default options and left alone: RocksDB refuses to open a database
without naming every family it has.

All column families share one WAL, so one ``WriteBatch`` plus one ``flush_wal(True)`` commits
across them atomically. The memory profile (8 MB block cache shared by every family, 8 MB
memtables, a 32 MB cap on all memtables and on the WAL) keeps RSS near 45 MB with a million
messages written (docs/storage.md has the measurement) and bounds crash-recovery replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    Options,
    Rdict,
)

COLUMN_FAMILIES: tuple[str, ...] = ("meta", "docs", "idx", "mqtt", "amqp", "uplink",
                                    "quarantine")
# Families whose records churn (insert, ack, delete): tombstones must not pile up.
_CHURNING = frozenset({"mqtt", "amqp", "uplink"})


@dataclass(frozen=True, slots=True)
class MemoryProfile:
    """RocksDB memory knobs; ``small`` is the default for 1 GB boards."""

    block_cache: int = 8 << 20
    write_buffer: int = 8 << 20
    max_write_buffers: int = 2
    total_memtables: int = 32 << 20
    max_total_wal: int = 32 << 20
    max_open_files: int = 64
    # Write-once/delete-once tuning of the churning families (docs/storage.md, "What a
    # backlog writes"): L0 files before a compaction, WAL files kept for reuse, and the
    # compact-on-deletion collector.
    l0_trigger: int = 4
    recycle_wals: int = 0
    deletion_collector: bool = True


SMALL = MemoryProfile()


class StoreLockedError(RuntimeError):
    """The data dir's database is held by another process (usually a running server)."""


def _family_options(profile: MemoryProfile, cache: Cache, churning: bool) -> Options:
    opts = Options(raw_mode=True)
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_bloom_filter(10, False)
    table.set_cache_index_and_filter_blocks(True)
    opts.set_block_based_table_factory(table)
    opts.set_write_buffer_size(profile.write_buffer)
    opts.set_max_write_buffer_number(profile.max_write_buffers)
    opts.set_compression_type(DBCompressionType.lz4())
    if churning:
        opts.set_level_zero_file_num_compaction_trigger(profile.l0_trigger)
        if profile.deletion_collector:
            # Compact files whose sliding window of 1000 entries holds >= 500 deletions,
            # or whose deletion ratio exceeds one half (docs/storage.md: tombstones).
            opts.add_compact_on_deletion_collector_factory(1000, 500, 0.5)
    return opts


def existing_families(path: Path) -> list[str]:
    """Names of the column families of the database at ``path`` ([] if there is none)."""
    if not (path / "CURRENT").exists():
        return []
    try:
        return [str(name) for name in Rdict.list_cf(str(path))]
    except Exception:  # unreadable: the open below reports the real error
        return []


def unknown_families(path: Path) -> list[str]:
    """Column families on disk that this version does not use (left alone)."""
    return [name for name in existing_families(path)
            if name != "default" and name not in COLUMN_FAMILIES]


def open_db(path: Path, profile: MemoryProfile = SMALL, read_only: bool = False) -> Rdict:
    """Open (creating if needed) the database at ``path`` with every column family."""
    cache = Cache(profile.block_cache)
    opts = _family_options(profile, cache, churning=False)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_db_write_buffer_size(profile.total_memtables)
    opts.set_max_total_wal_size(profile.max_total_wal)
    opts.set_max_open_files(profile.max_open_files)
    opts.set_keep_log_file_num(3)
    opts.set_max_log_file_size(1 << 20)
    opts.set_max_background_jobs(2)
    if profile.recycle_wals:
        opts.set_recycle_log_file_num(profile.recycle_wals)
    families = {
        name: _family_options(profile, cache, churning=name in _CHURNING)
        for name in COLUMN_FAMILIES
    }
    for name in unknown_families(path):
        families[name] = Options(raw_mode=True)
    if read_only:  # a read-only open cannot create a family (an old dir has no quarantine)
        on_disk = set(existing_families(path))
        families = {name: o for name, o in families.items() if name in on_disk}
    access = AccessType.read_only() if read_only else AccessType.read_write()
    try:
        return Rdict(str(path), opts, column_families=families, access_type=access)
    except Exception as exc:  # rocksdict raises a bare Exception for I/O errors
        if "lock" in str(exc).lower():
            raise StoreLockedError(f"database {path} is in use by another process") from exc
        raise
