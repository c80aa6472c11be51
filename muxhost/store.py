"""The record store: who runs where (SQLite in WAL mode, schema version in ``user_version``).

Every write is one short ``BEGIN IMMEDIATE`` transaction, so concurrent muxhost processes never lose
a write; a process killed mid-launch leaves at most a complete ``starting`` row, which ``ls`` shows as
``lost`` (or adopts, when its pane exists: panes carry ``@muxhost_record``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator

SCHEMA_VERSION = 2

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
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS records_name ON records(name);
CREATE INDEX IF NOT EXISTS records_conversation ON records(agent, conversation_id);
"""

_JSON_FIELDS = {"env", "argv", "pids", "conversations"}
# schema version -> statements that bring the previous version up to it
_MIGRATIONS = {
    2: ["ALTER TABLE records ADD COLUMN conversations TEXT NOT NULL DEFAULT '[]'",
        "UPDATE records SET conversations = json_array(conversation_id) WHERE conversation_id IS NOT NULL"],
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
    state: str = "starting"          # stored: starting | running | stopped
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

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "Record":
        data = dict(row)
        for k in _JSON_FIELDS:
            data[k] = json.loads(data[k]) if data.get(k) else ({} if k == "env" else [])
        data["created_session"] = bool(data["created_session"])
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_row(self) -> dict[str, Any]:
        d = asdict(self)
        for k in _JSON_FIELDS:
            d[k] = json.dumps(d[k])
        d["created_session"] = int(d["created_session"])
        return d


def state_dir(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("MUXHOST_STATE_DIR"):
        return Path(env["MUXHOST_STATE_DIR"])
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "muxhost"


class Store:
    def __init__(self, path: str | os.PathLike | None = None):
        if path is None:
            d = state_dir()
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = d / "state.db"
        self.path = Path(path)
        self.con = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        self.con.row_factory = sqlite3.Row
        self.con.execute("PRAGMA busy_timeout = 30000")
        if self.con.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            self._migrate()

    def _migrate(self) -> None:
        try:
            os.chmod(self.path, 0o600)
        except OSError:
            pass
        self.con.execute("PRAGMA journal_mode = WAL")
        with self.transaction():
            version = self.con.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                from muxhost.errors import MuxhostError

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
        store = self

        class _Tx:
            def __enter__(self):
                store.con.execute("BEGIN IMMEDIATE")
                return store.con

            def __exit__(self, exc_type, exc, tb):
                store.con.execute("ROLLBACK" if exc_type else "COMMIT")
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

    def get(self, record_id: str) -> Record | None:
        row = self.con.execute("SELECT * FROM records WHERE id = ?", (record_id,)).fetchone()
        return Record.from_row(row) if row else None

    def all(self) -> list[Record]:
        return [Record.from_row(r) for r in self.con.execute("SELECT * FROM records ORDER BY created_at, id")]

    def __iter__(self) -> Iterator[Record]:
        return iter(self.all())

    def close(self) -> None:
        self.con.close()
