"""Recorded activity fixtures: a real agent's screen and state files in one state, kept in the
plugin's tests and replayed by the contract suite (``AgentContract.activity_fixtures``), so an agent
CLI upgrade that changes a footer or a status word fails a test, not a user.

A case is a folder ``<fixtures>/<case>/``:

- ``expected.txt``: the state the plugin's ``activity`` must answer (``working``, ``waiting``, ``idle``);
- ``screen.txt`` (optional): the pane's visible screen, given as ``screen`` (lines right-stripped);
- ``context.json`` (optional): ``conversation_id``, ``cwd`` (default :data:`CWD`), ``env``;
- ``home/`` (optional): the state files, copied to a temporary HOME. In every file's bytes and name
  ``@HOME@`` becomes that HOME, ``@PID@`` the pid of a live stand-in process the replay starts (the
  agent's pids are ``[it]``) and ``@PID_START@`` its start time in clock ticks since boot (field 22
  of ``/proc/PID/stat``, Linux).

:func:`write_case` makes one from a live agent (real paths rewritten to the placeholders);
:func:`replay` asks a plugin about one.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping

__all__ = ["CWD", "cases", "expected", "record", "replay", "replay_all", "sqlite_subset", "write_case"]

#: the working directory every case is recorded in (rewritten from the real one: no machine's path)
CWD = "/muxhost-fixture/work"


def cases(folder: Path) -> list[Path]:
    """The case folders under ``folder`` (those with an ``expected.txt``), sorted by name."""
    return sorted(p.parent for p in Path(folder).glob("*/expected.txt"))


def _rewrite(data: bytes, subs: Mapping[str, str]) -> bytes:
    for old, new in sorted(subs.items(), key=lambda kv: -len(kv[0])):  # the longest first (a cwd under HOME)
        data = data.replace(old.encode(), new.encode())
    return data


def write_case(dest: Path, expected: str, screen: str | None, files: Mapping[str, bytes],
               context: Mapping | None = None, rewrite: Mapping[str, str] | None = None) -> Path:
    """Write case folder ``dest`` (replaced when it exists): ``files`` (path under HOME -> bytes),
    with every ``rewrite`` (real text -> placeholder, e.g. the real HOME -> ``@HOME@``, the real cwd
    -> :data:`CWD`) applied to their bytes, their paths, the screen and the context."""
    subs = dict(rewrite or {})
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    (dest / "expected.txt").write_text(expected + "\n")
    if screen is not None:
        text = _rewrite(screen.encode(), subs).decode()
        (dest / "screen.txt").write_text("\n".join(ln.rstrip() for ln in text.rstrip("\n").splitlines()) + "\n")
    if context:
        (dest / "context.json").write_bytes(_rewrite(json.dumps(dict(context), indent=1).encode(), subs) + b"\n")
    for rel, data in files.items():
        out = dest / "home" / _rewrite(rel.encode(), subs).decode()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(_rewrite(data, subs) if not data.startswith(b"SQLite format 3\0") else data)
    return dest


def sqlite_subset(db: Path, queries: Mapping[str, tuple[str, tuple]], rewrite: Mapping[str, str] | None = None) -> bytes:
    """A small SQLite database holding only what a plugin reads: for each ``table`` its schema (as
    ``db`` has it) and the rows ``select * from table where <clause>`` picks (``queries``: table ->
    (clause, params)); text values get ``rewrite`` (real text -> placeholder) — a database's bytes
    are never rewritten. ``db`` is read through SQLite's backup API (a live WAL database is fine)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.db"
        src, dst = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5), sqlite3.connect(copy)
        try:
            src.backup(dst)
        finally:
            src.close()
        out = Path(tmp) / "out.db"
        small = sqlite3.connect(out)
        try:
            for table, (clause, params) in queries.items():
                (schema,) = dst.execute("select sql from sqlite_master where type = 'table' and name = ?", (table,)).fetchone()
                small.execute(schema)
                rows = dst.execute(f'select * from "{table}" where {clause}', params).fetchall()
                if rows:
                    marks = ", ".join("?" * len(rows[0]))
                    small.executemany(f'insert into "{table}" values ({marks})',
                                      [tuple(_rewrite(v.encode(), rewrite or {}).decode() if isinstance(v, str) else v
                                             for v in r) for r in rows])
            small.commit()
            small.execute("vacuum")
        finally:
            small.close()
            dst.close()
        return out.read_bytes()


def _start_ticks(pid: int) -> str:
    data = Path(f"/proc/{pid}/stat").read_text()
    return data[data.rfind(")") + 2:].split()[19]


def replay(agent, case: Path, tmp: Path, stand_in: subprocess.Popen | None = None) -> str | None:
    """What ``agent.activity`` answers over ``case``: its ``home/`` copied to ``tmp/home`` (the
    placeholders filled in; ``stand_in`` the live process of ``@PID@``, started here when None and
    the case needs one; removed again after), its context and its screen."""
    from muxhost.agent import AgentContext

    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    files = [p for p in (case / "home").rglob("*") if p.is_file()] if (case / "home").is_dir() else []
    needs = any(b"@PID" in p.read_bytes() or "@PID" in str(p) for p in files)
    own = stand_in is None and needs
    if own:
        stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        subs = {"@HOME@": str(home)}
        if stand_in is not None:
            subs.update({"@PID@": str(stand_in.pid), "@PID_START@": _start_ticks(stand_in.pid) if needs else "0"})
        for p in files:
            rel = _rewrite(str(p.relative_to(case / "home")).encode(), subs).decode()
            out = home / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            data = p.read_bytes()
            out.write_bytes(data if data.startswith(b"SQLite format 3\0") else _rewrite(data, subs))
        context = json.loads(_rewrite((case / "context.json").read_bytes(), subs)) if (case / "context.json").exists() else {}
        screen = (case / "screen.txt").read_text() if (case / "screen.txt").exists() else None
        ctx = AgentContext(home=str(home), env={"HOME": str(home), **context.get("env", {})},
                           cwd=context.get("cwd", CWD), conversation_id=context.get("conversation_id"),
                           pids=[stand_in.pid] if stand_in is not None else [])
        return agent.activity(ctx, screen)
    finally:
        shutil.rmtree(home, ignore_errors=True)  # (a plugin may remember a path: none may outlive its case)
        if own and stand_in is not None:
            stand_in.kill()
            stand_in.wait()


def expected(case: Path) -> str:
    """The state recorded for ``case``."""
    return (case / "expected.txt").read_text().strip()


Take = Callable[[], "tuple[str | None, Mapping[str, bytes], Mapping | None]"]


def record(agent, dest: Path, state: str, take: Take, rewrite: Mapping[str, str], timeout: float = 30) -> Path:
    """Record case ``dest`` of a live agent in ``state``: ``take()`` returns (screen, files under
    HOME, context) as they are now; written (:func:`write_case`) and replayed (:func:`replay`) until
    the hook answers ``state`` over it — the agent may get there a moment after what the recorder
    waited for. Raises AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        screen, files, context = take()
        write_case(dest, state, screen, files, context, rewrite)
        with tempfile.TemporaryDirectory() as tmp:
            got = replay(agent, dest, Path(tmp))
        if got == state:
            return dest
        if time.monotonic() > deadline:
            raise AssertionError(f"{dest.name}: the hook answers {got!r} over what was recorded, not {state!r}")
        time.sleep(0.3)


def replay_all(agent_name: str, folder: str, tmp: str) -> dict:
    """Every case of ``folder`` replayed through agent ``agent_name`` as the CLI loads it (this
    process's environment): ``found`` (a plugin provides it), ``hook`` (it has an ``activity``
    hook) and ``cases`` (name -> [its answer, the state recorded]). What the contract suite runs."""
    from muxhost.agent import Agent
    from muxhost.config import Config
    from muxhost.plugins import Registry, get_plugin_manager

    agent = Registry(get_plugin_manager(Config())).agents.get(agent_name)
    hook = agent is not None and type(agent).activity is not Agent.activity
    out: dict = {"found": agent is not None, "hook": hook, "cases": {}}
    for case in cases(Path(folder)) if hook and folder else ():
        answer = replay(agent, case, Path(tmp) / case.name)
        out["cases"][case.name] = [None if answer is None else str(answer), expected(case)]
    return out
