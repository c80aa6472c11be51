"""Sleep and wake: the stop ladder (:mod:`muxhost.ladder`), but step 3 is SIGHUP to the agent's
processes and the pane stays: it then runs :mod:`muxhost.stub` (a few MB), which says which
conversation sleeps there and wakes it on Enter. The record is ``asleep``. A backend that keeps no
dead pane (herdr) gets a new pane for the stub, named as before. Wake is
:meth:`muxhost.launching.Launching.resume` into that pane (the agent replaces the stub)."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

from muxhost import procs, stub
from muxhost.activity import untouched_since
from muxhost.backends import AGENT_OPTION, RECORD_OPTION
from muxhost.errors import MuxhostError, Refused
from muxhost.state import Live, foreign_now
from muxhost.store import Record

if TYPE_CHECKING:
    from muxhost.activity import ActivityOps
    from muxhost.core import Core
    from muxhost.ladder import Ladder
    from muxhost.launching import Launching
    from muxhost.listing import Listing
    from muxhost.locks import Locks
    from muxhost.state import State

#: a sleep that left a record as it was (:attr:`muxhost.state.Live.skipped`), and the note it carries
ASLEEP, NOT_IDLE = "asleep", "not idle"
ASLEEP_NOTE = "it was asleep already"
NOT_IDLE_NOTE = "it was not idle that long: left awake"


def idle_that_long(lv: Live, seconds: float, now: float) -> bool:
    """``lv`` runs, and has been idle with nobody typing to it for ``seconds``."""
    quiet = (untouched_since(lv.activity_since, lv.pane.last_input if lv.pane is not None else None)
             if lv.state == "running" and lv.activity == "idle" else None)
    return quiet is not None and now - quiet >= seconds


def _ago_clock(t: float) -> str:
    return time.strftime("%H:%M" if time.time() - t < 86400 else "%Y-%m-%d %H:%M", time.localtime(t))


class Sleeping:
    """``sleep``, ``wake``, the stub in an asleep record's pane, and the muxhost the stub runs."""

    def __init__(self, core: "Core", state: "State", locks: "Locks", ladder: "Ladder", activity: "ActivityOps",
                 launching: "Launching", listing: "Listing"):
        self.core, self.state, self.locks, self.ladder = core, state, locks, ladder
        self.activity, self.launching, self.listing = activity, launching, listing

    def sleep_many(self, records: list[Record], grace: float | None = None,
                   idle_for: float | None = None) -> list["Live | MuxhostError"]:
        """Put each record to sleep (in lockstep, as ``stop`` does): refused for one that has no
        conversation it can be woken into (nothing of it is stopped then); one asleep already is
        left as it is. The records' locks are held throughout, stub included (see
        :meth:`muxhost.ladder.Ladder.stop_many`): a stop that comes meanwhile waits, then ends the
        stub. With ``idle_for`` (seconds), only those idle and untouched that long, judged again
        under the locks (:meth:`idle_for` chose them before: someone may have typed to one since)."""
        with self.locks.records(records, "sleep") as left:
            out = self._sleep_many([r for r in records if r.id not in left], grace, idle_for)
            return [left[r.id] if r.id in left else out[r.id] for r in records]

    def _sleep_many(self, records: list[Record], grace: float | None,
                    idle_for: float | None) -> dict[str, "Live | MuxhostError"]:
        view = self.state.view(records)
        lives = [self.state.live(r, view, check_resumable=False) for r in records]
        self.state.refresh([lv for lv in lives if lv.state == "running"], view)  # the conversation it is in now
        if idle_for is not None:
            self.activity.activities([lv for lv in lives if lv.state == "running"], view)
        now = time.time()
        out: dict[str, Live | MuxhostError] = {}
        todo: list[Record] = []
        for lv in lives:
            rec = lv.rec
            if lv.state == "asleep":
                lv.skipped, lv.notes = ASLEEP, [ASLEEP_NOTE]
                out[rec.id] = lv
            elif lv.state not in ("running", "exited"):
                out[rec.id] = Refused(f"record {rec.id} ({rec.name}) is {lv.state}: there is no agent to put to sleep")
            elif idle_for is not None and lv.state == "running" and not idle_that_long(lv, idle_for, now):
                lv.skipped, lv.notes = NOT_IDLE, [NOT_IDLE_NOTE]
                out[rec.id] = lv
            elif not rec.conversation_id or not self.core.resumable(self.core.registry.agents.get(rec.agent), rec, lv):
                out[rec.id] = Refused(f"record {rec.id} ({rec.name}) has no conversation on disk to wake it in "
                                      "(has it been given a first prompt?); `muxhost stop` it instead")
            else:
                todo.append(rec)
        results = self.ladder.stop_locked(todo, grace, view, keep_panes=True, refreshed=True) if todo else []
        panes: dict[int, list] = {}  # one look per server at the panes the ladder left
        for rec, result in zip(todo, results, strict=True):
            if isinstance(result, Live):
                backend = self.core.backend_of(rec)
                if id(backend) not in panes:
                    panes[id(backend)] = backend.snapshot() or []
                result.pane, result.notes = self.show_stub(rec, panes[id(backend)])
            out[rec.id] = result
        return out

    def stub_text(self, rec: Record) -> str:
        cid = rec.conversation_id or "?"
        short = cid if len(cid) <= 12 else cid[:8] + "…"
        return (f"muxhost: the {rec.agent} conversation {short} is asleep since {_ago_clock(rec.slept_at or time.time())} "
                f"— Enter wakes it\n(record {rec.id}, {rec.name}; `muxhost stop {rec.id}` ends it for good)")

    def muxhost_argv(self, rec: Record, *command: str) -> list[str]:
        """The command line of a muxhost that acts on ``rec``'s server with this muxhost's config."""
        argv = [sys.executable, "-m", "muxhost"]
        if self.core.config.path:
            argv += ["--config", os.path.abspath(self.core.config.path)]
        argv += ["--backend", rec.backend or "tmux"]
        if rec.socket:
            argv += ["--socket", rec.socket]
        return [*argv, *command]

    def caller_env(self) -> dict[str, str]:
        """This muxhost's environment for a muxhost it leaves behind (the stub's wake): no client
        variables of any backend, and no record of its own."""
        drop = self.core.client_vars() | {procs.RECORD_ENV}
        return {k: v for k, v in os.environ.items() if k not in drop}

    def show_stub(self, rec: Record, panes: list, target: str | None = None) -> tuple[Any, list[str]]:
        """The stub in the record's pane (its dead pane among ``panes``, else a new one named as
        before, or a window of session ``target``): the pane, and notes (why there is none)."""
        backend = self.core.backend_of(rec)
        store = self.core.store
        argv = [sys.executable, "-I", "-S", os.path.abspath(stub.__file__), self.stub_text(rec), "--",
                *self.muxhost_argv(rec, "wake", rec.id)]
        cwd = rec.cwd if os.path.isdir(rec.cwd) else os.path.expanduser("~")
        try:
            # the pane it ran in (dead now, after the ladder) first: never a pane another program runs in
            pane = min((p for p in panes if p.record == rec.id), key=lambda p: (p.pane_id != rec.pane, not p.dead),
                       default=None)
            if pane is not None and not pane.dead and foreign_now(rec, pane):
                pane = None  # another program runs there (not the agent's): left alone, the stub gets its own
            # (the stub is the pane's process muxhost started now: its pid and create time are the record's)
            if pane is not None:
                info = backend.respawn(pane.pane_id, argv, cwd=cwd, env=self.caller_env())
                store.update(rec, pane=info.pane_id, pids=procs.key_of(info.pid))
            else:
                info, created = backend.create(argv, cwd=cwd, env=self.caller_env(), name=rec.session_name or rec.name,
                                               target=target, options={RECORD_OPTION: rec.id, AGENT_OPTION: rec.agent})
                store.update(rec, pane=info.pane_id, session=info.session_id if created else None,
                             created_session=created, pids=procs.key_of(info.pid))
        except MuxhostError as e:
            return None, [f"its pane could not show the stub ({e}); `muxhost wake {rec.id}` opens a new one"]
        return info, []

    def wake(self, rec: Record) -> Live:
        """An asleep record's agent again, in its pane (or a new one); any other record: resume. One
        whose agent runs is left as it is (``already="awake"``)."""
        live = self.state.live(rec, self.state.view([rec]), check_resumable=False)
        if live.state == "running":
            live.already = "awake"
            return live
        return self.launching.resume(rec)

    def idle_for(self, seconds: float) -> list[Record]:
        """The running records that have been ``idle``, and nobody typed into their pane, for at
        least ``seconds`` (:func:`muxhost.activity.untouched_since`)."""
        now = time.time()
        return [lv.rec for lv in self.listing.ls() if idle_that_long(lv, seconds, now)]
