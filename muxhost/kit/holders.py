"""Who holds a conversation: the processes whose argv names its id, whose environment carries it,
that have one of its files open, or that hold a lock on one. What an ``in_use`` is made of.

Start from :func:`holders`, which combines them and returns the lines ``in_use`` returns
(``"pid 812 claude --resume … (why)"``)::

    def in_use(self, ctx, conversation_id):
        family = self.family(ctx, conversation_id)
        db = self.db_path(ctx)
        return holders(ctx, family, env_vars=("MYAGENT_SESSION",), names=self.process_names,
                       files=[db, f"{db}-wal"], locks=[db, f"{db}-shm"], exclude=r"\\bserve --service\\b")

Everything starts from the host's process table (``ctx.process_table()``: one scan for every
question) and reads command lines, environments and open files lazily, only as far as needed.
Never a holder: the calling process; muxhost's own processes (``muxhost purge --conversation ID``
names the id it purges) and tmux servers (whose argv is still the ``new-session … -- agent ID``
that started them), see :func:`muxhost.procs.is_muxhost`.

It fails closed: a process whose open files cannot be read counts as a holder when it is ours or
bears one of the agent's ``names``; a lock whose owner cannot be seen counts; where locks cannot be
listed (no ``/proc/locks``: macOS) and cannot be probed, unreadable processes make the answer
"cannot tell", which counts too. Linux and macOS: ``/proc`` is only ever a shortcut, psutil the rule.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Union

import psutil

from muxhost.procs import CT_TOLERANCE, Proc, ProcessTable, argv_holders, is_muxhost, with_argv

if TYPE_CHECKING:
    from muxhost.agent import AgentContext

__all__ = [
    "holders", "argv_holders", "with_argv", "with_env", "with_open", "OpenScan", "open_paths",
    "lock_owners", "locked", "server_clients",
]

#: what :func:`holders` leaves out of file and lock holders: a predicate on the process, or a
#: regular expression searched in its command line (``shlex.join(argv)``)
Exclude = Union[Callable[[Proc], bool], str, None]

_LOCK_KINDS = ("FLOCK", "POSIX", "OFDLCK")


def _same(p: Proc) -> psutil.Process | None:
    """A psutil handle on ``p`` while it is still that process (same create time), else None."""
    try:
        ps = psutil.Process(p.pid)
        return ps if abs(ps.create_time() - p.create_time) <= CT_TOLERANCE else None
    except psutil.Error:
        return None


def _fresh(pid: int) -> Proc | None:
    """``pid`` as it is now (a process the snapshot did not see, or one that reused a pid)."""
    try:
        ps = psutil.Process(pid)
        with ps.oneshot():
            return Proc(pid, ps.ppid(), ps.create_time(), ps.name())
    except psutil.Error:
        return None


def _uid(pid: int) -> int | None:
    try:
        return psutil.Process(pid).uids().real
    except (psutil.Error, OSError):
        return None


# --------------------------------------------------------------------------------------------------
# argv and environment


#: the environments read of each process table's processes (None: gone, another process, not ours)
_ENVIRONS: "weakref.WeakKeyDictionary[ProcessTable, dict[int, dict[str, str] | None]]" = weakref.WeakKeyDictionary()


def _environ(p: Proc) -> dict[str, str] | None:
    try:
        ps = psutil.Process(p.pid)
        if abs(ps.create_time() - p.create_time) > CT_TOLERANCE:
            return None
        return ps.environ()
    except (psutil.Error, OSError):
        return None


def with_env(table: ProcessTable, values: str | Collection[str],
             names: Iterable[str] | None = None) -> list[tuple[Proc, str]]:
    """``[(process, "NAME=value"), …]``: processes with an environment variable equal to one of
    ``values``, among ``names`` (``CODEX_THREAD_ID``, …) or, with ``names=None``, any variable.
    Agents hand such a variable to the tools they start, which may outlive the agent and still
    write into the conversation. Environments we may not read (another user's) are skipped."""
    wanted = {values} if isinstance(values, str) else set(values)
    keys = None if names is None else list(dict.fromkeys(names))
    me = os.getpid()
    out = []
    read = _ENVIRONS.setdefault(table, {})  # (one read per process and table: `conversations` asks for each)
    for p in table.procs.values():
        if p.pid == me or p.pid <= 0:
            continue
        if p.pid not in read:
            read[p.pid] = _environ(p)
        env = read[p.pid]
        if env is None:
            continue
        pairs = env.items() if keys is None else ((k, env.get(k)) for k in keys)
        hit = next((f"{k}={v}" for k, v in pairs if v in wanted), None)
        if hit and not is_muxhost(p):
            out.append((p, hit))
    return out


# --------------------------------------------------------------------------------------------------
# open files


def _proc_fd() -> bool:
    return sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")


def open_paths(pid: int) -> list[str]:
    """The paths of the files ``pid`` has open, as the kernel names them (symlinks resolved).
    Raises :class:`psutil.AccessDenied` when we may not look, :class:`psutil.NoSuchProcess` when it
    is gone. On Linux the ``/proc/<pid>/fd`` links are read directly (a readlink per descriptor,
    where psutil also reads each one's fdinfo); elsewhere psutil's ``open_files``."""
    if _proc_fd():
        folder = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(folder)
        except PermissionError:
            raise psutil.AccessDenied(pid) from None
        except (FileNotFoundError, ProcessLookupError):
            raise psutil.NoSuchProcess(pid) from None
        out = []
        for fd in fds:
            try:
                target = os.readlink(f"{folder}/{fd}")
            except OSError:
                continue  # closed meanwhile
            if target.startswith("/"):  # not a socket, pipe or anon inode
                out.append(target)
        return out
    return [f.path for f in psutil.Process(pid).open_files()]


#: the open files read of each process table's processes: paths, psutil.AccessDenied, or None (gone)
_OPENED: "weakref.WeakKeyDictionary[ProcessTable, dict[int, Any]]" = weakref.WeakKeyDictionary()


def _opened(pid: int) -> Any:
    try:
        return open_paths(pid)
    except psutil.AccessDenied:
        return psutil.AccessDenied
    except (psutil.Error, OSError):
        return None


@dataclass
class OpenScan:
    """What :func:`with_open` saw: ``found`` (process, path as given) pairs; ``unreadable``, the
    processes whose open files could not be read and that may hold the paths (ours, or bearing one
    of the agent's names); ``blind``, how many processes could not be read at all."""

    found: list[tuple[Proc, str]] = field(default_factory=list)
    unreadable: list[Proc] = field(default_factory=list)
    blind: int = 0


def with_open(table: ProcessTable, paths: Iterable[str | os.PathLike], names: Iterable[str] = ()) -> OpenScan:
    """The processes that have one of ``paths`` open (compared after resolving symlinks; this
    process left out). A process whose files we may not read is in ``unreadable`` when it is ours
    or its name is one of ``names`` (fail closed), and is counted in ``blind`` either way."""
    want: dict[str, str] = {}
    for path in paths:
        for form in (os.path.abspath(path), os.path.realpath(path)):
            want.setdefault(form, str(path))
    scan = OpenScan()
    if not want:
        return scan
    canonical = _proc_fd()  # Linux names every open file by its resolved path already
    names = tuple(names)
    uid, me = os.getuid(), os.getpid()
    read = _OPENED.setdefault(table, {})  # (one read per process and table: `conversations` asks for each)
    for p in table.procs.values():
        if p.pid == me or p.pid <= 0:
            continue
        if p.pid not in read:
            read[p.pid] = _opened(p.pid)
        opened = read[p.pid]
        if opened is psutil.AccessDenied:
            scan.blind += 1
            if _uid(p.pid) == uid or p.matches_name(names):
                scan.unreadable.append(p)
            continue
        if opened is None:
            continue
        hits = []
        for path in opened:
            key = path if canonical or path in want else os.path.realpath(path)
            if key in want and want[key] not in hits:
                hits.append(want[key])
        if hits:
            proc = p if _same(p) is not None else (_fresh(p.pid) or p)  # a pid reused since the snapshot
            scan.found += [(proc, h) for h in hits]
    return scan


# --------------------------------------------------------------------------------------------------
# locks


def _proc_locks() -> list[str] | None:
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return None


def lock_owners(paths: Iterable[str | os.PathLike]) -> dict[str, set[int]] | None:
    """``{path: pids}`` for each of ``paths`` someone holds (or waits for) a ``flock``, POSIX or OFD
    lock on, from ``/proc/locks`` (Linux): it names them all, even processes whose open files we
    may not read. A pid of 0 or less is an owner the kernel does not name. None when there is no
    ``/proc/locks`` (macOS): then ask :func:`with_open` and :func:`locked`.

    Every SQLite connection to a WAL database holds a POSIX lock on the database and its ``-shm``
    for as long as it is open, so for a WAL database this lists every process that has it open."""
    keys: dict[tuple[int, int, int], list[str]] = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        keys.setdefault((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino), []).append(str(path))
    lines = _proc_locks()
    if lines is None:
        return None
    out: dict[str, set[int]] = {}
    for line in lines:
        words = line.split()
        if len(words) > 1 and words[1] == "->":  # a waiter: it is about to hold it
            del words[1]
        if len(words) < 6 or words[1] not in _LOCK_KINDS:
            continue
        try:
            pid = int(words[4])
            major, minor, inode = words[5].split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        for path in keys.get(key, ()):
            out.setdefault(path, set()).add(pid)
    return out


def locked(path: str | os.PathLike) -> bool | None:
    """True when someone holds a lock on ``path``, False when no one does (or it does not exist),
    None when it cannot be told. ``/proc/locks`` on Linux; elsewhere a shared non-blocking
    ``flock`` is tried and let go at once (it sees exclusive ``flock`` holders only)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    owners = lock_owners([path])
    if owners is not None:
        return bool(owners)
    try:
        import fcntl

        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)


def server_clients(pid: int) -> str | None:
    """For a server process (an agent's ``serve``): None when no client is connected to a port it
    listens on, else why it may hold a conversation (its clients, or that its sockets cannot be
    read: fail closed). Use it in an ``exclude`` predicate: a background server that has the
    database open holds a conversation only while a client talks to it."""
    try:
        ps = psutil.Process(pid)
        conns = (getattr(ps, "net_connections", None) or ps.connections)(kind="inet")
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except (psutil.AccessDenied, OSError) as e:
        return f"cannot tell whether clients are connected to it ({type(e).__name__})"
    ports = {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN and c.laddr}
    clients = [c for c in conns if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port in ports]
    if not clients:
        return None
    peers = ", ".join(f"{c.raddr.ip}:{c.raddr.port}" for c in clients[:5] if c.raddr)
    return f"a server with {len(clients)} connected client{'s' if len(clients) != 1 else ''} ({peers})"


# --------------------------------------------------------------------------------------------------
# all of it


def _excluder(exclude: Exclude) -> Callable[[Proc], bool]:
    if exclude is None:
        return lambda p: False
    if isinstance(exclude, str):
        rx = re.compile(exclude)
        return lambda p: bool(p.cmdline) and rx.search(shlex.join(p.cmdline)) is not None
    return exclude


def holders(ctx: "AgentContext", conversation_id: str | Iterable[str], *, argv: bool = True,
            env_vars: Iterable[str] | bool = (), files: Iterable[str | os.PathLike] = (),
            locks: Iterable[str | os.PathLike] = (), exclude: Exclude = None,
            names: Iterable[str] = ()) -> list[str]:
    """Who holds the conversation (or any of a family: pass a list of ids), one line each, first
    reason first: ``"pid 812 claude --resume …"``, ``"pid 815 bash (CLAUDE_CODE_SESSION_ID=… in its
    environment)"``, ``"pid 820 codex (holds a lock on ~/.codex/…)"``; ``[]`` = free.

    - ``argv``: processes whose argv names one of the ids;
    - ``env_vars``: processes with one of these variables equal to one of the ids (``True``: any
      variable);
    - ``files``: processes that have one of these paths open;
    - ``locks``: processes that hold a lock on one of them (``/proc/locks``; where there is none,
      who has them open, and a probe for an exclusive ``flock`` nobody visible has);
    - ``exclude``: processes that have the files open or locked without holding a conversation
      (opencode's ``serve --service`` keeps the database open): a predicate on the
      :class:`~muxhost.procs.Proc`, or a regular expression searched in its command line. It
      applies to ``files`` and ``locks`` only: a process whose argv or environment names the
      conversation holds it whatever it is;
    - ``names``: the agent's process names; a process we may not read that bears one counts as a
      holder of ``files`` / ``locks`` (as does one of ours), fail closed.
    """
    ids = [conversation_id] if isinstance(conversation_id, str) else list(conversation_id)
    table = ctx.process_table()
    found: dict[object, str] = {}
    me = os.getpid()
    skip = _excluder(exclude)

    def add(p: Proc, why: str = "") -> None:
        found.setdefault(p.pid, p.describe() + (f" ({why})" if why else ""))

    def ignored(p: Proc) -> bool:
        return p.pid == me or is_muxhost(p) or bool(skip(p))

    if argv:
        for cid in ids:
            for p in with_argv(table, cid):
                add(p)
    if env_vars:
        names_ = None if env_vars is True else [env_vars] if isinstance(env_vars, str) else list(env_vars)
        for p, pair in with_env(table, ids, names_):
            add(p, f"{pair} in its environment")
    files = [str(f) for f in files]
    locks = [str(f) for f in locks]
    owners = lock_owners(locks) if locks else {}
    for path, pids in (owners or {}).items():
        _lock_owners_found(ctx, table, path, pids, found, add, ignored)
    scan_paths = list(dict.fromkeys(files + (locks if owners is None else [])))
    if scan_paths:
        _open_found(ctx, table, scan_paths, locks if owners is None else [], names, found, add, ignored)
    return list(found.values())


def _lock_owners_found(ctx: "AgentContext", table: ProcessTable, path: str, pids: Iterable[int],
                       found: dict, add: Callable, ignored: Callable[[Proc], bool]) -> None:
    """:func:`holders`: the processes the kernel says hold a lock on ``path``."""
    for pid in sorted(pids):
        p = table.get(pid) if pid > 0 else None
        if p is None or _same(p) is None:
            p = _fresh(pid) if pid > 0 else None
        if p is None:
            who = f"pid {pid}" if pid > 0 else "a process"
            found.setdefault(("lock", path), f"{ctx.expand(path)} is locked by {who}, which muxhost cannot see")
        elif not ignored(p):
            add(p, f"holds a lock on {ctx.expand(path)}")


def _open_found(ctx: "AgentContext", table: ProcessTable, scan_paths: list[str], unowned_locks: list[str],
                names: Iterable[str], found: dict, add: Callable, ignored: Callable[[Proc], bool]) -> None:
    """:func:`holders`: who has ``scan_paths`` open; and, where the kernel names no lock owners
    (``unowned_locks``), a probe of each lock nobody visible has open."""
    scan = with_open(table, scan_paths, names)
    for p, path in scan.found:
        if not ignored(p):
            add(p, f"has {ctx.expand(path)} open")
    listed = ", ".join(ctx.expand(f) for f in scan_paths[:3]) + (", …" if len(scan_paths) > 3 else "")
    for p in scan.unreadable:
        if not ignored(p):
            add(p, f"its open files cannot be read: it may have {listed} open")
    opened = {path for _p, path in scan.found}
    for path in unowned_locks:
        if path in opened:
            continue
        state = locked(path)
        if state:
            found.setdefault(("lock", path), f"{ctx.expand(path)} is locked by a process muxhost cannot see")
        elif state is None and scan.blind:
            found.setdefault(("lock", path), f"cannot tell whether {ctx.expand(path)} is held: the open files "
                                             f"of {scan.blind} process{'es' if scan.blind != 1 else ''} cannot be read")
