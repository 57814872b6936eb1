"""``Grants``: one connection's view of the permission model, with its answers cached.

Every check is a dictionary hit after the first time a topic or resource is seen. The
rules are rebuilt (and the caches emptied) when ``PermissionStore.generation`` moved, so a
``oxiedge permissions`` / ``acl`` change reaches live connections at their next operation.

MQTT and ``amq.topic`` are one topic space (the bridge maps ``/`` ⇄ ``.``), so both rule
sets guard it whichever protocol a client uses:

* an MQTT PUBLISH needs the MQTT ``write`` ACL on the topic *and* the user's topic
  permission ``write`` regexp for ``amq.topic`` on the routing key it becomes;
* an MQTT SUBSCRIBE needs an MQTT ``read`` rule covering the filter *and* the topic
  ``read`` regexp for ``amq.topic`` on the binding key it becomes (``+``→``*``);
* an AMQP publish to ``amq.topic`` needs AMQP ``write`` on the exchange, the topic ``write``
  regexp on the routing key *and* the MQTT ``write`` ACL on the topic it becomes;
* a binding from ``amq.topic`` needs (besides ``write``/``read`` on queue and exchange) the
  topic ``read`` regexp on the binding key *and* an MQTT ``read`` rule covering the filter it
  becomes (``*``→``+``; a key with ``#`` before its last word has no MQTT form and is refused
  to an MQTT-restricted user).
Each part applies only when that user is restricted by it (see ``rules.py`` defaults).
"""

from __future__ import annotations

import re
from typing import Any

from ..topicmap import EXCHANGE as AMQ_TOPIC
from ..topicmap import mqtt_to_routing_key, routing_key_to_mqtt
from .rules import (
    PermissionStore,
    compile_regex,
    filter_covered,
    filter_overlaps,
    substitute,
    topic_matches,
)

#: Cached answers per connection, cleared wholesale when full: a client cycling through
#: more names pays the rule walk again, and its memory stays bounded (also in the bytes of
#: the names it keeps alive: topics may be 4 KiB long).
CACHE_MAX = 1024
#: The user name of the admin socket's own clients (``oxiedge pub`` / ``sub`` without ``-u``):
#: whoever can open that socket controls the broker, so no rule restricts them. No password
#: file entry can have this name (``auth.user_name_ok`` refuses a ':').
LOCAL_ADMIN = "oxiedge:local-administrator"
CACHE_MAX_BYTES = 64 * 1024


def mqtt_filter_to_binding_key(flt: str) -> str | None:
    """``sensors/+/temp`` → ``sensors.*.temp``; None if it has no AMQP form."""
    if flt.startswith("$") or "." in flt or "*" in flt:
        return None
    levels = flt.split("/")
    if "" in levels:
        return None
    return ".".join("*" if lv == "+" else lv for lv in levels)


def binding_key_to_mqtt_filter(key: str) -> str | None:
    """``sensors.*.temp`` → ``sensors/+/temp``, ``a.#`` → ``a/#``; None if it has no MQTT
    form (``#`` before the last word, an empty word, ``/`` or ``+`` in a word)."""
    if not key or key.startswith("$") or any(c in key for c in "/+\x00"):
        return None
    words = key.split(".")
    if "" in words or "#" in words[:-1]:
        return None
    return "/".join("+" if w == "*" else w for w in words)


class Grants:
    """What one authenticated client (user, client id, vhost) may do."""

    def __init__(self, store: PermissionStore, username: str | None, client_id: str = "",
                 vhost: str = "/") -> None:
        self.store = store
        self.username = username or None
        self.client_id = client_id
        self.vhost = vhost
        self._gen = -1
        self._cache: dict[tuple[str, str], bool] = {}
        # The two per-message checks also have a flat copy (no key tuple on a hit); they are
        # cleared together with ``_cache``, so the same bounds hold.
        self._pub: dict[str, bool] = {}
        self._read_hits: dict[str, bool] = {}
        self._cache_bytes = 0
        self.mqtt_restricted = False
        self.amqp_restricted = False
        self._deny: list[str] = []
        self._read: list[str] = []
        self._write: list[str] = []
        self._vhost_perms: dict[str, re.Pattern[str]] | None = None
        self._topic_perms: dict[str, dict[str, re.Pattern[str]]] = {}
        self._sync()

    # ------------------------------------------------------------------ rebuild
    def _sync(self) -> None:
        store = self.store
        if self._gen == store.generation:
            return
        self._gen = store.generation
        self._clear()
        if self.username == LOCAL_ADMIN:  # unrestricted: every check below passes
            self.mqtt_restricted = self.amqp_restricted = False
            self._deny, self._read, self._write, self._topic_perms = [], [], [], {}
            self._vhost_perms = {op: re.compile("") for op in ("configure", "write", "read")}
            return
        doc = store.doc
        user = store.user(self.username)
        # MQTT: a user's own lines (or the anonymous lines), then every `pattern` line.
        own = user.get("acl", []) if self.username else doc["anonymous_acl"]
        lines: list[tuple[str, str]] = [(a, t) for a, t in own]
        for access, pattern in doc["patterns"]:
            topic = substitute(pattern, self.username, self.client_id)
            if topic is not None:
                lines.append((access, topic))
        # Any pattern line restricts every client, even one it gives nothing (a `%u` line
        # for an anonymous client): it would otherwise be unrestricted.
        self.mqtt_restricted = bool(own) or bool(doc["patterns"]) \
            or doc["default"]["mqtt"] == "deny"
        self._deny = [t for a, t in lines if a == "deny"]
        self._read = [t for a, t in lines if a in ("read", "readwrite")]
        self._write = [t for a, t in lines if a in ("write", "readwrite")]
        # AMQP: the user's regexps for this vhost; restricted once it has any vhost entry.
        vhosts = user.get("vhosts", {})
        self.amqp_restricted = bool(vhosts) or doc["default"]["amqp"] == "deny"
        perms = vhosts.get(self.vhost)
        self._vhost_perms = None if perms is None else {
            op: compile_regex(perms[op]) for op in ("configure", "write", "read")}
        self._topic_perms = {}
        names = {"username": self.username or "", "vhost": self.vhost,
                 "client_id": self.client_id}
        for exchange, tp in user.get("topics", {}).get(self.vhost, {}).items():
            self._topic_perms[exchange] = {
                op: compile_regex(_expand(tp[op], names)) for op in ("write", "read")}

    def _cached(self, kind: str, name: str, compute: Any) -> bool:
        self._sync()
        key = (kind, name)
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= CACHE_MAX or self._cache_bytes > CACHE_MAX_BYTES:
                self._clear()
            hit = self._cache[key] = bool(compute(name))
            self._cache_bytes += len(name) + len(kind)
        return hit

    def _clear(self) -> None:
        self._cache.clear()
        self._pub.clear()
        self._read_hits.clear()
        self._cache_bytes = 0

    # --------------------------------------------------------------------- MQTT
    def _mqtt_write(self, topic: str) -> bool:
        if not self.mqtt_restricted:
            return True
        if any(topic_matches(d, topic) for d in self._deny):
            return False
        return any(topic_matches(w, topic) for w in self._write)

    def _mqtt_read(self, topic: str) -> bool:
        if not self.mqtt_restricted:
            return True
        if any(topic_matches(d, topic) for d in self._deny):
            return False
        return any(topic_matches(r, topic) for r in self._read)

    def _mqtt_subscribe(self, flt: str) -> bool:
        if not self.mqtt_restricted:
            return True
        if any(filter_covered(d, flt) for d in self._deny):
            return False  # a deny that only overlaps the filter is applied per message
        return any(filter_covered(r, flt) for r in self._read)

    def may_publish(self, topic: str) -> bool:
        """MQTT PUBLISH (and a will) on ``topic``."""
        if self._gen == self.store.generation:  # the hot path: one lookup, no tuple
            hit = self._pub.get(topic)
            if hit is not None:
                return hit
        hit = self._cached("pub", topic, self._compute_publish)
        self._pub[topic] = hit
        return hit

    def _compute_publish(self, topic: str) -> bool:
        if not self._mqtt_write(topic):
            return False
        key = mqtt_to_routing_key(topic)
        return key is None or self._topic_ok(AMQ_TOPIC, "write", key)

    def may_subscribe(self, flt: str) -> bool:
        """MQTT SUBSCRIBE to filter ``flt``."""
        return self._cached("sub", flt, self._compute_subscribe)

    def _compute_subscribe(self, flt: str) -> bool:
        if not self._mqtt_subscribe(flt):
            return False
        key = mqtt_filter_to_binding_key(flt)
        return key is None or self._topic_ok(AMQ_TOPIC, "read", key)

    def may_read(self, topic: str) -> bool:
        """An MQTT delivery (live or retained) of ``topic`` to this client."""
        if self._gen == self.store.generation:
            hit = self._read_hits.get(topic)
            if hit is not None:
                return hit
        hit = self._cached("read", topic, self._mqtt_read)
        self._read_hits[topic] = hit
        return hit

    def denies_part_of(self, flt: str) -> bool:
        """True if a deny rule overlaps ``flt`` (delivery then checks each topic)."""
        self._sync()
        return any(filter_overlaps(d, flt) for d in self._deny)

    # --------------------------------------------------------------------- AMQP
    def vhost_allowed(self) -> bool:
        self._sync()
        return not self.amqp_restricted or self._vhost_perms is not None

    def amqp(self, op: str, name: str) -> bool:
        """RabbitMQ's resource check: ``op`` (configure/write/read) on an exchange or queue
        ``name`` (the default exchange is ``amq.default`` here, as in RabbitMQ)."""
        return self._cached(op, name or "amq.default", self._compute_amqp(op))

    def _compute_amqp(self, op: str) -> Any:
        def compute(name: str) -> bool:
            if not self.amqp_restricted:
                return True
            perms = self._vhost_perms
            return perms is not None and perms[op].search(name) is not None
        return compute

    def _topic_ok(self, exchange: str, op: str, key: str) -> bool:
        perms = self._topic_perms.get(exchange)
        return perms is None or perms[op].search(key) is not None

    def topic_publish(self, exchange: str, key: str) -> bool:
        """basic.publish to topic exchange ``exchange`` with routing key ``key``."""
        return self._cached("tw:" + exchange, key, lambda k: self._compute_tpub(exchange, k))

    def _compute_tpub(self, exchange: str, key: str) -> bool:
        if not self._topic_ok(exchange, "write", key):
            return False
        if exchange == AMQ_TOPIC and self.mqtt_restricted:
            topic = routing_key_to_mqtt(key)
            return topic is None or self._mqtt_write(topic)  # None: never reaches MQTT
        return True

    def topic_bind(self, exchange: str, key: str) -> bool:
        """A binding from topic exchange ``exchange`` with binding key ``key``."""
        return self._cached("tr:" + exchange, key, lambda k: self._compute_tbind(exchange, k))

    def _compute_tbind(self, exchange: str, key: str) -> bool:
        if not self._topic_ok(exchange, "read", key):
            return False
        if exchange == AMQ_TOPIC and self.mqtt_restricted:
            flt = binding_key_to_mqtt_filter(key)
            return flt is not None and self._mqtt_subscribe(flt)
        return True


def _expand(pattern: str, names: dict[str, str]) -> str:
    """RabbitMQ's ``{username}``, ``{vhost}``, ``{client_id}`` in a topic permission regexp;
    the values are escaped, so a ``.`` in a user name matches only a ``.``."""
    for key, value in names.items():
        pattern = pattern.replace("{" + key + "}", re.escape(value))
    return pattern
