"""The small query language of ``find``: filters, dotted paths and sort keys.

A filter is a JSON object. Each key is a field path (``a.b.c`` walks nested objects, and a
numeric part indexes an array); each value is either a literal (equality) or an object of
operators: ``$eq $ne $gt $gte $lt $lte $in $nin $exists``. ``$and``/``$or`` take lists of
filters. As in MongoDB, a literal or ``$eq`` also matches an array field containing the value.
Ordering comparisons only hold between values of the same kind (numbers with numbers, strings
with strings); anything else does not match, so ``{"value": {"$gt": 3}}`` never matches
``"value": "high"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

MISSING: Any = object()
Predicate = Callable[[dict[str, Any]], bool]


class QueryError(ValueError):
    """A filter or sort specification is malformed; the message says what is wrong."""


def get_path(doc: Any, path: str) -> Any:
    """Value at a dotted path, or ``MISSING``."""
    cur = doc
    for part in path.split("."):
        if isinstance(cur, dict):
            cur = cur.get(part, MISSING)
        elif isinstance(cur, list) and part.isdigit():
            idx = int(part)
            cur = cur[idx] if idx < len(cur) else MISSING
        else:
            return MISSING
        if cur is MISSING:
            return MISSING
    return cur


def is_operator_object(cond: Any) -> bool:
    """True if a field's condition is an object of operators, not a literal to compare."""
    return isinstance(cond, dict) and bool(cond) and all(k.startswith("$") for k in cond)


def _kind(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        return 1
    if isinstance(value, int | float):
        return 2
    if isinstance(value, str):
        return 3
    if isinstance(value, list):
        return 4
    return 5


def _equal(a: Any, b: Any) -> bool:
    if _kind(a) != _kind(b):
        return False
    return bool(a == b)


def _eq_match(value: Any, target: Any) -> bool:
    if value is MISSING:
        return target is None
    if _equal(value, target):
        return True
    return isinstance(value, list) and not isinstance(target, list) and any(
        _equal(v, target) for v in value
    )


def _ordered(op: str, value: Any, target: Any) -> bool:
    if value is MISSING or _kind(value) != _kind(target) or _kind(target) not in (2, 3):
        return False
    if op == "$gt":
        return bool(value > target)
    if op == "$gte":
        return bool(value >= target)
    if op == "$lt":
        return bool(value < target)
    return bool(value <= target)


def _op_predicate(path: str, op: str, arg: Any) -> Predicate:
    if op == "$eq":
        return lambda d: _eq_match(get_path(d, path), arg)
    if op == "$ne":
        return lambda d: not _eq_match(get_path(d, path), arg)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if _kind(arg) not in (2, 3):
            raise QueryError(f"{path}: {op} needs a number or a string, got {arg!r}")
        return lambda d: _ordered(op, get_path(d, path), arg)
    if op in ("$in", "$nin"):
        if not isinstance(arg, list):
            raise QueryError(f"{path}: {op} needs a list, got {arg!r}")
        values = list(arg)
        if op == "$in":
            return lambda d: any(_eq_match(get_path(d, path), v) for v in values)
        return lambda d: not any(_eq_match(get_path(d, path), v) for v in values)
    if op == "$exists":
        if not isinstance(arg, bool):
            raise QueryError(f"{path}: $exists needs true or false, got {arg!r}")
        return lambda d: (get_path(d, path) is not MISSING) == arg
    raise QueryError(f"{path}: unknown operator {op!r}")


def compile_filter(spec: dict[str, Any] | None) -> Predicate:
    """Turn a filter object into a predicate; raises ``QueryError`` for bad filters."""
    if spec is None or spec == {}:
        return lambda _d: True
    if not isinstance(spec, dict):
        raise QueryError(f"a filter must be a JSON object, got {type(spec).__name__}")
    preds: list[Predicate] = []
    for key, cond in spec.items():
        if key in ("$and", "$or"):
            if not isinstance(cond, list) or not cond:
                raise QueryError(f"{key} needs a non-empty list of filters")
            preds.append(_combine(key, [compile_filter(c) for c in cond]))
        elif key.startswith("$"):
            raise QueryError(f"unknown top-level operator {key!r}")
        elif is_operator_object(cond):
            preds.extend(_op_predicate(key, op, arg) for op, arg in cond.items())
        else:
            preds.append(_op_predicate(key, "$eq", cond))
    if len(preds) == 1:
        return preds[0]
    return lambda d: all(p(d) for p in preds)


def _combine(op: str, subs: list[Predicate]) -> Predicate:
    if op == "$and":
        return lambda d: all(p(d) for p in subs)
    return lambda d: any(p(d) for p in subs)


SortSpec = list[tuple[str, int]]


def parse_sort(spec: str | Iterable[tuple[str, int]] | None) -> SortSpec:
    """``"a,-b"`` or ``[("a", 1), ("b", -1)]`` → a list of (path, direction)."""
    if spec is None:
        return []
    if isinstance(spec, str):
        out: SortSpec = []
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            out.append((part[1:], -1) if part.startswith("-") else (part.lstrip("+"), 1))
        return out
    result = [(str(p), -1 if d in (-1, "desc", "-1") else 1) for p, d in spec]
    return result


def _sort_value(value: Any) -> tuple[int, Any]:
    if value is MISSING or value is None:
        return (0, 0)
    kind = _kind(value)
    if kind in (2, 3, 1):
        return (kind, value)
    return (kind, repr(value))


def sort_docs(docs: list[dict[str, Any]], sort: SortSpec) -> list[dict[str, Any]]:
    """Stable multi-key sort; missing values sort first, like MongoDB's null."""
    for path, direction in reversed(sort):
        docs.sort(key=_sort_key(path), reverse=direction < 0)
    return docs


def _sort_key(path: str) -> Callable[[dict[str, Any]], tuple[int, Any]]:
    return lambda d: _sort_value(get_path(d, path))
