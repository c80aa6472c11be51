"""SQLite for agent plugins: read-only reads that never get in an agent's way, and the write side a
purge needs (one transaction per database, then compaction).

Reads (:func:`connect_ro`, :func:`rows`, :func:`count`, :func:`counts`, :func:`keys`,
:func:`columns`) open the database ``mode=ro`` and wait at most :data:`READ_TIMEOUT` for a lock: they
never block the agent and can never change its database. :func:`delete_rows` removes rows in ONE
transaction per database, waiting up to :data:`WRITE_TIMEOUT` for the agent's own writers;
:func:`compact` then checkpoints and VACUUMs, so the deleted text leaves the file's bytes too.

Table and column names must be plain identifiers (``[A-Za-z_][A-Za-z0-9_]*``, else ValueError);
values always travel as SQL parameters. A database that does not exist has no rows (reads give
``[]`` / ``0``, deletes do nothing and create no file); one that cannot be read raises
:class:`DatabaseError`, never looks empty: what cannot be read cannot be called gone.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Sequence

from muxhost.errors import MuxhostError

__all__ = [
    "READ_TIMEOUT", "WRITE_TIMEOUT", "DatabaseError", "ident", "connect_ro", "columns", "rows", "count",
    "counts", "keys", "Reader", "delete_rows", "compact",
]

#: seconds a read waits for a lock (in WAL mode readers practically never wait)
READ_TIMEOUT = 1.0
#: seconds a purge's write transaction (and its compaction) waits for the agent's own writers
WRITE_TIMEOUT = 10.0

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CHUNK = 500  # values per ``in (…)``: far below SQLite's limit on parameters

#: what to delete: (table, column, value or collection of values)
Target = tuple[str, str, Any]


class DatabaseError(MuxhostError):
    """A database could not be read or written; ``path`` names it. The message is one line."""

    def __init__(self, path: str | os.PathLike, message: str):
        super().__init__(message)
        self.path = Path(path)


def ident(name: str) -> str:
    """``name`` double-quoted for SQL, after checking it is a plain identifier (else ValueError)."""
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise ValueError(f"not a plain SQL identifier: {name!r}")
    return f'"{name}"'


def _values(value: Any) -> list[Any]:
    """A collection (list, tuple, set, frozenset) is "any of these"; anything else is one value."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return sorted(value, key=repr) if isinstance(value, (set, frozenset)) else list(value)
    return [value]


def _chunks(values: list[Any]) -> Iterable[list[Any]]:
    for i in range(0, len(values), _CHUNK):
        yield values[i:i + _CHUNK]


# --------------------------------------------------------------------------------------------------
# reading


class _Snapshot(sqlite3.Connection):
    """A connection to a private copy of a database; the copy goes when the connection closes."""

    tmpdir: str | None = None

    def close(self) -> None:
        super().close()
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def __del__(self) -> None:
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


def _probe(con: sqlite3.Connection) -> sqlite3.Connection:
    try:
        con.execute("select count(*) from sqlite_master").fetchone()
    except BaseException:
        con.close()
        raise
    return con


def _busy(error: sqlite3.Error) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


def _is_wal(db: Path) -> bool:
    try:
        with open(db, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return head[:16] == b"SQLite format 3\x00" and head[18:20] == b"\x02\x02"


def _live_users(db: Path, thorough: bool = True) -> str | None:
    """Why a process may be using ``db`` now (one line), or None when no process is (none of its
    files is locked or open by another process; our own process excepted). Without ``thorough``,
    only what ``/proc/locks`` says (None where there is none)."""
    from muxhost.kit import holders
    from muxhost.procs import ProcessTable

    files = [str(db), f"{db}-wal", f"{db}-shm"]
    owners = holders.lock_owners(files)
    me = os.getpid()
    if owners is not None:
        pids = sorted({pid for found in owners.values() for pid in found} - {me})
        return f"pid {pids[0]} holds a lock on it" if pids else None
    if not thorough:
        return None
    # no /proc/locks (macOS): who has one of its files open (one of ours we may not read counts)
    scan = holders.with_open(ProcessTable.snapshot(), [f for f in files if os.path.exists(f)])
    found = [p for p, _path in scan.found if p.pid != me]
    if found:
        return f"pid {found[0].pid} has it open"
    if scan.unreadable:
        return f"pid {scan.unreadable[0].pid} may have it open (its open files cannot be read)"
    return None


def connect_ro(path: str | os.PathLike, timeout: float = READ_TIMEOUT) -> sqlite3.Connection:
    """A read-only connection to ``path`` (``mode=ro``) whose lock waits last at most ``timeout``
    seconds; rows come as :class:`sqlite3.Row` (by index or by name). Close it when done.

    It never creates a file beside the database (a dry run changes nothing). A WAL database read
    ``mode=ro`` needs its ``-shm`` (the WAL index), and SQLite would create it and a ``-wal`` for
    any reader; so a WAL database at rest (no ``-shm``: no connection has it open; on Linux
    ``/proc/locks`` confirms that no process holds it) is read without locks. So is one that
    ``mode=ro`` cannot read (a ``-shm`` we may not open, in a folder we may not write), but only
    when no process has it open or locked (``/proc/locks`` on Linux; elsewhere open files, where a
    process of ours whose files cannot be read counts as a user). Read without locks means: with no
    WAL content, the main file ``immutable=1``; with WAL content (a writer that died before its
    checkpoint), a private copy of the database and its WAL, since the main file alone lacks the
    WAL's commits. Such a read sees the database as it was when it was opened and takes no locks:
    a writer that starts afterwards may commit rows it never sees, and one our checks cannot see
    (another user's process, or an exclusive-locking-mode writer, on a system without
    ``/proc/locks``) may be missed. Use it to report, and re-check under :func:`delete_rows`' write
    lock before acting.

    A busy database (a writer holds a lock past ``timeout``) is never read around: that raises.
    Raises :class:`FileNotFoundError` when ``path`` is not a file, :class:`DatabaseError` when it
    cannot be read."""
    db = Path(path)
    if not db.is_file():
        raise FileNotFoundError(f"no database at {db}")
    uri = "file:" + urllib.parse.quote(str(db.absolute())) + "?mode=ro"
    if _is_wal(db) and not os.path.lexists(f"{db}-shm") and _live_users(db, thorough=False) is None:
        return _unlocked(db, uri, timeout, "")
    try:
        con = _probe(sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False))
        con.row_factory = sqlite3.Row
        return con
    except sqlite3.Error as e:
        error = e
    if _busy(error):
        raise DatabaseError(db, f"cannot read {db}: {error} (a writer holds it)")
    live = _live_users(db)
    if live:
        raise DatabaseError(db, f"cannot read {db} read-only ({error}), and {live}: "
                                "it was not read around its locks")
    return _unlocked(db, uri, timeout, f"{error}; ")


def _unlocked(db: Path, uri: str, timeout: float, why: str) -> sqlite3.Connection:
    """``db`` read without locks (see :func:`connect_ro`): ``immutable``, or a private copy."""
    wal = Path(f"{db}-wal")
    try:
        if not (wal.is_file() and wal.stat().st_size > 0):
            con = _probe(sqlite3.connect(uri + "&immutable=1", uri=True, timeout=timeout, check_same_thread=False))
        else:
            tmpdir = tempfile.mkdtemp(prefix="muxhost-sqlite-")
            try:
                copy = Path(tmpdir) / "copy.db"
                shutil.copyfile(db, copy)
                shutil.copyfile(wal, f"{copy}-wal")
                con = sqlite3.connect(str(copy), timeout=timeout, check_same_thread=False, factory=_Snapshot)
                con.tmpdir = tmpdir
                _probe(con)
                con.execute("pragma query_only = on")
            except BaseException:
                shutil.rmtree(tmpdir, ignore_errors=True)
                raise
        con.row_factory = sqlite3.Row
        return con
    except (OSError, sqlite3.Error) as e:
        raise DatabaseError(db, f"cannot read {db} read-only: {why}{e}") from e


def _read(path: str | os.PathLike, timeout: float, work: Callable[[sqlite3.Connection], Any], empty: Any) -> Any:
    try:
        con = connect_ro(path, timeout)
    except FileNotFoundError:
        return empty
    try:
        return work(con)
    except sqlite3.Error as e:
        raise DatabaseError(path, f"cannot read {path}: {e}") from e
    finally:
        con.close()


def _columns(con: sqlite3.Connection) -> dict[str, list[str]]:
    tables = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'"
                                        " and name not like 'sqlite\\_%' escape '\\' order by name")]
    return {t: [c[1] for c in con.execute(f"pragma table_info({ident(t)})")] for t in tables if _IDENT.fullmatch(t)}


def columns(path: str | os.PathLike, timeout: float = READ_TIMEOUT) -> dict[str, list[str]]:
    """``{table: [column, …]}`` of the database's own tables (SQLite's ``sqlite_*`` left out, and
    any table whose name is not a plain identifier). Build targets from the live schema: a table
    a later version of the agent adds is then found, one it drops is skipped."""
    return _read(path, timeout, _columns, {})


def rows(path: str | os.PathLike, sql: str, params: Sequence[Any] | dict[str, Any] = (),
         timeout: float = READ_TIMEOUT) -> list[sqlite3.Row]:
    """The rows of one read-only query (``?`` or ``:name`` parameters; never format values into
    ``sql``). The connection is ``mode=ro``: a statement that writes fails."""
    return _read(path, timeout, lambda con: con.execute(sql, params).fetchall(), [])


def _has(con: sqlite3.Connection, table: str, column: str) -> bool:
    ident(table), ident(column)
    return column in _columns(con).get(table, ())


def counts(path: str | os.PathLike, table: str, column: str, values: Collection[Any],
           timeout: float = READ_TIMEOUT) -> dict[Any, int]:
    """``{value: rows of table whose column equals it}`` for each of ``values`` that has rows;
    ``{}`` when the table or column does not exist (then no row can name them)."""
    values = _values(values)

    def work(con: sqlite3.Connection) -> dict[Any, int]:
        if not _has(con, table, column):
            return {}
        out: dict[Any, int] = {}
        for chunk in _chunks(values):
            marks = ",".join("?" * len(chunk))
            for value, n in con.execute(f"select {ident(column)}, count(*) from {ident(table)}"
                                        f" where {ident(column)} in ({marks}) group by 1", chunk):
                out[value] = out.get(value, 0) + n
        return out

    return _read(path, timeout, work, {})


def count(path: str | os.PathLike, table: str, column: str, value: Any, timeout: float = READ_TIMEOUT) -> int:
    """How many rows of ``table`` have ``column`` equal to ``value`` (or to any of a list/set of
    values); 0 when the database, the table or the column does not exist."""
    return sum(counts(path, table, column, _values(value), timeout).values())


def _row_key(con: sqlite3.Connection, table: str) -> str:
    info = list(con.execute(f"pragma table_info({ident(table)})"))
    names = [c[1] for c in info]
    if "id" in names:
        return '"id"'
    pk = [c[1] for c in sorted(info, key=lambda c: c[5]) if c[5] > 0 and _IDENT.fullmatch(c[1])]
    return " || '/' || ".join(ident(k) for k in pk) if pk else "rowid"


def keys(path: str | os.PathLike, table: str, column: str, values: Any,
         timeout: float = READ_TIMEOUT) -> list[tuple[str, Any]]:
    """``[(row key, column value), …]`` of the rows of ``table`` whose ``column`` is one of
    ``values``, to label them in a plan (``part:prt_…``). The key is the ``id`` column when there is
    one, else the primary key's columns joined with ``/``, else the rowid."""
    values = _values(values)

    def work(con: sqlite3.Connection) -> list[tuple[str, Any]]:
        if not _has(con, table, column):
            return []
        key = _row_key(con, table)
        out = []
        for chunk in _chunks(values):
            marks = ",".join("?" * len(chunk))
            out += [(str(k), v) for k, v in con.execute(
                f"select {key}, {ident(column)} from {ident(table)} where {ident(column)} in ({marks})", chunk)]
        return out

    return _read(path, timeout, work, [])


# --------------------------------------------------------------------------------------------------
# writing


class Reader:
    """What a late target list (a callable given to :func:`delete_rows`) may use: reads on the
    write transaction's own connection, refused any write (``query_only``)."""

    def __init__(self, con: sqlite3.Connection):
        self._con = con

    def rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        return self._con.execute(sql, params).fetchall()

    def columns(self) -> dict[str, list[str]]:
        return _columns(self._con)


def delete_rows(path: str | os.PathLike, targets: Iterable[Target] | Callable[[Reader], Iterable[Target]],
                timeout: float = WRITE_TIMEOUT, passes: int = 3) -> dict[str, int]:
    """Delete, in ONE transaction, every row of each ``(table, column, value)`` target (``value``
    may be a list or set of values: any of them). Returns ``{table: rows deleted}``.

    The transaction starts ``BEGIN IMMEDIATE`` (it waits up to ``timeout`` seconds for the agent's
    own writer, then fails) with ``secure_delete`` on; targets run in the order given (children
    before parents, when a foreign key asks it); a target whose table or column does not exist
    has no rows and is skipped. The targets are swept again until a pass deletes nothing (at most
    ``passes``): a trigger may write rows back. Any error rolls everything back and raises
    :class:`DatabaseError`: a database is never left half purged.

    ``targets`` may be a callable taking a :class:`Reader`: it is called inside the transaction,
    under the write lock, so it can find the rows again (a child created since the plan is taken
    too). A database that does not exist is left alone (no file is created) and gives ``{}``."""
    db = Path(path)
    if not db.is_file():
        return {}
    uri = "file:" + urllib.parse.quote(str(db.absolute())) + "?mode=rw"
    try:
        con = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
    except sqlite3.Error as e:
        raise DatabaseError(db, f"could not open {db} to delete rows: {e}") from e
    con.row_factory = sqlite3.Row
    try:
        con.execute(f"pragma busy_timeout = {int(timeout * 1000)}")
        con.execute("pragma secure_delete = on")
        con.execute("begin immediate")
        try:
            deleted = _sweep(con, _deletions(con, targets), passes)
            con.execute("commit")
        except BaseException:
            if con.in_transaction:
                con.execute("rollback")
            raise
    except sqlite3.Error as e:
        raise DatabaseError(db, f"could not delete the rows from {db}: {e}; nothing was deleted") from e
    finally:
        con.close()
    return deleted


def _deletions(con: sqlite3.Connection, targets) -> list[tuple[str, str, list]]:
    """:func:`delete_rows`'s targets as ``(table, column, values)``, those whose table and column
    exist; a callable is called read-only on ``con`` (inside the transaction)."""
    if callable(targets):
        con.execute("pragma query_only = on")
        try:
            todo = list(targets(Reader(con)))
        finally:
            con.execute("pragma query_only = off")
    else:
        todo = list(targets)
    schema = _columns(con)
    plan = []
    for table, column, value in todo:
        ident(table), ident(column)
        if column in schema.get(table, ()):
            plan.append((table, column, _values(value)))
    return plan


def _sweep(con: sqlite3.Connection, plan: list[tuple[str, str, list]], passes: int) -> dict[str, int]:
    """Delete the rows of ``plan`` in its order, again until a pass deletes nothing (at most
    ``passes``: a trigger may write rows back). Returns ``{table: rows deleted}``."""
    deleted: dict[str, int] = {}
    for _ in range(max(1, passes)):
        changed = 0
        for table, column, values in plan:
            for chunk in _chunks(values):
                marks = ",".join("?" * len(chunk))
                n = con.execute(f"delete from {ident(table)} where {ident(column)} in ({marks})", chunk).rowcount
                if n > 0:
                    deleted[table] = deleted.get(table, 0) + n
                    changed += n
        if not changed:
            break
    return deleted


def compact(path: str | os.PathLike, timeout: float = WRITE_TIMEOUT) -> str | None:
    """After deleting rows: checkpoint the WAL, VACUUM, and truncate the WAL, so the deleted text is
    gone from the file's bytes too (SQLite leaves it in free pages and in the WAL). Returns None when
    done (or when there is no database), else one line saying what may linger (for ``ctx.notes``)."""
    db = Path(path)
    if not db.is_file():
        return None
    uri = "file:" + urllib.parse.quote(str(db.absolute())) + "?mode=rw"
    try:
        con = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
    except sqlite3.Error as e:
        return f"could not open it to compact it ({e}): deleted text may remain in free pages"
    try:
        con.execute(f"pragma busy_timeout = {int(timeout * 1000)}")
        con.execute("pragma wal_checkpoint(truncate)").fetchall()
        con.execute("vacuum")
        busy = con.execute("pragma wal_checkpoint(truncate)").fetchone()
        if busy and busy[0]:
            return "the WAL could not be emptied (a reader was busy): deleted text may stay in it until the agent checkpoints"
        return None
    except sqlite3.Error as e:
        return f"was not compacted ({e}): deleted text may remain in free pages"
    finally:
        con.close()
