"""Model-based test of one durable session: publishes, connects, acks in any order of
steps, and restarts (recovery from the real store). The model: messages not yet fully
acknowledged, in publish order; the session must deliver exactly those, in order, with
DUP on re-sends, and keep PUBREL obligations across restarts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from oxiedge.mqtt import persist
from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.codec import decode_all
from oxiedge.mqtt.packets import Publish, Pubrel
from oxiedge.mqtt.session import Limits, Session
from oxiedge.store import Store

LIMITS = dict(queue_limit=6, max_inflight=3)


class Wire:
    def __init__(self) -> None:
        self.out_bytes = 0
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


class DurableSession(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="mqtt-model-"))
        self.store = Store.open(self.dir / "db")
        self.broker = Broker(self.store, Limits(**LIMITS))
        s, _, _ = self.broker.open_session("m", clean=False)
        self.broker.subscribe(s, [("t", 2)])
        self.store.commit_blocking()
        self.n = 0
        self.pending: list[tuple[int, int]] = []  # (number, qos) not fully acknowledged
        self.wire: Wire | None = None
        self.sent: list[tuple[int, int, int]] = []  # on the wire, unacked: (no, qos, pid)
        self.released: list[int] = []  # PUBREL seen on this wire, PUBCOMP not yet sent
        self.rel_owed: set[int] = set()  # PUBREC sent, PUBCOMP not yet: packet ids
        self.seen_once: set[int] = set()

    @property
    def session(self) -> Session:
        return self.broker.sessions["m"]

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _read_wire(self) -> None:
        if self.wire is None or not self.wire.data:
            return
        packets, self.wire.data = decode_all(self.wire.data), b""
        for p in packets:
            if isinstance(p, Pubrel):
                # Only re-sent PUBRELs reach this wire (the connection sends the first).
                assert p.packet_id in self.rel_owed
                self.released.append(p.packet_id)
                continue
            assert isinstance(p, Publish)
            no = int(p.payload)
            if no in self.seen_once:
                assert p.dup, "re-delivery without DUP (MQTT-3.3.1-1)"
            self.seen_once.add(no)
            # Delivered in publish order among the messages still owed.
            owed = [x for x, _q in self.pending if x not in {s[0] for s in self.sent}]
            assert owed and owed[0] == no, (owed, no)
            self.sent.append((no, p.qos, p.packet_id or 0))

    @precondition(lambda self: len(self.pending) < LIMITS["queue_limit"])
    @rule(qos=st.sampled_from([1, 2]))
    def publish(self, qos: int) -> None:
        self.n += 1
        assert self.broker.route("t", str(self.n).encode(), qos, False) is True
        self.store.commit_blocking()  # what the publisher's PUBACK waits for
        self.pending.append((self.n, qos))
        self._read_wire()

    @precondition(lambda self: self.wire is None)
    @rule()
    def connect(self) -> None:
        self.wire = Wire()
        self.sent = []  # everything unacknowledged is owed again
        self.released = []
        self.session.conn = self.wire
        self.session.resend()
        self._read_wire()

    @precondition(lambda self: self.wire is not None)
    @rule()
    def disconnect(self) -> None:
        self.session.conn = None
        self.wire = None
        self.sent = []  # acks can only come over a connection
        self.released = []

    @precondition(lambda self: bool(self.sent) and self.wire is not None)
    @rule()
    def ack_oldest(self) -> None:
        no, qos, pid = self.sent.pop(0)
        if qos == 1:
            self.session.on_puback(pid)
            self.pending.remove((no, 1))
        else:
            self.session.on_pubrec(pid)
            # The server's connection answers this PUBREC with PUBREL right away.
            self.released.append(pid)
            self.rel_owed.add(pid)
            self.pending.remove((no, 2))
        self._read_wire()

    @precondition(lambda self: bool(self.released) and self.wire is not None)
    @rule()
    def complete_oldest_release(self) -> None:
        pid = self.released.pop(0)
        self.session.on_pubcomp(pid)
        self.rel_owed.discard(pid)
        self._read_wire()

    @rule()
    def restart(self) -> None:
        self.store.commit_blocking()  # staged ack deletions are committed soon anyway
        # On disk: every message not yet acknowledged. Acknowledged ones above the oldest
        # unacknowledged are deleted one by one; those below it go as one range delete per
        # run of seqs (store/qlog.py RANGE_RUN) or when the queue empties, so a few may still
        # be there - recovery deletes them (below the floor it stored).
        on_disk = [
            int(persist.decode_msg(v)[3]) for _k, v in self.store.iter_raw(persist.CF, persist.MSG)
        ]
        pending = [no for no, _q in self.pending]
        if pending:
            assert [no for no in on_disk if no >= pending[0]] == pending
        else:
            assert on_disk == []
        # A new broker recovers from the same database (a real reopen after SIGKILL is
        # what test_durability.py does; here the state on disk is what matters).
        self.broker = Broker(self.store, Limits(**LIMITS))
        sessions, messages = self.broker.recover()
        assert sessions == 1
        assert messages == len(self.pending)
        self.wire = None
        self.sent = []
        self.released = []

    @invariant()
    def release_obligations_match(self) -> None:
        assert set(self.session.rel) == self.rel_owed


TestDurableSession = DurableSession.TestCase
TestDurableSession.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
