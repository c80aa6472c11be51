"""The stop ladder (CONTRACT §3), for one agent or many at once in lockstep: exit text, wait,
close the pane or session, SIGTERM, SIGKILL — every process of the record, nothing else. Part of
:class:`muxhost.host.Host`."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable

from muxhost import procs
from muxhost.agent import Agent
from muxhost.backends import Backend, PaneInfo
from muxhost.errors import MuxhostError
from muxhost.state import Live, Located, View, foreign_now, left_alone, woken
from muxhost.store import Record


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
    note: str = ""                 # for the user: why the ladder left the pane alone
    outcome: str | None = None
    seconds: float = 0.0
    error: MuxhostError | None = None


class LadderOps:
    """The stop half of :class:`muxhost.host.Host`."""

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
        :class:`Live` or the error that kept it from stopping cleanly.

        Each record's lock (:meth:`record_locks`) is held throughout: a stop that comes while
        another muxhost stops, sleeps or resumes the record waits for it, then judges the record
        as that left it (on a new view when it changed meanwhile: any write moves ``updated_at``).
        A record whose lock stays taken past :data:`muxhost.locks.RECORD_WAIT` is refused (exit 4);
        the others are stopped."""
        before = [r.updated_at for r in records]
        with self.record_locks(records, "stop") as left:
            if [r.updated_at for r in records] != before:
                view = None  # (one of them changed meanwhile: look again)
            todo = [r for r in records if r.id not in left]
            done = iter(self._stop_many(todo, grace, view) if todo else [])
            return [left[r.id] if r.id in left else next(done) for r in records]

    def _stop_many(self, records: list[Record], grace: float | None, view: View | None, keep_panes: bool = False,
                   refreshed: bool = False) -> list["Live | MuxhostError"]:
        """:meth:`stop_many` under the records' locks. ``keep_panes`` (``muxhost sleep``): step 3 is
        SIGHUP to each agent's processes instead of closing its pane, which stays (dead, on a
        backend that keeps dead panes); the records are ``asleep``, not ``stopped``.
        ``refreshed``: the caller has just refreshed their conversation ids on ``view``."""
        view = view or self.view(records)
        lives = [self.live(rec, view, check_resumable=False) for rec in records]
        running = [lv for lv in lives if lv.state == "running"]
        if running and not refreshed:
            self.refresh(running, view)  # the conversation each is in right now, before it goes
        since = min((r.launched_at for r in records), default=0.0)
        view.table.marked_index(since)  # one environment scan serves every record
        targets = [self._stop_target(rec, view, keep_panes) for rec in records]
        self._ladder(targets, grace)
        out: list[Live | MuxhostError] = []
        for rec, t in zip(records, targets):
            if t.error is not None:
                out.append(t.error)
                continue
            agent = self.registry.agents.get(rec.agent)
            now = time.time()
            if keep_panes:
                self.store.update(rec, state="asleep", stopped_at=now, slept_at=now, outcome=t.outcome, seconds=t.seconds)
            else:
                self.store.update(rec, state="stopped", stopped_at=now, outcome=t.outcome, seconds=t.seconds)
            result = Live(rec, rec.state, None, [])
            result.notes = [t.note] if t.note and t.outcome == "exit" else []
            result.resumable = self._resumable(agent, rec, result)
            self.pm.hook.muxhost_agent_stopped(record=result.to_dict(), outcome=t.outcome)
            out.append(result)
        return out

    def _stop_target(self, rec: Record, view: View, keep_pane: bool = False) -> "_Target":
        agent = self.registry.agents.get(rec.agent)
        backend = self.backend_of(rec)
        # (a pane that runs another program now is not the agent's: nothing typed, signalled or closed)
        foreign = view.foreign(rec)
        pane = None if foreign else view.pane_for(rec)
        root = view.table.get(pane.pid) if pane is not None and not pane.dead else None
        # (an asleep record's pane runs muxhost's stub, not the agent: no exit text for it)
        agent_proc = root if root is not None and (rec.state != "asleep" or woken(rec, root)) else None

        def collect(table: procs.ProcessTable) -> list[procs.Proc]:
            found = list(procs.marked(rec.id, table, since=rec.launched_at))
            if root is not None:
                found += table.tree_of(root.key)
            for key in rec.pids:  # the process muxhost started, even where no pane shows it
                found += table.tree_of((int(key[0]), key[1])) if len(key) == 2 else []
            return found

        def close(panes_now: Callable[[Backend], list[PaneInfo]]) -> None:
            if keep_pane:  # 3. (sleep) SIGHUP to the agent's processes; the pane stays for the stub
                for p in collect(procs.ProcessTable.snapshot()):
                    procs.signal_if_same(*p.key, procs.SIGHUP)
                return
            # 3. kill-session when muxhost created it, else kill-pane (tmux sends SIGHUP)
            if foreign:
                return
            now = panes_now(backend)
            mine = pane or next((p for p in now if p.record == rec.id), None)  # (a look that missed it)
            if mine is None or (mine is not pane and foreign_now(rec, mine)):
                return
            if rec.created_session and rec.session and rec.session == mine.session_id:
                # ... unless other panes live in that session now (`launch --target`, a user's split)
                if all(p.record == rec.id for p in now if p.session_id == rec.session):
                    backend.kill_session(rec.session)
                    return
            backend.kill_pane(mine.pane_id)

        victims = {p.key: p for p in [*view.table.tree(root.pid if root else None), *collect(view.table)]}
        note = f"the agent had already exited; {left_alone(foreign)}" if foreign else ""
        return _Target(f"record {rec.id}", backend, pane.pane_id if pane else None, agent, agent_proc,
                       victims, collect, close, self.exit_pause(agent), note=note)

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
                        t.backend.send_keys(t.pane_id, "ctrl+u")
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
                            t.backend.send_keys(t.pane_id, "enter")
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

    def stop_adopted(self, loc: "Located", grace: float | None = None) -> tuple[str, float]:
        """The ladder for an agent muxhost did not start: its pane (the user's shell) is left alone;
        step 3 is SIGHUP to the agent's own tree instead of killing the pane."""
        root = loc.proc
        backend = self.current()

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
