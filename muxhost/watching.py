"""The activity watch (``muxhost watch``): one long-running process per pane server that knows what
every agent on it is doing, and says so where it costs nothing to read. Part of
:class:`muxhost.host.Host`.

Each pass (every ``watch.interval``, default 1 s): ONE pane query, ONE process-table pass (a
:class:`muxhost.procs.Sampler`: each process's stat read once), the screens of only those panes
whose output moved since the last look (and whose plugin reads screens), batched in ONE round trip,
then :func:`muxhost.activity.judge` for each running record with what the watch remembers between
passes (the last screen, each process's CPU time, the last sign of life). Nothing is written when
nothing changed; a change is published in one round trip: per pane ``@muxhost_activity`` and
``@muxhost_activity_since``, and for the server ``@muxhost_summary`` (``2 working · 1 waiting``),
``@muxhost_waiting`` (the pane that has waited longest: the key of ``muxhost tmux-bindings``) and
``@muxhost_watch`` (this process, so ``ls`` knows the values are live). Each change also goes to
the hook ``muxhost_activity_changed`` and to the caller's ``emit``; an agent that starts waiting
gets the backend's alert (tmux: a message and the bell) unless ``watch.alert`` is false. With
``watch.sleep_after`` (seconds), an agent idle that long, with nobody typing into its session
meanwhile, is put to sleep (``muxhost sleep``).

A second watch for the same server is refused (exit 4) naming the first one's pid: the lock file
``<state dir>/locks/watch-<server>.lock`` is held (``flock``) for the watch's life, labelled with
the server instance it watches (``PaneInfo.server``). A watch ends when that instance does, even
when a new server runs on the same address; a holder of the lock that watches an instance that is
gone is ended (by pid and start time) and the lock taken over, with a line on stderr.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from muxhost import procs
from muxhost.activity import (CPU_BUSY, STATES, Evidence, ask_plugin, first_since, judge, needs_screen,
                              split_tree, untouched_since)
from muxhost.backends import (ACTIVITY_OPTION, ACTIVITY_SINCE_OPTION, SUMMARY_OPTION, WAITING_OPTION,
                              WATCH_OPTION, PaneInfo)
from muxhost.errors import MuxhostError, Refused
from muxhost.state import Live, View
from muxhost.store import Record


#: seconds between two refreshes of every running agent's conversation id (and at once for a new one)
REFRESH_EVERY = 10.0


@dataclass
class Track:
    """What the watch remembers of one running record between passes."""

    rec: Record
    pane: PaneInfo
    activity: str | None = None
    since: float | None = None
    progress: float | None = None          # the latest time it printed or used CPU
    mark: str = ""                         # the pane's output_mark at the last look
    screen: str | None = None              # its visible screen, as last captured
    cpu: dict[tuple[int, float], float] = field(default_factory=dict)  # non-resident process -> CPU s
    published: tuple[str, float] | None = None
    #: the latest last_input seen: the backend tells it only while the pane is the active one, and
    #: a line typed before the user moved to another pane is still there
    typed: float | None = None


def summary(counts: dict[str, int]) -> str:
    """``2 working · 1 waiting`` (states in a fixed order, none with no agent; "" for none at all)."""
    return " · ".join(f"{counts[s]} {s}" for s in ("working", "waiting", "stalled", "idle") if counts.get(s))


class Watch:
    """The watch of one server. :meth:`step` is one pass; :meth:`run` loops until the server ends
    (or KeyboardInterrupt) and then takes back what it published."""

    def __init__(self, host, interval: float, stall_after: float, alert: bool,
                 emit: Callable[[dict[str, Any]], None] = lambda change: None, only: Record | None = None):
        self.host, self.interval, self.stall_after, self.alert, self.emit = host, interval, stall_after, alert, emit
        #: ``wait``'s watch: judges this one record (read afresh every pass) on its own server, and
        #: publishes nothing: no options, no hook, no alert, no sleeping
        self.only = only
        self.server = (only.backend or "tmux", only.socket) if only else host.server
        self.backend = host.backend_of(only) if only else host.current()
        self.sampler = procs.Sampler()
        self.tracks: dict[str, Track] = {}
        self.residents: dict[tuple[int, float, str], bool] = {}
        self.records: list[Record] = []        # the records on this server
        self.everyone: list[Record] | None = None  # every record (on every server): what refresh weighs
        self.version: int | None = None
        self.looked: float | None = None       # the time of the previous pass
        self.server_values: dict[str, str | None] = {}
        self.warned = 0
        self.refreshed: float | None = None    # the last time conversation ids were refreshed
        self.sleep_after = None if only else host.config.watch("sleep_after")
        #: (record, idle and untouched since) -> the `muxhost sleep` started for that spell
        self.sleepers: dict[tuple[str, float | None], Any] = {}
        self.sleeps_begun: dict[str, float] = {}  # record -> when this watch's last sleep of it began
        import psutil

        self.ident = f"{os.getpid()} {psutil.Process().create_time()}"
        #: the server instance watched (PaneInfo.server): a new server on the same address is not it
        self.instance: str | None = None
        self.gone = False  # the server watched is gone

    # -- one pass -------------------------------------------------------------------------------
    def _records(self) -> list[Record]:
        store = self.host.store
        if self.only is not None:
            fresh = store.get(self.only.id)
            return [fresh] if fresh is not None else []
        version = store.version()
        if version != self.version:  # another muxhost committed: read them again
            self.version = version
            self.everyone = store.all()
            self.records = [r for r in self.everyone if (r.backend or "tmux", r.socket) == self.server]
        return self.records

    def step(self) -> list[dict[str, Any]] | None:
        """One pass; returns the changes (None: the server is gone)."""
        panes = self.backend.snapshot()
        if panes is not None and self.instance is None:
            self.instance = instance_of(panes)
        if panes is None or instance_of(panes) not in (None, self.instance):
            # the server ended, and every agent on it (another server on its address is not it)
            tracks, self.tracks = self.tracks, {}
            for tr in tracks.values():
                if tr.activity is not None:
                    try:  # (a line nobody can read any more must not keep the watch going)
                        self._changed(Live(tr.rec, "lost", None, []), tr.activity, None, time.time(), alert=False)
                    except Exception:
                        pass
            self.gone = True
            return None
        table = self.sampler.snapshot()
        if len(self.residents) > 4 * len(table.procs) + 100:  # forget processes long gone
            self.residents = {k: v for k, v in self.residents.items() if k[0] in table.procs}
        now = time.time()
        first = self.looked is None
        dt = None if first else max(now - self.looked, 1e-3)
        view = View({self.server: panes}, table)
        running: list[tuple[Live, Track, Any, bool, bool, bool]] = []
        wanted: list[str] = []
        for rec in self._records():
            pane = view.pane_for(rec)
            # (a pane that runs another program now is not the agent's: not watched)
            if rec.state in ("stopped", "asleep") or pane is None or pane.dead or view.foreign(rec) is not None:
                continue
            tree = table.tree(pane.pid)
            if not tree:
                continue
            live = Live(rec, "running", pane, tree)
            tr = self.tracks.get(rec.id)
            # a new pane, or a new agent in it (a wake, a resume: launched_at moved) starts afresh,
            # even when no pass saw the record asleep or its pane dead in between
            new = tr is None or tr.pane.pane_id != pane.pane_id or tr.rec.launched_at != rec.launched_at
            if new:
                tr = self.tracks[rec.id] = Track(rec, pane, progress=pane.last_output)
            tr.rec = rec
            agent = self.host.registry.agents.get(rec.agent)
            _, tools = split_tree(agent, tree, self.residents)
            own = [tree[0], *tools]
            used = tool_used = 0.0
            for p in own:
                before = tr.cpu.get(p.key)
                if p.cpu is None:
                    continue
                if before is not None:
                    d = max(p.cpu - before, 0.0)
                elif not new and self.looked is not None and p.create_time >= self.looked - 0.01:
                    d = p.cpu  # started since the last look: all of its CPU is new
                else:
                    d = 0.0
                used += d
                if p is not tree[0]:
                    tool_used += d
            tr.cpu = {p.key: p.cpu for p in own if p.cpu is not None}
            busy = dt is not None and used >= CPU_BUSY * dt
            tool_busy = dt is not None and tool_used >= CPU_BUSY * dt
            # output since the last look: the mark moved, or the (whole-second) output time is not
            # older than the second of the last look
            moved = pane.output_mark != tr.mark or (
                pane.last_output is not None and self.looked is not None and pane.last_output >= int(self.looked))
            if not new and moved:
                tr.progress = max(tr.progress or 0.0, min(pane.last_output + 1, now) if pane.last_output else now)
            if busy:
                tr.progress = now
            tr.mark, tr.pane = pane.output_mark, pane
            if pane.last_input is not None:
                tr.typed = max(tr.typed or 0.0, pane.last_input)
            # a backend that cannot tell when a pane printed (no mark, no time): its screen, every
            # pass, tells (see below)
            blind = not pane.output_mark and pane.last_output is None
            if blind or (needs_screen(agent) and (moved or tr.screen is None)):
                wanted.append(pane.pane_id)
            running.append((live, tr, agent, busy, tool_busy, new))
        # which conversation each is in (a new agent's first, after a /new or /clear), as `ls` would
        # say: the plugins' activity reads that conversation. Every pass while an agent that can
        # find its conversation has none yet (its first prompt is what makes one), else every 10 s.
        unknown = any(r[0].rec.conversation_id is None and r[2] is not None and _discovers(r[2]) for r in running)
        if running and (unknown or any(r[5] for r in running) or self.refreshed is None
                        or now - self.refreshed >= REFRESH_EVERY):
            # (every record, on every server, is weighed: a conversation another record holds
            # elsewhere is never handed to one of these; `wait`'s watch reads them from the store)
            self.host.refresh([r[0] for r in running], view, self.everyone)
            self.refreshed = now
        screens = self.backend.screens(wanted) if wanted else {}
        changes: list[dict[str, Any]] = []
        seen = set()
        for live, tr, agent, busy, tool_busy, new in running:
            seen.add(live.rec.id)
            if live.pane.pane_id in screens:
                screen = screens[live.pane.pane_id]
                if not new and tr.screen is not None and screen != tr.screen and not live.pane.output_mark \
                        and live.pane.last_output is None:
                    tr.progress = now  # (a blind backend's pane: its screen changed since the last look)
                tr.screen = screen
            ev = Evidence(ask_plugin(self.host, agent, live, tr.screen, table) if agent else None,
                          busy, tool_busy, tr.progress)
            state = judge(ev, now, self.stall_after)
            if state == tr.activity:
                # idle before and after this pass, but a turn came and went in between: a prompt (a
                # `send`, a user's key) and output after it restart the idle clock. (Output alone does
                # not: an idle TUI redraws itself, claude every few seconds.)
                poke = max(live.rec.sent_at or 0.0, tr.typed or 0.0)
                if state == "idle" and tr.since is not None and poke > tr.since and (tr.progress or 0.0) >= poke:
                    tr.since = min(tr.progress, now)
                continue
            if new:
                since = first_since(state, live.pane.last_output, tr.progress, self.stall_after, now,
                                    live.rec.launched_at) or now
            elif state == "stalled" and tr.progress is not None:
                since = min(tr.progress + self.stall_after, now)
            else:
                since = now
            old, tr.activity, tr.since = tr.activity, state, since
            live.activity, live.activity_since = state, since
            changes.append(self._changed(live, old, state, since, alert=not first or old is not None))
        fresh = {r.id: r for r in self.records} if self.only is None else {}
        for rid in [r for r in self.tracks if r not in seen]:
            tr = self.tracks.pop(rid)
            live = Live(tr.rec, "exited", tr.pane, [])
            if tr.activity is not None:
                # (why, where it is known: put to sleep — by this watch's sleep_after, its sleep
                # under way or done, or by another muxhost)
                asleep = getattr(fresh.get(rid), "state", None) == "asleep"
                mine = any(k[0] == rid and p is not None and p.poll() is None for k, p in self.sleepers.items()) or (
                    asleep and rid in self.sleeps_begun and (fresh[rid].slept_at or 0.0) >= self.sleeps_begun[rid])
                note = "asleep (sleep_after)" if mine else "asleep" if asleep else None
                changes.append(self._changed(live, tr.activity, None, now, alert=False, note=note))
            if tr.published is not None:  # a dead pane keeps its options: take ours back
                self.backend.publish({tr.pane.pane_id: {ACTIVITY_OPTION: None, ACTIVITY_SINCE_OPTION: None}})
        self._publish()
        self._sleep_idle(now)
        self.looked = now
        return changes

    def _sleep_idle(self, now: float) -> None:
        """``watch.sleep_after``: an agent idle that long is put to sleep, by a ``muxhost sleep`` of
        its own (the watch goes on meanwhile); once per idle spell (a refusal is not retried)."""
        if not self.sleep_after:
            return
        import subprocess

        for key, proc in list(self.sleepers.items()):
            if proc is not None and proc.poll() is not None:
                self.sleepers[key] = None  # done (reaped): not again for this spell
        for tr in self.tracks.values():
            quiet = untouched_since(tr.since, tr.typed)
            key = (tr.rec.id, quiet)  # (a key typed since is a new spell: a sleep that found it is retried)
            if tr.activity == "idle" and quiet is not None and now - quiet >= self.sleep_after \
                    and key not in self.sleepers:
                # --idle-for: the sleep judges it again under the record's lock (a key typed meanwhile
                # counts), from what this watch published — where the backend shows that to others
                again = ("--idle-for", f"{self.sleep_after}s") if tr.pane.watcher is not None else ()
                argv = self.host.sleeping.muxhost_argv(tr.rec, "sleep", *again, tr.rec.id)
                self.sleeps_begun[tr.rec.id] = time.time()
                self.sleepers[key] = subprocess.Popen(argv,
                                                      env=self.host.sleeping.caller_env(), stdin=subprocess.DEVNULL,
                                                      stdout=subprocess.DEVNULL)

    def _changed(self, live: Live, old: str | None, new: str | None, since: float, alert: bool,
                 note: str | None = None) -> dict[str, Any]:
        """One change: ``at`` is when the watch saw it, ``since`` since when the new state holds (it
        may be earlier: a new agent idle since its last output); ``note`` says why a record left the
        watch (``asleep``, ``asleep (sleep_after)``), where known."""
        rec = live.rec
        change = {"record": rec.id, "name": rec.name, "agent": rec.agent,
                  "pane": live.pane.pane_id if live.pane else None, "old": old, "new": new, "since": round(since, 3),
                  "at": round(time.time(), 3), "note": note}
        if self.only is not None:
            return change
        try:
            self.host.pm.hook.muxhost_activity_changed(record=live.to_dict(), old=old, new=new)
        except Exception as e:  # a plugin's notifier failing does not stop the watch
            self.host.warn("-", "muxhost_activity_changed", e, rec)
        if new == "waiting" and alert and self.alert and live.pane is not None:
            self.backend.alert(f"muxhost: {rec.name} ({rec.agent}) is waiting for you", live.pane.pane_id)
        self.emit(change)
        return change

    def _publish(self) -> None:
        """What changed since the last publish, in one round trip."""
        if self.only is not None:
            return
        panes: dict[str, dict[str, str | None]] = {}
        counts: dict[str, int] = {}
        waiting: list[tuple[float, str]] = []
        for tr in self.tracks.values():
            if tr.activity is None:
                continue
            counts[tr.activity] = counts.get(tr.activity, 0) + 1
            if tr.activity == "waiting":
                waiting.append((tr.since or 0.0, tr.pane.pane_id))
            value = (tr.activity, tr.since or 0.0)
            if tr.published != value:
                panes[tr.pane.pane_id] = {ACTIVITY_OPTION: value[0], ACTIVITY_SINCE_OPTION: f"{value[1]:.3f}"}
                tr.published = value
        server = {WATCH_OPTION: self.ident, SUMMARY_OPTION: summary(counts),
                  WAITING_OPTION: min(waiting)[1] if waiting else ""}
        changed = {k: v for k, v in server.items() if self.server_values.get(k) != v}
        if panes or changed:
            self.backend.publish(panes, changed)
            self.server_values.update(changed)

    def withdraw(self) -> None:
        """Take back everything published (the watch ends): no stale state in any status line — but
        nothing of a server on the same address that is not the one watched."""
        if self.gone or (self.instance is not None and instance_of(self.backend.snapshot() or []) != self.instance):
            return
        panes = {tr.pane.pane_id: {ACTIVITY_OPTION: None, ACTIVITY_SINCE_OPTION: None}
                 for tr in self.tracks.values() if tr.published is not None}
        self.backend.publish(panes, {WATCH_OPTION: None, SUMMARY_OPTION: None, WAITING_OPTION: None})

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while True:
                t0 = time.monotonic()
                try:
                    if self.step() is None:
                        return  # the server ended: so does its watch
                except (MuxhostError, OSError) as e:  # a bad moment (a busy store, a tmux hiccup): next pass
                    print(f"muxhost: watch: {e} (trying again)", file=sys.stderr, flush=True)
                self._warnings()
                time.sleep(max(0.0, self.interval - (time.monotonic() - t0)))
        finally:
            try:
                self.withdraw()
            except Exception:
                pass

    def _warnings(self) -> None:
        new = self.host.warnings[self.warned:]
        self.warned = len(self.host.warnings)
        for w in new:
            rec = f" for record {w['record']}" if w.get("record") else ""
            print(f"muxhost: warning: {w['agent']}: {w['hook']} failed{rec}: {w['error']}", file=sys.stderr, flush=True)


def _server_alive(instance: list[str]) -> bool:
    """The server instance ``[pid, start time]`` of a watch lock's label still runs; unknown counts
    as running (a watch is ended only when its server is surely gone)."""
    import psutil

    try:
        pid, started = int(instance[0]), float(instance[1])
        server = psutil.Process(pid)
        return abs(server.create_time() - started) < 2.0 and server.status() != psutil.STATUS_ZOMBIE
    except (IndexError, ValueError):
        return True
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def instance_of(panes: list[PaneInfo]) -> str | None:
    """The server instance of a snapshot's panes (:attr:`PaneInfo.server`), None when unknown."""
    return next((p.server for p in panes if p.server), None)


def _discovers(agent) -> bool:
    """Whether the plugin finds its agent's conversation itself (overrides ``discover``)."""
    from muxhost.agent import Agent

    return getattr(type(agent), "discover", Agent.discover) is not Agent.discover


def lock_path(server: tuple[str, str | None]) -> str:
    """The watch lock of a server: ``<state dir>/locks/watch-<hash of backend and address>.lock``."""
    import hashlib

    from muxhost.store import state_dir

    digest = hashlib.sha256(f"{server[0]}\0{server[1] or ''}".encode()).hexdigest()[:24]
    return str(state_dir() / "locks" / f"watch-{digest}.lock")


class WatchOps:
    """The watch of the chosen server, run on ``host`` (a :class:`muxhost.host.Host`)."""

    def __init__(self, host):
        self.host = host

    def watch(self, emit: Callable[[dict[str, Any]], None], interval: float | None = None) -> None:
        """Run the watch of the chosen server until the server ends (or KeyboardInterrupt). A second
        watch of the same server is refused (exit 4), naming the first one's pid."""
        from muxhost.kit.flock import LockTimeout, flock

        interval = float(self.host.config.watch("interval") if interval is None else interval)
        from muxhost.config import MAX_SECONDS, seconds_ok

        if not seconds_ok(interval) or interval == 0:
            from muxhost.errors import UsageError

            raise UsageError(f"--interval must be more than 0 seconds, and at most {MAX_SECONDS}")
        backend = self.host.current()
        panes = backend.snapshot()
        if panes is None:
            raise MuxhostError(self.host.no_server())
        instance = instance_of(panes)
        # a process that runs for days imports every plugin now: one removed or upgraded meanwhile
        # must not fail a pass hours from now
        load_pending = getattr(self.host.pm, "load_pending", None)
        if load_pending is not None:
            load_pending()
        path = lock_path(self.host.server)
        from muxhost.store import private_folder, state_folder

        state_folder()
        private_folder(os.path.dirname(path))
        import psutil

        me = psutil.Process()
        # (the label: who holds it, and of which server instance; "watch pid N" first, as before)
        label = f"watch pid {me.pid} started {me.create_time()} server {instance or '-'}"
        wait = 0.0
        while True:
            try:
                with flock(path, wait, private=True, label=label):
                    watch = Watch(self.host, interval, float(self.host.config.watch("stall_after")),
                                  bool(self.host.config.watch("alert")), emit)
                    watch.instance = instance
                    watch.run()
                return
            except LockTimeout as e:
                if os.path.realpath(e.path) != os.path.realpath(path):
                    raise
                if wait or not self._end_stale_watch(e.holder, instance, backend):
                    pid = e.holder.split()[2] if len(e.holder.split()) > 2 else "?"
                    raise Refused(f"a watch already runs for the {backend.name} server on {backend.where()} "
                                  f"(pid {pid})") from None
                wait = 10.0  # (it was told to end: its lock comes once it has)

    def _end_stale_watch(self, holder: str, instance: str | None, backend) -> bool:
        """The lock's holder watches another instance of this server (one that is gone): end it (by
        its pid and start time, SIGTERM, then SIGKILL), say so on stderr, and return True. False
        when it watches this very server, or when that is not known."""
        import signal

        from muxhost import procs

        words = holder.split()  # watch pid N started T server P S
        if instance is None or len(words) < 7 or words[:2] != ["watch", "pid"] or words[5] != "server":
            return False
        theirs = " ".join(words[6:])
        if theirs == instance:
            return False
        try:
            pid, started = int(words[2]), float(words[4])
        except ValueError:
            return False
        if _server_alive(words[6:]):  # (another server of that name, under another TMUX_TMPDIR: not gone)
            return False
        print(f"muxhost: watch: taking over the lock of watch pid {pid}: it watches a {backend.name} server on "
              f"{backend.where()} that is gone (server {theirs}; this one is {instance})", file=sys.stderr, flush=True)
        if procs.signal_if_same(pid, started, signal.SIGTERM):
            procs.signal_if_same(pid, started, signal.SIGCONT)  # (a stopped one, too, ends)
            deadline = time.monotonic() + 5
            while procs.same_process(pid, started) and time.monotonic() < deadline:
                time.sleep(0.05)
            procs.signal_if_same(pid, started, signal.SIGKILL)
        return True


__all__ = ["STATES", "Track", "Watch", "WatchOps", "lock_path", "summary"]
