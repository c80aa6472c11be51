"""The host: launch / stop / resume / purge / reconcile, written once for every agent.

Nothing here names an agent: agents come from plugins (:mod:`muxhost.plugins`), panes from a backend
(:mod:`muxhost.backends`), processes from :mod:`muxhost.procs`, records from :mod:`muxhost.store`.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from muxhost import procs
from muxhost.agent import Agent, AgentContext, Launch, PurgeReport
from muxhost.backends import AGENT_OPTION, RECORD_OPTION, Backend, PaneInfo
from muxhost.config import Config
from muxhost.errors import MuxhostError, NotFound, Refused, UsageError
from muxhost.store import Record, Store

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_XDG_VARS = ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR")
# what the launching client's tmux says about ITSELF; the agent's pane gets its own
_DROP_ENV = ("TMUX", "TMUX_PANE")
STARTING_GRACE = 30.0  # a `starting` record without a pane after this long is lost


@dataclass
class View:
    """One look at the world: every pane (one tmux query per server) and the process table."""

    panes: dict[str | None, list[PaneInfo] | None]
    table: procs.ProcessTable

    def pane_for(self, rec: Record) -> PaneInfo | None:
        panes = self.panes.get(rec.socket) or []
        by_option = [p for p in panes if p.record == rec.id]
        if by_option:
            alive = [p for p in by_option if not p.dead]
            return (alive or by_option)[0]
        return None

    def server_running(self, socket: str | None) -> bool:
        return self.panes.get(socket) is not None


@dataclass
class _Target:
    """One agent on its way down the stop ladder."""

    what: str                      # for messages: "record 1a2b3c4d"
    backend: Backend
    pane_id: str | None
    agent: Agent | None
    agent_proc: procs.Proc | None  # the pane's process, while the agent is there
    victims: dict                  # {(pid, create time): …} every process known to be the agent's
    collect: Callable[[procs.ProcessTable], list[procs.Proc]]
    close: Callable[[Callable[[Backend], list[PaneInfo]]], None]  # step 3, given the panes now
    pause: float = 0.5             # exit text -> Enter
    outcome: str | None = None
    seconds: float = 0.0
    error: MuxhostError | None = None


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

    def to_dict(self) -> dict[str, Any]:
        r = self.rec
        d = {
            "id": r.id, "agent": r.agent, "name": r.name, "state": self.state,
            "conversation_id": r.conversation_id, "conversations": list(r.conversations), "cwd": r.cwd,
            "pane": self.pane.pane_id if self.pane else None,
            "resumable": self.resumable,
            "session": (self.pane.session_name if self.pane else None),
            "home": r.home, "socket": r.socket, "backend": r.backend, "argv": r.argv,
            "launched_at": r.launched_at, "stopped_at": r.stopped_at,
            "exit_status": self.pane.dead_status if self.pane and self.pane.dead else None,
            "pids": [p.pid for p in self.tree],
            "warnings": list(self.warnings),
        }
        if r.outcome:
            d["outcome"], d["seconds"] = r.outcome, r.seconds
        if self.notes:
            d["notes"] = list(self.notes)
        return d


class Host:
    def __init__(self, config: Config | None = None, socket: str | None = None, pm=None,
                 store: Store | None = None):
        from muxhost.plugins import Registry, get_plugin_manager

        self.config = config or Config()
        self.pm = pm or get_plugin_manager(self.config)
        self.registry = Registry(self.pm)
        for name, entry in self.config.agents.items():
            if not entry.get("command") and name not in self.registry.agents:
                raise self.config.error(f"agents.{name}", f"no plugin provides agent {name!r} and the entry has no `command`")
        self.socket = socket or os.environ.get("MUXHOST_TMUX_SOCKET") or self.config.socket_name or None
        self._store = store
        self._backends: dict[tuple[str, str | None], Backend] = {}
        self.warnings: list[dict[str, str]] = []  # plugin hooks that failed (see warn)

    # -- plumbing ---------------------------------------------------------------------------------
    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store()
        return self._store

    def backend(self, socket: str | None = None, name: str = "tmux") -> Backend:
        key = (name, socket)
        if key not in self._backends:
            factory = self.registry.backends.get(name)
            if factory is None:
                raise MuxhostError(f"no backend {name!r} is installed (known: {', '.join(sorted(self.registry.backends))})")
            self._backends[key] = factory(socket, self.config)
        return self._backends[key]

    def stop_setting(self, key: str) -> float:
        return self.config.stop(key)

    def exit_pause(self, agent: Agent | None) -> float:
        """Seconds between the exit text and Enter: the agent's config entry, then ``stop:``, then
        the plugin's own default."""
        entry = self.config.agent(agent.name) if agent is not None else {}
        if entry.get("exit_pause") is not None:
            return float(entry["exit_pause"])
        if (self.config.data.get("stop") or {}).get("exit_pause") is not None:
            return self.stop_setting("exit_pause")
        default = getattr(agent, "exit_pause", None)
        return float(default) if default is not None else self.stop_setting("exit_pause")

    def view(self, records: Iterable[Record] = (), sockets: Iterable[str | None] = ()) -> View:
        wanted = {r.socket for r in records} | set(sockets)
        panes = {s: self.backend(s).snapshot() for s in wanted}
        return View(panes, procs.ProcessTable.snapshot())

    # -- live state -----------------------------------------------------------------------------
    def live(self, rec: Record, view: View, agent: Agent | None = None, check_resumable: bool = True) -> Live:
        pane = view.pane_for(rec)
        tree: list[procs.Proc] = []
        if pane is not None and not pane.dead:
            tree = view.table.tree(pane.pid)
            state = "running" if tree else "exited"
        elif pane is not None:
            state = "exited"
        elif rec.state == "stopped":
            state = "stopped"
        elif rec.state == "starting" and time.time() - rec.created_at < STARTING_GRACE:
            state = "starting"
        else:
            state = "lost"
        live = Live(rec, state, pane, tree)
        if check_resumable and rec.conversation_id and state != "running":
            agent = agent or self.registry.agents.get(rec.agent)
            live.resumable = self._resumable(agent, rec, live)
        return live

    def _resumable(self, agent: Agent | None, rec: Record, live: "Live | None" = None) -> bool:
        if agent is None or not agent.valid_id(rec.conversation_id):
            return False
        try:
            return bool(agent.exists(self.context(rec), rec.conversation_id))
        except Exception as e:  # not resumable as far as we can tell, and the user is told why
            self.warn(agent.name, "exists", e, rec, live)
            return False

    def warn(self, agent: str, hook: str, error: BaseException, rec: Record | None = None,
             live: "Live | None" = None) -> dict[str, str]:
        """A plugin hook failed: carry on, but say so (``ls --json`` ``warnings``, a line on stderr;
        ``MUXHOST_DEBUG=1`` prints the traceback)."""
        w = {"agent": agent, "hook": hook, "error": f"{type(error).__name__}: {error}"}
        if rec is not None:
            w["record"] = rec.id
        if os.environ.get("MUXHOST_DEBUG"):
            import sys
            import traceback

            traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        if w not in self.warnings:
            self.warnings.append(w)
        if live is not None and w not in live.warnings:
            live.warnings.append(w)
        return w

    def context(self, rec: Record, pids: Iterable[int] = (), claimed: Iterable[str] = (),
                table: procs.ProcessTable | None = None) -> AgentContext:
        cfg = self.config.agent(rec.agent)
        return AgentContext(home=rec.home, env=dict(rec.env), cwd=rec.cwd, launched_at=rec.launched_at,
                            pids=list(pids), claimed=frozenset(claimed), config=cfg,
                            args=list(cfg.get("args") or []), conversation_id=rec.conversation_id,
                            record_id=rec.id, processes=table)

    def refresh(self, lives: list[Live], view: View | None = None, records: list[Record] | None = None) -> None:
        """Ask the plugins which conversation each running record is in now (``discover``), and
        give each conversation to at most one record, whatever the plugins answer.

        Every running record of the agents concerned is asked in the same refresh, not only those
        of ``lives``: a plugin that ignores pids ("the newest conversation in my cwd that is not
        claimed") can only tell two agents in one folder apart when both are asked. Records without
        a conversation choose first (newest launch first: its window is the narrowest), then the
        others. Every id any other running record has been in is claimed, and so is each id handed
        out earlier in this refresh. A record that has a conversation never moves onto an id that
        another record's ``discover`` also returned: an ambiguous answer changes nothing."""
        agents = {lv.rec.agent for lv in lives if lv.state == "running"}
        if not agents:
            return
        records = self.store.all() if records is None else records
        by_id = {lv.rec.id: lv for lv in lives}
        others = [r for r in records if r.id not in by_id and r.agent in agents and r.state in ("running", "starting")]
        if others:
            missing = {r.socket for r in others} - set(view.panes if view else ())
            if view is None or missing:
                more = self.view(others)
                view = View({**(view.panes if view else {}), **more.panes}, view.table if view else more.table)
            for r in others:
                by_id[r.id] = self.live(r, view, check_resumable=False)
        table = view.table if view else None
        for name in sorted(agents):
            agent = self.registry.agents.get(name)
            if agent is None:
                continue
            group = [lv for lv in by_id.values() if lv.rec.agent == name]
            # every id a live record of this agent is (or has been) in belongs to that record
            owner: dict[str, set[str]] = {}
            for lv in group:
                if lv.state in ("running", "starting", "exited"):
                    for cid in {*lv.rec.conversations, *([lv.rec.conversation_id] if lv.rec.conversation_id else [])}:
                        owner.setdefault(cid, set()).add(lv.rec.id)
            asked = sorted((lv for lv in group if lv.state == "running"),
                           key=lambda lv: (lv.rec.conversation_id is not None, -lv.rec.launched_at))
            answers: dict[str, str | None] = {}
            handed: dict[str, str] = {}  # id -> record id, in this refresh
            for lv in asked:
                claimed = {c for c, ids in owner.items() if ids - {lv.rec.id}} | {c for c, r in handed.items() if r != lv.rec.id}
                try:
                    cid = agent.discover(self.context(lv.rec, [p.pid for p in lv.tree], claimed, table))
                except Exception as e:
                    self.warn(name, "discover", e, lv.rec, lv)
                    continue
                if cid is not None and not agent.valid_id(cid):
                    self.warn(name, "discover", ValueError(f"returned an invalid id {cid!r}"), lv.rec, lv)
                    continue
                answers[lv.rec.id] = cid
                if cid and cid != lv.rec.conversation_id and cid not in claimed:
                    handed[cid] = lv.rec.id
            for cid, rid in handed.items():
                rec = by_id[rid].rec
                if rec.conversation_id and any(o != rid and answer == cid for o, answer in answers.items()):
                    continue  # a move onto an id another record's discover also gives: ambiguous, no move
                self.store.update(rec, conversation_id=cid)

    def live_records(self) -> tuple[list[Record], View]:
        """The records whose agent may still be there (``running``, ``exited``, ``starting``), and the
        view they were judged by — without asking any plugin (``stop --all``)."""
        records = self.store.all()
        view = self.view(records)
        lives = [self.live(r, view, check_resumable=False) for r in records]
        return [lv.rec for lv in lives if lv.state in ("running", "exited", "starting")], view

    def ls(self, all_records: bool = False) -> list[Live]:
        records = self.store.all()
        view = self.view(records)
        lives = [self.live(r, view, check_resumable=False) for r in records]
        self.refresh(lives, view, records)
        for lv in lives:
            lv.resumable = self._resumable(self.registry.agents.get(lv.rec.agent), lv.rec, lv)
        if not all_records:
            lives = [lv for lv in lives if lv.state in ("running", "exited", "starting")]
        return lives

    # -- REF ----------------------------------------------------------------------------------
    def resolve(self, ref: str) -> Record:
        records = self.store.all()
        if ref.startswith("%"):
            view = self.view(records, [self.socket])
            for rec in reversed(records):
                pane = view.pane_for(rec)
                if pane is not None and pane.pane_id == ref and rec.socket == self.socket:
                    return rec
            if not view.server_running(self.socket):
                raise MuxhostError(f"no tmux server running on {self.backend(self.socket).where()}")
            raise NotFound(f"no muxhost record for pane {ref}")
        exact = [r for r in records if r.id == ref]
        if exact:
            return exact[0]
        named = [r for r in records if r.name == ref]
        if len(named) > 1:
            current = [r for r in named if r.state != "stopped"]
            if len(current) == 1:
                return current[0]
        if not named:
            named = [r for r in records if r.id.startswith(ref)] if len(ref) >= 2 else []
        if len(named) == 1:
            return named[0]
        if not named:
            raise NotFound(f"no record matches {ref!r} (see `muxhost ls --all`)")
        ids = ", ".join(f"{r.id} ({r.name})" for r in named[:6])
        raise UsageError(f"{ref!r} matches {len(named)} records: {ids}; use a longer id")

    # -- launch ---------------------------------------------------------------------------------
    def agent_env(self, base: dict[str, str], home: str | None, agent_name: str,
                  extra: Iterable[str] = ()) -> tuple[str, dict[str, str]]:
        env = {k: v for k, v in base.items() if k not in _DROP_ENV}
        caller_home = base.get("HOME") or os.path.expanduser("~")
        home = os.path.abspath(os.path.expanduser(home)) if home else caller_home
        if home and not os.path.isdir(home):
            raise UsageError(f"--home {home}: no such directory")
        if os.path.realpath(home) != os.path.realpath(caller_home):
            # another HOME: the caller's XDG dirs belong to the caller's home, not this one
            for var in _XDG_VARS:
                env.pop(var, None)
        env["HOME"] = home
        env.update(self.config.agent(agent_name).get("env") or {})
        for pair in extra:
            key, sep, value = pair.partition("=")
            if not sep or not ENV_RE.fullmatch(key):
                raise UsageError(f"--env {pair!r}: expected KEY=VALUE")
            env[key] = value
        return home, env

    def launch(self, agent_name: str, *, cwd: str | None = None, name: str | None = None,
               target: str | None = None, split: str | None = None, home: str | None = None,
               env: Iterable[str] = (), args: Iterable[str] = ()) -> Live:
        agent = self.registry.agent(agent_name)
        cwd = os.path.abspath(os.path.expanduser(cwd or os.getcwd()))
        if not os.path.isdir(cwd):
            raise UsageError(f"--cwd {cwd}: no such directory")
        rid = os.urandom(4).hex()
        name = name or f"{agent.name}-{rid}"
        if not NAME_RE.fullmatch(name):
            raise UsageError(f"--name {name!r}: use letters, digits, '-' and '_' (up to 64)")
        for other in self.store.all():
            if other.name == name and other.state != "stopped":
                raise UsageError(f"--name {name!r} is already used by record {other.id}")
        home, full_env = self.agent_env(dict(os.environ), home, agent.name, env)
        full_env[procs.RECORD_ENV] = rid
        full_env["PWD"] = cwd  # as a shell would set it: some agents take their folder from $PWD
        cfg = self.config.agent(agent.name)
        ctx = AgentContext(home=home, env=dict(full_env), cwd=cwd, launched_at=time.time(), config=cfg,
                           args=list(cfg.get("args") or []) + list(args), record_id=rid)
        launch = self._checked_launch(agent, agent.launch(ctx))
        full_env.update(launch.env)
        self.check_command(agent, list(launch.argv), full_env, cwd)  # no record, no pane, if it cannot run
        notes = list(ctx.notes)
        rec = Record(id=rid, name=name, agent=agent.name, cwd=cwd, home=home, launched_at=ctx.launched_at,
                     socket=self.socket, conversation_id=launch.conversation_id, env=full_env,
                     argv=list(launch.argv))
        cid = launch.conversation_id
        # into a conversation that is on disk (`-- --resume ID`): never while it is being purged
        existing = cid is not None and self._exists(agent, ctx, cid)
        with self.conversation_lock(agent.name, cid, "launch") if existing else contextlib.nullcontext():
            if existing and not self._exists(agent, ctx, cid):
                raise NotFound(f"conversation {cid} of agent {agent.name} no longer exists")
            self.store.insert(rec)  # `starting`: a launch killed from here on is seen as lost, never half
            live = self._start(rec, agent, launch, target=target, split=split)
        live.notes = notes
        return live

    def _exists(self, agent: Agent, ctx: AgentContext, conversation_id: str) -> bool:
        """``exists``, failing closed: a plugin that cannot tell counts as "it exists"."""
        if not agent.valid_id(conversation_id):
            return False
        try:
            return bool(agent.exists(ctx, conversation_id))
        except Exception as e:
            self.warn(agent.name, "exists", e)
            return True

    @staticmethod
    def check_command(agent: Agent, argv: list[str] | tuple[str, ...], env: dict[str, str], cwd: str) -> str:
        """The executable ``argv[0]`` resolves to on the agent's own PATH (or as a path, relative to
        its cwd), checked before any pane exists; else a one-line error with the plugin's install hint."""
        import shutil

        cmd = argv[0]
        if os.sep in cmd:
            path = cmd if os.path.isabs(cmd) else os.path.join(cwd, cmd)
            found = path if os.path.isfile(path) and os.access(path, os.X_OK) else None
        else:
            found = shutil.which(cmd, path=env.get("PATH") or os.defpath)
        if found is None:
            where = "is not an executable file" if os.sep in cmd else "is not on the agent's PATH"
            hint = getattr(agent, "install_hint", "") or ""
            raise MuxhostError(f"cannot start {agent.name}: {cmd!r} {where}" + (f" ({hint})" if hint else ""))
        return found

    def _checked_launch(self, agent: Agent, launch: Launch) -> Launch:
        if not isinstance(launch, Launch) or not launch.argv or not all(isinstance(a, str) for a in launch.argv):
            raise MuxhostError(f"agent {agent.name!r} returned no command to run")
        if launch.conversation_id is not None and not agent.valid_id(launch.conversation_id):
            raise MuxhostError(f"agent {agent.name!r} chose an invalid conversation id {launch.conversation_id!r}")
        return launch

    def _start(self, rec: Record, agent: Agent, launch: Launch, target=None, split=None,
               respawn_pane: str | None = None) -> Live:
        backend = self.backend(rec.socket)
        env = dict(rec.env)
        env.update(launch.env)
        try:
            if respawn_pane:
                pane = backend.respawn(respawn_pane, launch.argv, cwd=rec.cwd, env=env)
                created = rec.created_session
            else:
                pane, created = backend.create(launch.argv, cwd=rec.cwd, env=env, name=rec.name, target=target,
                                               split=split, options={RECORD_OPTION: rec.id, AGENT_OPTION: rec.agent})
        except MuxhostError:
            if rec.state == "starting":
                self._forget(rec)
            raise
        pids = []
        if pane.pid:
            try:
                import psutil

                pids = [[pane.pid, psutil.Process(pane.pid).create_time()]]
            except Exception:
                pids = []
        self.store.update(rec, state="running", pane=pane.pane_id, session=pane.session_id if created else rec.session,
                          created_session=created, pids=pids, stopped_at=None, outcome=None, seconds=None,
                          conversation_id=launch.conversation_id or rec.conversation_id, argv=list(launch.argv))
        live = Live(rec, "running", pane, procs.ProcessTable.snapshot().tree(pane.pid) if pane.pid else [])
        self.pm.hook.muxhost_agent_launched(record=live.to_dict())
        return live

    def _forget(self, rec: Record) -> None:
        with self.store.transaction() as con:
            con.execute("DELETE FROM records WHERE id = ? AND state = 'starting'", (rec.id,))

    # -- stop -------------------------------------------------------------------------------------
    def stop(self, rec: Record, grace: float | None = None, view: View | None = None) -> Live:
        """The stop ladder (CONTRACT §3) for a record, run to completion in this process."""
        result = self.stop_many([rec], grace, view)[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def stop_many(self, records: list[Record], grace: float | None = None,
                  view: View | None = None) -> list["Live | MuxhostError"]:
        """The stop ladder for many records at once, in lockstep: every agent gets its exit text,
        then one wait for all of them, then each step for whatever is left — so 50 agents take about
        as long as the slowest one, not 50 times one. Returns, per record in order, its stopped
        :class:`Live` or the error that kept it from stopping cleanly."""
        view = view or self.view(records)
        lives = [self.live(rec, view, check_resumable=False) for rec in records]
        running = [lv for lv in lives if lv.state == "running"]
        if running:
            self.refresh(running, view)  # the conversation each is in right now, before it goes
        since = min((r.launched_at for r in records), default=0.0)
        view.table.marked_index(since)  # one environment scan serves every record
        targets = [self._stop_target(rec, view) for rec in records]
        self._ladder(targets, grace)
        out: list[Live | MuxhostError] = []
        for rec, t in zip(records, targets):
            if t.error is not None:
                out.append(t.error)
                continue
            agent = self.registry.agents.get(rec.agent)
            self.store.update(rec, state="stopped", stopped_at=time.time(), outcome=t.outcome, seconds=t.seconds)
            result = Live(rec, "stopped", None, [])
            result.resumable = self._resumable(agent, rec, result)
            self.pm.hook.muxhost_agent_stopped(record=result.to_dict(), outcome=t.outcome)
            out.append(result)
        return out

    def _stop_target(self, rec: Record, view: View) -> "_Target":
        agent = self.registry.agents.get(rec.agent)
        backend = self.backend(rec.socket)
        pane = view.pane_for(rec)
        agent_proc = view.table.get(pane.pid) if pane is not None and not pane.dead else None

        def collect(table: procs.ProcessTable) -> list[procs.Proc]:
            found = list(procs.marked(rec.id, table, since=rec.launched_at))
            if agent_proc is not None:
                found += table.tree_of(agent_proc.key)
            return found

        def close(panes_now: Callable[[Backend], list[PaneInfo]]) -> None:
            # 3. kill-session when muxhost created it, else kill-pane (tmux sends SIGHUP)
            if pane is None:
                return
            if rec.created_session and rec.session and rec.session == pane.session_id:
                # ... unless other panes live in that session now (`launch --target`, a user's split)
                if all(p.record == rec.id for p in panes_now(backend) if p.session_id == rec.session):
                    backend.kill_session(rec.session)
                    return
            backend.kill_pane(pane.pane_id)

        victims = {p.key: p for p in [*view.table.tree(pane.pid if agent_proc else None), *collect(view.table)]}
        return _Target(f"record {rec.id}", backend, pane.pane_id if pane else None, agent, agent_proc,
                       victims, collect, close, self.exit_pause(agent))

    def _ladder(self, targets: list["_Target"], grace: float | None) -> None:
        """Steps 1-5 of the ladder for every target at once. ``collect(table)`` lists every process
        that belongs to a target; ``close()`` is its step 3. Sets each target's outcome and seconds
        (or its error)."""
        t0 = time.monotonic()
        exit_grace = self.stop_setting("exit_grace") if grace is None else grace

        def done(t: _Target, outcome: str) -> None:
            t.outcome, t.seconds = outcome, round(time.monotonic() - t0, 3)

        # 1. Ctrl-U, the exit text, a pause, Enter — only while the agent itself is there
        # (each step as one batch per server: a pane that went meanwhile is left to the next steps)
        typed: list[_Target] = []
        with self._batched(targets):
            for t in targets:
                text = t.agent.exit_text if t.agent is not None else None
                if t.pane_id is not None and t.agent_proc is not None and text is not None \
                        and procs.same_process(*t.agent_proc.key):
                    try:
                        t.backend.send_keys(t.pane_id, "C-u")
                        t.backend.type_text(t.pane_id, text)
                        typed.append(t)
                    except MuxhostError:
                        pass
                elif not procs.alive(t.victims):
                    done(t, "exit")  # it had already ended: clean up without typing a key
        typed_at = time.monotonic()
        for pause in sorted({t.pause for t in typed}):
            time.sleep(max(0.0, typed_at + pause - time.monotonic()))
            with self._batched(typed):
                for t in typed:
                    if t.pause == pause and procs.same_process(*t.agent_proc.key):
                        try:
                            t.backend.send_keys(t.pane_id, "Enter")
                        except MuxhostError:
                            pass
        # 2. wait for every process of each agent to end
        for t in self._wait_gone(typed, lambda t: t.victims, exit_grace):
            done(t, "exit")
        table = procs.ProcessTable.snapshot()
        for t in targets:
            if t.outcome is None:
                # the whole set again, just before step 3: children started meanwhile count too
                t.victims.update({p.key: p for p in t.collect(table)})
                if not procs.alive(t.victims):
                    done(t, "exit")
        # 3. close every pane (or session)
        snapshots: dict[int, list[PaneInfo]] = {}

        def panes_now(backend: Backend) -> list[PaneInfo]:
            if id(backend) not in snapshots:
                snapshots[id(backend)] = backend.snapshot() or []
            return snapshots[id(backend)]

        with self._batched(targets):
            for t in targets:
                try:
                    t.close(panes_now)
                except MuxhostError:
                    pass  # the server went meanwhile: steps 4-5 still find every process
        table = procs.ProcessTable.snapshot()
        for t in targets:
            if t.outcome is not None:
                # it ended, but did it leave anything behind (a detached exit hook, a tool)? the
                # ladder goes on for those
                stragglers = procs.alive({p.key: p for p in t.collect(table)})
                if stragglers:
                    t.victims, t.outcome = {k: None for k in stragglers}, None
        left = [t for t in targets if t.outcome is None]
        for t in self._wait_gone(left, lambda t: t.victims, self.stop_setting("hup_grace")):
            done(t, "hup")
        left = [t for t in left if t.outcome is None]
        # 4. SIGTERM to every survivor
        for t in left:
            t.victims = {k: None for k in procs.alive(t.victims)}
            for key in t.victims:
                procs.signal_if_same(*key, procs.SIGTERM)
        for t in self._wait_gone(left, lambda t: t.victims, self.stop_setting("term_grace")):
            done(t, "term")
        # 5. SIGKILL to every survivor, and whatever they started meanwhile
        left = [t for t in left if t.outcome is None]
        if left:
            self._kill_all(left)
            for t in left:
                done(t, "kill")

    @staticmethod
    def _batched(targets: list["_Target"]) -> contextlib.ExitStack:
        """One :meth:`Backend.batch` open for each server of the targets."""
        stack = contextlib.ExitStack()
        for backend in {id(t.backend): t.backend for t in targets}.values():
            stack.enter_context(backend.batch())
        return stack

    @staticmethod
    def _wait_gone(targets: list["_Target"], keys: Callable[["_Target"], dict], timeout: float,
                   interval: float = 0.05) -> list["_Target"]:
        """Wait up to ``timeout`` for every process of each target to end (one poll for all);
        return the targets that ended, as they end."""
        ended: list[_Target] = []
        waiting = list(targets)
        deadline = time.monotonic() + timeout
        while waiting:
            for t in list(waiting):
                if not procs.alive(keys(t)):
                    waiting.remove(t)
                    ended.append(t)
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(interval)
        return ended

    @staticmethod
    def _kill_all(targets: list["_Target"]) -> None:
        """SIGKILL every survivor of every target, and whatever they start meanwhile (their trees
        and every process carrying their record), until none is left; one process-table pass per
        round for all targets. A target whose processes survive ten rounds gets an error."""
        keys = {id(t): set(procs.alive(t.victims)) for t in targets}
        for _ in range(10):
            table = procs.ProcessTable.snapshot()
            for t in targets:
                mine = keys[id(t)]
                for key in list(mine):
                    mine.update(p.key for p in table.tree_of(key))
                mine.update(p.key for p in t.collect(table))
                for key in mine:
                    procs.signal_if_same(*key, procs.SIGKILL)
            left = set(procs.wait_gone({k for ks in keys.values() for k in ks}, 2.0))
            keys = {i: ks & left for i, ks in keys.items()}
            if not left:
                return
        for t in targets:
            if keys[id(t)]:
                pids = ", ".join(str(pid) for pid, _ in sorted(keys[id(t)]))
                t.error = MuxhostError(f"{t.what}: processes {pids} survived SIGKILL")

    # -- resume -----------------------------------------------------------------------------------
    def resume(self, rec: Record, target: str | None = None, split: str | None = None) -> Live:
        agent = self.registry.agent(rec.agent)
        view = self.view([rec])
        live = self.live(rec, view, agent, check_resumable=False)
        if live.state in ("running", "starting"):
            where = f" in pane {live.pane.pane_id}" if live.pane else ""
            raise Refused(f"record {rec.id} is {live.state}{where}; stop it first")
        cid = rec.conversation_id
        if not cid:
            raise NotFound(f"record {rec.id} has no conversation id to resume")
        self.check_id(agent, cid)
        if not os.path.isdir(rec.cwd):
            raise NotFound(f"cannot resume {rec.id}: its directory {rec.cwd} no longer exists")
        ctx = self.context(rec)
        try:  # first: a plugin may refuse with a precise reason (NotFound("… belongs to /other/cwd"))
            launch = self._checked_launch(agent, agent.resume(ctx, cid))
        except NotImplementedError as e:
            raise UsageError(str(e) or f"agent {agent.name!r} cannot resume") from None
        if launch.conversation_id is None:
            launch.conversation_id = cid
        self.check_command(agent, list(launch.argv), {**rec.env, **launch.env}, rec.cwd)
        # under the conversation's lock until the pane runs: a purge of it that starts meanwhile
        # sees this record running (and one already under way makes this wait, then refuse)
        with self.conversation_lock(agent.name, cid, "resume"):
            if not agent.exists(ctx, cid):
                raise NotFound(f"conversation {cid} of agent {agent.name} no longer exists")
            self.store.update(rec, launched_at=time.time())
            respawn = live.pane.pane_id if live.pane is not None and live.pane.dead and not (target or split) else None
            started = self._start(rec, agent, launch, target=target, split=split, respawn_pane=respawn)
        started.notes = list(ctx.notes)
        return started

    # -- purge ------------------------------------------------------------------------------------
    @staticmethod
    def check_id(agent: Agent, conversation_id: str) -> None:
        if not agent.valid_id(conversation_id):
            raise UsageError(f"{conversation_id!r} is not a valid {agent.name} conversation id")

    def purge(self, *, rec: Record | None = None, agent_name: str | None = None,
              conversation_id: str | None = None, home: str | None = None, dry_run: bool = False,
              stop: bool = False, confirm: Callable[[PurgeReport], bool] | None = None,
              ctx: AgentContext | None = None) -> PurgeReport:
        """validate → in_use → artifacts (the plan) → veto → purge → artifacts (the residual)."""
        if rec is not None:
            agent = self.registry.agent(rec.agent)
            if conversation_id is None:
                if rec.state != "stopped":
                    view = self.view([rec])
                    self.refresh([self.live(rec, view, agent, check_resumable=False)], view)
                conversation_id = rec.conversation_id
            if not conversation_id:
                raise NotFound(f"record {rec.id} has no conversation id: nothing to purge")
        else:
            agent = self.registry.agent(agent_name or "")
            if conversation_id is None:
                raise UsageError("purge needs a REF, or --agent and --conversation")
        self.check_id(agent, conversation_id)
        if ctx is None:  # (a caller that found a hand-started agent in a pane passes its context)
            rec = rec or self._record_for(agent.name, conversation_id)
            if rec is not None:
                ctx = self.context(rec)
            else:
                h, env = self.agent_env(dict(os.environ), home, agent.name)
                ctx = AgentContext(home=h, env=env, cwd=os.getcwd(), config=self.config.agent(agent.name))
        if dry_run:
            return self._purge(agent, ctx, conversation_id, rec, dry_run=True)
        # held from the in-use check until the residual is read: a resume or launch of this
        # conversation (and a second purge) that comes meanwhile waits briefly, then is refused
        with self.conversation_lock(agent.name, conversation_id, "purge"):
            return self._purge(agent, ctx, conversation_id, rec, stop=stop, confirm=confirm)

    def conversation_lock(self, agent: str, conversation_id: str, purpose: str):
        """The per-conversation lock (muxhost.locks), in the state dir beside the store."""
        from muxhost import locks

        return locks.conversation(Path(self.store.path).parent / "locks", agent, conversation_id, purpose)

    def _purge(self, agent: Agent, ctx: AgentContext, conversation_id: str, rec: Record | None, *,
               dry_run: bool = False, stop: bool = False,
               confirm: Callable[[PurgeReport], bool] | None = None) -> PurgeReport:
        if stop and not dry_run and rec is not None:
            live = self.live(rec, self.view([rec]), agent, check_resumable=False)
            if live.state in ("running", "exited", "starting"):
                self.stop(rec)
        from muxhost import plans

        members = self._family(agent, ctx, conversation_id)
        self._refuse_held(agent, ctx, conversation_id, members)
        report = PurgeReport(agent=agent.name, conversation_id=conversation_id, record=rec.id if rec else None)
        items, legacy = self._plan(agent, ctx, members)
        report.plan = plans.labels(items) if items is not None else legacy
        if not report.plan:
            raise NotFound(f"nothing to purge: conversation {conversation_id} of agent {agent.name} has no artifacts")
        if dry_run:
            report.dry_run = True
            report.notes = list(ctx.notes)
            return report
        if confirm is not None:
            if not confirm(report):
                raise Refused("purge cancelled")
            # the answer may have taken minutes: who holds it now, and what is there now
            members = self._family(agent, ctx, conversation_id)
            self._refuse_held(agent, ctx, conversation_id, members)
            items, legacy = self._plan(agent, ctx, members)
        reason = self.pm.hook.muxhost_purge_veto(agent=agent.name, conversation_id=conversation_id,
                                                 artifacts=list(report.plan))
        if reason is not None:
            raise Refused(f"purge vetoed: {reason}")
        if items is not None:  # typed artifacts: the host carries the plan out
            ran = plans.carry_out(items, ctx, ctx.notes)
            after, _ = self._plan(agent, ctx, self._family(agent, ctx, conversation_id), members)
            left = {i.key for i in after or []}
            report.removed = ran + [i.label for i in items
                                    if i.key not in left and i.artifact.kind not in ("command", "leftover")]
            report.residual = [i.label for i in after or [] if i.artifact.kind != "command"]
        else:
            try:
                report.removed = list(agent.purge(ctx, conversation_id))
            except NotImplementedError as e:
                raise UsageError(str(e) or f"agent {agent.name!r} cannot purge") from None
            report.residual = list(agent.artifacts(ctx, conversation_id))
        report.notes = list(ctx.notes)
        self.pm.hook.muxhost_conversation_purged(agent=agent.name, conversation_id=conversation_id,
                                                 report=report.to_dict())
        return report

    def _family(self, agent: Agent, ctx: AgentContext, conversation_id: str) -> list[str]:
        from muxhost import plans

        try:
            return plans.family(agent, ctx, conversation_id)
        except MuxhostError:
            raise
        except Exception as e:  # fail closed: a family we cannot see cannot be purged
            raise Refused(f"cannot tell the child conversations of {conversation_id} "
                          f"({agent.name}.children: {type(e).__name__}: {e}); nothing was removed") from None

    def _refuse_held(self, agent: Agent, ctx: AgentContext, conversation_id: str, members: list[str]) -> None:
        """Exit 4 when the conversation or any conversation of its family is held."""
        holders = []
        for member in members:
            label = "" if member == conversation_id else f"child conversation {member}: "
            holders += [label + h for h in self._holders(agent, ctx, member)]
        if holders:
            raise Refused(f"conversation {conversation_id} is in use: " + "; ".join(holders))

    def _plan(self, agent: Agent, ctx: AgentContext, members: list[str],
              also: Iterable[str] = ()) -> tuple[list | None, list[str]]:
        """The plan: typed items (the host carries them out), or the strings of an older plugin."""
        from muxhost import plans

        wanted = list(dict.fromkeys([*members, *also]))
        results = {m: list(agent.artifacts(ctx, m) or []) for m in wanted}
        typed = [plans.is_typed(r) for r in results.values() if r]
        if typed and all(typed):
            return plans.build(agent, ctx, wanted, results), []
        if any(typed):
            raise MuxhostError(f"agent {agent.name!r}: artifacts() returns typed artifacts for some conversations "
                               "and strings for others")
        legacy = []
        for m in wanted:
            suffix = "" if m == wanted[0] or not results[m] else f" [child conversation {m}]"
            legacy += [f"{a}{suffix}" for a in results[m]]
        return None, legacy

    def _record_for(self, agent: str, conversation_id: str) -> Record | None:
        matches = [r for r in self.store.all() if r.agent == agent and r.conversation_id == conversation_id]
        return matches[-1] if matches else None

    def _holders(self, agent: Agent, ctx: AgentContext, conversation_id: str) -> list[str]:
        holders = []
        records = [r for r in self.store.all() if r.agent == agent.name and r.conversation_id == conversation_id]
        if records:
            view = self.view(records)
            for r in records:
                lv = self.live(r, view, agent, check_resumable=False)
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

    # -- a pane, whoever started its agent -----------------------------------------------------
    def locate(self, pane_id: str) -> "Located":
        """The agent in tmux pane ``pane_id`` and its conversation: a record's, or an agent the user
        started by hand, found in the pane's process tree by the plugins' ``process_names``."""
        records = self.store.all()
        view = self.view(records, [self.socket])
        panes = view.panes.get(self.socket)
        if panes is None:
            raise MuxhostError(f"no tmux server running on {self.backend(self.socket).where()}")
        pane = next((p for p in panes if p.pane_id == pane_id), None)
        if pane is None:
            raise NotFound(f"no pane {pane_id}")
        running = {r.id: self.live(r, view, check_resumable=False) for r in records}
        rec = next((r for r in reversed(records) if r.socket == self.socket and pane.record == r.id), None)
        if rec is not None:
            lv = running[rec.id]
            self.refresh([lv], view, records)
            agent = self.registry.agent(rec.agent)
            return Located(pane, agent, rec, None, self.context(rec, [p.pid for p in lv.tree]), rec.conversation_id)
        if pane.dead:
            raise NotFound(f"no agent in pane {pane_id}")
        found = self._agent_in(view.table, pane.pid)
        if found is None:
            raise NotFound(f"no agent in pane {pane_id}")
        agent, proc = found
        claimed = {lv.rec.conversation_id for lv in running.values()
                   if lv.state == "running" and lv.rec.agent == agent.name and lv.rec.conversation_id}
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
                for agent in self.registry.agents.values():
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
        cfg = self.config.agent(agent.name)
        return AgentContext(home=home, env=env, cwd=cwd, launched_at=proc.create_time,
                            pids=[p.pid for p in table.tree(proc.pid)], claimed=frozenset(claimed), config=cfg,
                            args=list(cfg.get("args") or []))

    def stop_adopted(self, loc: "Located", grace: float | None = None) -> tuple[str, float]:
        """The ladder for an agent muxhost did not start: its pane (the user's shell) is left alone;
        step 3 is SIGHUP to the agent's own tree instead of killing the pane."""
        root = loc.proc
        backend = self.backend(self.socket)

        def collect(table: procs.ProcessTable) -> list[procs.Proc]:
            return table.tree_of(root.key)

        def close(_panes_now) -> None:
            for p in collect(procs.ProcessTable.snapshot()):
                procs.signal_if_same(*p.key, procs.SIGHUP)

        victims = {p.key: p for p in collect(procs.ProcessTable.snapshot())}
        t = _Target(f"{loc.agent.name} in pane {loc.pane.pane_id}", backend, loc.pane.pane_id, loc.agent, root,
                    victims, collect, close, self.exit_pause(loc.agent))
        self._ladder([t], grace)
        if t.error is not None:
            raise t.error
        return t.outcome, t.seconds

    def purge_pane(self, pane_id: str, *, dry_run: bool = False, stop: bool = False,
                   confirm: Callable[[PurgeReport], bool] | None = None) -> PurgeReport:
        loc = self.locate(pane_id)
        if loc.rec is not None:
            return self.purge(rec=loc.rec, dry_run=dry_run, stop=stop, confirm=confirm)
        if not loc.conversation_id:
            raise NotFound(f"the {loc.agent.name} agent in pane {pane_id} has no conversation on disk yet")
        self.check_id(loc.agent, loc.conversation_id)
        if stop and not dry_run:
            self.stop_adopted(loc)
        return self.purge(agent_name=loc.agent.name, conversation_id=loc.conversation_id, dry_run=dry_run,
                          confirm=confirm, ctx=loc.ctx)

    # -- reconcile --------------------------------------------------------------------------------
    def reconcile(self) -> list[str]:
        """Compare records with the panes and the process table; fix what drifted; say what changed."""
        records = self.store.all()
        view = self.view(records, [self.socket])
        changes = []
        known = {r.id for r in records}
        lives = []
        for rec in records:
            lv = self.live(rec, view, check_resumable=False)
            lives.append(lv)
            if lv.pane is not None and lv.pane.pane_id != rec.pane:
                changes.append(f"{rec.id}: pane {rec.pane or '-'} -> {lv.pane.pane_id}")
                self.store.update(rec, pane=lv.pane.pane_id, state="running" if rec.state == "starting" else rec.state)
            if lv.state == "lost" and rec.state in ("running", "starting"):
                changes.append(f"{rec.id}: its pane is gone; marked lost")
                self.store.update(rec, state="lost")
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
