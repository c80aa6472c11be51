"""The record store: who runs where (SQLite in WAL mode, schema version in ``user_version``).

Every write is one short ``BEGIN IMMEDIATE`` transaction, so concurrent muxhost processes never lose
a write; a process killed mid-launch leaves at most a complete ``starting`` row, which ``ls`` shows as
``lost`` (or adopts, when its pane exists: panes carry ``@muxhost_record``).

Every SQLite or OS error met opening, migrating, reading or writing the store becomes one
:class:`~muxhost.errors.MuxhostError` (exit 1) that names the file, says what is wrong and what to do
(damaged, locked, not writable, full disk, a folder where a file belongs...). Nothing is swallowed: a
write that fails fails the command. The state folder muxhost creates is 0700; ``state.db`` and its
``-wal`` / ``-shm`` are 0600 whatever the umask (SQLite gives those two the database file's mode).

As tmux and ssh do, muxhost uses no state folder, and no file or folder in it, that another user
could change (it holds every agent's environment, and ``restore`` runs what a record says): one
not owned by you, writable by group or others, or a symbolic link is refused (exit 1, one line
naming it and the fix), and so is a parent of the state folder that someone other than you or
root owns, or that group or others can write without the sticky bit (``/tmp`` is fine).
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import stat
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator

from muxhost.errors import MuxhostError, UsageError

SCHEMA_VERSION = 3
LOCK_TIMEOUT = 30.0  # seconds a write waits for another muxhost's transaction ($MUXHOST_LOCK_TIMEOUT)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    agent TEXT NOT NULL,
    backend TEXT NOT NULL DEFAULT 'tmux',
    socket TEXT,
    state TEXT NOT NULL,
    conversation_id TEXT,
    conversations TEXT NOT NULL DEFAULT '[]',
    cwd TEXT NOT NULL,
    home TEXT NOT NULL,
    env TEXT NOT NULL DEFAULT '{}',
    argv TEXT NOT NULL DEFAULT '[]',
    pane TEXT,
    session TEXT,
    created_session INTEGER NOT NULL DEFAULT 0,
    pids TEXT NOT NULL DEFAULT '[]',
    launched_at REAL NOT NULL,
    stopped_at REAL,
    outcome TEXT,
    seconds REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    session_name TEXT,
    slept_at REAL,
    sent_at REAL,
    worktree TEXT
);
CREATE INDEX IF NOT EXISTS records_name ON records(name);
CREATE INDEX IF NOT EXISTS records_conversation ON records(agent, conversation_id);
"""

_JSON_FIELDS = {"env", "argv", "pids", "conversations", "worktree"}
# schema version -> statements that bring the previous version up to it
_MIGRATIONS = {
    2: ["ALTER TABLE records ADD COLUMN conversations TEXT NOT NULL DEFAULT '[]'",
        "UPDATE records SET conversations = json_array(conversation_id) WHERE conversation_id IS NOT NULL"],
    3: ["ALTER TABLE records ADD COLUMN session_name TEXT", "ALTER TABLE records ADD COLUMN slept_at REAL",
        "ALTER TABLE records ADD COLUMN sent_at REAL", "ALTER TABLE records ADD COLUMN worktree TEXT"],
}


@dataclass
class Record:
    id: str
    name: str
    agent: str
    cwd: str
    home: str
    launched_at: float
    backend: str = "tmux"
    socket: str | None = None
    state: str = "starting"          # stored: starting | running | asleep | stopping | stopped
    conversation_id: str | None = None
    conversations: list[str] = field(default_factory=list)  # every id it has been in, oldest first
    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    pane: str | None = None
    session: str | None = None
    created_session: bool = False
    pids: list[list[float]] = field(default_factory=list)   # [[pid, create_time], ...] at launch
    stopped_at: float | None = None
    outcome: str | None = None
    seconds: float | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    session_name: str | None = None  # the session's name when it started (restore names it so again)
    slept_at: float | None = None    # when `sleep` put it to sleep
    sent_at: float | None = None     # when `send` last typed into it (`wait` judges only after)
    worktree: dict[str, Any] | None = None  # the git worktree muxhost made for it: path, repo, branch, base

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "Record":
        data = dict(row)
        for k in _JSON_FIELDS:
            data[k] = json.loads(data[k]) if data.get(k) else ({} if k == "env" else None if k == "worktree" else [])
        data["created_session"] = bool(data["created_session"])
        for k, kind in (("env", dict), ("argv", list), ("pids", list), ("conversations", list),
                        ("worktree", (dict, type(None)))):
            if not isinstance(data[k], kind):
                raise TypeError(f"{k} is a {type(data[k]).__name__}")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in data["env"].items()):
            raise TypeError("env holds a value that is not a string")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_row(self) -> dict[str, Any]:
        d = asdict(self)
        for k in _JSON_FIELDS:
            d[k] = json.dumps(d[k])
        d["created_session"] = int(d["created_session"])
        return d


def state_dir(env: dict[str, str] | None = None) -> Path:
    """``$MUXHOST_STATE_DIR``, else ``$XDG_STATE_HOME/muxhost`` (``~/.local/state/muxhost``), its
    symlinks resolved once, here: every check and every open after this uses the same real path, so
    a link someone else owns on the way cannot be pointed elsewhere between the check and the open."""
    env = os.environ if env is None else env
    if env.get("MUXHOST_STATE_DIR"):
        return Path(os.path.realpath(env["MUXHOST_STATE_DIR"]))
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(os.path.realpath(os.path.join(base, "muxhost")))


def lock_timeout(env: dict[str, str] | None = None) -> float:
    """Seconds a write waits for another muxhost's transaction: ``$MUXHOST_LOCK_TIMEOUT``, else 30."""
    raw = (os.environ if env is None else env).get("MUXHOST_LOCK_TIMEOUT", "").strip()
    if not raw:
        return LOCK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    from muxhost.config import MAX_SECONDS, seconds_ok

    if not seconds_ok(value):
        raise UsageError(f"MUXHOST_LOCK_TIMEOUT={raw!r}: expected a number of seconds from 0 to {MAX_SECONDS}")
    return value


def _unsafe(st: os.stat_result) -> str | None:
    """Why another user could change the file or folder ``st`` is about (the fix included), or None."""
    me = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link where muxhost keeps a file of its own; remove it"
    if st.st_uid != me:
        return (f"owned by uid {st.st_uid}, not by you (uid {me}), who could read your agents' secrets or run "
                f"code as you through it; remove it, or set MUXHOST_STATE_DIR to a folder of your own")
    if st.st_mode & 0o022:
        return "writable by group or others, who could read your agents' secrets or run code as you through it"
    return None


def check_private(path: str | os.PathLike, st: os.stat_result | None = None) -> None:
    """Refuse (exit 1) a file or folder of the state folder that another user could change: not
    yours, writable by group or others, or a symbolic link. ``st``: its ``fstat`` when it is open
    already (else ``lstat``); a missing path passes (muxhost makes it)."""
    if st is None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
    why = _unsafe(st)
    if why:
        if why.startswith("writable"):
            why += f"; chmod go-w {path}"
        raise MuxhostError(f"{path}: {why}")


def private_folder(path: str | os.PathLike) -> Path:
    """A folder muxhost keeps in the state folder (``locks/``, ``launch/``): made 0700 whatever the
    umask, or refused (exit 1) when another user could change it (:func:`check_private`)."""
    path = Path(path)
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)
    except FileExistsError:
        check_private(path)
        if not path.is_dir():
            raise _os_error(NotADirectoryError(errno.ENOTDIR, ""), path) from None
    return path


def _check_state_folder(d: Path) -> None:
    """The state folder and its parents, as ssh judges them: the folder (its symlinks resolved) is
    yours and not writable by group or others; a parent is yours or root's, and writable by group or
    others only with the sticky bit (``/tmp``), so that nobody else can replace the folder."""
    check_private(d, os.stat(d))
    check_parents(d)


def check_parents(d: Path, what: str = "the state folder") -> None:
    """Refuse ``d`` when a parent folder is another user's, or writable by others without the sticky
    bit: they could replace ``d`` (``what``, named in the message) in it."""
    for parent in Path(os.path.realpath(d)).parents:
        st = os.stat(parent)
        if st.st_uid not in (0, os.geteuid()):
            raise MuxhostError(f"{parent}: owned by uid {st.st_uid}, who could replace {what} {d} in it; "
                               f"set MUXHOST_STATE_DIR to a folder of your own")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise MuxhostError(f"{parent}: writable by group or others, who could replace {what} {d} "
                               f"in it; chmod go-w {parent}, or set MUXHOST_STATE_DIR to a folder of your own")


def state_folder() -> Path:
    """The state folder (:func:`state_dir`), created 0700, checked (:func:`_check_state_folder`)."""
    return Store._state_folder()


def _private(path: Path, mode: int) -> None:
    """Drop group/other access from an existing ``path``. A file we may not chmod (not ours, a
    read-only file system) is left as it is: the write that needs it reports the real problem."""
    try:
        if os.stat(path).st_mode & 0o077:
            os.chmod(path, mode)
    except OSError:
        pass


class Store:
    def __init__(self, path: str | os.PathLike | None = None):
        self.timeout = lock_timeout()
        #: records :meth:`all` skipped because their row is damaged: {record id: what is wrong}
        self.damaged: dict[str, str] = {}
        if path is None:
            path = self._state_folder() / "state.db"
        else:
            path = os.path.realpath(path)  # (as state_dir: resolved once)
            if Path(path).parent.is_dir():
                _check_state_folder(Path(path).parent)
        self.path = Path(path)
        with self._errors():
            for p in (self.path, *self._sidecars()):
                check_private(p)
            try:  # created 0600 here, not by SQLite with the umask; its -wal and -shm take its mode
                os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                pass
            for p in (self.path, *self._sidecars()):
                _private(p, 0o600)
            self.con = sqlite3.connect(str(self.path), timeout=self.timeout, isolation_level=None)
            self.con.row_factory = sqlite3.Row
            if self.con.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                self._migrate()

    @staticmethod
    def _state_folder() -> Path:
        """The state folder, created 0700. An existing one is tightened to 0700 only when it is the
        default one (``…/muxhost``, muxhost's own); a ``$MUXHOST_STATE_DIR`` that already existed keeps
        the user's mode (the files in it are 0600), but one that group or others can write, or that is
        not the user's, is refused (:func:`_check_state_folder`)."""
        d = state_dir()
        if d.parent.is_dir():
            check_parents(d)  # before anything is made in it
        try:
            d.mkdir(parents=True, mode=0o700)
            os.chmod(d, 0o700)
        except FileExistsError:
            if not d.is_dir():
                raise MuxhostError(f"{d}: is a file, not a folder; move it aside, or set MUXHOST_STATE_DIR "
                                   f"to a folder for muxhost's records") from None
            _check_state_folder(d)
            if not os.environ.get("MUXHOST_STATE_DIR"):
                _private(d, 0o700)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM):
                raise MuxhostError(f"{d}: cannot create the state folder ({e.strerror}); make {d.parent} "
                                   f"writable by you, or set MUXHOST_STATE_DIR to a folder you can write") from e
            if e.errno == errno.ENOTDIR:  # an ancestor is a file
                d = next((a for a in d.parents if a.exists() and not a.is_dir()), d)
            raise _os_error(e, d, "creating the state folder") from e
        else:
            _check_state_folder(d)
        return d

    def _sidecars(self) -> tuple[Path, Path]:
        return Path(f"{self.path}-wal"), Path(f"{self.path}-shm")

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn SQLite and OS errors into one line that names the file and says what to do."""
        try:
            yield
        except sqlite3.Error as e:
            raise self._sqlite_error(e) from e
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR):
                raise self._not_writable(e.strerror) from e
            raise _os_error(e, Path(e.filename) if e.filename else self.path) from e

    def _sqlite_error(self, e: sqlite3.Error) -> MuxhostError:
        code = (getattr(e, "sqlite_errorcode", None) or 0) & 0xFF
        path = self.path
        if code == 26:  # SQLITE_NOTADB
            return MuxhostError(f"{path}: not a SQLite database (damaged?); move it aside to start afresh "
                                f"(muxhost keeps its records there)")
        if code == 11:  # SQLITE_CORRUPT
            return MuxhostError(f"{path}: the database is damaged ({e}); move it aside to start afresh, "
                                f"or try `sqlite3 {path} .recover`")
        if code in (5, 6):  # SQLITE_BUSY, SQLITE_LOCKED
            return MuxhostError(f"{path}: locked by another muxhost for over {self.timeout:g}s; try again "
                                f"when it has finished (MUXHOST_LOCK_TIMEOUT sets the wait)")
        if code == 13 or (code == 10 and _disk_full(path)):  # SQLITE_FULL, SQLITE_IOERR on a full disk
            return _os_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), path)
        if code in (3, 8, 14, 23):  # SQLITE_PERM, SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_AUTH
            return self._not_writable(str(e))
        if code == 10:  # SQLITE_IOERR
            return MuxhostError(f"{path}: disk I/O error ({e}); check the disk, then try again")
        return MuxhostError(f"{path}: SQLite error: {e}; try again, and move the file aside if it persists")

    def _not_writable(self, why: str) -> MuxhostError:
        """Which of the folder, ``state.db``, ``-wal`` or ``-shm`` stops SQLite, and what to do."""
        folder = self.path.parent
        if self.path.is_dir():
            return _os_error(IsADirectoryError(errno.EISDIR, ""), self.path)
        if not folder.is_dir():
            return MuxhostError(f"{folder}: not a folder (or missing); create it, or set MUXHOST_STATE_DIR "
                                f"to a folder for muxhost's records")
        if not os.access(folder, os.W_OK | os.X_OK):
            return MuxhostError(f"{folder}: the state folder is not writable (SQLite creates {self.path.name}-wal "
                                f"and -shm in it); make it writable by you, or set MUXHOST_STATE_DIR to a "
                                f"folder you can write")
        for p in (self.path, *self._sidecars()):
            if p.exists() and not os.access(p, os.R_OK | os.W_OK):
                return MuxhostError(f"{p}: not writable; make it readable and writable by you "
                                    f"(chmod u+rw), or set MUXHOST_STATE_DIR to a folder you can write")
        return MuxhostError(f"{self.path}: cannot write it ({why}); check the file and its folder {folder}")

    def _migrate(self) -> None:
        self.con.execute("PRAGMA journal_mode = WAL")
        with self.transaction():
            version = self.con.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise MuxhostError(f"{self.path} was written by a newer muxhost (schema {version})")
            if version == 0:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self.con.execute(statement)
            else:
                for step in range(version + 1, SCHEMA_VERSION + 1):
                    for statement in _MIGRATIONS[step]:
                        self.con.execute(statement)
            self.con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def transaction(self):
        """``with store.transaction() as con:`` one ``BEGIN IMMEDIATE`` transaction; an error in it
        (ours or SQLite's) rolls it back and reaches the caller as a :class:`MuxhostError`."""
        store = self

        class _Tx:
            def __enter__(self):
                with store._errors():
                    store.con.execute("BEGIN IMMEDIATE")
                return store.con

            def __exit__(self, exc_type, exc, tb):
                with store._errors():
                    try:
                        if exc_type is None:
                            store.con.execute("COMMIT")
                    finally:  # the body or COMMIT failed (SQLite may have rolled back already: a full disk)
                        if store.con.in_transaction:
                            store.con.execute("ROLLBACK")
                    if isinstance(exc, (sqlite3.Error, OSError)):
                        raise exc
                return False

        return _Tx()

    def insert(self, rec: Record) -> None:
        if rec.conversation_id and rec.conversation_id not in rec.conversations:
            rec.conversations.append(rec.conversation_id)
        now = time.time()
        rec.created_at = rec.created_at or now
        rec.updated_at = now
        row = rec.to_row()
        cols = ", ".join(row)
        marks = ", ".join(f":{k}" for k in row)
        with self.transaction() as con:
            con.execute(f"INSERT INTO records ({cols}) VALUES ({marks})", row)

    def update(self, rec: Record, **changes: Any) -> Record:
        cid = changes.get("conversation_id")
        if cid and cid not in rec.conversations:
            changes["conversations"] = [*rec.conversations, cid]
        for k, v in changes.items():
            setattr(rec, k, v)
        rec.updated_at = time.time()
        row = rec.to_row()
        keys = [k for k in changes] + ["updated_at"]
        sets = ", ".join(f"{k} = :{k}" for k in keys)
        with self.transaction() as con:
            con.execute(f"UPDATE records SET {sets} WHERE id = :id", {**{k: row[k] for k in keys}, "id": rec.id})
        return rec

    def delete(self, rec: Record) -> None:
        """Forget a record (``muxhost rm``)."""
        with self.transaction() as con:
            con.execute("DELETE FROM records WHERE id = ?", (rec.id,))

    def get(self, record_id: str) -> Record | None:
        with self._errors():
            row = self.con.execute("SELECT * FROM records WHERE id = ?", (record_id,)).fetchone()
        return self._record(row) if row else None

    def all(self) -> list[Record]:
        with self._errors():
            rows = self.con.execute("SELECT * FROM records ORDER BY created_at, id").fetchall()
        out = []
        for row in rows:  # one damaged row never hides the others: it is skipped, and said (damaged)
            try:
                out.append(self._record(row))
            except MuxhostError as e:
                cause = e.__cause__
                self.damaged[str(dict(row).get("id"))] = f"{type(cause).__name__}: {cause}" if cause else str(e)
        return out

    def version(self) -> int:
        """A number that changes whenever another connection commits (``PRAGMA data_version``): a
        long-running reader (the watch) reads the records again only then."""
        with self._errors():
            return int(self.con.execute("PRAGMA data_version").fetchone()[0])

    def _record(self, row: sqlite3.Row) -> Record:
        try:
            return Record.from_row(row)
        except (ValueError, TypeError, KeyError) as e:
            raise MuxhostError(f"{self.path}: record {dict(row).get('id')} is damaged ({type(e).__name__}: {e}); "
                               f"move the file aside to start afresh") from e

    def __iter__(self) -> Iterator[Record]:
        return iter(self.all())

    def close(self) -> None:
        with self._errors():
            self.con.close()


def _disk_full(path: Path) -> bool:
    try:
        return os.statvfs(path.parent).f_bavail == 0
    except OSError:
        return False


def _os_error(e: OSError, path: Path, doing: str = "") -> MuxhostError:
    """One line for an OS error on a store file or folder."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return MuxhostError(f"{path}: no space left on device{' ' + doing if doing else ''}; free some space, "
                            f"then try again")
    if e.errno == errno.EROFS:
        return MuxhostError(f"{path}: on a read-only file system; set MUXHOST_STATE_DIR to a writable folder")
    if e.errno == errno.EISDIR:
        return MuxhostError(f"{path}: is a folder, not a database file; move it aside (muxhost then starts "
                            f"a new state.db)")
    if e.errno in (errno.ENOTDIR, errno.EEXIST):
        return MuxhostError(f"{path}: a file stands where a folder belongs; move it aside, or set "
                            f"MUXHOST_STATE_DIR to a folder for muxhost's records")
    return MuxhostError(f"{path}: {e.strerror or e}{' ' + doing if doing else ''}; check the file and its "
                        f"folder, then try again")
