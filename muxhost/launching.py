"""Launch and resume: the agent's environment, its command checked before any pane exists, the
pane started under a record, under the conversation's and the record's locks (:mod:`muxhost.locks`),
after the refusals (:mod:`muxhost.refusals`)."""

from __future__ import annotations

import contextlib
import os
import re
import time
from typing import TYPE_CHECKING, Iterable

from muxhost import procs, worktrees
from muxhost.agent import Agent, AgentContext, Launch
from muxhost.backends import AGENT_OPTION, RECORD_OPTION
from muxhost.errors import MuxhostError, NotFound, Refused, UsageError
from muxhost.refusals import check_id
from muxhost.state import Live, owners
from muxhost.store import Record

if TYPE_CHECKING:
    from muxhost.core import Core
    from muxhost.locks import Locks
    from muxhost.refusals import Refusals
    from muxhost.state import State

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
ID_BYTES = 4  # a record id is os.urandom(ID_BYTES).hex(): 8 lowercase hex digits
#: what a REF of a record id (or of a prefix of one) looks like: never a name
ID_LIKE_RE = re.compile(rf"[0-9a-f]{{1,{2 * ID_BYTES}}}")
ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_XDG_VARS = ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR")
#: seconds a launch or resume waits for the agent's first screen (it is up then, or it died)
UP_TIMEOUT = 3.0
#: seconds after its first screen in which an agent that prints an error and exits is caught
UP_SETTLE = 0.2


class Launching:
    """Launch and resume (and so wake and restore) of records."""

    def __init__(self, core: "Core", state: "State", locks: "Locks", refusals: "Refusals"):
        self.core, self.state, self.locks, self.refusals = core, state, locks, refusals

    def agent_env(self, base: dict[str, str], home: str | None, agent_name: str,
                  extra: Iterable[str] = ()) -> tuple[str, dict[str, str]]:
        # what the launching client's multiplexer says about ITSELF (tmux: TMUX, TMUX_PANE): the
        # agent's pane gets its own
        # (of every installed backend: a launch on herdr from inside tmux must not hand over TMUX)
        drop = self.core.client_vars()
        env = {k: v for k, v in base.items() if k not in drop}
        caller_home = base.get("HOME") or os.path.expanduser("~")
        home = os.path.abspath(os.path.expanduser(home)) if home else caller_home
        if home and not os.path.isdir(home):
            raise UsageError(f"--home {home}: no such directory")
        if os.path.realpath(home) != os.path.realpath(caller_home):
            # another HOME: the caller's XDG dirs belong to the caller's home, not this one
            for var in _XDG_VARS:
                env.pop(var, None)
        env["HOME"] = home
        env.update(self.core.config.agent(agent_name).get("env") or {})
        for pair in extra:
            key, sep, value = pair.partition("=")
            if not sep or not ENV_RE.fullmatch(key):
                raise UsageError(f"--env {pair!r}: expected KEY=VALUE")
            env[key] = value
        return home, env

    def launch(self, agent_name: str, *, cwd: str | None = None, name: str | None = None,
               target: str | None = None, split: str | None = None, home: str | None = None,
               env: Iterable[str] = (), args: Iterable[str] = (), worktree: str | None = None) -> Live:
        agent = self.core.registry.agent(agent_name)
        cwd = os.path.abspath(os.path.expanduser(cwd or os.getcwd()))
        if not os.path.isdir(cwd):
            raise UsageError(f"--cwd {cwd}: no such directory")
        rid = os.urandom(ID_BYTES).hex()
        name = name or f"{agent.name}-{rid}"
        if not NAME_RE.fullmatch(name):
            raise UsageError(f"--name {name!r}: use letters, digits, '-' and '_' (up to 64)")
        if ID_LIKE_RE.fullmatch(name):
            raise UsageError(f"--name {name!r} looks like a record id (or a prefix of one: up to "
                             f"{2 * ID_BYTES} hex digits); a REF would not tell them apart: choose another name")
        everyone = self.core.store.all()
        for other in everyone:
            if other.name == name and other.state != "stopped":
                raise UsageError(f"--name {name!r} is already used by record {other.id}")
        home, full_env = self.agent_env(dict(os.environ), home, agent.name, env)
        wt, rec = None, None
        if worktree is not None:  # a new branch in a new folder (muxhost.worktrees), undone if the launch fails
            wt, rel = worktrees.plan(cwd, worktree, self.core.config.worktree_root)
            cwd = worktrees.create(wt, rel)
        try:
            full_env[procs.RECORD_ENV] = rid
            full_env["PWD"] = cwd  # as a shell would set it: some agents take their folder from $PWD
            cfg = self.core.config.agent(agent.name)
            ctx = AgentContext(home=home, env=dict(full_env), cwd=cwd, launched_at=time.time(), config=cfg,
                               args=list(cfg.get("args") or []) + list(args), record_id=rid,
                               claimed=frozenset(owners(everyone, agent.name)))
            launch = self._checked_launch(agent, agent.launch(ctx))
            full_env.update(launch.env)
            self.check_command(agent, list(launch.argv), full_env, cwd)  # no record, no pane, if it cannot run
            notes = list(ctx.notes)
            rec = Record(id=rid, name=name, agent=agent.name, cwd=cwd, home=home, launched_at=ctx.launched_at,
                         backend=self.core.backend_name, socket=self.core.socket, conversation_id=launch.conversation_id,
                         env=full_env, argv=list(launch.argv), worktree=wt)
            cid = launch.conversation_id
            # into a conversation that is on disk (`-- --resume ID`): never while it is being purged
            existing = cid is not None and self._exists(agent, ctx, cid)
            with self.locks.conversation(agent.name, cid, "launch") if existing else contextlib.nullcontext():
                if existing and not self._exists(agent, ctx, cid):
                    raise NotFound(f"conversation {cid} of agent {agent.name} no longer exists")
                self.core.store.insert(rec)  # `starting`: a launch killed from here on is seen as lost, never half
                live = self._start(rec, agent, launch, target=target, split=split)
            live.notes = notes
            self._wait_up(rec, live.pane.pane_id)  # (no lock held: a purge asking meanwhile sees it running)
        except BaseException as e:
            if wt is not None and (rec is None or rec.state != "running"):  # no agent runs there: leave nothing
                try:
                    worktrees.discard(wt)
                except MuxhostError as undo:
                    if isinstance(e, MuxhostError):
                        raise MuxhostError(f"{e}; {undo}", e.exit_code) from e
                    raise
            raise
        return live

    def _exists(self, agent: Agent, ctx: AgentContext, conversation_id: str) -> bool:
        """``exists``, failing closed: a plugin that cannot tell counts as "it exists"."""
        if not agent.valid_id(conversation_id):
            return False
        try:
            return bool(agent.exists(ctx, conversation_id))
        except Exception as e:
            self.core.warn(agent.name, "exists", e)
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
               respawn_pane: str | None = None, session_name: str | None = None) -> Live:
        backend = self.core.backend_of(rec)
        # (its plugins imported now, before any pane: a plugin that cannot be imported any more is
        # an error before the agent runs, not after)
        announce = self.core.pm.hook.muxhost_agent_launched
        env = dict(rec.env)
        env.update(launch.env)
        try:
            if respawn_pane:
                pane = backend.respawn(respawn_pane, launch.argv, cwd=rec.cwd, env=env)
                created = rec.created_session
            else:
                pane, created = backend.create(launch.argv, cwd=rec.cwd, env=env, name=session_name or rec.name, target=target,
                                               split=split, options={RECORD_OPTION: rec.id, AGENT_OPTION: rec.agent})
        except MuxhostError:
            if rec.state == "starting":
                self._forget(rec)
            raise
        pids = procs.key_of(pane.pid)  # the pane's process is the agent only while it is this one
        self.core.store.update(rec, state="running", pane=pane.pane_id, session=pane.session_id if created else rec.session,
                          session_name=pane.session_name or rec.session_name, slept_at=None,
                          created_session=created, pids=pids, stopped_at=None, outcome=None, seconds=None,
                          conversation_id=launch.conversation_id or rec.conversation_id, argv=list(launch.argv))
        live = Live(rec, "running", pane, procs.ProcessTable.snapshot().tree(pane.pid) if pane.pid else [])
        announce(record=live.to_dict())
        return live

    def _wait_up(self, rec: Record, pane_id: str) -> None:
        """Until the agent shows its first screen (and a moment more): one that exits at once
        (a bad flag, a missing key) is exit 1 with its status and its last lines, not "launched".
        The record stays (``exited``: ``ls`` shows it, ``resume`` and ``rm`` work on it)."""
        backend = self.core.backend_of(rec)
        deadline = time.monotonic() + UP_TIMEOUT
        seen_at, screen = None, ""

        def look() -> str:
            try:
                return backend.capture(pane_id)
            except MuxhostError:  # (a backend that keeps no dead pane: gone with the agent)
                return ""

        started = tuple(rec.pids[0]) if rec.pids and len(rec.pids[0]) == 2 else None
        while True:  # (one cheap look at the process muxhost started, and the screen, each time)
            if started is not None and not procs.same_process(int(started[0]), started[1]):
                break
            if started is None and self.state.live(rec, self.state.view([rec]), check_resumable=False).state != "running":
                break
            now = time.monotonic()
            screen = look() or screen
            if seen_at is None and screen.strip():
                seen_at = now
            if now >= deadline or (seen_at is not None and now - seen_at >= UP_SETTLE):
                return
            time.sleep(0.05)
        live = self.state.live(rec, self.state.view([rec]), check_resumable=False)
        if live.state in ("running", "starting"):
            return  # (its first process ended, but what it started runs on in the pane)
        pane = live.pane
        end = time.monotonic() + 1.0  # its process is gone; the pane server may not have reaped it yet
        while pane is not None and pane.dead_status is None and backend.keeps_dead_panes and time.monotonic() < end:
            time.sleep(0.05)
            pane = next((p for p in backend.snapshot() or [] if p.pane_id == pane_id), None)
        status = f" (status {pane.dead_status})" if pane is not None and pane.dead_status is not None else ""
        last = [ln.strip() for ln in ((look() if pane is not None else "") or screen).splitlines() if ln.strip()][-5:]
        said = ": " + " | ".join(last) if last else ""
        read = f"`muxhost read {rec.id}` shows its screen, " if pane is not None else ""
        raise MuxhostError(f"{rec.agent} exited at once{status}{said} (record {rec.id}: {read}"
                           f"`muxhost rm {rec.id}` forgets it)")

    def _forget(self, rec: Record) -> None:
        with self.core.store.transaction() as con:
            con.execute("DELETE FROM records WHERE id = ? AND state = 'starting'", (rec.id,))

    def resume(self, rec: Record, target: str | None = None, split: str | None = None,
               session_name: str | None = None) -> Live:
        """The record's conversation again, in its (dead) pane, else a new one (``target``, ``split``;
        a new session is named ``session_name``, default the record's name). An asleep record wakes
        in its own pane: the agent replaces muxhost's stub there."""
        agent = self.core.registry.agent(rec.agent)
        view = self.state.view([rec])
        live = self.state.live(rec, view, agent, check_resumable=False)
        if live.state in ("running", "starting"):
            where = f" in pane {live.pane.pane_id}" if live.pane else ""
            raise Refused(f"record {rec.id} is {live.state}{where}; stop it first")
        cid = rec.conversation_id
        if not cid:
            raise NotFound(f"record {rec.id} has no conversation id to resume")
        check_id(agent, cid)
        if not os.path.isdir(rec.cwd):
            raise NotFound(f"cannot resume {rec.id}: its directory {rec.cwd} no longer exists")
        ctx = self.core.context(rec)
        try:  # first: a plugin may refuse with a precise reason (NotFound("… belongs to /other/cwd"))
            launch = self._checked_launch(agent, agent.resume(ctx, cid))
        except NotImplementedError as e:
            raise UsageError(str(e) or f"agent {agent.name!r} cannot resume") from None
        if launch.conversation_id is None:
            launch.conversation_id = cid
        self.check_command(agent, list(launch.argv), {**rec.env, **launch.env}, rec.cwd)
        # under the conversation's lock until the pane runs: a purge of it that starts meanwhile
        # sees this record running (and one already under way makes this wait, then refuse)
        # and under the record's: a stop or sleep of it under way finishes first (then this refuses)
        with self.locks.conversation(agent.name, cid, "resume"), self.locks.record(rec, "resume"):
            now = self.core.store.get(rec.id)
            # another muxhost woke, resumed or stopped it meanwhile (a resume moves launched_at under
            # this lock: two resumes of one lost record never both start it)
            if now is None or (now.state, now.launched_at) != (rec.state, rec.launched_at):
                raise Refused(f"record {rec.id} changed meanwhile (it is {now.state if now else 'gone'}); look again")
            if not agent.exists(ctx, cid):
                raise NotFound(f"conversation {cid} of agent {agent.name} no longer exists")
            # (an asleep record's pane runs muxhost's stub, and the ladder ended the agent there)
            stub = live.state == "asleep" and live.pane is not None
            self.refusals.refuse_alive(rec, agent, [] if stub else [cid], own=[p.pid for p in live.tree])
            self.core.store.update(rec, launched_at=time.time())
            reuse = (live.pane is not None and (live.pane.dead or live.state == "asleep") and not (target or split)
                     and self.core.backend_of(rec).keeps_dead_panes)  # (herdr: no pane to start in again)
            other = view.foreign(rec)
            if other is not None and not (target or split):  # its pane is the user's now: a window beside it
                target = other[0].session_id
            started = self._start(rec, agent, launch, target=target, split=split,
                                  respawn_pane=live.pane.pane_id if reuse else None, session_name=session_name)
            if live.state == "asleep" and live.pane is not None and not reuse:  # woken elsewhere: no stub left
                with contextlib.suppress(MuxhostError):
                    self.core.backend_of(rec).kill_pane(live.pane.pane_id)
        started.notes = list(ctx.notes)
        self._wait_up(rec, started.pane.pane_id)  # (after the stub's pane went, outside the locks)
        return started
