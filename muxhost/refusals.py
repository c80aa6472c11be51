"""The host's refusals (exit 4, or 2 for a bad id): a conversation id the plugin does not accept,
a conversation in use (a live record in it, or the plugin's ``in_use``, fail closed; for a purge, its
whole family), a record that still runs where its pane does not show it, an agent that moved to
another conversation since the user confirmed one. Asked by launch/resume, purge and ``rm``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable

from muxhost import procs
from muxhost.agent import Agent, AgentContext
from muxhost.errors import Refused, UsageError
from muxhost.store import Record

if TYPE_CHECKING:
    from muxhost.core import Core
    from muxhost.state import Live, Located, State

_PID_RE = re.compile(r"pid (\d+)\b")


def check_id(agent: Agent, conversation_id: str) -> None:
    """Exit 2 for an id the agent's plugin does not accept."""
    if not agent.valid_id(conversation_id):
        raise UsageError(f"{conversation_id!r} is not a valid {agent.name} conversation id")


def refuse_moved(loc: "Located", confirmed: str) -> None:
    """Exit 4 when the agent located in a pane is no longer in the conversation ``confirmed``."""
    if loc.conversation_id != confirmed:
        raise Refused(f"the {loc.agent.name} agent in pane {loc.pane.pane_id} is in conversation "
                      f"{loc.conversation_id or '(none yet)'} now, not {confirmed} as confirmed: nothing "
                      "was purged (press the key again)")


def holder_pid(holder: str) -> int | None:
    """The pid an ``in_use`` line starts with (``"pid 812 claude …"``), else None."""
    m = _PID_RE.match(str(holder))
    return int(m.group(1)) if m else None


class Refusals:
    """The in-use checks, on the records' live state (:class:`muxhost.state.State`) and the plugins."""

    def __init__(self, core: "Core", state: "State"):
        self.core, self.state = core, state

    def holders(self, agent: Agent, ctx: AgentContext, conversation_id: str, view=None) -> list[str]:
        """Who holds ``conversation_id``: each live record in it, then the plugin's ``in_use``
        (a plugin that fails says so: in use)."""
        holders = []
        records = [r for r in self.core.store.all() if r.agent == agent.name and r.conversation_id == conversation_id]
        if records:
            view = view or self.state.view(records)
            for r in records:
                lv = self.state.live(r, view, agent, check_resumable=False)
                if lv.state in ("running", "starting"):
                    where = f" in pane {lv.pane.pane_id}" if lv.pane else ""
                    holders.append(f"record {r.id} ({r.name}){where}")
        try:
            for h in agent.in_use(ctx, conversation_id) or []:
                if h not in holders:
                    holders.append(str(h))
        except Exception as e:  # fail closed: if we cannot tell, it is in use
            holders.append(f"cannot tell who holds it ({type(e).__name__}: {e})")
        return holders

    def refuse_held(self, agent: Agent, ctx: AgentContext, conversation_id: str, members: list[str],
                    stopped: "Live | None" = None) -> None:
        """Exit 4 when the conversation or any conversation of its family is held — leaving out
        ``stopped``, a record a ``--stop`` would stop first (itself, and processes of its tree)."""
        own = {p.pid for p in stopped.tree} if stopped is not None else set()

        def theirs(h: str) -> bool:
            pid = holder_pid(h)
            return stopped is None or not (h.startswith(f"record {stopped.rec.id} ") or (pid is not None and pid in own))

        holders = []
        for member in members:
            label = "" if member == conversation_id else f"child conversation {member}: "
            holders += [label + h for h in self.holders(agent, ctx, member) if theirs(h)]
        if holders:
            raise Refused(f"conversation {conversation_id} is in use: " + "; ".join(holders))

    def refuse_alive(self, rec: Record, agent: Agent | None, conversations: Iterable[str],
                     own: Iterable[int] = (), then: str = "") -> None:
        """Exit 4 while something of the record may still run where its pane does not show it — a
        pane gone from this muxhost's view (another TMUX_TMPDIR, a server it cannot reach) is no
        proof that its agent ended: a process of an earlier run (its ``MUXHOST_RECORD``, outside
        ``own``: the record's own pane tree), or one of ``conversations`` held (another live
        record, or the plugin's ``in_use``, fail closed, as for a purge). Asked before ``resume``
        starts a record again and before ``rm`` forgets one; ``then`` ends the message."""
        cids = list(dict.fromkeys(conversations))
        view = self.state.view([rec, *(r for r in self.core.store.all() if r.conversation_id in cids)])
        skip = set(own)
        left = [p for p in procs.marked(rec.id, view.table) if p.pid not in skip]
        if left:
            raise Refused(f"record {rec.id} ({rec.name}) still has processes of an earlier run (pid "
                          f"{', '.join(str(p.pid) for p in left[:5])}); `muxhost stop {rec.id}` ends them first{then}")
        if agent is None:  # (its plugin is gone: nothing can say more)
            return
        ctx = self.core.context(rec, table=view.table)
        for cid in cids:
            held = self.holders(agent, ctx, cid, view)
            if held:
                raise Refused(f"conversation {cid} of record {rec.id} ({rec.name}) is in use "
                              f"({'; '.join(held)}): it runs already; stop it first{then}")
