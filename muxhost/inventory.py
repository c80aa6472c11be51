"""Every conversation on disk (``muxhost conversations``) and ``prune``: the plugins' ``conversations``
for the caller's HOME and each record's, ids checked, children under their parent, each with the
record that has it and who holds it; prune purges the old ones through the host's one purge path.

A child conversation is never a row of its own: it is listed under its parent and goes with it. A
conversation is held (never pruned) while the plugin's ``in_use`` names a holder (raising counts),
or while a record that runs or sleeps is in it or in one of its children.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from muxhost.agent import Agent, AgentContext, Conversation
from muxhost.errors import MuxhostError, NotFound, Refused
from muxhost.store import Record

if TYPE_CHECKING:
    from muxhost.core import Core
    from muxhost.launching import Launching
    from muxhost.state import State

#: the live states of a record that hold its conversation: a prune leaves it alone
HOLDING = ("running", "starting", "asleep", "stopping")


@dataclass
class Row:
    """One conversation on disk: the plugin's facts, the HOME it is in (None: the caller's), the
    record that has been in it, who holds it, and its child conversations (rows too)."""

    agent: str
    conv: Conversation
    home: str | None = None
    record: Record | None = None
    holders: list[str] = field(default_factory=list)
    children: list["Row"] = field(default_factory=list)

    def family(self) -> list["Row"]:
        """This row and its children at every depth, parent first."""
        out = [self]
        for child in self.children:
            out += child.family()
        return out

    @property
    def total_size(self) -> int:
        return sum(r.conv.size for r in self.family())

    @property
    def last_updated(self) -> float:
        return max(r.conv.updated for r in self.family())

    def to_dict(self) -> dict[str, Any]:
        rec = self.record
        return {"agent": self.agent, **self.conv.to_dict(), "total_size": self.total_size, "home": self.home,
                "record": None if rec is None else {"id": rec.id, "name": rec.name, "state": rec.state},
                "in_use": bool(self.holders), "holders": list(self.holders),
                "children": [c.to_dict() for c in self.children]}


class Inventory:
    """``conversations`` and ``prune``."""

    def __init__(self, core: "Core", state: "State", launching: "Launching", purge: Callable[..., Any]):
        self.core, self.state, self.launching, self.purge = core, state, launching, purge

    # -- conversations -------------------------------------------------------------------------------
    def conversations(self, agent: str | None = None, cwd: str | None = None, older_than: float | None = None,
                      grep: str | None = None) -> list[Row]:
        """Every conversation on disk as rows (children under their parent), newest first, filtered:
        ``agent``; ``cwd`` (in that folder or under it); ``older_than`` (seconds: the whole family
        last updated before now minus that); ``grep`` (in the id, title or cwd of it or a child)."""
        agents = [self.core.registry.agent(agent)] if agent else list(self.core.registry.agents.values())
        records = self.core.store.all()
        held, table = self._held_by_records(records)
        rows: list[Row] = []
        for a in agents:
            rows += self._rows(a, records, held, table)
        rows = [r for r in rows if _wanted(r, cwd, older_than, grep)]
        return sorted(rows, key=lambda r: r.last_updated, reverse=True)

    def _rows(self, agent: Agent, records: list[Record], held: dict[tuple[str, str], str], table) -> list[Row]:
        """The agent's rows, each HOME once (the caller's, then its records' other ones)."""
        by_id: dict[str, Row] = {}
        for home, ctx in self._contexts(agent, records, table):
            try:
                found = list(agent.conversations(ctx) or ())
            except Exception as e:  # the others still list; the warning says why these are missing
                self.core.warn(agent.name, "conversations", e)
                continue
            for conv in found:
                if not isinstance(conv, Conversation) or not agent.valid_id(conv.id) or conv.id in by_id:
                    continue
                conv.children = [c for c in conv.children if agent.valid_id(c) and c != conv.id]
                by_id[conv.id] = row = Row(agent.name, conv, home, _record_of(records, agent.name, conv.id))
                row.holders = self._holders(agent, ctx, conv.id, held)
        return _nest(by_id)

    def _contexts(self, agent: Agent, records: list[Record], table) -> Iterable[tuple[str | None, AgentContext]]:
        home, env = self.launching.agent_env(dict(os.environ), None, agent.name)
        yield None, AgentContext(home=home, env=env, cwd=os.getcwd(), config=self.core.config.agent(agent.name),
                                 processes=table)
        seen = {os.path.realpath(home)}
        for rec in records:
            if rec.agent == agent.name and os.path.realpath(rec.home) not in seen and os.path.isdir(rec.home):
                seen.add(os.path.realpath(rec.home))
                yield rec.home, self.core.context(rec, table=table)

    def _held_by_records(self, records: list[Record]) -> tuple[dict[tuple[str, str], str], Any]:
        """(agent, conversation id) -> "record ID (NAME) is running" for every record that runs or
        sleeps; and the process table read for it (the plugins' ``in_use`` share it)."""
        maybe = [r for r in records if r.state != "stopped" and r.conversation_id]
        view = self.state.view(maybe)
        held = {}
        for rec in maybe:
            lv = self.state.live(rec, view, check_resumable=False)
            if lv.state in HOLDING:
                held[(rec.agent, rec.conversation_id)] = f"record {rec.id} ({rec.name}) is {lv.state}"
        return held, view.table

    @staticmethod
    def _holders(agent: Agent, ctx: AgentContext, cid: str, held: dict[tuple[str, str], str]) -> list[str]:
        holders = [held[(agent.name, cid)]] if (agent.name, cid) in held else []
        try:
            holders += [str(h) for h in agent.in_use(ctx, cid) or () if str(h) not in holders]
        except Exception as e:  # fail closed: if we cannot tell, it is in use
            holders.append(f"cannot tell who holds it ({type(e).__name__}: {e})")
        return holders

    # -- prune ---------------------------------------------------------------------------------------
    def prune(self, older_than: float, *, agent: str | None = None, cwd: str | None = None, dry_run: bool = False,
              archive: bool = False, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Purge every conversation (with its children) last updated more than ``older_than``
        seconds ago, each through the host's purge (its every check holds); skip, saying why, those
        held, those with a child updated since, those a purge refuses (a plugin's veto). The report:
        ``purged``, ``skipped``, ``errors``, ``bytes_freed`` (the sizes ``conversations`` listed, of
        the purges that left nothing), ``archives``."""
        cutoff = time.time() - older_than
        rows = [r for r in self.conversations(agent=agent, cwd=cwd) if r.conv.updated < cutoff]
        report: dict[str, Any] = {"cutoff": cutoff, "dry_run": dry_run, "purged": [], "skipped": [],
                                  "errors": [], "bytes_freed": 0, "archives": []}
        for n, row in enumerate(rows, 1):
            why = _skip_reason(row, cutoff)
            if why is None:
                why = self._prune_one(row, report, dry_run, archive)
            if why is not None:
                report["skipped"].append({**_brief(row), "reason": why})
            if progress is not None:
                progress(n, len(rows))
        return report

    def _prune_one(self, row: Row, report: dict[str, Any], dry_run: bool, archive: bool) -> str | None:
        """One row through the host's purge; a reason to skip it, or None (purged, or an error)."""
        extra = {"archive": True} if archive else {}  # (only when asked: Host.purge's archive keyword)
        try:
            done = self.purge(agent_name=row.agent, conversation_id=row.conv.id, home=row.home, dry_run=dry_run,
                              **extra)
        except NotFound as e:
            return f"gone: {e}"
        except Refused as e:
            return str(e)
        except MuxhostError as e:
            report["errors"].append({**_brief(row), "error": str(e)})
            return None
        if dry_run and done.refused:
            return done.refused
        entry = {**_brief(row), "plan" if dry_run else "removed": list(done.plan if dry_run else done.removed),
                 "residual": list(done.residual), "archive": getattr(done, "archive", None)}
        report["purged"].append(entry)
        if not done.residual:
            report["bytes_freed"] += row.total_size
        if entry["archive"]:
            report["archives"].append(entry["archive"])
        return None


def _brief(row: Row) -> dict[str, Any]:
    return {"agent": row.agent, "id": row.conv.id, "children": [r.conv.id for r in row.family()[1:]],
            "updated": row.last_updated, "size": row.total_size, "cwd": row.conv.cwd, "title": row.conv.title}


def _skip_reason(row: Row, cutoff: float) -> str | None:
    """Why a prune leaves this row alone before it asks the purge, or None."""
    for member in row.family():
        if member.holders:
            what = "" if member is row else f"child conversation {member.conv.id}: "
            return f"in use: {what}{'; '.join(member.holders)}"
    newer = [m.conv.id for m in row.family()[1:] if m.conv.updated >= cutoff]
    if newer:
        return f"child conversation {newer[0]} was updated since the cutoff"
    return None


def _record_of(records: list[Record], agent: str, cid: str) -> Record | None:
    """The latest record that has been in the conversation."""
    return next((r for r in reversed(records) if r.agent == agent and cid in (r.conversations or [r.conversation_id])),
                None)


def _nest(by_id: dict[str, Row]) -> list[Row]:
    """The rows that are nobody's child, each with its children under it (a cycle is cut)."""
    child_ids = {c for row in by_id.values() for c in row.conv.children if c in by_id}
    placed: set[str] = set()

    def attach(row: Row) -> Row:
        placed.add(row.conv.id)
        row.children = [attach(by_id[c]) for c in row.conv.children if c in by_id and c not in placed]
        return row

    tops = [attach(r) for cid, r in by_id.items() if cid not in child_ids]
    # (children of a cycle with no top: each a row of its own, so nothing on disk is hidden)
    return tops + [attach(r) for cid, r in by_id.items() if cid not in placed]


def _wanted(row: Row, cwd: str | None, older_than: float | None, grep: str | None) -> bool:
    if cwd is not None:
        want = os.path.realpath(os.path.expanduser(cwd))
        have = os.path.realpath(row.conv.cwd) if row.conv.cwd else ""
        if not (have == want or have.startswith(want.rstrip("/") + "/")):
            return False
    if older_than is not None and row.last_updated >= time.time() - older_than:
        return False
    if grep:
        rx = re.compile(re.escape(grep), re.IGNORECASE)
        return any(rx.search(f"{m.conv.id}\n{m.conv.title}\n{m.conv.cwd}") for m in row.family())
    return True
