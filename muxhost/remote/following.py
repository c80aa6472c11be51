"""Following remote hosts' watches: each host's ``muxhost watch --json`` over its shared ssh connection.

A :class:`Follower` runs one thread per configured host. Each thread holds one long-lived ssh session
(:func:`muxhost.remote.transport.session`: the shared ControlMaster connection, BatchMode, the
protocol's header and schema check) running ``watch --json`` there, reads its change lines (unknown
fields ignored) and keeps every remote record's latest activity. The remote watch ends when the
session goes (its stdin closes: :mod:`muxhost.remote.protocol`), so ending the ssh child by its pid
leaves nothing there.

A remote server already watched refuses a second watch (its lock, exit 4): the host is then
followed by polling ``ls --json`` (which reads what that watch publishes) every
:data:`POLL` seconds; a remote with no pane server (yet, or any more: its watch ended) is polled the
same way. On EOF or an error
the host is marked offline with the reason and tried again after a backoff, 1 s doubling to 60 s
(from 1 s again only after it was followed for :data:`STEADY` seconds).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

BACKOFF = (1.0, 60.0)
#: seconds between two ``ls --json`` of a host followed by polling
POLL = 2.0
#: seconds a host must stay followed before a failure starts the backoff again from its first step
#: (a host that answers and then drops at once, every time, backs off like one that never answers)
STEADY = 10.0
#: what ``watch`` says on stderr when a watch of that server runs already
REFUSED = "a watch already runs"
#: a REF the wait key may put in a shell line (a remote's record name, else its id)
PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: what a muxhost of this schema but from before ``watch`` was served says (``ls`` still serves)
NOT_SERVED = "'watch' is not served"
#: what it says when no pane server runs there (yet): ``ls`` still lists its records
NO_SERVER = re.compile(r"no \w+ server running on")


@dataclass
class HostState:
    """What is known of one host: online (None: not known yet), the reason it is offline, how it
    is followed (``watch`` or ``ls``), and its records' latest change lines by record id."""

    name: str
    online: bool | None = None
    reason: str | None = None
    mode: str = "watch"
    records: dict[str, dict[str, Any]] = field(default_factory=dict)


class Follower:
    """Every host of ``table`` (:class:`muxhost.remote.hosts.Hosts`) followed; ``emit(line)`` gets
    each remote change line (a local watch's, with ``host``) and each ``{"host", "online",
    "reason"}`` line when a host goes offline or comes back. :meth:`close` ends every ssh child."""

    def __init__(self, table, emit: Callable[[dict[str, Any]], None] = lambda line: None,
                 backoff: tuple[float, float] = BACKOFF, poll: float = POLL, steady: float = STEADY):
        self.table, self.emit, self.backoff, self.poll, self.steady = table, emit, backoff, poll, steady
        self.states = {name: HostState(name) for name in sorted(table.hosts)}
        self.lock = threading.Lock()
        self.ended = threading.Event()
        self.procs: dict[str, Any] = {}  # host -> its ssh child now
        self.version = 0  # one more at each change of what is known (the dashboard looks again)
        self.threads = [threading.Thread(target=self._follow, args=(table.hosts[n],), daemon=True,
                                         name=f"muxhost-follow-{n}") for n in self.states]

    def start(self) -> "Follower":
        for t in self.threads:
            t.start()
        return self

    def close(self) -> None:
        """End every ssh child by its pid (SIGKILL: it has nothing to save) and wait for them."""
        self.ended.set()
        with self.lock:
            procs = list(self.procs.values())
        for proc in procs:
            _end(proc)
        for t in self.threads:
            if t.ident is not None:
                t.join(5)

    # -- what the local watch and the dashboard read ---------------------------------------------
    def snapshot(self) -> list[HostState]:
        """A copy of every host's state, by host name."""
        with self.lock:
            return [HostState(s.name, s.online, s.reason, s.mode, {k: dict(v) for k, v in s.records.items()})
                    for s in self.states.values()]

    def tally(self) -> tuple[dict[str, int], list[str], list[tuple[float, str]]]:
        """(activity counts over every remote agent, the offline hosts' names, ``(since, REF@HOST)``
        of each waiting agent)."""
        counts: dict[str, int] = {}
        offline, waiting = [], []
        for s in self.snapshot():
            if s.online is False:
                offline.append(s.name)
            for line in s.records.values():
                new = line.get("new")
                if new:
                    counts[new] = counts.get(new, 0) + 1
                ref = next((r for r in (line.get("name"), line.get("record")) if isinstance(r, str)
                            and PLAIN.fullmatch(r)), None)  # (it goes into a tmux key's shell line)
                if new == "waiting" and ref:
                    waiting.append((float(line.get("since") or 0.0), f"{ref}@{s.name}"))
        return counts, offline, waiting

    # -- one host's thread ----------------------------------------------------------------------
    def _follow(self, host) -> None:
        delay = self.backoff[0]
        while not self.ended.is_set():
            began = time.monotonic()
            try:
                reached = self._watch(host)
                if reached == "refused" and not self.ended.is_set():
                    reached = self._poll(host)
            except Exception as e:  # (a thread that dies would leave the host "online" for ever)
                reached = False
                self._offline(host.name, f"{type(e).__name__}: {e}")
            if self.ended.is_set():
                return
            steady = reached and time.monotonic() - began >= self.steady
            delay = self.backoff[0] if steady else min(delay * 2, self.backoff[1])
            self.ended.wait(delay)

    def _watch(self, host) -> bool | str:
        """One session of ``watch --json`` there, read to its end: True when it was reached,
        ``"refused"`` when it refused (a watch runs there already, or no pane server runs) or ended
        by itself (its server ended)."""
        from muxhost.remote import protocol, transport

        proc = transport.session(host, ["watch", "--json"], self.table.timeout)
        with self.lock:
            self.procs[host.name] = proc
        if self.ended.is_set():
            _end(proc)
        errs: list[bytes] = []
        reader = threading.Thread(target=lambda: errs.append(proc.stderr.read()), daemon=True)
        reader.start()
        try:
            head = protocol.parse_header(proc.stdout.readline())
            if head is None or protocol.incompatible(head):
                proc.stdout.read()
                rc = proc.wait()
                reader.join()
                err = b"".join(errs).decode("utf-8", "replace")
                self._offline(host.name, protocol.incompatible(head) if head else transport.failure(host, rc, err))
                return False
            self._online(host.name, "watch")
            for raw in proc.stdout:
                self._line(host.name, raw)
            rc = proc.wait()
            reader.join()
        finally:
            _end(proc)
            with self.lock:
                self.procs.pop(host.name, None)
        err = b"".join(errs).decode("utf-8", "replace")
        if not self.ended.is_set() and (rc == 0 or REFUSED in err or NOT_SERVED in err or NO_SERVER.search(err)):
            return "refused"  # (exit 0: its server ended there; `ls` follows what is left)
        if not self.ended.is_set():
            why = (err.strip().splitlines() or [f"its watch ended (exit {rc})"])[-1].removeprefix("muxhost: ")
            self._offline(host.name, why if rc != 255 else transport.failure(host, rc, err))
        return True

    def _poll(self, host) -> bool:
        """Follow ``host`` by ``ls --json`` every :attr:`poll` seconds until it fails (offline)."""
        from muxhost.remote import transport

        reached = False
        while not self.ended.is_set():
            a = transport.ask(host, ["ls", "--json"], self.table.timeout)
            if not (a.ok and isinstance(a.doc, list)):
                if not self.ended.is_set():
                    self._offline(host.name, a.reason or "no answer")
                return reached
            reached = True
            self._online(host.name, "ls")
            self._listed(host.name, [d for d in a.doc if isinstance(d, dict)])
            self.ended.wait(self.poll)
        return reached

    # -- what was read --------------------------------------------------------------------------
    def _line(self, name: str, raw: bytes) -> None:
        try:
            line = json.loads(raw)
        except ValueError:
            return
        if not isinstance(line, dict) or not isinstance(line.get("record"), str) or "new" not in line:
            return  # (a notify warning there, or a line of a later muxhost: not ours to count)
        line = {**line, "host": name}
        with self.lock:
            self.version += 1
            if line.get("new"):
                self.states[name].records[line["record"]] = line
            else:
                self.states[name].records.pop(line["record"], None)
        self.emit(line)

    def _listed(self, name: str, docs: list[dict]) -> None:
        """An ``ls --json`` of host ``name``: a change line for each record whose activity moved."""
        now = round(time.time(), 3)
        seen = {}
        for d in docs:
            if d.get("state") == "running" and d.get("activity") and isinstance(d.get("id"), str):
                seen[d["id"]] = d
        with self.lock:
            known = dict(self.states[name].records)
        for rid, d in seen.items():
            old = known.get(rid, {}).get("new")
            if old != d["activity"]:
                self._line(name, json.dumps({
                    "record": rid, "name": d.get("name"), "agent": d.get("agent"), "pane": d.get("pane"),
                    "old": old, "new": d["activity"], "since": d.get("activity_since") or now, "at": now,
                    "note": None}).encode())
        for rid, line in known.items():
            if rid not in seen:
                self._line(name, json.dumps({**line, "old": line.get("new"), "new": None, "at": now}).encode())

    def _online(self, name: str, mode: str) -> None:
        with self.lock:
            s = self.states[name]
            was, s.online, s.reason = s.online, True, None
            if was is not True:
                s.records.clear()  # (a new connection tells every record again; a switch to ls diffs on)
                self.version += 1
            s.mode = mode
        if was is not True:
            self.emit({"host": name, "online": True, "reason": None, "at": round(time.time(), 3)})

    def _offline(self, name: str, reason: str) -> None:
        with self.lock:
            s = self.states[name]
            was = (s.online, s.reason)
            self.version += 1
            s.online, s.reason = False, reason
            s.records.clear()
        if was != (False, reason):
            self.emit({"host": name, "online": False, "reason": reason, "at": round(time.time(), 3)})


def _end(proc) -> None:
    """An ssh child ended by its pid (its own session: nothing else is in its group), and reaped."""
    if proc.poll() is None:
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(5)
    except Exception:
        pass


def for_config(cfg, emit: Callable[[dict[str, Any]], None] = lambda line: None) -> Follower | None:
    """A follower of every host of the config ``cfg`` (not started yet), or None when there is none
    (or this muxhost serves another's request: it follows nothing further)."""
    from muxhost.remote import hosts, protocol

    if protocol.serving() or not hosts.any_configured(cfg):
        return None
    table = hosts.load(cfg=cfg)
    return Follower(table, emit) if table.hosts else None
