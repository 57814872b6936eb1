"""Collection names and the store's usage error (shared by ``store.py`` and ``index.py``)."""

from __future__ import annotations

import re

_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}$")


class StoreError(ValueError):
    """Bad use of the store (invalid collection name, unknown document, bad document)."""


def validate_collection_name(name: str) -> str:
    """Return ``name`` if it is a valid collection name, else raise ``StoreError``."""
    if not isinstance(name, str) or not _COLLECTION_NAME.match(name):
        raise StoreError(
            f"invalid collection name {name!r}: use 1-100 characters from A-Z a-z 0-9 _ . -,"
            " not starting with . or -"
        )
    return name
