"""Topic names, topic filters and the subscription trie (MQTT 3.1.1, 4.7).

``TopicTrie`` maps filters to subscribers. A node per filter level; matching a topic
walks the topic's levels and, at each node, follows at most the exact child, the ``+``
child and collects the ``#`` subscribers. The cost therefore grows with the depth of
the topic (and the number of wildcard branches actually present), never with the
number of subscriptions. ``RetainedTrie`` is the reverse index used on SUBSCRIBE: it
holds concrete topics and walks them with a filter.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


def valid_topic_name(topic: str) -> bool:
    """A topic name for PUBLISH: non-empty, no wildcards (MQTT-4.7.3-1, MQTT-3.3.2-2)."""
    return bool(topic) and "+" not in topic and "#" not in topic and "\x00" not in topic


def sys_topic(topic: str) -> bool:
    """``$SYS`` or under it: the broker's own topics (``systree.py``), which clients may not
    publish to."""
    return topic.startswith("$SYS") and (len(topic) == 4 or topic[4] == "/")


def reserved_topic(topic: str) -> bool:
    """A topic no client may publish to: ``$SYS`` (``sys_topic``) or one under ``$share/``,
    the prefix of shared subscriptions (as Mosquitto refuses it)."""
    return sys_topic(topic) or topic.startswith("$share/")


def topic_filter_problem(topic_filter: str) -> str | None:
    """``None`` if ``topic_filter`` is a valid subscription filter, else the reason."""
    if not topic_filter:
        return "empty topic filter"  # MQTT-4.7.3-1
    if "\x00" in topic_filter:
        return "topic filter contains NUL"  # MQTT-4.7.3-2
    if len(topic_filter.encode()) > 65535:
        return "topic filter longer than 65535 bytes"  # 1.5.3: a 2-byte length prefix
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != last):
            return "'#' must be a whole level and the last one"  # MQTT-4.7.1-2
        if "+" in level and level != "+":
            return "'+' must be a whole level"  # MQTT-4.7.1-3
    return None


#: Mosquitto's hierarchy limit: at most this many ``/`` separators in a topic or filter.
DEFAULT_MAX_TOPIC_LEVELS = 200
#: Longest topic name or filter accepted, UTF-8 bytes (the protocol allows 65535).
DEFAULT_MAX_TOPIC_LENGTH = 4096


def topic_limit_problem(topic: str, max_levels: int, max_length: int) -> str | None:
    """``None`` if ``topic`` (a name or a filter) is within the configured bounds.

    ``max_levels`` counts ``/`` separators as Mosquitto does (``"/" * 200`` passes,
    ``"/" * 201`` does not); ``max_length`` is in UTF-8 bytes. The walks over a topic
    (trie, matching) cost one step per level, so both bound the work one topic costs."""
    if topic.count("/") > max_levels:
        return f"topic has more than {max_levels} '/' separators"
    # A code point is at most 4 UTF-8 bytes: short topics skip the encoding.
    if len(topic) * 4 > max_length and len(topic.encode("utf-8")) > max_length:
        return f"topic longer than {max_length} bytes"
    return None


def valid_topic_filter(topic_filter: str) -> bool:
    """A subscription filter: ``+`` occupies a whole level (MQTT-4.7.1-3); ``#`` occupies
    a whole level and is the last one (MQTT-4.7.1-2); non-empty (MQTT-4.7.3-1)."""
    return topic_filter_problem(topic_filter) is None


def topic_matches(topic_filter: str, topic: str) -> bool:
    """True if ``topic`` matches ``topic_filter`` (reference implementation, no trie)."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False  # MQTT-4.7.2-1
    f_levels = topic_filter.split("/")
    t_levels = topic.split("/")
    for i, f in enumerate(f_levels):
        if f == "#":
            return True  # also matches the parent level: "a/#" matches "a" (4.7.1.2)
        if i >= len(t_levels):
            return False
        if f != "+" and f != t_levels[i]:
            return False
    return len(f_levels) == len(t_levels)


class _Node(Generic[K, V]):
    __slots__ = ("children", "subs")

    def __init__(self) -> None:
        self.children: dict[str, _Node[K, V]] = {}
        self.subs: dict[K, V] = {}


def _prune(path: list[tuple[_Node[K, V], str]]) -> None:
    """Drop the nodes left empty at the end of ``path`` ((parent, level) pairs, root first)."""
    for parent, level in reversed(path):
        child = parent.children[level]
        if child.subs or child.children:
            break
        del parent.children[level]


class TopicTrie(Generic[K, V]):
    """Subscriptions: filter -> {subscriber key: value} (e.g. client id -> granted QoS)."""

    __slots__ = ("_count", "_root")

    def __init__(self) -> None:
        self._root: _Node[K, V] = _Node()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, topic_filter: str, key: K, value: V) -> bool:
        """Add or replace ``key``'s subscription to ``topic_filter``; True if new."""
        node = self._root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Node()
            node = child
        new = key not in node.subs
        node.subs[key] = value
        if new:
            self._count += 1
        return new

    def remove(self, topic_filter: str, key: K) -> bool:
        """Remove ``key``'s subscription; prune empty nodes; True if it existed."""
        path: list[tuple[_Node[K, V], str]] = []
        node = self._root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                return False
            path.append((node, level))
            node = child
        if key not in node.subs:
            return False
        del node.subs[key]
        self._count -= 1
        _prune(path)
        return True

    def match(self, topic: str) -> Iterator[tuple[K, V]]:
        """Yield ``(key, value)`` of every subscription matching ``topic`` (a key appears
        once per matching filter; callers merge overlapping subscriptions)."""
        levels = topic.split("/")
        # MQTT-4.7.2-1: filters starting with a wildcard do not match "$..." topics.
        dollar = topic.startswith("$")
        last = len(levels)
        stack: list[tuple[_Node[K, V], int]] = [(self._root, 0)]
        while stack:
            node, depth = stack.pop()
            children = node.children
            if not children:
                continue
            skip_wild = dollar and depth == 0
            if not skip_wild:
                multi = children.get("#")
                if multi is not None:
                    # "#" matches the parent level too (4.7.1.2): "a/#" matches "a".
                    yield from multi.subs.items()
            if depth == last:
                continue
            exact = children.get(levels[depth])
            if exact is not None:
                if depth + 1 == last:
                    yield from exact.subs.items()
                stack.append((exact, depth + 1))
            if not skip_wild:
                single = children.get("+")
                if single is not None:
                    if depth + 1 == last:
                        yield from single.subs.items()
                    stack.append((single, depth + 1))

    def filters(self) -> Iterator[tuple[str, K, V]]:
        """Yield every ``(filter, key, value)`` (admin listings, persistence checks)."""
        stack: list[tuple[_Node[K, V], tuple[str, ...]]] = [(self._root, ())]
        while stack:
            node, path = stack.pop()
            for key, value in node.subs.items():
                yield "/".join(path), key, value
            for level, child in node.children.items():
                stack.append((child, (*path, level)))


class RetainedTrie(Generic[V]):
    """Concrete topic -> value (the retained message), searchable by a filter."""

    __slots__ = ("_count", "_root")

    def __init__(self) -> None:
        self._root: _Node[str, V] = _Node()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def get(self, topic: str) -> V | None:
        node = self._root
        for level in topic.split("/"):
            child = node.children.get(level)
            if child is None:
                return None
            node = child
        return node.subs.get(topic)

    def set(self, topic: str, value: V) -> None:
        """Set or replace the value of ``topic``."""
        node = self._root
        for level in topic.split("/"):
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Node()
            node = child
        if topic not in node.subs:
            self._count += 1
        node.subs[topic] = value

    def delete(self, topic: str) -> bool:
        """Remove ``topic``; True if it was present."""
        path: list[tuple[_Node[str, V], str]] = []
        node = self._root
        for level in topic.split("/"):
            child = node.children.get(level)
            if child is None:
                return False
            path.append((node, level))
            node = child
        if node.subs.pop(topic, None) is None:
            return False
        self._count -= 1
        _prune(path)
        return True

    def match(self, topic_filter: str) -> Iterator[tuple[str, V]]:
        """Yield ``(topic, value)`` for every stored topic matching ``topic_filter``."""
        levels = topic_filter.split("/")
        last = len(levels)
        stack: list[tuple[_Node[str, V], int]] = [(self._root, 0)]
        while stack:
            node, depth = stack.pop()
            if depth == last:
                yield from node.subs.items()
                continue
            level = levels[depth]
            if level == "#":
                # Everything at and below this node; the parent level itself too
                # ("a/#" matches "a"). The root never holds a topic itself.
                yield from node.subs.items()
                sub = [(c, name) for name, c in node.children.items()]
                while sub:
                    n, first = sub.pop()
                    if depth == 0 and first.startswith("$"):
                        continue  # MQTT-4.7.2-1
                    yield from n.subs.items()
                    sub.extend((c, first) for c in n.children.values())
            elif level == "+":
                for name, child in node.children.items():
                    if depth == 0 and name.startswith("$"):
                        continue  # MQTT-4.7.2-1
                    stack.append((child, depth + 1))
            else:
                exact = node.children.get(level)
                if exact is not None:
                    stack.append((exact, depth + 1))

    def items(self) -> Iterator[tuple[str, V]]:
        """Every ``(topic, value)``."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            yield from node.subs.items()
            stack.extend(node.children.values())
