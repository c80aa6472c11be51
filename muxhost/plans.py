"""Purge plans: the host's side of typed artifacts (:mod:`muxhost.artifacts`).

:func:`plan` asks the plugin for each member of a conversation's family; :func:`build` keeps what
is really there, checks every rule (roots, a File is no folder, plain SQL identifiers) and labels
each item; :func:`carry_out` removes the items in the one fixed order; planning again gives the
residual. An older plugin's strings go through the same steps as :class:`Legacy` items (its own
``purge`` removes them: :func:`legacy`), so a purge has one path. Nothing here names an agent.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sqlite3
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from muxhost import fsutil
from muxhost.artifacts import (TYPES, Artifact, Command, Dir, File, FlockFile, Item, JsonMember, Leftover, Lines,
                               MkdirLock, Rows)
from muxhost.errors import MuxhostError, Refused, UsageError

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SQL_TIMEOUT = 10.0
#: seconds a rewrite of a shared file waits for the file's flock and for the agent's own lock
LOCK_TIMEOUT = 10.0
MAX_FAMILY = 10_000


class PlanError(Refused):
    """A plan that breaks a rule the host enforces: refused before anything runs (exit 4)."""


# -- families --------------------------------------------------------------------------------------
def family(agent, ctx, conversation_id: str) -> list[str]:
    """The conversation and its descendants at every depth, parent first (cycle-safe): the
    plugin's ``children`` walked by the host. Ids that do not fullmatch ``id_pattern`` are dropped."""
    out, seen, frontier = [conversation_id], {conversation_id}, [conversation_id]
    while frontier and len(out) < MAX_FAMILY:
        nxt = []
        for cid in frontier:
            kids = agent.children(ctx, cid) or []
            if isinstance(kids, (str, bytes)):  # its characters are no ids: fail closed
                raise TypeError(f"children() returned {kids!r}, not a list of ids")
            for child in kids:
                if child not in seen and agent.valid_id(child):
                    seen.add(child)
                    nxt.append(child)
        out += nxt
        frontier = nxt
    return out


# -- building a plan -------------------------------------------------------------------------------
def is_typed(result: list) -> bool:
    """True for a list of typed artifacts, False for the strings of an older plugin; a mix is a bug."""
    typed = [isinstance(a, TYPES) for a in result]
    if all(typed):
        return bool(result)
    if any(typed) or not all(isinstance(a, str) for a in result):
        raise MuxhostError("the plugin's artifacts() mixes typed artifacts with other values")
    return False


def plan(agent, ctx, members: list[str], also: Iterable[str] = ()) -> list[Item]:
    """The plan for a family (``members``, and ``also``: the members an earlier plan had): typed
    artifacts :func:`build` checks and labels, or an older plugin's strings as :func:`legacy` items."""
    wanted = list(dict.fromkeys([*members, *also]))
    results = {m: list(agent.artifacts(ctx, m) or []) for m in wanted}
    typed = [is_typed(r) for r in results.values() if r]
    if typed and all(typed):
        return build(agent, ctx, wanted, results)
    if any(typed):
        raise MuxhostError(f"agent {agent.name!r}: artifacts() returns typed artifacts for some conversations "
                           "and strings for others")
    return legacy(agent, ctx, wanted, results)


@dataclass(frozen=True)
class Legacy(Artifact):
    """One string of an older plugin's ``artifacts`` (a path, ``table:id``): shown as it is, and
    removed by the plugin's own ``purge`` (``remove``), which :func:`carry_out` calls once."""

    text: str
    remove: Callable[[], list[str]] = field(compare=False, repr=False)
    conversation: str | None = None


def legacy(agent, ctx, members: list[str], results: dict[str, list[str]]) -> list[Item]:
    """Items for an older plugin's strings: a child's labelled with it; removing any of them is the
    plugin's ``purge`` of the root conversation (its children with it), once."""
    root = members[0]

    def remove() -> list[str]:
        try:
            return list(agent.purge(ctx, root))
        except NotImplementedError as e:
            raise UsageError(str(e) or f"agent {agent.name!r} cannot purge") from None

    items = []
    for m in members:
        suffix = "" if m == root else f" [child conversation {m}]"
        items += [Item(Legacy(a, remove, m), m, f"{a}{suffix}", ("legacy", a, m)) for a in results[m]]
    return items


def build(agent, ctx, members: list[str], results: dict[str, list[Artifact]]) -> list[Item]:
    """Items for the typed artifacts ``results[member]`` that are there now, each checked and labelled."""
    roots = [os.path.realpath(r) for r in agent.roots(ctx)]
    items: list[Item] = []
    seen: set[tuple] = set()
    root_id = members[0]
    for member in members:
        for art in results.get(member, []):
            conv = art.conversation or member
            places = check(art, roots, ctx)
            found = _present(art, conv, ctx, places)
            if isinstance(art, (Lines, JsonMember, Rows)) and found:
                _refuse_links(places["path"], ctx, isinstance(art, Rows))
            if isinstance(art, (Lines, JsonMember)):
                found += _backups(art, places["path"], conv, ctx)
            for item in found:
                if item.key in seen:
                    continue
                seen.add(item.key)
                item.extra.update(places)
                if conv != root_id:
                    item.label += f" [child conversation {conv}]"
                items.append(item)
    # a root that is a file (~/.claude.json) is a shared file too: a backup an interrupted rewrite left
    # beside it is muxhost's leftover whether or not the plugin names the file this time (the member may
    # be gone from it already; the backup still holds it)
    for root in roots:
        if os.path.isfile(root):
            places = check(Lines(root, contains=""), roots, ctx)  # (checked as the file it is)
            for item in _backups(None, places["path"], root_id, ctx):
                if item.key not in seen:
                    seen.add(item.key)
                    item.extra.update(places)
                    items.append(item)
    return _hard_links(items, ctx)


def locate(path, *, target: bool) -> str:
    """Where the kernel takes ``path`` to: every symlink resolved before the ``..`` after it (never
    collapsed as text first). ``target``: the whole path (what is opened, read or rewritten);
    else the entry itself in its folder's real path (what is removed: a symlink, not what it
    points at)."""
    p = os.fspath(path)
    p = p if os.path.isabs(p) else os.path.join(os.getcwd(), p)
    if target:
        return os.path.realpath(p)
    head, name = os.path.split(p.rstrip(os.sep) or os.sep)
    if name in ("", ".", ".."):
        return os.path.realpath(p)
    return os.path.join(os.path.realpath(head), name)


def _folder_id(path: str) -> tuple | None:
    """``(st_dev, st_ino)`` of the folder ``path`` is in, as checked (None when it is not there)."""
    try:
        st = os.stat(os.path.dirname(path))
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _shown(path, checked: str, target: bool) -> str:
    """The path a label shows: as the plan spelled it (normalised) when that is where the kernel
    goes, else the place the kernel really goes to (``link/../x`` is not ``x``)."""
    plain = os.path.normpath(os.path.abspath(os.fspath(path)))
    return plain if locate(plain, target=target) == checked else checked


def _links(st: os.stat_result) -> str:
    n = st.st_nlink - 1
    return f"{n} other hard link{'s' if n != 1 else ''}"


def _refuse_links(path: str, ctx, database: bool) -> None:
    """A shared file (or a database and its journal) rewritten in place with other hard links
    would change every copy: refused before anything runs."""
    for p in (path, f"{path}-wal", f"{path}-journal") if database else (path,):
        try:
            st = os.stat(p)
        except OSError:
            continue
        if st.st_nlink > 1:
            raise PlanError(f"refused: {_where(p, ctx)} has {_links(st)}: changing it in place would change "
                            "them too; nothing was removed")


def _backups(art: Artifact, path: str, conv: str, ctx) -> list[Item]:
    """muxhost's own leftovers beside a shared file: the backups of an interrupted rewrite (they
    hold the original, the purged text too). Carrying out the plan restores or removes them, then
    rewrites the file for ``art`` (what was restored may hold it again)."""
    folder, name = os.path.split(path)
    out = []
    for b in fsutil.backups(folder, name):
        full = os.path.join(folder, b)
        out.append(Item(File(full, conv), conv, f"{_where(full, ctx)} (muxhost's backup from an interrupted rewrite)",
                        ("backup", full), extra={"backup_of": path, "art": art}))
    return out


def _hard_links(items: list[Item], ctx) -> list[Item]:
    """A File (or a file in a Dir) with more links than the plan names keeps its bytes on disk when
    the plan's names go: it is a Leftover (kept, the purge incomplete), never called removed."""
    def files(item):
        p = item.extra["path"]
        if isinstance(item.artifact, File):
            yield p
        elif os.path.isdir(p) and not os.path.islink(p):
            for top, _dirs, names in os.walk(p):
                yield from (os.path.join(top, n) for n in names)

    found: dict[int, list[tuple[tuple, os.stat_result]]] = {}
    named: dict[tuple, set[str]] = {}
    for i, item in enumerate(items):
        if not isinstance(item.artifact, (File, Dir)) or "backup_of" in item.extra:
            continue
        for f in files(item):
            try:
                st = os.lstat(f)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                inode = (st.st_dev, st.st_ino)
                named.setdefault(inode, set()).add(f)
                found.setdefault(i, []).append((inode, st))
    out = []
    for i, item in enumerate(items):
        extra = sum(st.st_nlink - len(named[inode]) for inode, st in found.get(i, []) if st.st_nlink > len(named[inode]))
        if extra:
            path, conv = item.extra["path"], item.conversation
            what = f"{extra} other hard link{'s' if extra != 1 else ''}" + (" of files in it" if isinstance(item.artifact, Dir) else "")
            label = item.label.split(" [child conversation ")[0]
            item = Item(Leftover(path, what, conv), conv, item.label.replace(label, f"{label} ({what})", 1),
                        ("leftover", path, what, conv))
        out.append(item)
    return out


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _where(path, ctx) -> str:
    return ctx.expand(path)


def check(art: Artifact, roots: list[str], ctx) -> dict:
    """The rules every plan keeps, whatever the plugin: paths inside the roots (the place a file is
    removed from, after symlinks; the target of what is rewritten), each judged as the kernel
    resolves it (:func:`locate`), never a whole root removed, plain SQL identifiers, and artifacts
    whole enough to carry out (a key path, an argv). Returns the places checked (``path``, ``lock``:
    the resolved path; ``folder``, ``lock_folder``: the identity of its folder), which carrying out
    the plan then touches, never resolving the plugin's path again."""
    places: dict = {}

    def own(path, *, target: bool, key: str = "path") -> str:
        real = locate(path, target=target)
        p = _shown(path, real, target)
        places[key] = real
        places["folder" if key == "path" else "lock_folder"] = _folder_id(real)
        if not target and real in roots:  # a File or Dir is never a whole root
            raise PlanError(f"refused: the plan removes {_where(p, ctx)}, one of the agent's folders itself; "
                            "nothing was removed")
        if not _inside(real, roots):
            raise PlanError(f"refused: the plan names {_where(p, ctx)}, which is outside the agent's folders "
                            f"({', '.join(_where(r, ctx) for r in roots)}); nothing was removed")
        return real

    if isinstance(art, (File, Dir)):
        real = own(art.path, target=False)
        if isinstance(art, File) and os.path.isdir(real) and not os.path.islink(real):
            raise PlanError(f"refused: the plan names the folder {_where(art.path, ctx)} as a file; nothing was removed")
    elif isinstance(art, Rows):
        own(art.db, target=True)
        for name in (art.table, art.column):
            if not isinstance(name, str) or not IDENT.fullmatch(name):
                raise PlanError(f"refused: {name!r} is not a plain SQL name; nothing was removed")
    elif isinstance(art, (Lines, JsonMember)):
        real = own(art.path, target=True)
        if art.lock is not None:
            flock = isinstance(art.lock, FlockFile)  # flock opens it (following a link); mkdir makes the entry
            lock = locate(art.lock.path, target=flock)
            if lock == real + ".lock":  # <file>.lock is checked as its file is
                places["lock"], places["lock_folder"] = lock, _folder_id(lock)
            else:
                own(art.lock.path, target=flock, key="lock")
            if isinstance(art.lock, MkdirLock) and not os.fspath(art.lock.path).endswith(".lock"):
                raise PlanError(f"refused: a MkdirLock is the folder <file>.lock, not {art.lock.path}")
        if isinstance(art, Lines) and art.key is None and art.contains is None:
            raise PlanError("refused: a Lines artifact needs `key` or `contains`")
        if isinstance(art, JsonMember) and (not art.keys or not all(isinstance(k, str) for k in art.keys)):
            raise PlanError(f"refused: a JsonMember of {_where(art.path, ctx)} needs a key path of names, "
                            f"not {art.keys!r}; nothing was removed")
    elif isinstance(art, Command):
        if not art.argv or not all(isinstance(a, str) for a in art.argv) \
                or not all(isinstance(x, str) for kv in art.env for x in kv):
            raise PlanError(f"refused: a Command needs an argv of strings (and string env), not {art.argv!r}; "
                            "nothing was removed")
    return places


def _count_rows(art: Rows, db=None) -> int:
    """Rows of the artifact there now (read-only, creating no file: a dry run changes nothing)."""
    from muxhost.kit import sqlite as ksql

    try:
        return sum(ksql.counts(db or art.db, art.table, art.column, list(art.all_values()), timeout=SQL_TIMEOUT).values())
    except FileNotFoundError:
        return 0


def line_matcher(art: Lines):
    """``match(line: bytes) -> bool`` for a :class:`Lines` artifact (a line that is not JSON never
    matches a key)."""
    if art.contains is not None:
        needle = art.contains.encode()
        return lambda line: needle in line
    keys = (art.key,) if isinstance(art.key, str) else tuple(art.key)
    wanted = set(art.values) if art.values else {art.value}

    def match(line: bytes) -> bool:
        if not line.strip():
            return False
        try:
            obj: Any = json.loads(line)
        except ValueError:
            return False
        for k in keys:
            if not isinstance(obj, dict) or k not in obj:
                return False
            obj = obj[k]
        try:
            return obj in wanted
        except TypeError:  # an unhashable value is never one of ours
            return False

    return match


def split_lines(data: bytes) -> list[bytes]:
    """The lines of ``data``, each with its ``\\n``: only ``\\n`` ends a line (a ``\\r`` inside a
    log line is part of it, as it is when the file is read line by line)."""
    lines = [ln + b"\n" for ln in data.split(b"\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _count_lines(art: Lines, path=None) -> int:
    match = line_matcher(art)
    with open(path or art.path, "rb") as f:
        return sum(1 for line in f if match(line.rstrip(b"\r\n")))


_MISSING = object()


def _member(obj: Any, keys: tuple[str, ...]) -> Any:
    for k in keys:
        if not isinstance(obj, dict) or k not in obj:
            return _MISSING
        obj = obj[k]
    return obj


def _keypath(keys: tuple[str, ...]) -> str:
    return "".join(f".{k}" if IDENT.fullmatch(k) else f"[{json.dumps(k)}]" for k in keys).lstrip(".")


def _unreadable(path: str, why: str, conv: str, ctx) -> list[Item]:
    """What cannot be read, as a Leftover item (the plan shows it; the purge cannot finish)."""
    return [Item(Leftover(path, why, conv), conv, f"{_where(path, ctx)} (could not be read: {why})",
                 ("leftover", os.path.abspath(path), why, conv))]


def _present_rows(art: Rows, conv: str, ctx, real: str, shown: str) -> list[Item]:
    """:func:`_present` for rows: the item with its row count when there are rows ([] when none)."""
    from muxhost.kit.sqlite import DatabaseError

    try:
        n = _count_rows(art, real)
    except (sqlite3.Error, DatabaseError) as e:
        return _unreadable(real, str(e), conv, ctx)
    if not n:
        return []
    vals = art.all_values()
    what = f"{art.table}:{vals[0]}" if len(vals) == 1 else f"{art.table}:{art.column} in {len(vals)} ids"
    label = f"{what} ({n} row{'s' if n != 1 else ''} in {shown})"
    return [Item(art, conv, label, ("rows", real, art.table, art.column, vals, conv), n)]


def _present(art: Artifact, conv: str, ctx, places: dict | None = None) -> list[Item]:
    """The item when it is there now ([] when not); what cannot be read becomes a Leftover item.
    ``places``: what :func:`check` resolved (labels show where the kernel goes)."""
    places = places or {}
    target = isinstance(art, (Rows, Lines, JsonMember))
    given = getattr(art, "db" if isinstance(art, Rows) else "path", None)
    real = places.get("path") or (locate(given, target=target) if given is not None else None)
    shown = _where(_shown(given, real, target), ctx) if real else ""
    if isinstance(art, File):
        if not os.path.lexists(real):
            return []
        return [Item(art, conv, shown, ("file", real, conv))]
    if isinstance(art, Dir):
        if not os.path.lexists(real):
            return []
        return [Item(art, conv, shown + "/", ("dir", real, conv))]
    if isinstance(art, Rows):
        return _present_rows(art, conv, ctx, real, shown)
    if isinstance(art, Lines):
        if not os.path.exists(real):
            return []
        try:
            n = _count_lines(art, real)
        except OSError as e:
            return _unreadable(real, e.strerror or str(e), conv, ctx)
        if not n:
            return []
        key = ("lines", real, art.key, art.value, tuple(sorted(map(str, art.values))),
               art.contains, conv)
        return [Item(art, conv, f"{shown}: {n} line{'s' if n != 1 else ''}", key, n)]
    if isinstance(art, JsonMember):
        if not os.path.exists(real):
            return []
        try:
            obj = json.loads(Path(real).read_bytes())
        except (OSError, ValueError) as e:
            return _unreadable(real, getattr(e, "strerror", None) or str(e), conv, ctx)
        value = _member(obj, tuple(art.keys))
        if value is _MISSING or (art.equals is not None and value != art.equals):
            return []
        return [Item(art, conv, f"{shown}: {_keypath(tuple(art.keys))}",
                     ("json", real, tuple(art.keys), conv))]
    if isinstance(art, Command):
        return [Item(art, conv, f"run: {shlex.join(art.argv)}", ("command", art.argv, conv))]
    if isinstance(art, Leftover):
        what = f" ({art.what})" if art.what else ""
        return [Item(art, conv, f"{_where(art.path, ctx)}{what}", ("leftover", os.path.abspath(art.path), art.what, conv))]
    raise MuxhostError(f"unknown artifact {art!r}")


# -- carrying it out -------------------------------------------------------------------------------
def carry_out(items: list[Item], ctx, notes: list[str]) -> list[str]:
    """Remove the items in the fixed order: commands, rows (one transaction per database, then
    compaction), shared files in place under lock, then files and folders. A step that fails is a
    note; what it left shows in the residual. Returns the labels of the commands that succeeded
    (and, for an older plugin's :class:`Legacy` items, what its ``purge`` says it removed)."""
    ran = []
    old = [item.artifact for item in items if isinstance(item.artifact, Legacy)]
    if old:
        ran += old[0].remove()
    for item in items:
        if isinstance(item.artifact, Command) and _run(item.artifact, ctx, notes):
            ran.append(item.label.replace("run: ", "ran: ", 1))
    by_db: dict[str, list[Rows]] = {}
    folders: dict[str, tuple | None] = {}
    for item in items:
        if isinstance(item.artifact, Rows):
            by_db.setdefault(_place(item), []).append(item.artifact)
            folders[_place(item)] = item.extra.get("folder")
    for db, rows in by_db.items():
        _delete_rows(db, rows, ctx, notes, folders[db])
    shared: dict[str, list[Item]] = {}
    for item in items:
        if isinstance(item.artifact, (Lines, JsonMember)) or "backup_of" in item.extra:
            shared.setdefault(item.extra.get("backup_of") or _place(item), []).append(item)
    for path, group in shared.items():  # (an interrupted rewrite's backups are restored or removed there)
        arts = {id(a): (a, i.extra) for i in group for a in [i.extra.get("art", i.artifact)] if a is not None}.values()
        _rewrite(path, [a for a, _ in arts], ctx, notes, [group[0].extra, *(where for _, where in arts)])
    for kind in (File, Dir):
        for item in items:
            if isinstance(item.artifact, kind) and "backup_of" not in item.extra:
                try:
                    # the entry checked, in the folder checked: a file or a link, never a folder
                    # (even one made since) unless it is a Dir; no symlink followed on the way
                    path = _place(item)
                    fsutil.remove_in(os.path.dirname(path), os.path.basename(path), item.extra.get("folder"),
                                     tree=kind is Dir)
                except FileNotFoundError:
                    pass  # gone already (the agent's own command removed it)
                except OSError as e:
                    notes.append(f"could not remove {item.label}: {e.strerror or e}")
    return ran


def _run(cmd: Command, ctx, notes: list[str]) -> bool:
    """The agent's own delete command (:func:`muxhost.kit.command.run`: the agent's environment,
    never ``MUXHOST_RECORD``); a failure is a note, and the rest of the plan removes what it leaves."""
    from muxhost.kit import command

    import shutil

    label = shlex.join(cmd.argv)
    env = {k: v for k, v in cmd.env if k != "MUXHOST_RECORD"}  # a stop of the record must never take it
    path = env.get("PATH") or ctx.env.get("PATH") or os.defpath
    if os.sep not in cmd.argv[0] and not shutil.which(cmd.argv[0], path=path):
        notes.append(f"`{label}` did not run ({cmd.argv[0]} not found); the rest of the plan removes what it would have")
        return False
    result = command.run(ctx, cmd.argv, env=env, timeout=cmd.timeout,
                         cwd=os.fspath(cmd.cwd) if cmd.cwd else None)
    if not result.ok:
        notes.append(f"`{label}` {result.why}; the rest of the plan removes what it leaves")
    return result.ok


def _place(item: Item) -> str:
    """The path :func:`check` resolved for the item (an item built elsewhere: resolved now)."""
    art = item.artifact
    return item.extra.get("path") or locate(art.db if isinstance(art, Rows) else art.path,
                                            target=isinstance(art, (Rows, Lines, JsonMember)))


def _delete_rows(db: str, rows: list[Rows], ctx, notes: list[str], folder: tuple | None = None) -> None:
    """One write transaction for the database (:func:`muxhost.kit.sqlite.delete_rows`), then
    checkpoint + VACUUM so the deleted text is gone from the file's bytes too. ``db`` is the path
    checked, in the folder ``folder``: SQLite opens a path, so it is the same folder and no symlink
    just before (the rest of that window is SQLite's)."""
    from muxhost.kit import sqlite as ksql

    if not os.path.exists(db):
        return  # gone already (the agent's own command removed it): never make an empty one
    try:
        os.close(fsutil.open_dir(os.path.dirname(db), folder))
        if os.path.islink(db):
            raise OSError(f"{db} is a symlink now; left as it was")
    except OSError as e:
        notes.append(f"could not delete rows from {_where(db, ctx)}: {e.strerror or e}")
        return
    try:
        ksql.delete_rows(db, [(r.table, r.column, list(r.all_values())) for r in rows], timeout=SQL_TIMEOUT)
    except ksql.DatabaseError as e:
        notes.append(f"could not delete rows from {_where(db, ctx)}: {e}")
        return
    problem = ksql.compact(db, timeout=SQL_TIMEOUT)
    if problem:
        notes.append(f"{_where(db, ctx)}: {problem}")


@contextlib.contextmanager
def _held(lock, timeout: float, path: str | None = None, folder: tuple | None = None) -> Iterator[None]:
    """The agent's own lock of a shared file, when the artifact names one (``path``: where
    :func:`check` resolved it, in the folder ``folder``)."""
    from muxhost.kit import flock as kflock

    path = path or os.fspath(lock.path) if lock is not None else None
    if lock is None:
        yield
    elif isinstance(lock, FlockFile):
        try:  # the agent's lock file is not ours to make; the one checked, never through a symlink
            dfd = fsutil.open_dir(os.path.dirname(path), folder)
        except FileNotFoundError:
            yield
            return
        try:
            fd = os.open(os.path.basename(path), os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
        except FileNotFoundError:
            fd = None
        finally:
            os.close(dfd)
        if fd is None:
            yield
            return
        try:
            if not kflock.wait_lock(fd, timeout):
                raise kflock.LockTimeout(path)
            yield
        finally:
            os.close(fd)
    elif isinstance(lock, MkdirLock):
        with kflock.dirlock(path[: -len(".lock")], timeout, stale=lock.stale):
            yield
    else:
        raise MuxhostError(f"unknown lock {lock!r}")


#: the agent's own lock of a shared file held (``held(lock, timeout, path, folder)``): an unpurge holds it too
held = _held


def _rewrite(path: str, arts: list, ctx, notes: list[str], places: list[dict] | None = None) -> None:
    """Every Lines / JsonMember of one shared file in one in-place rewrite under its locks.
    ``places``: what :func:`check` resolved, for the file, then for each of ``arts``."""
    lines = [a for a in arts if isinstance(a, Lines)]
    members = [a for a in arts if isinstance(a, JsonMember)]
    matchers = [line_matcher(a) for a in lines]
    places = places or [{}] * (len(arts) + 1)
    locks = list({id(a.lock): (a.lock, where.get("lock"), where.get("lock_folder"))
                  for a, where in zip(arts, places[1:]) if a.lock is not None}.values())

    def transform(data: bytes) -> bytes:
        if matchers:
            kept = [ln for ln in split_lines(data) if not any(m(ln.rstrip(b"\r\n")) for m in matchers)]
            data = b"".join(kept)
        for m in members:
            data = drop_member(data, tuple(m.keys), m.equals)
        return data

    # a symlinked file stays a symlink; its target (as checked) is rewritten, in the folder checked
    folder = places[0].get("folder") or _folder_id(path)
    try:
        with contextlib.ExitStack() as stack:
            for lock, where, lock_folder in locks:
                stack.enter_context(_held(lock, LOCK_TIMEOUT, where, lock_folder))
            fsutil.rewrite(path, transform, lock_timeout=LOCK_TIMEOUT, checked=folder)
    except (OSError, ValueError) as e:
        notes.append(f"could not rewrite {_where(path, ctx)}: {e}")


def drop_member(data: bytes, keys: tuple[str, ...], equals: Any = None) -> bytes:
    """``data`` (a JSON document) without the member at ``keys`` (only while it equals ``equals``,
    when given). The member is cut out of the text so every other byte stays; the result is checked
    by parsing it, and only if that check fails is the document written again (key order kept,
    the indentation it had)."""
    text = data.decode("utf-8")
    obj = json.loads(text)
    value = _member(obj, keys)
    if value is _MISSING or (equals is not None and value != equals):
        return data
    expected = json.loads(text)
    parent = _member(expected, keys[:-1]) if len(keys) > 1 else expected
    del parent[keys[-1]]
    k, v = re.escape(json.dumps(keys[-1])), re.escape(json.dumps(value))
    for pattern in (r",\s*" + k + r"\s*:\s*" + v + r"(?=\s*[,}])", k + r"\s*:\s*" + v + r"\s*,\s*",
                    k + r"\s*:\s*" + v + r"\s*(?=})"):
        for m in re.finditer(pattern, text):
            new = text[:m.start()] + text[m.end():]
            try:
                if json.loads(new) == expected:
                    return new.encode("utf-8")
            except ValueError:
                continue
    return dump_like(text, expected)


def dump_like(text: str, obj: Any) -> bytes:
    """``obj`` as a JSON document written the way ``text`` was (its indentation, its final newline)."""
    indent_match = re.search(r"\n([ \t]+)\S", text)
    indent = None if not indent_match else ("\t" if indent_match.group(1).startswith("\t") else len(indent_match.group(1)))
    out = json.dumps(obj, indent=indent, ensure_ascii=False)
    return (out + ("\n" if text.endswith("\n") else "")).encode("utf-8")


def labels(items: Iterable[Item]) -> list[str]:
    return [i.label for i in items]
