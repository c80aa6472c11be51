"""The host: one muxhost's operations — launch / stop / resume / purge / sleep / restore / watch —
written once for every agent, as objects built here and called through :class:`Host`, the facade.

Nothing here names an agent: agents come from plugins (:mod:`muxhost.plugins`), panes from a backend
(:mod:`muxhost.backends`), processes from :mod:`muxhost.procs`, records from :mod:`muxhost.store`.
What every operation shares (config, plugins, store, backends, warnings) is :class:`muxhost.core.Core`.
Each operation is a module with its own object, given the core and the operations it calls:

- :mod:`muxhost.state` (``State``): one look at the world, each record's live state, the conversation
  each agent is in (refresh), REF resolution, reconcile, the agent in a pane;
- :mod:`muxhost.listing` (``Listing``): ``ls`` / ``show``: state, activity, resumable;
- :mod:`muxhost.locks` (``Locks``): the per-conversation and per-record locks;
- :mod:`muxhost.refusals` (``Refusals``): the id check, in use, still alive, moved;
- :mod:`muxhost.ladder` (``Ladder``): **stop** — state → record locks → the ladder's steps;
- :mod:`muxhost.launching` (``Launching``): launch, resume — refusals → locks → the pane;
- :mod:`muxhost.purging` (``Purging``): **purge** — refusals (in use) → the plan (:mod:`muxhost.plans`)
  → veto → carried out, under the conversation's lock; ``--stop``: the ladder first;
- :mod:`muxhost.unpurging` (``Unpurging``): **unpurge** a purge archive (:mod:`muxhost.archive`), and ``archives``;
- :mod:`muxhost.sleeping` (``Sleeping``): sleep (the ladder, keeping the pane) and wake (resume);
- :mod:`muxhost.restoring` (``Restoring``): restore after the pane server died;
- :mod:`muxhost.fleet` (``Scripting``): send, read; ``wait`` is :meth:`Host.wait`, over :class:`muxhost.passes.Poller`;
- :mod:`muxhost.worktrees` (``Removal``): ``rm``, and the worktree of ``launch --worktree``;
- :mod:`muxhost.activity` (``ActivityOps``): what each agent is doing, by one look;
- :mod:`muxhost.explaining` (``Explaining``): ``explain``: what that look read and which rule decided;
- :mod:`muxhost.passes`: **the watch pass** — observe (one pane query, one process pass, the screens that
  moved) → judge (pure) — shared by the watch and ``wait``;
- :mod:`muxhost.watching` (``WatchOps``, ``Watch``): the watch: a pass per interval, then publish;
- :mod:`muxhost.inventory` (``Inventory``): every conversation on disk (``conversations``), and ``prune``
  through the one purge.
"""

from __future__ import annotations

import time
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterable

from muxhost.activity import ActivityOps
from muxhost.agent import Agent, AgentContext, PurgeReport
from muxhost.backends import Backend
from muxhost.config import Config
from muxhost.core import Core
from muxhost.errors import MuxhostError, Refused, UsageError
from muxhost.fleet import SETTLE, UNTIL, WAIT_INTERVAL, Scripting, other_program
from muxhost.ladder import Ladder
from muxhost.launching import ENV_RE, NAME_RE, Launching
from muxhost.listing import Listing
from muxhost.locks import Locks
from muxhost.purging import Purging
from muxhost.refusals import Refusals, check_id, refuse_moved
from muxhost.restoring import Restoring
from muxhost.sleeping import Sleeping
from muxhost.state import STARTING_GRACE, Live, Located, State, View
from muxhost.store import Record, Store
from muxhost.watching import WatchOps
from muxhost.worktrees import Removal

if TYPE_CHECKING:
    from muxhost.explaining import Explaining
    from muxhost.inventory import Inventory, Row

__all__ = ["Host", "Live", "Located", "View", "NAME_RE", "ENV_RE", "STARTING_GRACE"]


class Host:
    """One muxhost: its config, plugins, record store and pane backends, and every operation."""

    def __init__(self, config: Config | None = None, socket: str | None = None, pm=None,
                 store: Store | None = None, backend: str | None = None):
        core = self.core = Core(config, socket, pm, store, backend)
        self.config, self.pm, self.registry = core.config, core.pm, core.registry
        self.backend_name, self.socket = core.backend_name, core.socket
        self.warnings, self.notes = core.warnings, core.notes
        self.locks = Locks(core)
        self.state = State(core)
        self.activity = ActivityOps(core)
        self.refusals = Refusals(core, self.state)
        self.ladder = Ladder(core, self.state, self.locks)
        self.listing = Listing(core, self.state, self.ladder, self.activity)
        self.launching = Launching(core, self.state, self.locks, self.refusals)
        self.purging = Purging(core, self.state, self.ladder, self.locks, self.refusals, self.launching)
        self.sleeping = Sleeping(core, self.state, self.locks, self.ladder, self.activity, self.launching,
                                 self.listing)
        self.restoring = Restoring(core, self.state, self.locks, self.launching, self.sleeping)
        self.scripting = Scripting(core, self.state)
        self.removal = Removal(core, self.state, self.locks, self.refusals, self.purging)
        self._unpurging = None
        self.watching = WatchOps(self)

    @cached_property
    def explaining(self) -> "Explaining":
        """``explain`` (:mod:`muxhost.explaining`, imported when first used: start-up)."""
        from muxhost.explaining import Explaining

        return Explaining(self.core, self.state, self.activity)

    @cached_property
    def inventory(self) -> "Inventory":
        """``conversations`` and ``prune`` (:mod:`muxhost.inventory`, imported when first used: start-up)."""
        from muxhost.inventory import Inventory

        return Inventory(self.core, self.state, self.launching, self.purge)

    # -- what every operation shares (muxhost.core) ------------------------------------------------
    @property
    def store(self) -> Store:
        return self.core.store

    @property
    def _store(self) -> Store | None:
        """The store if this command opened one (the CLI's ``_print_damaged`` reads it), else None."""
        return self.core._store

    def backend(self, socket: str | None = None, name: str | None = None) -> Backend:
        return self.core.backend(socket, name)

    @property
    def server(self) -> tuple[str, str | None]:
        return self.core.server

    def current(self) -> Backend:
        return self.core.current()

    def backend_of(self, rec: Record) -> Backend:
        return self.core.backend_of(rec)

    def no_server(self) -> str:
        return self.core.no_server()

    def client_vars(self) -> set[str]:
        return self.core.client_vars()

    def stop_setting(self, key: str) -> float:
        return self.core.stop_setting(key)

    def exit_pause(self, agent: Agent | None) -> float:
        return self.core.exit_pause(agent)

    def exit_grace(self, agent: Agent | None) -> float:
        return self.core.exit_grace(agent)

    def context(self, rec: Record, pids: Iterable[int] = (), claimed: Iterable[str] = (), table=None) -> AgentContext:
        return self.core.context(rec, pids, claimed, table)

    def warn(self, agent: str, hook: str, error: BaseException, rec: Record | None = None,
             live: Live | None = None) -> dict[str, str]:
        return self.core.warn(agent, hook, error, rec, live)

    # -- state and ls --------------------------------------------------------------------------------
    def view(self, records: Iterable[Record] = (), servers: Iterable[tuple[str, str | None]] = ()) -> View:
        return self.state.view(records, servers)

    def live(self, rec: Record, view: View, agent: Agent | None = None, check_resumable: bool = True) -> Live:
        return self.state.live(rec, view, agent, check_resumable)

    def refresh(self, lives: list[Live], view: View | None = None, records: list[Record] | None = None) -> None:
        return self.state.refresh(lives, view, records)

    def live_records(self) -> tuple[list[Record], View]:
        return self.state.live_records()

    def resolve(self, ref: str) -> Record:
        return self.state.resolve(ref)

    def reconcile(self) -> list[str]:
        return self.state.reconcile()

    def locate(self, pane_id: str) -> Located:
        return self.state.locate(pane_id)

    def ls(self) -> list[Live]:
        return self.listing.ls()

    def judge(self, lives: list[Live], view: View, records: list[Record] | None = None) -> None:
        return self.listing.judge(lives, view, records)

    def activities(self, lives: list, view) -> None:
        return self.activity.activities(lives, view)

    def explain(self, rec: Record) -> dict[str, Any]:
        return self.explaining.explain(rec)

    # -- launch, resume ------------------------------------------------------------------------------
    def agent_env(self, base: dict[str, str], home: str | None, agent_name: str,
                  extra: Iterable[str] = ()) -> tuple[str, dict[str, str]]:
        return self.launching.agent_env(base, home, agent_name, extra)

    def launch(self, agent_name: str, *, cwd: str | None = None, name: str | None = None,
               target: str | None = None, split: str | None = None, home: str | None = None,
               env: Iterable[str] = (), args: Iterable[str] = (), worktree: str | None = None) -> Live:
        return self.launching.launch(agent_name, cwd=cwd, name=name, target=target, split=split, home=home,
                                     env=env, args=args, worktree=worktree)

    def resume(self, rec: Record, target: str | None = None, split: str | None = None,
               session_name: str | None = None) -> Live:
        return self.launching.resume(rec, target, split, session_name)

    check_command = staticmethod(Launching.check_command)

    # -- stop ----------------------------------------------------------------------------------------
    def stop(self, rec: Record, grace: float | None = None, view: View | None = None) -> Live:
        return self.ladder.stop(rec, grace, view)

    def stop_many(self, records: list[Record], grace: float | None = None,
                  view: View | None = None) -> list[Live | MuxhostError]:
        return self.ladder.stop_many(records, grace, view)

    def finish_stops(self, records: list[Record], view: View) -> list[Record]:
        return self.ladder.finish_stops(records, view)

    def stop_adopted(self, loc: Located, grace: float | None = None) -> tuple[str, float]:
        return self.ladder.stop_adopted(loc, grace)

    # -- locks and refusals --------------------------------------------------------------------------
    def conversation_lock(self, agent: str, conversation_id: str, purpose: str):
        return self.locks.conversation(agent, conversation_id, purpose)

    def record_locks(self, records: list[Record], purpose: str, timeout: float | None = None):
        return self.locks.records(records, purpose, timeout)

    def record_lock(self, rec: Record, purpose: str):
        return self.locks.record(rec, purpose)

    check_id = staticmethod(check_id)
    refuse_moved = staticmethod(refuse_moved)

    def refuse_alive(self, rec: Record, agent: Agent | None, conversations: Iterable[str],
                     own: Iterable[int] = (), then: str = "") -> None:
        return self.refusals.refuse_alive(rec, agent, conversations, own, then)

    # -- purge, rm -----------------------------------------------------------------------------------
    def purge(self, *, rec: Record | None = None, agent_name: str | None = None,
              conversation_id: str | None = None, home: str | None = None, dry_run: bool = False,
              stop: bool = False, confirm: Callable[[PurgeReport], bool] | None = None,
              ctx: AgentContext | None = None, confirmed: str | None = None,
              archive: bool | None = None) -> PurgeReport:
        return self.purging.purge(rec=rec, agent_name=agent_name, conversation_id=conversation_id, home=home,
                                  dry_run=dry_run, stop=stop, confirm=confirm, ctx=ctx, confirmed=confirmed,
                                  archive=archive)

    def purge_pane(self, pane_id: str, *, dry_run: bool = False, stop: bool = False,
                   confirm: Callable[[PurgeReport], bool] | None = None, confirmed: str | None = None,
                   archive: bool | None = None) -> PurgeReport:
        return self.purging.purge_pane(pane_id, dry_run=dry_run, stop=stop, confirm=confirm, confirmed=confirmed,
                                       archive=archive)

    @property
    def unpurging(self):
        """``unpurge`` and ``archives`` (:mod:`muxhost.unpurging`, imported when first used: start-up)."""
        if self._unpurging is None:
            from muxhost.unpurging import Unpurging

            self._unpurging = Unpurging(self.core, self.locks, self.refusals, self.launching)
        return self._unpurging

    def unpurge(self, ref: str, dry_run: bool = False) -> dict[str, Any]:
        return self.unpurging.unpurge(ref, dry_run)

    def rm(self, rec: Record, *, purge: bool = False, force: bool = False) -> dict[str, Any]:
        return self.removal.rm(rec, purge=purge, force=force)

    # -- every conversation on disk, prune ------------------------------------------------------------
    def conversations(self, agent: str | None = None, cwd: str | None = None, older_than: float | None = None,
                      grep: str | None = None) -> list[Row]:
        return self.inventory.conversations(agent, cwd, older_than, grep)

    def prune(self, older_than: float, *, agent: str | None = None, cwd: str | None = None, dry_run: bool = False,
              archive: bool = False, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        return self.inventory.prune(older_than, agent=agent, cwd=cwd, dry_run=dry_run, archive=archive,
                                    progress=progress)

    # -- sleep, wake, restore ------------------------------------------------------------------------
    def sleep_many(self, records: list[Record], grace: float | None = None,
                   idle_for: float | None = None) -> list[Live | MuxhostError]:
        return self.sleeping.sleep_many(records, grace, idle_for)

    def wake(self, rec: Record) -> Live:
        return self.sleeping.wake(rec)

    def idle_for(self, seconds: float) -> list[Record]:
        return self.sleeping.idle_for(seconds)

    def stub_text(self, rec: Record) -> str:
        return self.sleeping.stub_text(rec)

    def restore(self, dry_run: bool = False, wake: bool = False) -> list[dict[str, Any]]:
        return self.restoring.restore(dry_run, wake)

    # -- scripted control, the watch -----------------------------------------------------------------
    def send(self, rec: Record, text: str) -> Live:
        return self.scripting.send(rec, text)

    def read(self, rec: Record, lines: int | None = None) -> str:
        return self.scripting.read(rec, lines)

    def watch(self, emit: Callable[[dict[str, Any]], None], interval: float | None = None, follower=None) -> None:
        return self.watching.watch(emit, interval, follower)

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
                              f"{other_program(view, fresh) if view is not None else ''}")
            if deadline is not None and time.monotonic() >= deadline:
                raise MuxhostError(f"record {rec.id} ({rec.name}) is not {until} after {timeout:g}s "
                               f"(it is {state or 'unknown'})")
            time.sleep(WAIT_INTERVAL)
