"""The stop ladder (CONTRACT §3), for one agent or many at once in lockstep: exit text, wait,
close the pane or session, SIGTERM, SIGKILL — every process of the record, nothing else, under the
records' locks (:mod:`muxhost.locks`), each record judged by :class:`muxhost.state.State`."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from muxhost import procs
from muxhost.agent import Agent
from muxhost.backends import Backend, PaneInfo
from muxhost.errors import MuxhostError
from muxhost.exitwatch import ExitWatch
from muxhost.state import Live, Located, View, foreign_now, left_alone, woken
from muxhost.store import Record

if TYPE_CHECKING:
    from muxhost.core import Core
    from muxhost.locks import Locks
    from muxhost.state import State


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
    keeps_pane: bool = False       # step 3 leaves the pane (sleep: the stub's respawn ends what is in it)
    outcome: str | None = None
    seconds: float = 0.0
    error: MuxhostError | None = None


class Ladder:
    """The stop ladder for records (``stop``, ``stop_many``; ``sleep``'s with ``keep_panes``) and for
    an agent muxhost did not start (``stop_adopted``)."""

    def __init__(self, core: "Core", state: "State", locks: "Locks"):
        self.core, self.state, self.locks = core, state, locks

    def stop_setting(self, key: str) -> float:
        return self.core.stop_setting(key)

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

        Each record's lock (:meth:`muxhost.locks.Locks.records`) is held throughout: a stop that comes while
        another muxhost stops, sleeps or resumes the record waits for it, then judges the record
        as that left it (on a new view when it changed meanwhile: any write moves ``updated_at``).
        A record whose lock stays taken past :data:`muxhost.locks.RECORD_WAIT` is refused (exit 4);
        the others are stopped."""
        before = [r.updated_at for r in records]
        with self.locks.records(records, "stop") as left:
            if [r.updated_at for r in records] != before:
                view = None  # (one of them changed meanwhile: look again)
            todo = [r for r in records if r.id not in left]
            done = iter(self.stop_locked(todo, grace, view) if todo else [])
            return [left[r.id] if r.id in left else next(done) for r in records]

    def finish_stops(self, records: list[Record], view: View) -> list[Record]:
        """``ls`` of stops that were cut short (a record left ``stopping``: the muxhost that ran the
        ladder was killed, interrupted, or could not write the record). One with nothing of it left
        (no process, no live pane) is written ``stopped``, its outcome unknown (None: the ladder's
        was lost with it); ``ls`` never runs a ladder itself. Returns those with something left, for
        ``muxhost stop`` to finish. A record whose lock is held (its stop under way) is left alone."""
        left_over = []
        try:
            with self.locks.records(records, "stop", timeout=0.0) as busy:
                for rec in records:
                    if rec.id in busy or rec.state != "stopping":
                        continue
                    t = self._stop_target(rec, view)
                    pane = view.pane_for(rec)
                    if t.victims or (pane is not None and not pane.dead and not view.foreign(rec)):
                        left_over.append(rec)
                    else:
                        self.core.store.update(rec, state="stopped", stopped_at=time.time(), outcome=None, seconds=None)
        except MuxhostError:
            pass  # (a write that failed: the next ls tries again)
        return left_over

    def stop_locked(self, records: list[Record], grace: float | None, view: View | None, keep_panes: bool = False,
                   refreshed: bool = False) -> list["Live | MuxhostError"]:
        """:meth:`stop_many` under the records' locks. ``keep_panes`` (``muxhost sleep``): step 3 is
        SIGHUP to each agent's processes instead of closing its pane, which stays (dead, on a
        backend that keeps dead panes); the records are ``asleep``, not ``stopped``.
        ``refreshed``: the caller has just refreshed their conversation ids on ``view``."""
        view = view or self.state.view(records)
        lives = [self.state.live(rec, view, check_resumable=False) for rec in records]
        running = [lv for lv in lives if lv.state == "running"]
        if running and not refreshed:
            try:
                self.state.refresh(running, view)  # the conversation each is in right now, before it goes
            except MuxhostError:
                pass  # (a store that cannot be written, a full disk: the ladder runs all the same)
        since = min((r.launched_at for r in records), default=0.0)
        view.table.marked_index(since)  # one environment scan serves every record
        targets = [self._stop_target(rec, view, keep_panes) for rec in records]
        # stopped already, and nothing of it left: said so, its record (its last stop's outcome) kept
        already = {rec.id for rec, lv, t in zip(records, lives, targets)
                   if lv.state == "stopped" and t.pane_id is None and not t.victims}
        if not keep_panes:
            # the intent first: a stop cut short (kill -9, Ctrl-C, a full disk) leaves `stopping`,
            # which `restore` never starts again and the next `ls` or `stop` finishes
            for rec in records:
                if rec.state != "stopping" and rec.id not in already:
                    try:
                        self.core.store.update(rec, state="stopping")
                    except MuxhostError:
                        pass  # (the store cannot be written: the ladder runs all the same)
        self._ladder(targets, grace)
        if os.environ.get("MUXHOST_TEST_HOLD") == "stop-record":  # tests: a stop killed right here
            print("muxhost: test hold: the ladder ended, the record is not written", file=sys.stderr, flush=True)
            time.sleep(120)
        return [self._written(rec, t, rec.id in already, keep_panes) for rec, t in zip(records, targets)]

    def _written(self, rec: Record, t: "_Target", already: bool, keep_panes: bool) -> "Live | MuxhostError":
        """What the ladder did to ``rec``, written down (``stopped``, or ``asleep`` with ``keep_panes``)
        and announced; ``already``: it was stopped already, and nothing of it was left."""
        if t.error is not None:
            return t.error
        agent = self.core.registry.agents.get(rec.agent)
        if already:
            result = Live(rec, "stopped", None, [], already="stopped")
            result.resumable = self.core.resumable(agent, rec, result)
            return result
        now = time.time()
        try:
            if keep_panes:
                self.core.store.update(rec, state="asleep", stopped_at=now, slept_at=now, outcome=t.outcome,
                                       seconds=t.seconds)
            else:
                self.core.store.update(rec, state="stopped", stopped_at=now, outcome=t.outcome, seconds=t.seconds)
        except MuxhostError as e:  # it is down all the same: say so, and that the record is not
            return MuxhostError(f"{'asleep' if keep_panes else 'stopped'} ({t.outcome} after "
                                f"{t.seconds:.2f}s), but the record could not be written: {e}")
        result = Live(rec, rec.state, None, [])
        result.notes = [t.note] if t.note and t.outcome == "exit" else []
        result.resumable = self.core.resumable(agent, rec, result)
        self.core.pm.hook.muxhost_agent_stopped(record=result.to_dict(), outcome=t.outcome)
        return result

    def _stop_target(self, rec: Record, view: View, keep_pane: bool = False) -> "_Target":
        agent = self.core.registry.agents.get(rec.agent)
        backend = self.core.backend_of(rec)
        # (a pane that runs another program now is not the agent's: nothing typed, signalled or closed)
        foreign = view.foreign(rec)
        pane = None if foreign else view.pane_for(rec)
        root = view.table.get(pane.pid) if pane is not None and not pane.dead else None
        # (an asleep record's pane runs muxhost's stub, not the agent: no exit text for it; nor a
        # stop cut short of one: `stopping`)
        agent_proc = root if root is not None and (rec.state not in ("asleep", "stopping") or woken(rec, root)) else None
        started = [(int(k[0]), k[1]) for k in rec.pids if len(k) == 2]  # the agent muxhost started

        def collect(table: procs.ProcessTable) -> list[procs.Proc]:
            found = list(procs.marked(rec.id, table, since=rec.launched_at))
            if root is not None:
                found += table.tree_of(root.key)
            for key in started:  # the process muxhost started, while it lives, its pane shown or not
                found += table.tree_of(key)
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
            # the pane as it is now (the view's, else one a look missed): one whose process is not
            # the one the view saw (the user respawned a shell there meanwhile) is judged again
            mine = next((p for p in now if (p.pane_id == pane.pane_id if pane else p.record == rec.id)), pane)
            if mine is None or ((pane is None or mine.pid != pane.pid) and not mine.dead and foreign_now(rec, mine)):
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
                       victims, collect, close, self.core.exit_pause(agent), note=note, keeps_pane=keep_pane)

    def _ladder(self, targets: list["_Target"], grace: float | None) -> None:
        """Steps 1-5 of the ladder for every target at once. ``collect(table)`` lists every process
        that belongs to a target; ``close()`` is its step 3. Sets each target's outcome and seconds
        (or its error)."""
        for t in targets:
            _spare_self(t)
        restore: dict = {}
        if any(procs.spared(k) for t in targets for k in t.victims):
            # this muxhost runs inside a pane it stops (an agent stopping itself): closing the pane
            # hangs it up, and the agent may end its tools as it goes; the ladder finishes first
            with contextlib.suppress(ValueError, OSError):  # (not the main thread)
                restore = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGHUP, signal.SIGTERM)}
        try:
            self._steps(targets, grace)
        finally:  # (what this process starts later gets the signals as they were)
            for sig, handler in restore.items():
                signal.signal(sig, handler)

    def _steps(self, targets: list["_Target"], grace: float | None) -> None:
        """:meth:`_ladder`'s five steps."""
        t0 = time.monotonic()

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
        # (an explicit --grace is waited in full; else an agent that shows it did not take its exit
        # text is given up on sooner: exitwatch)
        watch = ExitWatch(typed, lambda t: self.core.exit_still(t.agent) if grace is None else None)
        for pause in sorted({t.pause for t in typed}):
            time.sleep(max(0.0, typed_at + pause - time.monotonic()))
            watch.before_enter([t for t in typed if t.pause == pause])
            with self._batched(typed):
                for t in typed:
                    if t.pause == pause and procs.same_process(*t.agent_proc.key):
                        try:
                            t.backend.send_keys(t.pane_id, "enter")
                        except MuxhostError:
                            pass
        # 2. wait for every process of each agent to end, up to its exit grace (--grace, else the
        # agent's own: Core.exit_grace), or until it shows it did not take the exit text
        graces = {id(t): self.core.exit_grace(t.agent) if grace is None else grace for t in typed}
        for t in self._wait_gone(typed, lambda t: t.victims, lambda t: graces[id(t)], grow=True, watch=watch):
            done(t, "exit")
        table = procs.ProcessTable.snapshot()
        for t in targets:
            if t.outcome is None:
                # the whole set again, just before step 3: children started meanwhile count too
                _grow(t, table)
                if not procs.alive(t.victims):
                    done(t, "exit")
        self._close_and_signal(targets, done)

    def _close_and_signal(self, targets: list["_Target"], done: Callable[["_Target", str], None]) -> None:
        """:meth:`_steps` 3-5, for whatever the exit text left; ``done(t, outcome)`` ends a target."""
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
                before = dict(t.victims)
                t.victims = {}
                _grow(t, table, also=before)
                stragglers = procs.alive(t.victims)
                if stragglers:
                    t.victims, t.outcome = {k: None for k in stragglers}, None
            else:
                _grow(t, table)
        left = [t for t in targets if t.outcome is None]
        for t in self._wait_gone(left, lambda t: t.victims, self.stop_setting("hup_grace"), grow=True):
            done(t, "hup")
        left = [t for t in left if t.outcome is None]
        # 4. SIGTERM to every survivor, the agent's children before the agent (while it lives,
        # what they leave behind is re-parented to it, where the next look finds it). This
        # muxhost and its ancestors are never signalled (procs.lineage): they are set aside
        spared: dict[int, list[tuple[int, float]]] = {}
        for t in left:
            alive = procs.alive(t.victims)
            spared[id(t)] = [k for k in alive if procs.spared(k)]
            root = t.agent_proc.key if t.agent_proc is not None else None
            t.victims = {k: None for k in sorted(alive, key=lambda k: k == root) if not procs.spared(k)}
            for key in t.victims:
                procs.signal_if_same(*key, procs.SIGTERM)
        for t in self._wait_gone(left, lambda t: t.victims, self.stop_setting("term_grace"), grow=True):
            done(t, "term")
        # 5. SIGKILL to every survivor, and whatever they started meanwhile
        left = [t for t in left if t.outcome is None]
        if left:
            self._kill_all(left)
            for t in left:
                done(t, "kill")
        self._ancestors_left(targets, spared)

    @staticmethod
    def _ancestors_left(targets: list["_Target"], spared: dict[int, list[tuple[int, float]]]) -> None:
        """An error for each target whose processes this muxhost spared (its own ancestors) still run."""
        for t in targets:
            # the ancestors of this muxhost that are the agent's: closing the pane ends them (sleep:
            # the stub's respawn does); one that outlived that is said, never signalled
            still = procs.alive(spared.get(id(t), ()))
            if still and not t.keeps_pane and t.error is None:
                pids = ", ".join(str(pid) for pid, _ in sorted(still))
                t.error = MuxhostError(f"{t.what}: processes {pids} still run: they are this muxhost's own "
                                       "ancestors (it runs inside the agent's pane), which it never signals; "
                                       "stop it from outside the agent")

    @staticmethod
    def _batched(targets: list["_Target"]) -> contextlib.ExitStack:
        """One :meth:`Backend.batch` open for each server of the targets."""
        stack = contextlib.ExitStack()
        for backend in {id(t.backend): t.backend for t in targets}.values():
            stack.enter_context(backend.batch())
        return stack

    @staticmethod
    def _wait_gone(targets: list["_Target"], keys: Callable[["_Target"], dict],
                   timeout: float | Callable[["_Target"], float], interval: float = 0.05, grow: bool = False,
                   watch: ExitWatch | None = None) -> list["_Target"]:
        """Wait up to ``timeout`` (or ``timeout(target)`` for each) for every process of each
        target to end (one poll for all); return the targets that ended, as they end. With
        ``grow``, every :data:`GROW_EVERY` seconds a new look adds what each target's processes
        started meanwhile (:func:`_grow`). With ``watch`` (step 2), a target it finds
        :meth:`~muxhost.exitwatch.ExitWatch.refused` is waited for no more."""
        ended: list[_Target] = []
        waiting = list(targets)
        start = time.monotonic()
        limit = timeout if callable(timeout) else (lambda t: timeout)
        grown = start
        while waiting:
            if grow and time.monotonic() - grown >= GROW_EVERY:
                table = procs.ProcessTable.snapshot()
                for t in waiting:
                    _grow(t, table, marked=False)  # (trees only: no environment scan each time)
                grown = time.monotonic()
            if watch is not None:
                watch.look(waiting)
            for t in list(waiting):
                if not procs.alive(keys(t)):
                    waiting.remove(t)
                    ended.append(t)
                elif time.monotonic() - start >= limit(t) or (watch is not None and watch.refused(t)):
                    waiting.remove(t)
            if not waiting:
                break
            time.sleep(interval)
        return ended

    @staticmethod
    def _kill_all(targets: list["_Target"]) -> None:
        """SIGKILL every survivor of every target, and whatever they start meanwhile (their trees
        and every process carrying their record), until none is left; one process-table pass per
        round for all targets. Each round first freezes them (SIGSTOP, looking again until a look
        finds nothing new: a stopped process starts nothing and orphans nothing), then kills them
        all. This muxhost and its ancestors are never among them. A target whose processes
        survive ten rounds gets an error."""
        keys = {id(t): {k for k in procs.alive(t.victims) if not procs.spared(k)} for t in targets}
        try:
            _kill_rounds(targets, keys)
        finally:  # (interrupted between SIGSTOP and SIGKILL: nothing is left frozen)
            for ks in keys.values():
                for key in ks:
                    procs.signal_if_same(*key, procs.SIGKILL)
        for t in targets:
            if keys[id(t)]:
                pids = ", ".join(str(pid) for pid, _ in sorted(keys[id(t)]))
                t.error = MuxhostError(f"{t.what}: processes {pids} survived SIGKILL")

    def stop_adopted(self, loc: "Located", grace: float | None = None) -> tuple[str, float]:
        """The ladder for an agent muxhost did not start: its pane (the user's shell) is left alone;
        step 3 is SIGHUP to the agent's own tree instead of killing the pane."""
        root = loc.proc
        backend = self.core.current()

        def collect(table: procs.ProcessTable) -> list[procs.Proc]:
            return table.tree_of(root.key)

        def close(_panes_now) -> None:
            for p in collect(procs.ProcessTable.snapshot()):
                procs.signal_if_same(*p.key, procs.SIGHUP)

        victims = {p.key: p for p in collect(procs.ProcessTable.snapshot())}
        t = _Target(f"{loc.agent.name} in pane {loc.pane.pane_id}", backend, loc.pane.pane_id, loc.agent, root,
                    victims, collect, close, self.core.exit_pause(loc.agent))
        self._ladder([t], grace)
        if t.error is not None:
            raise t.error
        return t.outcome, t.seconds


#: seconds between two looks for new processes of a target while the ladder waits
GROW_EVERY = 0.25


def _grow(t: "_Target", table: procs.ProcessTable, also: dict | None = None, marked: bool = True) -> None:
    """Add to ``t.victims`` every process of the target in ``table``: what ``collect`` finds (with
    ``marked``), and the tree of every process known to be its own (``also`` too) — a tool of a
    tool that its agent no longer parents is still under the one that started it. This muxhost
    itself never."""
    known = [*t.victims, *(also or ())]
    found = {p.key: p for p in t.collect(table)} if marked else {}
    for key in known:
        found.update({p.key: p for p in table.tree_of(key)})
    t.victims.update(found)
    _spare_self(t)


def _spare_self(t: "_Target") -> None:
    """This muxhost process is never among a target's processes (it would wait for itself)."""
    me = os.getpid()
    for key in [k for k in t.victims if k[0] == me]:
        del t.victims[key]


def _kill_rounds(targets: list["_Target"], keys: dict[int, set]) -> None:
    """:meth:`Ladder._kill_all`'s rounds (freeze, kill, wait); ``keys`` is left holding what survives."""
    for _ in range(10):
        for _ in range(20):
            table = procs.ProcessTable.snapshot()
            new = False
            for t in targets:
                mine = keys[id(t)]
                found = {p.key for key in list(mine) for p in table.tree_of(key)}
                found.update(p.key for p in t.collect(table))
                found = {k for k in found - mine if not procs.spared(k)}
                new = new or bool(found)
                mine.update(found)
                for key in mine:
                    procs.signal_if_same(*key, procs.SIGSTOP)
            if not new:
                break
        for t in targets:
            for key in keys[id(t)]:
                procs.signal_if_same(*key, procs.SIGKILL)
        left = set(procs.wait_gone({k for ks in keys.values() for k in ks}, 2.0))
        for i in keys:
            keys[i] &= left
        if not left:
            return
