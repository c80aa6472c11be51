"""State: who runs where. One look at the world (:class:`View`: every pane, one query per
server, and the process table), each record's live state (:class:`Live`), the conversation each
running agent is in (``refresh``), REF resolution, finding the agent in a pane, and ``reconcile``:
:class:`State`, given the host's :class:`muxhost.core.Core`."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from muxhost import procs
from muxhost.agent import Agent, AgentContext
from muxhost.backends import PaneInfo
from muxhost.errors import MuxhostError, NotFound, UsageError
from muxhost.refusals import holder_pid
from muxhost.store import Record

if TYPE_CHECKING:
    from muxhost.core import Core

STARTING_GRACE = 30.0  # a `starting` record without a pane after this long is lost
#: the states `ls` shows without --all, and `stop --all` stops: an agent (or its stub) may be there
#: (`stopping`: a stop under way, or one cut short that the next `ls` or `stop` finishes)
LIVE_STATES = ("running", "exited", "starting", "asleep", "stopping")


@dataclass
class View:
    """One look at the world: every pane (one query per server: ``(backend name, address)``) and the
    process table."""

    panes: dict[tuple[str, str | None], list[PaneInfo] | None]
    table: procs.ProcessTable
    _owned: dict = field(default_factory=dict, repr=False)  # (record id, pid) -> owns(): once per look

    def owned(self, rec: Record, pane: PaneInfo) -> bool:
        key = (rec.id, pane.pid)
        if key not in self._owned:
            self._owned[key] = owns(rec, self.table.get(pane.pid), self.table)
        return self._owned[key]

    def pane_for(self, rec: Record) -> PaneInfo | None:
        """The record's pane: the live one that runs its agent (or stub); else its own dead one (the
        pane it last ran in first); a pane where another program runs now comes last."""
        panes = self.panes.get(server_of(rec)) or []
        by_option = [p for p in panes if p.record == rec.id]
        if by_option:
            mine = [p for p in by_option if not p.dead and self.owned(rec, p)]
            dead = sorted((p for p in by_option if p.dead), key=lambda p: p.pane_id != rec.pane)
            return (mine or dead or by_option)[0]
        return None

    def foreign(self, rec: Record) -> tuple[PaneInfo, procs.Proc] | None:
        """The record's pane and its process when that process is not muxhost's for the record
        (:func:`owns`): the agent exited and the user started something else there (``tmux
        respawn-pane -k`` a shell). Such a pane is no longer the agent's: nothing is typed into it,
        nothing of it is signalled or closed, and the record is ``exited``."""
        pane = self.pane_for(rec)
        root = self.table.get(pane.pid) if pane is not None and not pane.dead else None
        if root is None or self.owned(rec, pane):
            return None
        return pane, root

    def server_running(self, server: tuple[str, str | None]) -> bool:
        return self.panes.get(server) is not None


def left_alone(found: tuple[PaneInfo, procs.Proc]) -> str:
    """What :meth:`View.foreign` found, for the user: "its pane %3 runs another program now (pid 812
    bash), left alone"."""
    pane, proc = found
    return f"its pane {pane.pane_id} runs another program now (pid {proc.pid} {proc.name}), left alone"


def foreign_now(rec: Record, pane: PaneInfo) -> bool:
    """:meth:`View.foreign` for one pane of ``rec``, judged on a fresh process table."""
    return View({server_of(rec): [pane]}, procs.ProcessTable.snapshot()).foreign(rec) is not None


def woken(rec: Record, root: procs.Proc | None) -> bool:
    """An ``asleep`` record's pane runs its agent again (``root``, the pane's process): a wake
    killed between starting the agent and writing the record down. Only once a wake began (it
    moves ``launched_at`` past ``slept_at`` first): before that, a pane not running the stub is one
    about to (tmux's child before its exec, caught by a look)."""
    return root is not None and not is_stub(root) and (rec.slept_at is None or rec.launched_at > rec.slept_at)


def owns(rec: Record, proc: procs.Proc | None, table: procs.ProcessTable) -> bool:
    """``proc`` (a pane's process) is the one muxhost started there for ``rec``: the agent it
    launched, resumed or woke, or the asleep stub — the pid and create time ``rec.pids`` keeps
    (the launcher execs the agent: one process). One not written down yet (a launch, wake or sleep
    cut short between starting the pane and writing the record) counts while it started since the
    record's last launch and is muxhost's launcher or stub, carries the record's ``MUXHOST_RECORD``,
    or is still the multiplexer's own child before its exec. Anything else is not the agent."""
    if proc is None:
        return False
    if any(len(k) == 2 and procs.same_key(proc, k) for k in rec.pids):
        return True
    if proc.create_time + 1.0 < rec.launched_at:
        return False
    parent = table.get(proc.ppid)
    unexeced = parent is not None and parent.name == proc.name and parent.cmdline == proc.cmdline
    return unexeced or is_stub(proc) or procs.record_of(proc) == rec.id


def is_stub(proc: procs.Proc) -> bool:
    """True for muxhost's asleep stub (:mod:`muxhost.stub`), or the launcher about to become it."""
    tail = (os.path.join("muxhost", "stub.py"), os.path.join("muxhost", "launcher.py"))
    return any(arg.endswith(tail) for arg in proc.cmdline[:4])


def owners(records: Iterable[Record], agent: str) -> dict[str, set[str]]:
    """Each conversation id a record of ``agent`` is or has been in, and the ids of those records:
    a record owns them whatever its state (stopped, asleep, lost, exited) until ``rm`` forgets it."""
    owner: dict[str, set[str]] = {}
    for r in records:
        if r.agent == agent:
            for cid in {*r.conversations, *([r.conversation_id] if r.conversation_id else [])}:
                owner.setdefault(cid, set()).add(r.id)
    return owner


def server_of(rec: Record) -> tuple[str, str | None]:
    """The server a record's agent runs on: (backend name, address)."""
    return (rec.backend or "tmux", rec.socket)


@dataclass
class Located:
    """The agent found in a pane: a record's, or a hand-started one (``proc``)."""

    pane: PaneInfo
    agent: Agent
    rec: Record | None
    proc: procs.Proc | None
    ctx: AgentContext
    conversation_id: str | None


@dataclass
class Live:
    """A record with what is true now."""

    rec: Record
    state: str
    pane: PaneInfo | None
    tree: list[procs.Proc] = field(default_factory=list)
    resumable: bool = False
    notes: list[str] = field(default_factory=list)  # the plugin's remarks (ctx.notes) at launch/resume
    warnings: list[dict[str, str]] = field(default_factory=list)  # plugin hooks that failed for it
    activity: str | None = None          # working | waiting | idle | stalled (muxhost.activity), when running
    activity_since: float | None = None  # epoch seconds it has held since (None: unknown)
    already: str | None = None  # a wake of one awake ("awake"), a stop of one stopped ("stopped"): nothing done
    skipped: str | None = None  # a sleep that left it as it was, and why: "asleep" (already), "not idle"

    def to_dict(self) -> dict[str, Any]:
        r = self.rec
        d = {
            "id": r.id, "agent": r.agent, "name": r.name, "state": self.state,
            "conversation_id": r.conversation_id, "conversations": list(r.conversations), "cwd": r.cwd,
            "pane": self.pane.pane_id if self.pane else None,
            "resumable": self.resumable,
            "session": (self.pane.session_name if self.pane else None),
            "home": r.home, "socket": r.socket, "backend": r.backend, "argv": r.argv,
            "launched_at": r.launched_at, "stopped_at": r.stopped_at, "slept_at": r.slept_at,
            "exit_status": self.pane.dead_status if self.pane and self.pane.dead else None,
            "pids": [p.pid for p in self.tree],
            "warnings": list(self.warnings),
            "activity": self.activity, "activity_since": self.activity_since,
            "worktree": r.worktree,
        }
        if r.outcome:
            d["outcome"], d["seconds"] = r.outcome, r.seconds
        if self.notes:
            d["notes"] = list(self.notes)
        if self.already:
            d["already"] = self.already
        if self.skipped:
            d["skipped"] = self.skipped
        return d


class State:
    """Who runs where: looks at the world and judges each record by it."""

    def __init__(self, core: "Core"):
        self.core = core

    def view(self, records: Iterable[Record] = (), servers: Iterable[tuple[str, str | None]] = ()) -> View:
        """Every pane of each server the records are on (and of ``servers``), one query per server."""
        wanted = {server_of(r) for r in records} | set(servers)
        panes = {s: self.core.backend(s[1], s[0]).snapshot() for s in wanted}
        return View(panes, procs.ProcessTable.snapshot())

    def pane_view(self, rec: Record) -> View:
        """The panes of ``rec``'s server and, of the process table, only the processes of the live
        panes that carry the record (and their parents, :meth:`procs.ProcessTable.of`): enough for
        :meth:`View.pane_for` and :meth:`View.foreign` (``read``), not for :meth:`live`."""
        server = server_of(rec)
        panes = self.core.backend(server[1], server[0]).snapshot()
        pids = [p.pid for p in panes or () if p.record == rec.id and not p.dead]
        return View({server: panes}, procs.ProcessTable.of(pids))

    def live(self, rec: Record, view: View, agent: Agent | None = None, check_resumable: bool = True) -> Live:
        pane = view.pane_for(rec)
        tree: list[procs.Proc] = []
        if view.foreign(rec) is not None:  # another program runs in its pane: not the agent (any more)
            pane = None
            starting = rec.state == "starting" and time.time() - rec.created_at < STARTING_GRACE
            state = "starting" if starting else "stopped" if rec.state == "stopped" else "exited"
        elif rec.state == "asleep":  # its pane (if any: a server restart took it) shows muxhost's stub
            tree = view.table.tree(pane.pid) if pane is not None and not pane.dead else []
            # ... unless the agent runs there again: a wake killed between starting it and saying so
            state = "running" if woken(rec, tree[0] if tree else None) else "asleep"
        elif pane is not None and not pane.dead:
            tree = view.table.tree(pane.pid)
            state = "running" if tree else "exited"
        elif pane is not None:
            state = "exited"
        elif rec.state in ("stopped", "stopping"):
            state = rec.state
        elif rec.state == "starting" and time.time() - rec.created_at < STARTING_GRACE:
            state = "starting"
        elif rec.state == "running" and not self.core.backend_of(rec).keeps_dead_panes and view.server_running(
                server_of(rec)) and not any(view.table.tree_of((int(k[0]), k[1])) for k in rec.pids if len(k) == 2):
            state = "exited"  # a multiplexer that keeps no dead pane: the agent ended and its pane with it
        else:
            state = "lost"
        live = Live(rec, state, pane, tree)
        if check_resumable and rec.conversation_id and state != "running":
            agent = agent or self.core.registry.agents.get(rec.agent)
            live.resumable = self.core.resumable(agent, rec, live)
        return live

    def refresh(self, lives: list[Live], view: View | None = None, records: list[Record] | None = None) -> None:
        """Ask the plugins which conversation each running record is in now (``discover``), and
        give each conversation to at most one record, whatever the plugins answer.

        Every running record of the agents concerned is asked in the same refresh, not only those
        of ``lives``: a plugin that ignores pids ("the newest conversation in my cwd that is not
        claimed") can only tell two agents in one folder apart when both are asked. Records without
        a conversation choose first (newest launch first: its window is the narrowest), then the
        others. Every id any other record has been in is claimed, whatever its state (stopped,
        asleep, lost, exited: only ``rm`` forgets a record), and so is each id handed out earlier in
        this refresh. A record that has a conversation never moves onto an id that
        another record's ``discover`` also returned: an ambiguous answer changes nothing."""
        agents = {lv.rec.agent for lv in lives if lv.state == "running"}
        if not agents:
            return
        records = self.core.store.all() if records is None else records
        by_id = {lv.rec.id: lv for lv in lives}
        others = [r for r in records if r.id not in by_id and r.agent in agents and r.state in ("running", "starting")]
        if others:
            missing = {server_of(r) for r in others} - set(view.panes if view else ())
            if view is None or missing:
                more = self.view(others)
                view = View({**(view.panes if view else {}), **more.panes}, view.table if view else more.table)
            for r in others:
                by_id[r.id] = self.live(r, view, check_resumable=False)
        table = view.table if view else None
        for name in sorted(agents):
            agent = self.core.registry.agents.get(name)
            if agent is not None:
                self._refresh_agent(agent, [lv for lv in by_id.values() if lv.rec.agent == name], records, table)

    def _refresh_agent(self, agent: Agent, group: list[Live], records: list[Record],
                       table: procs.ProcessTable | None) -> None:
        """:meth:`refresh` for the records of one agent (``group``: every record of it asked)."""
        name = agent.name
        # every id a record of this agent is (or has been) in belongs to that record, whatever its state
        owner = owners([*records, *(lv.rec for lv in group)], name)
        asked = sorted((lv for lv in group if lv.state == "running"),
                       key=lambda lv: (lv.rec.conversation_id is not None, -lv.rec.launched_at))
        answers: dict[str, str | None] = {}
        handed: dict[str, str] = {}  # id -> record id, in this refresh
        live_ids = {lv.rec.id for lv in group if lv.state in ("running", "starting")}
        for lv in asked:
            others_own = {c for c, ids in owner.items() if ids - {lv.rec.id}}
            # never: an id another live record is in, or one handed out in this refresh
            taken = {c for c in others_own if (owner[c] - {lv.rec.id}) & live_ids} | \
                {c for c, r in handed.items() if r != lv.rec.id}
            claimed = others_own | taken
            ctx = self.core.context(lv.rec, [p.pid for p in lv.tree], claimed, table)
            try:
                cid = agent.discover(ctx)
            except Exception as e:
                self.core.warn(name, "discover", e, lv.rec, lv)
                continue
            if cid is not None and not agent.valid_id(cid):
                self.core.warn(name, "discover", ValueError(f"returned an invalid id {cid!r}"), lv.rec, lv)
                continue
            answers[lv.rec.id] = cid
            if cid and cid != lv.rec.conversation_id and cid not in taken:
                # an id a record that does not run owns (stopped, asleep, lost): only with proof that
                # this agent holds it now (an in-session `/resume ID`), never on a plugin's guess
                if cid in claimed and not self.holds(agent, ctx, cid, lv):
                    continue
                handed[cid] = lv.rec.id
        by_id = {lv.rec.id: lv for lv in group}
        for cid, rid in handed.items():
            rec = by_id[rid].rec
            if rec.conversation_id and any(o != rid and answer == cid for o, answer in answers.items()):
                continue  # a move onto an id another record's discover also gives: ambiguous, no move
            self.core.store.update(rec, conversation_id=cid)

    @staticmethod
    def holds(agent: Agent, ctx: AgentContext, cid: str, lv: Live) -> bool:
        """The plugin's ``in_use`` names ``lv``'s agent itself (``pid N …``: a process of its tree
        that its ``process_names`` match, else the pane's process) as a holder of ``cid``: proof,
        not a guess, that the agent is in that conversation now. A tool of the agent that merely
        names the id (``cat ID.jsonl``) is no proof."""
        mine = {p.pid for p in lv.tree if p.matches_name(agent.process_names)} or {p.pid for p in lv.tree[:1]}
        try:
            held = agent.in_use(ctx, cid) or []
        except Exception:
            return False
        return any(holder_pid(h) in mine for h in held)

    def live_records(self) -> tuple[list[Record], View]:
        """The records whose agent may still be there (``running``, ``exited``, ``starting``), and the
        view they were judged by — without asking any plugin (``stop --all``)."""
        records = self.core.store.all()
        view = self.view(records)
        lives = [self.live(r, view, check_resumable=False) for r in records]
        return [lv.rec for lv in lives if lv.state in LIVE_STATES], view

    def resolve(self, ref: str) -> Record:
        records = self.core.store.all()
        pane_id = self.core.current().pane_ref(ref)  # "%12" on tmux: the chosen server's pane
        if pane_id is not None:
            view = self.view(records, [self.core.server])
            for rec in reversed(records):
                pane = view.pane_for(rec)
                if pane is not None and pane.pane_id == pane_id and server_of(rec) == self.core.server:
                    return rec
            if not view.server_running(self.core.server):
                raise MuxhostError(self.core.no_server())
            raise NotFound(f"no muxhost record for pane {ref}")
        if not ref:
            raise UsageError("an empty REF names no record")
        # an id, any unique prefix of one, or a name: every record REF could mean, none preferred
        named = [r for r in records if r.name == ref]
        if len(named) > 1:  # a name used again after a stop: the record that is not stopped
            current = [r for r in named if r.state != "stopped"]
            named = current if len(current) == 1 else named
        found = list({r.id: r for r in [*named, *(r for r in records if r.id.startswith(ref))]}.values())
        if len(found) == 1:
            return found[0]
        if not found:
            raise NotFound(f"no record matches {ref!r} (see `muxhost ls --all`)")
        shown = ", ".join(f"{r.id} (name {r.name}, {r.state})" for r in found[:10])
        more = f" and {len(found) - 10} more" if len(found) > 10 else ""
        raise UsageError(f"ambiguous: {ref!r} matches {len(found)} records: {shown}{more}; "
                         "give more of the id, or the name")

    def reconcile(self) -> list[str]:
        """Compare records with the panes and the process table; fix what drifted; say what changed."""
        records = self.core.store.all()
        view = self.view(records, [self.core.server])
        changes = []
        known = {r.id for r in records}
        lives = []
        for rec in records:
            lv = self.live(rec, view, check_resumable=False)
            lives.append(lv)
            if lv.pane is not None and lv.pane.pane_id != rec.pane:
                changes.append(f"{rec.id}: pane {rec.pane or '-'} -> {lv.pane.pane_id}")
                self.core.store.update(rec, pane=lv.pane.pane_id, state="running" if rec.state == "starting" else rec.state)
            if lv.state == "lost" and rec.state in ("running", "starting"):
                changes.append(f"{rec.id}: its pane is gone; marked lost")
                self.core.store.update(rec, state="lost")
        before = {lv.rec.id: lv.rec.conversation_id for lv in lives}
        self.refresh(lives, view, records)
        for lv in lives:
            if lv.rec.conversation_id != before[lv.rec.id]:
                changes.append(f"{lv.rec.id}: conversation {before[lv.rec.id] or '-'} -> {lv.rec.conversation_id}")
        for socket, panes in view.panes.items():
            for p in panes or []:
                if p.record and p.record not in known:
                    changes.append(f"pane {p.pane_id} carries unknown record {p.record}; left alone")
        return changes

    def locate(self, pane_id: str) -> "Located":
        """The agent in tmux pane ``pane_id`` and its conversation: a record's, or an agent the user
        started by hand, found in the pane's process tree by the plugins' ``process_names``."""
        records = self.core.store.all()
        view = self.view(records, [self.core.server])
        panes = view.panes.get(self.core.server)
        if panes is None:
            raise MuxhostError(self.core.no_server())
        pane = next((p for p in panes if p.pane_id == pane_id), None)
        if pane is None:
            raise NotFound(f"no pane {pane_id}")
        running = {r.id: self.live(r, view, check_resumable=False) for r in records}
        rec = next((r for r in reversed(records) if server_of(r) == self.core.server and pane.record == r.id), None)
        if rec is not None and (running[rec.id].pane is None or running[rec.id].pane.pane_id != pane.pane_id):
            rec = None  # (the pane keeps its mark after a `respawn-pane`; the record is not there any more)
        if rec is not None:
            lv = running[rec.id]
            self.refresh([lv], view, records)
            agent = self.core.registry.agent(rec.agent)
            return Located(pane, agent, rec, None, self.core.context(rec, [p.pid for p in lv.tree]), rec.conversation_id)
        if pane.dead:
            raise NotFound(f"no agent in pane {pane_id}")
        found = self._agent_in(view.table, pane.pid)
        if found is None:
            raise NotFound(f"no agent in pane {pane_id}")
        agent, proc = found
        claimed = set(owners(records, agent.name))  # every id a record has been in, whatever its state
        ctx = self._process_context(agent, proc, view.table, claimed)
        cid = None
        try:
            cid = agent.discover(ctx)
        except Exception as e:
            raise MuxhostError(f"{agent.name} in pane {pane_id}: cannot tell its conversation ({type(e).__name__}: {e})")
        if cid is not None and not agent.valid_id(cid):
            cid = None
        return Located(pane, agent, None, proc, ctx, cid)

    def _agent_in(self, table: procs.ProcessTable, root_pid: int | None) -> tuple[Agent, procs.Proc] | None:
        """The shallowest process of the tree that some agent's ``process_names`` match."""
        level = [table.get(root_pid)] if table.get(root_pid) else []
        while level:
            for p in level:
                for agent in self.core.registry.agents.values():
                    if p.matches_name(agent.process_names):
                        return agent, p
            level = [c for p in level for c in table.children(p.pid)]
        return None

    def _process_context(self, agent: Agent, proc: procs.Proc, table: procs.ProcessTable,
                         claimed: Iterable[str]) -> AgentContext:
        import psutil

        env: dict[str, str] = {}
        cwd = ""
        try:
            ps = psutil.Process(proc.pid)
            env = ps.environ()
            cwd = ps.cwd()
        except psutil.Error:
            pass
        home = env.get("HOME") or os.path.expanduser("~")
        cfg = self.core.config.agent(agent.name)
        return AgentContext(home=home, env=env, cwd=cwd, launched_at=proc.create_time,
                            pids=[p.pid for p in table.tree(proc.pid)], claimed=frozenset(claimed), config=cfg,
                            args=list(cfg.get("args") or []))
