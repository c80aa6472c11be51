"""The fleet: sleep and wake, restore after the pane server died, and scripted control (send, wait,
read). Part of :class:`muxhost.host.Host`; built on the stop ladder and resume, for every agent and
every backend.

- **sleep**: the ladder, but step 3 is SIGHUP to the agent's processes and the pane stays: it then
  runs :mod:`muxhost.stub` (a few MB), which says which conversation sleeps there and wakes it on
  Enter. The record is ``asleep``. A backend that keeps no dead pane (herdr) gets a new pane for
  the stub, named as before.
- **wake**: :meth:`muxhost.launching.LaunchOps.resume` into that pane (the agent replaces the stub).
- **restore**: every record that was running (or asleep) when its server went away is resumed, in a
  session named as before, each in its own conversation; one restore at a time, and never a
  conversation that another record runs already.
- **send / wait / read**: type a line like the ladder types its exit text; wait until the agent is
  ``idle``, ``waiting`` or ``exited`` (judged like the watch judges, over time); read the screen.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from muxhost.backends import AGENT_OPTION, RECORD_OPTION
from muxhost.errors import MuxhostError, NotFound, Refused, UsageError
from muxhost.state import Live, foreign_now, left_alone
from muxhost.store import Record

UNTIL = ("idle", "waiting", "exited")
#: seconds after a `send` in which `idle` (what an agent typed into was, most likely) does not count
#: for `wait` — it may not have started on the text yet — unless another state was seen meanwhile
SETTLE = 3.0
WAIT_INTERVAL = 0.5  # seconds between two looks of `wait` (one pane query, one process-table pass)
ASLEEP_ALREADY = "it was asleep already"
NOT_IDLE = "it was not idle that long: left awake"


def parse_duration(text: str, what: str = "duration") -> float:
    """``90`` / ``90s``, ``30m``, ``2h``, ``1d`` -> seconds."""
    raw = str(text).strip().lower()
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(raw[-1:], None)
    number = raw[:-1] if unit else raw
    try:
        value = float(number) * (unit or 1)
    except ValueError:
        value = -1.0
    from muxhost.config import MAX_SECONDS, seconds_ok

    if not seconds_ok(value):
        raise UsageError(f"{what} {text!r}: expected seconds, or a number with s, m, h or d (30m), "
                         f"up to {MAX_SECONDS // 86400}d")
    return value


def _idle_that_long(lv: Live, seconds: float, now: float) -> bool:
    """``lv`` runs, and has been idle with nobody typing to it for ``seconds``."""
    from muxhost.activity import untouched_since

    quiet = (untouched_since(lv.activity_since, lv.pane.last_input if lv.pane is not None else None)
             if lv.state == "running" and lv.activity == "idle" else None)
    return quiet is not None and now - quiet >= seconds


def _other_program(view: Any, rec: Record) -> str:
    """"; its pane %3 runs another program now (…), left alone" when it does (else "")."""
    other = view.foreign(rec)
    return "" if other is None else "; " + left_alone(other)


def _ago_clock(t: float) -> str:
    return time.strftime("%H:%M" if time.time() - t < 86400 else "%Y-%m-%d %H:%M", time.localtime(t))


class FleetOps:
    """The fleet half of :class:`muxhost.host.Host`."""

    # -- sleep and wake ----------------------------------------------------------------------------
    def sleep_many(self, records: list[Record], grace: float | None = None,
                   idle_for: float | None = None) -> list["Live | MuxhostError"]:
        """Put each record to sleep (in lockstep, as ``stop`` does): refused for one that has no
        conversation it can be woken into (nothing of it is stopped then); one asleep already is
        left as it is. The records' locks are held throughout, stub included (see
        :meth:`stop_many`): a stop that comes meanwhile waits, then ends the stub. With
        ``idle_for`` (seconds), only those idle and untouched that long, judged again under the
        locks (:meth:`idle_for` chose them before: someone may have typed to one since)."""
        with self.record_locks(records, "sleep") as left:
            out = self._sleep_many([r for r in records if r.id not in left], grace, idle_for)
            return [left[r.id] if r.id in left else out[r.id] for r in records]

    def _sleep_many(self, records: list[Record], grace: float | None,
                    idle_for: float | None) -> dict[str, "Live | MuxhostError"]:
        view = self.view(records)
        lives = [self.live(r, view, check_resumable=False) for r in records]
        self.refresh([lv for lv in lives if lv.state == "running"], view)  # the conversation it is in now
        if idle_for is not None:
            self.activities([lv for lv in lives if lv.state == "running"], view)
        now = time.time()
        out: dict[str, Live | MuxhostError] = {}
        todo: list[Record] = []
        for lv in lives:
            rec = lv.rec
            if lv.state == "asleep":
                lv.notes = [ASLEEP_ALREADY]
                out[rec.id] = lv
            elif lv.state not in ("running", "exited"):
                out[rec.id] = Refused(f"record {rec.id} ({rec.name}) is {lv.state}: there is no agent to put to sleep")
            elif idle_for is not None and lv.state == "running" and not _idle_that_long(lv, idle_for, now):
                lv.notes = [NOT_IDLE]
                out[rec.id] = lv
            elif not rec.conversation_id or not self._resumable(self.registry.agents.get(rec.agent), rec, lv):
                out[rec.id] = Refused(f"record {rec.id} ({rec.name}) has no conversation on disk to wake it in "
                                      "(has it been given a first prompt?); `muxhost stop` it instead")
            else:
                todo.append(rec)
        results = self._stop_many(todo, grace, view, keep_panes=True, refreshed=True) if todo else []
        panes: dict[int, list] = {}  # one look per server at the panes the ladder left
        for rec, result in zip(todo, results, strict=True):
            if isinstance(result, Live):
                backend = self.backend_of(rec)
                if id(backend) not in panes:
                    panes[id(backend)] = backend.snapshot() or []
                result.pane, result.notes = self._show_stub(rec, panes[id(backend)])
            out[rec.id] = result
        return out

    def stub_text(self, rec: Record) -> str:
        cid = rec.conversation_id or "?"
        short = cid if len(cid) <= 12 else cid[:8] + "…"
        return (f"muxhost: the {rec.agent} conversation {short} is asleep since {_ago_clock(rec.slept_at or time.time())} "
                f"— Enter wakes it\n(record {rec.id}, {rec.name}; `muxhost stop {rec.id}` ends it for good)")

    def _muxhost_argv(self, rec: Record, *command: str) -> list[str]:
        """The command line of a muxhost that acts on ``rec``'s server with this muxhost's config."""
        argv = [sys.executable, "-m", "muxhost"]
        if self.config.path:
            argv += ["--config", os.path.abspath(self.config.path)]
        argv += ["--backend", rec.backend or "tmux"]
        if rec.socket:
            argv += ["--socket", rec.socket]
        return [*argv, *command]

    def _caller_env(self) -> dict[str, str]:
        """This muxhost's environment for a muxhost it leaves behind (the stub's wake): no client
        variables of any backend, and no record of its own."""
        from muxhost import procs

        drop = self.client_vars() | {procs.RECORD_ENV}
        return {k: v for k, v in os.environ.items() if k not in drop}

    def _show_stub(self, rec: Record, panes: list, target: str | None = None) -> tuple[Any, list[str]]:
        """The stub in the record's pane (its dead pane among ``panes``, else a new one named as
        before, or a window of session ``target``): the pane, and notes (why there is none)."""
        from muxhost import procs, stub

        backend = self.backend_of(rec)
        argv = [sys.executable, "-I", "-S", os.path.abspath(stub.__file__), self.stub_text(rec), "--",
                *self._muxhost_argv(rec, "wake", rec.id)]
        cwd = rec.cwd if os.path.isdir(rec.cwd) else os.path.expanduser("~")
        try:
            # the pane it ran in (dead now, after the ladder) first: never a pane another program runs in
            pane = min((p for p in panes if p.record == rec.id), key=lambda p: (p.pane_id != rec.pane, not p.dead),
                       default=None)
            if pane is not None and not pane.dead and foreign_now(rec, pane):
                pane = None  # another program runs there (not the agent's): left alone, the stub gets its own
            # (the stub is the pane's process muxhost started now: its pid and create time are the record's)
            if pane is not None:
                info = backend.respawn(pane.pane_id, argv, cwd=cwd, env=self._caller_env())
                self.store.update(rec, pane=info.pane_id, pids=procs.key_of(info.pid))
            else:
                info, created = backend.create(argv, cwd=cwd, env=self._caller_env(), name=rec.session_name or rec.name,
                                               target=target, options={RECORD_OPTION: rec.id, AGENT_OPTION: rec.agent})
                self.store.update(rec, pane=info.pane_id, session=info.session_id if created else None,
                                  created_session=created, pids=procs.key_of(info.pid))
        except MuxhostError as e:
            return None, [f"its pane could not show the stub ({e}); `muxhost wake {rec.id}` opens a new one"]
        return info, []

    def wake(self, rec: Record) -> Live:
        """An asleep record's agent again, in its pane (or a new one); any other record: resume. One
        whose agent runs is left as it is (``already="awake"``)."""
        live = self.live(rec, self.view([rec]), check_resumable=False)
        if live.state == "running":
            live.already = "awake"
            return live
        return self.resume(rec)

    def idle_for(self, seconds: float) -> list[Record]:
        """The running records that have been ``idle``, and nobody typed into their pane, for at
        least ``seconds`` (:func:`muxhost.activity.untouched_since`)."""
        now = time.time()
        return [lv.rec for lv in self.ls() if _idle_that_long(lv, seconds, now)]

    # -- restore -----------------------------------------------------------------------------------
    def restore(self, dry_run: bool = False, wake: bool = False) -> list[dict[str, Any]]:
        """Resume every record that was running when its pane went away (the server died), each in a
        session named as before, in its own conversation; one that was asleep gets its stub there
        again (``asleep: true`` in its entry), or, with ``wake``, is woken. One entry per such record:
        ``action`` is ``restored`` (``would restore`` with ``dry_run``), ``skipped`` (and why: no
        conversation, gone from disk, run by another record, the agent not installed) or ``failed``."""
        from muxhost.kit.flock import LockTimeout, flock

        if dry_run:
            return self._restore(dry_run, wake)
        from muxhost.store import private_folder

        path = os.path.join(private_folder(os.path.join(os.path.dirname(self.store.path), "locks")), "restore.lock")
        try:  # one restore at a time: a second one waits, then finds them running
            with flock(path, 60.0, private=True, label=f"restore pid {os.getpid()}"):
                return self._restore(dry_run, wake)
        except LockTimeout as e:
            raise Refused(f"another restore is still running ({e.holder or 'unknown'})") from None

    def _restore(self, dry_run: bool, wake: bool) -> list[dict[str, Any]]:
        records = self.store.all()
        view = self.view(records)
        lives = [self.live(r, view, check_resumable=False) for r in records]
        running = {(lv.rec.agent, lv.rec.conversation_id): lv.rec for lv in lives if lv.rec.conversation_id
                   and (lv.state in ("running", "starting", "exited") or (lv.state == "asleep" and lv.pane is not None))}
        todo = [lv for lv in lives if (lv.state == "lost" and lv.rec.state in ("running", "starting"))
                or (lv.state == "asleep" and lv.pane is None)]
        sessions: dict[tuple[str, str | None], set[str]] = {}
        report = []
        for lv in todo:
            rec = lv.rec
            entry: dict[str, Any] = {"id": rec.id, "name": rec.name, "agent": rec.agent,
                                     "conversation_id": rec.conversation_id, "was": lv.state,
                                     "session": rec.session_name or rec.name, "pane": None,
                                     "asleep": lv.state == "asleep" and not wake}
            report.append(entry)
            why = self._unrestorable(rec, running)
            if why:
                entry.update(action="skipped", reason=why)
                continue
            if dry_run:
                entry["action"] = "would restore"
                continue
            server = (rec.backend or "tmux", rec.socket)
            if server not in sessions:
                sessions[server] = {p.session_name for p in (self.backend_of(rec).snapshot() or [])}
            name = entry["session"]
            target = name if name in sessions[server] else None  # made by this restore: a window in it
            if entry["asleep"]:  # asleep it was, asleep it stays: its stub, no agent and none of its memory
                with self.record_lock(rec, "restore"):
                    now = self.store.get(rec.id)  # (any write since the look moves updated_at)
                    if now is None or now.state != "asleep" or now.updated_at != rec.updated_at:
                        entry.update(action="skipped", reason="it was woken, stopped or forgotten meanwhile")
                        continue
                    pane, notes = self._show_stub(now, [], target=target)
                if pane is None:
                    entry.update(action="failed", reason="; ".join(notes))
                    continue
                sessions[server].add(pane.session_name)
                entry.update(action="restored", pane=pane.pane_id, session=pane.session_name)
                continue
            try:
                started = self.resume(rec, target=target, session_name=name)
            except MuxhostError as e:
                entry.update(action="failed", reason=str(e))
                continue
            sessions[server].add(started.pane.session_name)
            running[(rec.agent, rec.conversation_id)] = rec
            entry.update(action="restored", pane=started.pane.pane_id, session=started.pane.session_name)
        return report

    def _unrestorable(self, rec: Record, running: dict[tuple[str, str | None], Record]) -> str | None:
        agent = self.registry.agents.get(rec.agent)
        if agent is None:
            return f"agent {rec.agent!r} is not installed"
        if not rec.conversation_id:
            return "it has no conversation to resume"
        other = running.get((rec.agent, rec.conversation_id))
        if other is not None and other.id != rec.id:
            return f"its conversation runs in record {other.id} ({other.name})"
        if not self._resumable(agent, rec):
            return f"conversation {rec.conversation_id} no longer exists"
        if not os.path.isdir(rec.cwd):
            return f"its directory {rec.cwd} no longer exists"
        return None

    # -- scripted control --------------------------------------------------------------------------
    def _running(self, rec: Record, doing: str) -> Live:
        view = self.view([rec])
        live = self.live(rec, view, check_resumable=False)
        if live.state != "running" or live.pane is None:
            hint = f"; `muxhost wake {rec.id}` first" if live.state == "asleep" else _other_program(view, rec)
            raise Refused(f"record {rec.id} ({rec.name}) is {live.state}: no agent to {doing}{hint}")
        return live

    def send(self, rec: Record, text: str) -> Live:
        """Type ``text`` into the agent as the ladder types its exit text: Ctrl-U, the text, a pause,
        Enter (only while the agent itself is still the pane's process)."""
        from muxhost import procs

        if not text or any(ord(c) < 32 or ord(c) == 127 for c in text):
            raise UsageError("TEXT must be one line, with no control characters")
        live = self._running(rec, "type into")
        backend = self.backend_of(rec)
        agent = self.registry.agents.get(rec.agent)
        me = live.tree[0].key
        self.store.update(rec, sent_at=time.time())
        backend.send_keys(live.pane.pane_id, "ctrl+u")
        backend.type_text(live.pane.pane_id, text)
        time.sleep(self.exit_pause(agent))
        if not procs.same_process(*me):
            raise Refused(f"record {rec.id} ({rec.name}): the agent ended while the text was typed")
        backend.send_keys(live.pane.pane_id, "enter")
        return live

    def wait(self, rec: Record, until: str, timeout: float | None = None) -> str:
        """Wait until the agent is ``until`` (``idle``, ``waiting``, or ``exited``: no agent any more,
        whatever the reason). Judged as the watch judges (output and CPU over time, the plugin's
        word); after a ``send``, ``idle`` counts only once the agent has been seen doing something
        else, or :data:`SETTLE` seconds passed. Returns the state; raises
        :class:`MuxhostError` (exit 1) when ``timeout`` passes first, and :class:`Refused` when the
        agent is gone and ``until`` can no longer be reached."""
        if until not in UNTIL:
            raise UsageError(f"--until {until!r}: expected one of {', '.join(UNTIL)}")
        deadline = None if timeout is None else time.monotonic() + timeout
        from muxhost.passes import Poller

        poller = Poller(self, rec, float(self.config.watch("stall_after")))
        seen_other = False
        state = None
        view = None
        while True:
            stored = self.store.get(rec.id)
            fresh = stored or rec
            track = poller.step(stored)
            tracked = track is not None and fresh.state != "asleep"
            if tracked:
                state = track.activity
            else:
                view = self.view([fresh])
                state = self.live(fresh, view, check_resumable=False).state
                if state == "running":  # (a moment between two looks: its pane came or went)
                    state = None
            if until == "exited":
                if state is not None and not tracked:
                    return state
            elif tracked and state is not None:
                recent = until == "idle" and fresh.sent_at is not None and time.time() - fresh.sent_at < SETTLE
                if state == until and (seen_other or not recent):
                    return state
                if state != until:
                    seen_other = True
            elif state is not None:
                raise Refused(f"record {rec.id} ({rec.name}) is {state}: it will not be {until}"
                              f"{_other_program(view, fresh) if view is not None else ''}")
            if deadline is not None and time.monotonic() >= deadline:
                raise MuxhostError(f"record {rec.id} ({rec.name}) is not {until} after {timeout:g}s "
                               f"(it is {state or 'unknown'})")
            time.sleep(WAIT_INTERVAL)

    def read(self, rec: Record, lines: int | None = None) -> str:
        """The agent's screen as plain text: the visible screen, or its last ``lines`` lines with the
        scrollback. A pane that has gone has nothing to read (NotFound)."""
        if lines is not None and lines < 1:
            raise UsageError("--lines must be 1 or more")
        view = self.view([rec])
        pane = view.pane_for(rec)
        if view.foreign(rec) is not None:
            raise Refused(f"record {rec.id} ({rec.name}) has exited: nothing of the agent to read"
                          f"{_other_program(view, rec)}")
        if pane is None:
            raise NotFound(f"record {rec.id} ({rec.name}) has no pane to read (it is {rec.state})")
        backend = self.backend_of(rec)
        text = backend.capture(pane.pane_id) if lines else backend.screens([pane.pane_id]).get(pane.pane_id)
        if text is None:
            raise NotFound(f"record {rec.id} ({rec.name}): its pane {pane.pane_id} went meanwhile")
        rows = [r.rstrip() for r in text.splitlines()]
        while rows and not rows[-1]:
            rows.pop()
        return "\n".join(rows[-lines:] if lines else rows)


__all__ = ["FleetOps", "UNTIL", "parse_duration"]
