"""The definitions document without a server: field checks name the field, the plan of an
import (what it creates, what it leaves), secrets as references."""

from __future__ import annotations

from typing import Any

import pytest

from oxiedge.definitions.document import (
    State,
    check,
    export,
    resolve_urls,
    uplink_json,
)
from oxiedge.definitions.plan import CREATE, SAME, SKIPPED, plan
from oxiedge.operations import OperationError


def _state(**kw: Any) -> State:
    base: dict[str, Any] = {"users": [], "permissions": {"users": {}}, "queues": [],
                            "exchanges": [], "bindings": [], "ingest": [], "indexes": [],
                            "uplinks": []}
    return State(**{**base, **kw})


@pytest.mark.parametrize("doc, field", [
    ([], "document: must be a JSON object"),
    ({"queues": {}}, "queues: must be a list"),
    ({"queues": [1]}, "queues[0]: must be an object"),
    ({"queues": [{"name": 5}]}, "queues[0].name: must be a string"),
    ({"queues": [{"name": "q", "durable": "yes"}]},
     "queues[0].durable: must be true or false, not 'yes'"),
    ({"exchanges": [{"name": "x"}]}, "exchanges[0].type: must be a string"),
    ({"queues": [{"name": "q", "vhost": "prod"}]}, "queues[0].vhost:"),
    ({"bindings": [{"source": "x", "destination": "q", "destination_type": "topic"}]},
     "bindings[0].destination_type:"),
    ({"permissions": [{"user": "u", "vhost": "/", "configure": ".*", "write": ".*"}]},
     "permissions[0].read: must be a string"),
    ({"oxiedge": {"ingest": [{"filter": "a/#", "collection": "c", "max_docs": "many"}]}},
     "oxiedge.ingest[0].max_docs: must be an integer"),
    ({"oxiedge": {"acl": {"users": {"u": [["sometimes", "a"]]}}}},
     "oxiedge.acl.users.u[0]:"),
    ({"oxiedge": {"acl": {"default": {"mqtt": "maybe"}}}}, "oxiedge.acl.default.mqtt:"),
    ({"users": [{"name": "ok"}, {"name": "a\nb"}]}, "users[1].name: a user name is"),
])
def test_check_names_the_field(doc: Any, field: str) -> None:
    with pytest.raises(OperationError) as refused:
        check(doc)
    assert str(refused.value).startswith(field)
    assert refused.value.kind == "bad_request"


@pytest.mark.parametrize("doc, field", [
    ({"permissions": [{"user": "u", "vhost": "/", "configure": "(", "write": "", "read": ""}]},
     "permissions[0].configure: invalid regular expression"),
    ({"exchanges": [{"name": "x", "type": "sideways"}]}, "exchanges[0].type:"),
    ({"exchanges": [{"name": "amq.mine", "type": "direct"}]}, "exchanges[0].name:"),
    ({"queues": [{"name": "q", "arguments": {"x-max-length": -1}}]}, "queues[0].arguments:"),
    ({"bindings": [{"source": "x", "destination": "q", "destination_type": "queue"}]},
     "bindings[0].source: no exchange 'x'"),
    ({"oxiedge": {"ingest": [{"filter": "a/#", "collection": "$bad"}]}}, "oxiedge.ingest[0]:"),
    ({"oxiedge": {"indexes": [{"collection": "c", "field": "_id"}]}},
     "oxiedge.indexes[0].field:"),
    ({"oxiedge": {"uplinks": [{"name": "u", "urls": ["ftp://h"], "out": ["#"]}]}},
     "oxiedge.uplinks[0]:"),
])
def test_plan_checks_values_before_anything(doc: Any, field: str) -> None:
    with pytest.raises(OperationError) as refused:
        plan(check(doc), _state(), lambda _name: None)
    assert str(refused.value).startswith(field)


def test_plan_skips_what_exists_alike_and_unknown_hashes() -> None:
    state = _state(queues=[{"name": "q", "auto_delete": False, "arguments": {}}],
                   users=[("alice", "pbkdf2_sha256$1$a$b")])
    doc = {"users": [{"name": "alice", "tags": []},
                     {"name": "guest", "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgx"},
                     {"name": "bob", "password_hash": "pbkdf2_sha256$1$c$d",
                      "tags": "administrator,policymaker"}],
           "queues": [{"name": "q", "durable": True}, {"name": "r"}],
           "policies": [{"ignored": True}]}
    steps = {(s.section, s.name): s for s in plan(check(doc), state, lambda _n: None)}
    assert steps["users", "alice"].action == SAME
    assert steps["users", "guest"].action == SKIPPED
    assert steps["users", "bob"].action == CREATE
    assert steps["users", "bob"].args["tags"] == ["administrator"]
    assert steps["queues", "q"].action == SAME
    assert steps["queues", "r"].op == "queue.declare"


def test_uplink_passwords_are_references() -> None:
    doc = {"_kind": "uplink", "_id": 3, "name": "hq-1",
           "urls": ["amqps://edge:p%40ss@a:5671/%2F", "amqps://edge:other@b:5671/%2F",
                    "mqtt://c:1883"]}
    out = uplink_json(doc)
    assert out["urls"] == ["amqps://edge:${OXIEDGE_SECRET_UPLINK_HQ_1}@a:5671/%2F",
                           "amqps://edge:${OXIEDGE_SECRET_UPLINK_HQ_1_2}@b:5671/%2F",
                           "mqtt://c:1883"]
    assert "_id" not in out and "_kind" not in out
    back = resolve_urls(out["urls"], {"OXIEDGE_SECRET_UPLINK_HQ_1": "p@ss",
                                      "OXIEDGE_SECRET_UPLINK_HQ_1_2": "other"})
    assert back == doc["urls"]


def test_export_is_sorted_and_complete() -> None:
    state = _state(users=[("b", "$7$x"), ("a", "pbkdf2_sha256$1$a$b")],
                   permissions={"users": {"a": {"tags": ["monitoring"], "acl": [["read", "t"]]}},
                                "anonymous_acl": [], "patterns": [],
                                "default": {"mqtt": "deny", "amqp": "allow"}},
                   queues=[{"name": "z"}, {"name": "y", "arguments": {"x-max-length": 2}}])
    doc = export(state)
    assert [u["name"] for u in doc["users"]] == ["a", "b"]
    assert doc["users"][1]["hashing_algorithm"] == "mosquitto_pbkdf2_sha512"
    assert [q["name"] for q in doc["queues"]] == ["y", "z"]
    assert doc["oxiedge"]["acl"] == {"default": {"mqtt": "deny", "amqp": "allow"},
                                     "anonymous": [], "patterns": [],
                                     "users": {"a": [["read", "t"]]}}
    assert plan(check(doc), state, lambda _n: None)[0].action == SAME
