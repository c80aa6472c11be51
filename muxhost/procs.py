"""Process snapshots, trees and the stop ladder's signals (psutil only: Linux and macOS).

One :meth:`ProcessTable.snapshot` reads the whole process table in a single ``psutil.process_iter``
pass; trees are then walked in memory, so asking about 50 panes costs one scan, not 50.
A pid is only ever signalled when its create time still matches the one we saw (no pid reuse).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import time
from typing import Iterable

import psutil

RECORD_ENV = "MUXHOST_RECORD"
# what reading a process that is exiting can raise: psutil's errors, and (seen on Linux) an
# IndexError or ValueError when /proc/<pid>/stat is read half written
_GONE = (psutil.Error, OSError, IndexError, ValueError)
CT_TOLERANCE = 0.01  # seconds; create times come from clock ticks


class Proc:
    """One process as the snapshot saw it. ``cmdline`` is read on first use when the snapshot did
    not read it (a process table read without command lines is half the price)."""

    __slots__ = ("pid", "ppid", "create_time", "name", "_cmdline", "cpu")

    def __init__(self, pid: int, ppid: int, create_time: float, name: str,
                 cmdline: tuple[str, ...] | None = None, cpu: float | None = None):
        self.pid, self.ppid, self.create_time, self.name = pid, ppid, create_time, name
        self._cmdline = None if cmdline is None else tuple(cmdline)
        self.cpu = cpu  # CPU seconds used so far (user + system, its children not counted), when read

    @property
    def cmdline(self) -> tuple[str, ...]:
        if self._cmdline is None:
            try:
                ps = psutil.Process(self.pid)
                same = abs(ps.create_time() - self.create_time) <= CT_TOLERANCE
                self._cmdline = tuple(ps.cmdline()) if same else ()
            except _GONE:
                self._cmdline = ()
        return self._cmdline

    def __repr__(self) -> str:
        return f"Proc(pid={self.pid}, ppid={self.ppid}, name={self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Proc) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def key(self) -> tuple[int, float]:
        return (self.pid, self.create_time)

    def describe(self) -> str:
        """``pid 812 claude --resume …`` (the command line, or the name when it cannot be read)."""
        cmd = shlex.join(self.cmdline) if self.cmdline else self.name
        if len(cmd) > 200:
            cmd = cmd[:199] + "…"
        return f"pid {self.pid} {cmd}"

    def matches_name(self, names: Iterable[str]) -> bool:
        """True when comm, basename(argv[0]) or (for an interpreter) basename(argv[1]) is in names."""
        names = set(names)
        if not names:
            return False
        if self.name in names:
            return True
        if self.cmdline:
            if os.path.basename(self.cmdline[0]) in names:
                return True
            if len(self.cmdline) > 1 and os.path.basename(self.cmdline[0]).startswith(("python", "node", "bun")):
                return os.path.basename(self.cmdline[1]) in names
        return False


def _proc_from_info(info: dict) -> Proc | None:
    if info.get("pid") is None or info.get("create_time") is None:
        return None
    cmdline = info.get("cmdline", None)
    times = info.get("cpu_times")
    return Proc(info["pid"], info.get("ppid") or 0, info["create_time"], info.get("name") or "",
                None if cmdline is None and "cmdline" not in info else tuple(cmdline or ()),
                None if times is None else times.user + times.system)


class ProcessTable:
    """An in-memory copy of the process table taken in one pass."""

    def __init__(self, procs: dict[int, Proc]):
        self.procs = procs
        self._children: dict[int, list[int]] = {}
        self._marks: tuple[float | None, dict[str, list[Proc]]] | None = None  # see marked_index
        for p in procs.values():
            self._children.setdefault(p.ppid, []).append(p.pid)

    @classmethod
    def snapshot(cls, cmdlines: bool = False, cpu: bool = False) -> "ProcessTable":
        """Read the process table in one pass; command lines only with ``cmdlines`` (otherwise each
        is read when first asked for); each process's CPU time (:attr:`Proc.cpu`) with ``cpu`` (on
        Linux from the same read). A caller that reads the table again and again uses a
        :class:`Sampler`."""
        procs: dict[int, Proc] = {}
        attrs = ["pid", "ppid", "create_time", "name"] + (["cmdline"] if cmdlines else []) + (["cpu_times"] if cpu else [])
        for p in psutil.process_iter():
            try:
                info = p.as_dict(attrs)
            except _GONE:  # a process exiting while it is read: not in the table
                continue
            proc = _proc_from_info(info)
            if proc is not None:
                procs[proc.pid] = proc
        return cls(procs)

    @classmethod
    def of(cls, pids: Iterable[int | None]) -> "ProcessTable":
        """Only the processes ``pids`` and their parents, each read on its own: what judging whose a
        pane's process is needs (:func:`muxhost.state.owns`), without a pass over the whole table.
        No tree is walked in it: :meth:`tree` and :meth:`marked_index` refuse."""
        procs: dict[int, Proc] = {}
        wanted = [pid for pid in pids if pid]
        for _ in range(2):  # the processes, then their parents
            for pid in wanted:
                if pid in procs:
                    continue
                try:
                    info = psutil.Process(pid).as_dict(["pid", "ppid", "create_time", "name"])
                except _GONE:
                    continue
                proc = _proc_from_info(info)
                if proc is not None:
                    procs[proc.pid] = proc
            wanted = [procs[pid].ppid for pid in wanted if pid in procs]
        table = cls(procs)
        table.partial = True
        return table

    partial = False  # (:meth:`of`: a few processes, not the whole table)

    def _whole(self) -> None:
        if self.partial:
            raise RuntimeError("a partial process table (ProcessTable.of) has no trees")

    def get(self, pid: int | None) -> Proc | None:
        return self.procs.get(pid) if pid is not None else None

    def tree(self, pid: int | None) -> list[Proc]:
        """The process and all its descendants (root first), or [] when it is not running."""
        self._whole()
        root = self.get(pid)
        if root is None:
            return []
        out, stack, seen = [], [root.pid], set()
        while stack:
            cur = stack.pop()
            if cur in seen or cur not in self.procs:
                continue
            seen.add(cur)
            if cur != root.pid and is_tmux_server(self.procs[cur]):
                continue  # a tmux server the tree started (re-parented to it) and its panes are not its
            out.append(self.procs[cur])
            stack.extend(self._children.get(cur, ()))
        return out

    def children(self, pid: int) -> list[Proc]:
        return [self.procs[c] for c in self._children.get(pid, ()) if c in self.procs]

    def tree_of(self, key: tuple[int, float]) -> list[Proc]:
        """:meth:`tree` of the process ``key`` = (pid, create time), or [] when that pid is now
        another process: the children of a reused pid are never taken for ours."""
        root = self.get(key[0])
        if root is None or abs(root.create_time - key[1]) > CT_TOLERANCE:
            return []
        return self.tree(key[0])

    def under_tmux(self, pid: int) -> bool:
        """True when a tmux server (:func:`is_tmux_server`) is this process or one of its ancestors."""
        seen = set()
        p = self.get(pid)
        while p is not None and p.pid not in seen and p.pid > 1:
            if is_tmux_server(p):
                return True
            seen.add(p.pid)
            p = self.get(p.ppid)
        return False

    def marked_index(self, since: float | None = None) -> dict[str, list[Proc]]:
        """``{record id: [Proc, …]}`` from the ``MUXHOST_RECORD`` of every process of our user that
        started at or after ``since`` (less a second) and is not under a tmux server; each process's
        environment is read once per table, whatever the number of records asked about."""
        cached = self._marks
        index: dict[str, list[Proc]]
        self._whole()
        if cached is not None and (cached[0] is None or (since is not None and since >= cached[0])):
            index = cached[1]
        else:
            index = {}
            uid, me = os.getuid(), os.getpid()
            for p in self.procs.values():
                if p.pid == me or (since is not None and p.create_time + 1.0 < since):
                    continue
                if self.under_tmux(p.pid):
                    continue
                try:
                    proc = psutil.Process(p.pid)
                    if proc.uids().real != uid:
                        continue
                    rid = proc.environ().get(RECORD_ENV)
                except (psutil.Error, OSError):
                    continue
                if rid:
                    index.setdefault(rid, []).append(p)
            self._marks = (since, index)
        if since is None:
            return index
        return {rid: [p for p in ps if p.create_time + 1.0 >= since] for rid, ps in index.items()}

    def with_token(self, token: str, exclude: Iterable[int] = ()) -> list[Proc]:
        """Processes whose argv contains ``token`` as a word or inside a word (``--session=ID``)."""
        skip = set(exclude) | {os.getpid()}
        out = []
        for p in self.procs.values():
            if p.pid in skip:
                continue
            if any(token in arg for arg in p.cmdline):
                out.append(p)
        return out


class Sampler:
    """Process tables read again and again (the activity watch, once a second): it keeps a psutil
    handle and the parent pid of every process between snapshots, so each pass reads each process's
    stat once (its CPU time and name) instead of three times. A pid whose name changed or whose CPU
    time went down is read afresh (an exec, or — in theory — a pid reused within one pass)."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[psutil.Process, int, float, str, float]] = {}  # pid -> (handle, ppid, ct, name, cpu)

    def snapshot(self) -> ProcessTable:
        """The whole process table with :attr:`Proc.cpu` (command lines are read when asked for)."""
        procs: dict[int, Proc] = {}
        known: dict[int, tuple[psutil.Process, int, float, str, float]] = {}
        for pid in psutil.pids():
            entry = self._known.get(pid)
            try:
                if entry is not None:
                    handle, ppid, ct = entry[0], entry[1], entry[2]
                    with handle.oneshot():
                        t, name = handle.cpu_times(), handle.name()
                    used = t.user + t.system
                    if name != entry[3] or used + 0.05 < entry[4]:
                        entry = None  # not the process we knew: read it afresh
                if entry is None:
                    handle = psutil.Process(pid)
                    with handle.oneshot():
                        ppid, ct, name, t = handle.ppid(), handle.create_time(), handle.name(), handle.cpu_times()
                    used = t.user + t.system
            except _GONE:
                continue
            known[pid] = (handle, ppid, ct, name, used)
            procs[pid] = Proc(pid, ppid, ct, name, None, used)
        self._known = known
        return ProcessTable(procs)


def with_argv(table: ProcessTable, token: str, exclude: Iterable[int] = ()) -> list[Proc]:
    """Processes whose argv contains ``token``, as a word or inside one (``--session=ID``); never
    this process, its parent (the shell of a ``sh -c "muxhost purge … ID"``) or muxhost's own."""
    skip = set(exclude) | {os.getpid(), os.getppid()}
    return [p for p in table.with_token(token, exclude=skip) if not is_muxhost(p)]


def argv_holders(token: str, table: ProcessTable | None = None, exclude: Iterable[int] = ()) -> list[str]:
    """``["pid 812 claude --resume <id>", …]`` for every process whose argv names ``token``
    (muxhost's own processes excepted); also :func:`muxhost.kit.holders.argv_holders`."""
    table = table or ProcessTable.snapshot(cmdlines=True)
    return [p.describe() for p in with_argv(table, token, exclude)]


@functools.lru_cache(maxsize=1)
def _tmux_program() -> str | None:
    """The real path of the tmux program on our PATH (the one the tmux backend runs), or None."""
    found = shutil.which("tmux")
    return os.path.realpath(found) if found else None


@functools.lru_cache(maxsize=4096)
def _runs_tmux(pid: int, create_time: float) -> bool:
    try:
        ps = psutil.Process(pid)
        if abs(ps.create_time() - create_time) > CT_TOLERANCE:
            return False
        program = _tmux_program()
        return program is not None and os.path.realpath(ps.exe()) == program
    except _GONE:
        return False


def is_tmux(p: Proc) -> bool:
    """True when ``p`` runs the tmux program itself (a client or a server). Judged by the
    executable the kernel runs, never by a name or an argv the process chose (``tmuxsleep``, a copy
    of another program named ``tmux``); anything that cannot be proven is not tmux."""
    looks = p.name.startswith("tmux") or (p.cmdline and os.path.basename(p.cmdline[0]) == "tmux")
    return bool(looks) and _runs_tmux(p.pid, p.create_time)


def is_tmux_server(p: Proc) -> bool:
    """True when ``p`` is a tmux server: it runs the tmux program (:func:`is_tmux`) and leads its
    own session (a server daemonizes; a client runs in its shell's session). The stop ladder and
    the record's environment never take such a server, nor the panes under it, for an agent's
    processes — and nothing else: a process that only names itself ``tmux…`` is the agent's."""
    if not p.name.startswith("tmux") or not is_tmux(p):
        return False
    try:
        return os.getsid(p.pid) == p.pid
    except OSError:
        return False


def is_muxhost(p: Proc) -> bool:
    # Our own CLI processes (`muxhost purge --conversation ID`) name the id but hold nothing; so does
    # the tmux server, whose argv is still that of the `tmux new-session … -- agent --id ID` that
    # started it.
    if is_tmux(p):
        return True
    args = [os.path.basename(a) for a in p.cmdline[:3]]
    return "muxhost" in args or (len(p.cmdline) > 2 and p.cmdline[1:3] == ("-m", "muxhost"))


def same_key(proc: Proc, key) -> bool:
    """True when ``key`` (a record's ``[pid, create time]``) is the process ``proc``."""
    return int(key[0]) == proc.pid and abs(float(key[1]) - proc.create_time) <= CT_TOLERANCE


def key_of(pid: int | None) -> list[list[float]]:
    """``[[pid, create time]]`` of a running process, as a record keeps it (``[]`` when gone)."""
    try:
        return [[pid, psutil.Process(pid).create_time()]] if pid else []
    except _GONE:
        return []


def record_of(proc: Proc) -> str | None:
    """The ``MUXHOST_RECORD`` in ``proc``'s environment (None: none, gone, or not readable)."""
    try:
        ps = psutil.Process(proc.pid)
        if abs(ps.create_time() - proc.create_time) > CT_TOLERANCE:
            return None
        return ps.environ().get(RECORD_ENV)
    except _GONE:
        return None


def same_process(pid: int, create_time: float) -> bool:
    """True when ``pid`` is running (not a zombie) and is the process that had ``create_time``."""
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - create_time) > CT_TOLERANCE:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.AccessDenied:
        return True  # it exists; we cannot tell more
    except _GONE:
        return False


_LINEAGE: tuple[int, set[tuple[int, float]]] | None = None


def lineage() -> set[tuple[int, float]]:
    """(pid, create time) of this process and of each of its ancestors (taken once per process).
    They are never signalled (:func:`signal_if_same`): a muxhost run inside an agent's pane is in
    that pane's tree, and a stop of that agent must not end the muxhost that runs it."""
    global _LINEAGE
    if _LINEAGE is None or _LINEAGE[0] != os.getpid():
        keys: set[tuple[int, float]] = set()
        try:
            me = psutil.Process()
            for p in [me, *me.parents()]:
                try:
                    keys.add((p.pid, p.create_time()))
                except _GONE:
                    continue
        except _GONE:
            pass
        _LINEAGE = (os.getpid(), keys)
    return _LINEAGE[1]


def _in(key: tuple[int, float], keys: Iterable[tuple[int, float]]) -> bool:
    return any(pid == key[0] and abs(ct - key[1]) <= CT_TOLERANCE for pid, ct in keys)


def spared(key: tuple[int, float]) -> bool:
    """True for this muxhost process and its ancestors (:func:`lineage`)."""
    return _in(key, lineage())


def signal_if_same(pid: int, create_time: float, sig: int) -> bool:
    """Send ``sig`` to ``pid`` only if it is still the process that had ``create_time``, and is
    neither this process nor one of its ancestors (:func:`lineage`). Returns True when the signal
    was sent."""
    if spared((pid, create_time)):
        return False
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - create_time) > CT_TOLERANCE:
            return False
        p.send_signal(sig)
        return True
    except _GONE:  # ProcessLookupError is an OSError
        return False


def alive(keys: Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
    return [k for k in keys if same_process(*k)]


def wait_gone(keys: Iterable[tuple[int, float]], timeout: float, interval: float = 0.05) -> list[tuple[int, float]]:
    """Wait up to ``timeout`` seconds for every process to end; return the survivors."""
    keys = list(keys)
    deadline = time.monotonic() + timeout
    while True:
        keys = alive(keys)
        if not keys or time.monotonic() >= deadline:
            return keys
        time.sleep(interval)


def marked(record_id: str, table: ProcessTable, since: float | None = None) -> list[Proc]:
    """Processes whose environment carries ``MUXHOST_RECORD=<record_id>`` (found even after they
    called setsid or were re-parented). Only processes of our user started at or after ``since``
    are read, to keep the scan short; ones we may not read are skipped.

    A tmux server and everything under one are never taken by their environment: a server that a
    tool of the agent started inherits the variable and hands it to every pane of that server. (The
    agent's own pane is found as the pane's process tree, not here.)"""
    return list(table.marked_index(since).get(record_id, ()))


SIGHUP = signal.SIGHUP
SIGTERM = signal.SIGTERM
SIGKILL = signal.SIGKILL
SIGSTOP = signal.SIGSTOP
