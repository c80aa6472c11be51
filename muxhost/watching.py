"""The activity watch (``muxhost watch``): one long-running process per pane server that knows what
every agent on it is doing, and says so where it costs nothing to read. Part of
:class:`muxhost.host.Host`.

Each pass (every ``watch.interval``, default 1 s) is observe → judge (:mod:`muxhost.passes`:
ONE pane query, ONE process-table pass, the screens of only those panes whose output moved since
the last look, batched in ONE round trip; then a pure judgement with what the watch remembers
between passes: the last screen, each process's CPU time, the last sign of life) → publish (here).
Nothing is written when nothing changed; a change is published in one round trip: per pane
``@muxhost_activity`` and ``@muxhost_activity_since``, and for the server ``@muxhost_summary``
(``2 working · 1 waiting``), ``@muxhost_waiting`` (the pane that has waited longest: the key of
``muxhost tmux-bindings``) and ``@muxhost_watch`` (this process, so ``ls`` knows the values are
live). Each change also goes to the hook ``muxhost_activity_changed`` and to the caller's ``emit``;
an agent that starts waiting gets the backend's alert (tmux: a message and the bell) unless
``watch.alert`` is false. With ``notify.urls``, each pass's changes go to :mod:`muxhost.notify` (it
only enqueues; a worker thread sends). With ``watch.sleep_after`` (seconds), an agent idle that long,
with nobody typing into its session meanwhile, is put to sleep (``muxhost sleep``).

A second watch for the same server is refused (exit 4) naming the first one's pid: the lock file
``<state dir>/locks/watch-<server>.lock`` is held (``flock``) for the watch's life, labelled with
the server instance it watches (``PaneInfo.server``). A watch ends when that instance does, even
when a new server runs on the same address; a holder of the lock that watches an instance that is
gone is ended (by pid and start time) and the lock taken over, with a line on stderr.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

from muxhost import passes
from muxhost.activity import STATES, untouched_since
from muxhost.backends import ACTIVITY_OPTION, ACTIVITY_SINCE_OPTION, SUMMARY_OPTION, WAITING_OPTION, WATCH_OPTION
from muxhost.errors import MuxhostError, Refused
from muxhost.passes import Change, Track, instance_of
from muxhost.store import Record


def summary(counts: dict[str, int]) -> str:
    """``2 working · 1 waiting`` (states in a fixed order, none with no agent; "" for none at all)."""
    return " · ".join(f"{counts[s]} {s}" for s in ("working", "waiting", "stalled", "idle") if counts.get(s))


class Watch:
    """The watch of one server. :meth:`step` is one pass (observe, judge: :mod:`muxhost.passes`;
    then publish); :meth:`run` loops until the server ends (or KeyboardInterrupt) and then takes
    back what it published."""

    def __init__(self, host, interval: float, stall_after: float, alert: bool,
                 emit: Callable[[dict[str, Any]], None] = lambda change: None, instance: str | None = None,
                 follower=None):
        self.host, self.interval, self.stall_after, self.alert, self.emit = host, interval, stall_after, alert, emit
        #: the remote hosts' watches (:class:`muxhost.remote.following.Follower`), counted in what is published
        self.follower = follower
        self.server = host.server
        self.backend = host.current()
        self.observer = passes.observer_of(host, self.backend, self.server, instance)
        self.tracks: dict[str, Track] = {}
        self.records: list[Record] = []        # the records on this server
        self.everyone: list[Record] | None = None  # every record (on every server): what refresh weighs
        self.version: int | None = None
        self.looked: float | None = None       # the time of the previous pass
        #: record -> (pane, (activity, since)) as published in its pane's options
        self.published: dict[str, tuple[str, tuple[str, float]]] = {}
        self.server_values: dict[str, str | None] = {}
        self.warned = 0
        self.sleep_after = host.config.watch("sleep_after")
        #: (record, idle and untouched since) -> the `muxhost sleep` started for that spell
        self.sleepers: dict[tuple[str, float | None], Any] = {}
        self.sleeps_begun: dict[str, float] = {}  # record -> when this watch's last sleep of it began
        import psutil

        self.ident = f"{os.getpid()} {psutil.Process().create_time()}"
        self.gone = False  # the server watched is gone
        self.emitting = threading.Lock()  # (the notifier's worker emits its warnings too)
        from muxhost import notify

        #: notify.urls: each pass's changes, told through apprise (None: no URL set)
        self.notifier = notify.for_watch(host.config, stall_after, self._notify_warning)
        if follower is not None:
            follower.emit = self._remote_changed
            follower.start()

    @property
    def instance(self) -> str | None:
        """The server instance watched (PaneInfo.server): a new server on the same address is not it."""
        return self.observer.instance

    # -- one pass -------------------------------------------------------------------------------
    def _records(self) -> list[Record]:
        store = self.host.store
        version = store.version()
        if version != self.version:  # another muxhost committed: read them again
            self.version = version
            self.everyone = store.all()
            self.records = [r for r in self.everyone if (r.backend or "tmux", r.socket) == self.server]
        return self.records

    def step(self) -> list[dict[str, Any]] | None:
        """One pass; returns the changes (None: the server is gone)."""
        sight = self.observer.look(self._records(), self.tracks, self.looked, self.everyone)
        if sight is None:  # the server ended, and every agent on it
            tracks, self.tracks = self.tracks, {}
            for change in passes.lost(tracks, time.time()):
                try:  # (a line nobody can read any more must not keep the watch going)
                    self._changed(change)
                except Exception:
                    pass
            self.gone = True
            return None
        left = self.tracks.keys() - {seen.live.rec.id for seen in sight.running}
        judged = passes.judge_pass(sight, self.tracks, self.looked, self.stall_after,
                                   self._notes(left) if left else None)
        self.tracks = judged.tracks
        changes = [self._changed(change) for change in judged.changes]
        if self.notifier is not None and judged.changes:
            self._notify(judged.changes, sight.now)
        self._publish(judged.left)
        self._sleep_idle(sight.now)
        self.looked = sight.now
        return changes

    def _notes(self, left: set[str]) -> dict[str, str]:
        """Why each record of ``left`` left the watch, where known: put to sleep — by this watch's
        sleep_after (its sleep under way or done), or by another muxhost."""
        stored = {r.id: r for r in self.records if r.id in left}
        notes = {}
        for rid in left:
            asleep = getattr(stored.get(rid), "state", None) == "asleep"
            mine = any(k[0] == rid and p is not None and p.poll() is None for k, p in self.sleepers.items()) or (
                asleep and rid in self.sleeps_begun and (stored[rid].slept_at or 0.0) >= self.sleeps_begun[rid])
            if mine or asleep:
                notes[rid] = "asleep (sleep_after)" if mine else "asleep"
        return notes

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

    def _changed(self, change: Change) -> dict[str, Any]:
        """Publish one change (the hook, the alert, ``emit``) and return its line: ``at`` is when the
        watch saw it, ``since`` since when the new state holds (it may be earlier: a new agent idle
        since its last output); ``note`` says why a record left the watch (``asleep``, ``asleep
        (sleep_after)``), where known."""
        live, old, new = change.live, change.old, change.new
        rec = live.rec
        line = {"record": rec.id, "name": rec.name, "agent": rec.agent,
                "pane": live.pane.pane_id if live.pane else None, "old": old, "new": new,
                "since": round(change.since, 3), "at": round(time.time(), 3), "note": change.note}
        try:
            self.host.pm.hook.muxhost_activity_changed(record=live.to_dict(), old=old, new=new)
        except Exception as e:  # a plugin's notifier failing does not stop the watch
            self.host.warn("-", "muxhost_activity_changed", e, rec)
        if new == "waiting" and change.alert and self.alert and live.pane is not None:
            self.backend.alert(f"muxhost: {rec.name} ({rec.agent}) is waiting for you", live.pane.pane_id)
        with self.emitting:
            self.emit(line)
        return line

    def _remote_changed(self, line: dict[str, Any]) -> None:
        """A remote host's change line (with ``host``; from the follower's thread), or a host going
        offline or back: the alert and the notification a local agent gets, naming the host; then
        ``emit``. (A record's first line after connecting, ``old`` None, is no news.)"""
        new, old = line.get("new"), line.get("old")
        if "record" in line and old is not None and new in ("waiting", "stalled"):
            who = f"{line.get('name')}@{line['host']} ({line.get('agent')})"
            if new == "waiting" and self.alert:
                self.backend.alert(f"muxhost: {who} is waiting for you", None)
            if self.notifier is not None and self.notifier.thread is not None and new in self.notifier.events:
                from muxhost.notify import Event

                now, since = time.time(), float(line.get("since") or time.time())
                seconds = now - since + (self.stall_after if new == "stalled" else 0.0)
                self.notifier.queue.put([Event(new, str(line["record"]), str(line.get("name")),
                                               str(line.get("agent")), str(line["host"]), since, seconds)])
        with self.emitting:
            self.emit(line)

    def _notify(self, changes: list[Change], now: float) -> None:
        """Hand a pass's changes to the notifier, which only enqueues (no channel is waited on); a
        notifier that fails is a warning line, never the end of the watch."""
        try:
            self.notifier.saw(changes, now, self.backend.screens, self._panes_now)
        except Exception as e:
            self._notify_warning({"notify": "error", "error": f"{type(e).__name__}: {e}"})

    def _panes_now(self) -> dict[str, Any]:
        """The server's panes by id, now (a pane an agent left: its exit status)."""
        return {pane.pane_id: pane for pane in self.backend.snapshot() or []}

    def _notify_warning(self, warning: dict[str, Any]) -> None:
        """A notification channel failed (or apprise is missing): a line on stderr, and a
        ``notify`` line for ``emit`` (``watch --json``)."""
        from muxhost.notify import warning_line

        print(warning_line(warning), file=sys.stderr, flush=True)
        with self.emitting:
            self.emit({**warning, "at": round(time.time(), 3)})

    def _publish(self, left: list[Track]) -> None:
        """What changed since the last publish, in one round trip: the options of each judged pane,
        those of the panes of ``left`` taken back (a dead pane keeps its options), the server's."""
        panes: dict[str, dict[str, str | None]] = {}
        for tr in left:
            gone = self.published.pop(tr.rec.id, None)
            if gone is not None:
                panes[gone[0]] = {ACTIVITY_OPTION: None, ACTIVITY_SINCE_OPTION: None}
        counts: dict[str, int] = {}
        waiting: list[tuple[float, str]] = []
        for rid, tr in self.tracks.items():
            if tr.activity is None:
                continue
            counts[tr.activity] = counts.get(tr.activity, 0) + 1
            if tr.activity == "waiting":
                waiting.append((tr.since or 0.0, tr.pane.pane_id))
            value = (tr.pane.pane_id, (tr.activity, tr.since or 0.0))
            if self.published.get(rid) != value:
                panes[tr.pane.pane_id] = {ACTIVITY_OPTION: tr.activity, ACTIVITY_SINCE_OPTION: f"{value[1][1]:.3f}"}
                self.published[rid] = value
        offline: list[str] = []
        if self.follower is not None:  # every host's agents counted; a host offline named
            theirs, offline, their_waiting = self.follower.tally()
            for k, n in theirs.items():
                counts[k] = counts.get(k, 0) + n
            waiting += their_waiting
        shown = " · ".join([summary(counts), *(f"{h} offline" for h in offline)][0 if counts else 1:])
        server = {WATCH_OPTION: self.ident, SUMMARY_OPTION: shown,
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
        panes = {pane: {ACTIVITY_OPTION: None, ACTIVITY_SINCE_OPTION: None} for pane, _ in self.published.values()}
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
            if self.follower is not None:
                self.follower.close()  # (its ssh children, by pid; their remote watches end with them)
            if self.notifier is not None:
                self.notifier.close()
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

    def watch(self, emit: Callable[[dict[str, Any]], None], interval: float | None = None, follower=None) -> None:
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
                    Watch(self.host, interval, float(self.host.config.watch("stall_after")),
                          bool(self.host.config.watch("alert")), emit, instance, follower).run()
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


__all__ = ["STATES", "Track", "Watch", "WatchOps", "instance_of", "lock_path", "summary"]
