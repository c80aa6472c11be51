"""Evidence on disk: hashes of trees ("byte for byte"), unique texts and the files holding them,
whether a purge plan names a file, rows of a SQLite database read from a copy."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

SQLITE_MAGIC = b"SQLite format 3\x00"
DB_SIDECARS = ("-wal", "-journal", "-shm")


def tree_hash(*roots: str | os.PathLike, skip: tuple[str, ...] = (),
              sizes: dict[str, int] | None = None) -> dict[str, str]:
    """``{path: sha256}`` for every file (and ``path/: dir`` for folders) under the roots — compare
    one taken before a purge with one after to prove "byte for byte". Paths containing any of
    ``skip`` are left out. ``sizes``, when given, is filled with each hashed file's size (of the
    very bytes hashed), for :func:`appended_only`."""
    import hashlib

    out: dict[str, str] = {}
    for root in roots:
        root = Path(root)
        if root.is_file():
            data = root.read_bytes()
            out[str(root)] = hashlib.sha256(data).hexdigest()
            if sizes is not None:
                sizes[str(root)] = len(data)
            continue
        if not root.is_dir():
            continue
        for dirpath, _dirnames, filenames in os.walk(root):
            if any(s in dirpath for s in skip):
                continue
            out[dirpath + "/"] = "dir"
            for f in filenames:
                p = os.path.join(dirpath, f)
                if any(s in p for s in skip):
                    continue
                try:
                    data = Path(p).read_bytes()
                except OSError:
                    out[p] = "unreadable"
                    continue
                out[p] = hashlib.sha256(data).hexdigest()
                if sizes is not None:
                    sizes[p] = len(data)
    return out


def appended_only(before: dict[str, str], sizes: dict[str, int], after: dict[str, str]) -> dict[str, str]:
    """``after`` without the files that only grew since ``before`` (``sizes`` from the same
    :func:`tree_hash`): each such file's first ``sizes[p]`` bytes, read now, hash to what they did
    before. A running agent appends to its own log while a refused purge runs; that is the agent's
    doing, and it loses no byte. A file rewritten, truncated or with a line taken out stays in."""
    import hashlib

    out = dict(after)
    for p, was in before.items():
        now = after.get(p)
        if now is None or now == was or was in ("dir", "unreadable") or p not in sizes:
            continue
        try:
            data = Path(p).read_bytes()
        except OSError:
            continue
        if len(data) > sizes[p] and hashlib.sha256(data[:sizes[p]]).hexdigest() == was:
            out[p] = was
    return out


def unique_text(role: str) -> str:
    """A text no file holds yet (``muxhost contract <role> <32 hex digits>``): grep finds exactly it."""
    import uuid

    return f"muxhost contract {role} {uuid.uuid4().hex}"


def files_under(roots: list[Path], skip: tuple[str, ...]) -> list[str]:
    """Every regular file under ``roots`` (symlinks not followed), without paths containing ``skip``."""
    out: dict[str, None] = {}
    for root in roots:
        for dirpath, _dirnames, filenames in os.walk(root):
            for name in filenames:
                p = os.path.join(dirpath, name)
                if not any(s in p for s in skip) and not os.path.islink(p) and os.path.isfile(p):
                    out[p] = None
    return list(out)


def files_holding(roots: list[Path], needles: list[str], skip: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """``{path: [needle, …]}`` for every file under ``roots`` whose raw bytes contain a needle:
    bytes, not rows, so SQLite files, their ``-wal`` and their free pages count."""
    wanted = [(n, n.encode()) for n in needles]
    out: dict[str, list[str]] = {}
    for path in files_under(roots, skip):
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        hits = [n for n, raw in wanted if raw in data]
        if hits:
            out[path] = hits
    return out


def _mentions(line: str, form: str, ends: tuple[str, ...]) -> bool:
    """``form`` appears in ``line`` as a whole path: after a start or a space/bracket, before one of ``ends``."""
    i = line.find(form)
    while i >= 0:
        before, after = line[i - 1:i] if i else "", line[i + len(form):i + len(form) + 1]
        if before in ("", " ", "(", "[", "'", '"') and after in ends:
            return True
        i = line.find(form, i + 1)
    return False


def plan_names(plan: list[str], path: str, home: str | os.PathLike, roots: list[Path] = ()) -> bool:
    """True when a line of a purge plan names the file ``path``: itself (absolute or ``~/…``), a
    folder holding it inside ``roots`` (a ``Dir`` line, ``~/…/``), or for a database's ``-wal``,
    ``-journal`` or ``-shm`` its database (rows are named by their database's path)."""
    targets = [path] + [path[:-len(s)] for s in DB_SIDECARS if path.endswith(s)]
    homes = {os.path.abspath(home), os.path.realpath(home)}
    inside = [os.path.realpath(r) for r in roots] + [os.path.abspath(r) for r in roots]

    def forms(p: str) -> set[str]:
        out = {p}
        for h in homes:
            if p.startswith(h.rstrip(os.sep) + os.sep):
                out.add("~" + p[len(h.rstrip(os.sep)):])
        return out

    for target in targets:
        for p in {os.path.abspath(target), os.path.realpath(target)}:
            if any(_mentions(line, f, ("", " ", ":", ")", ",", "]", ";")) for line in plan for f in forms(p)):
                return True
            d = os.path.dirname(p)
            while any(d.startswith(r.rstrip(os.sep) + os.sep) for r in inside):
                for f in forms(d):
                    if any(_mentions(line, f + "/", ("", " ")) or _mentions(line, f, ("", " "))
                           for line in plan):
                        return True
                d = os.path.dirname(d)
    return False


def file_head(path: str) -> bytes:
    """The first bytes of ``path``, as many as :data:`SQLITE_MAGIC` has (a database starts with it)."""
    with open(path, "rb") as f:
        return f.read(len(SQLITE_MAGIC))


def sqlite_text(db: str, text: str) -> tuple[bool, str]:
    """(whether a row of ``db`` holds ``text``, what went wrong), read from a copy of the database
    and its ``-wal`` (the original is not opened)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "copy.db")
        shutil.copyfile(db, copy)
        for suffix in ("-wal", "-journal"):
            if os.path.exists(db + suffix):
                shutil.copyfile(db + suffix, copy + suffix)
        try:
            con = sqlite3.connect(copy)
            try:
                tables = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
                for table in tables:
                    for row in con.execute(f'select * from "{table}"'):
                        for v in row:
                            if (isinstance(v, str) and text in v) or (isinstance(v, bytes) and text.encode() in v):
                                return True, ""
            finally:
                con.close()
        except sqlite3.Error as e:
            return False, f"its rows cannot be read ({e})"
    return False, "no row holds its text"
