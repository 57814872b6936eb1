"""What an argument table the broker keeps costs, for ``--amqp-max-arguments-bytes``.

A client's field table outlives its method in three places: the arguments of a headers
binding (``Binding.arguments``, plus the canonical form that is part of the binding's
identity, ``exchanges.args_key``, a digest), of a queue (``Queue.arguments``) and of an exchange
(``Exchange.arguments``).  The count bounds (``--amqp-max-bindings`` ...) do not bound
their size: 500 headers bindings of 8000 keys each took the RSS to ~732 MiB.

Why an estimate of the Python objects and not the encoded size: measured with tracemalloc
(CPython 3.11, 64-bit), what a decoded table keeps is 2x (one long string) to 23x (many
two-character keys without values) its encoded size, so a budget of encoded bytes would
bound memory only to within a factor of ten.  The estimate below walks the table once
(no encoding, no allocation beyond a worklist; a worklist, not recursion, so a deep
stored document cannot reach the recursion limit) with CPython's object sizes, and is
within ~15% of the measured memory for every shape tried, over rather than under (small
ints and one-character strings, which CPython shares, are charged as if they were not).
It depends only on the table, so the charge at the bind and the refund at the unbind are
the same number.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

#: ``sys.getsizeof`` of the empty containers and the fixed objects (CPython 3.11, 64-bit)
_DICT = 64
_LIST = 56
_STR = 49  # + 1 byte per character when ASCII
_STR_WIDE = 80  # + up to 4 bytes per character otherwise (charged as 4)
_BYTES = 33
_NUMBER = 32  # int 28..36, float 24, Timestamp
_DECIMAL = 104
#: a dict entry (hash, key, value: 24 bytes) with its index and the free slots a dict
#: keeps (it is at most 2/3 full): 26-45 bytes measured
_ENTRY = 40
#: a list slot (a pointer; the decoder's appends over-allocate by up to 1/8)
_SLOT = 9


def str_cost(s: str) -> int:
    """Bytes of a ``str`` object (``isascii`` is O(1) in CPython)."""
    return _STR + len(s) if s.isascii() else _STR_WIDE + 4 * len(s)


def table_cost(table: dict[str, Any]) -> int:
    """Estimated bytes of memory ``table`` holds (0 for an empty one: an empty table is
    part of the object that holds it, which its count bound covers)."""
    if not table:
        return 0
    total = 0
    todo: list[Any] = [table]
    while todo:
        value = todo.pop()
        if value is None or isinstance(value, bool):
            continue  # singletons
        if isinstance(value, dict):
            total += _DICT + _ENTRY * len(value)
            for key, item in value.items():
                total += str_cost(key) if isinstance(key, str) else _NUMBER
                todo.append(item)
        elif isinstance(value, (list, tuple)):
            total += _LIST + _SLOT * len(value)
            todo.extend(value)
        elif isinstance(value, str):
            total += str_cost(value)
        elif isinstance(value, (bytes, bytearray)):
            total += _BYTES + len(value)
        elif isinstance(value, Decimal):
            total += _DECIMAL
        else:  # int, float, Timestamp
            total += _NUMBER
    return total


def binding_cost(arguments: dict[str, Any], identity: bytes) -> int:
    """A headers binding keeps its arguments and ``identity``, their digest
    (``exchanges.args_key``: 16 bytes)."""
    if not arguments:
        return 0
    return table_cost(arguments) + _BYTES + len(identity)
