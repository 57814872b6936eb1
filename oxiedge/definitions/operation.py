"""``definitions.export`` and ``definitions.import``: the one implementation behind
``oxiedge definitions export|import`` (admin socket) and ``GET|POST /api/definitions``.

Theory of operation
-------------------
The operation sees the server through a :class:`Target`: the state as ``state.py`` reads
it, the admin handler table (``operate``: each change is one operation of
docs/operations.md, through the broker's own code, answered once durable), the password
file (``put_user``) and the server's environment (``secret``). An import checks the whole
document (``document.check``), compares it with the state (``plan.plan``, which refuses
conflicts), and only then applies the steps that change something, in order. With
``dry_run`` it stops after the plan and answers it. With ``progress`` the answer is a
stream (``operations.Streamed``): one ``{"done", "total", "section", "name"}`` event per
step applied, then the result, so a front end can draw a progress bar.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from ..operations import Args, Emit, Operation, Streamed
from .document import State, check, export
from .plan import CREATE, SAME, SKIPPED, UPDATE, USER_PUT, Step, plan


class Target(Protocol):
    """What the definitions operation needs of a server."""

    async def state(self) -> State:
        """The current state (read off the event loop)."""

    async def operate(self, name: str, args: dict[str, Any]) -> Any:
        """Run the admin operation ``name`` (``OperationError`` when refused)."""

    async def put_user(self, name: str, stored_hash: str) -> None:
        """Add the user with its stored hash to the password file (and reload it)."""

    def secret(self, name: str) -> str | None:
        """The server's own value of a secret reference (its environment), or None."""


class DefinitionsOperations:
    """The two operations over one :class:`Target`."""

    def __init__(self, target: Target) -> None:
        self.target = target

    async def export(self) -> dict[str, Any]:
        return export(await self.target.state())

    async def import_(self, document: Any, *, dry_run: bool = False,
                      secrets: dict[str, str] | None = None,
                      emit: Emit | None = None) -> dict[str, Any]:
        """Check, plan and (unless ``dry_run``) apply ``document``; the plan's rows and
        counts. Nothing is applied when a check fails."""
        given = dict(secrets or {})
        wanted = check(document)
        steps = plan(wanted, await self.target.state(),
                     lambda name: given.get(name) or self.target.secret(name))
        todo = [s for s in steps if s.action in (CREATE, UPDATE)]
        if not dry_run:
            for done, step in enumerate(todo, 1):
                await self._apply(step)
                if emit is not None:
                    await emit({"done": done, "total": len(todo), "section": step.section,
                                "name": step.name})
        return _result(steps, dry_run)

    async def _apply(self, step: Step) -> None:
        if step.op == USER_PUT:
            await self.target.put_user(step.args["name"], step.args["hash"])
            if step.args["tags"]:
                await self.target.operate("permissions.apply", {"op": "tags", "args": {
                    "user": step.args["name"], "tags": step.args["tags"]}})
            return
        await self.target.operate(step.op, step.args)

    def operations(self) -> list[Operation]:
        return [
            Operation("definitions.export", "the definitions document of this server",
                      lambda _a: self.export()),
            Operation("definitions.import", "import a definitions document (checked whole "
                      "first; dry_run: only say what would change)", self._import_adapter,
                      writes=True),
        ]

    def _import_adapter(self, args: Args) -> Awaitable[Any] | Streamed:
        document = args.raw.get("document")
        dry_run = args.flag("dry_run")
        secrets = {str(k): str(v) for k, v in args.table("secrets").items()}
        if args.flag("progress") and not dry_run:
            return Streamed(lambda emit: self.import_(document, secrets=secrets, emit=emit))
        return self.import_(document, dry_run=dry_run, secrets=secrets)


def _result(steps: list[Step], dry_run: bool) -> dict[str, Any]:
    def count(action: str) -> int:
        return sum(s.action == action for s in steps)

    sections: dict[str, int] = {}
    for s in steps:
        if s.action != SKIPPED:
            sections[s.section] = sections.get(s.section, 0) + 1
    return {
        "dry_run": dry_run,
        "created": count(CREATE), "updated": count(UPDATE), "unchanged": count(SAME),
        "added_users": [s.name for s in steps if s.section == "users" and s.action == CREATE],
        "skipped_users": [s.name for s in steps if s.action == SKIPPED],
        **sections,
        "changes": [s.row() for s in steps if s.action != SAME],
    }
