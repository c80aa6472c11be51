"""muxhost plugin for the OpenAI Codex CLI (``codex``, npm ``@openai/codex``).

Where codex keeps a conversation ("thread"), under ``$CODEX_HOME`` (default ``~/.codex``):

- ``sessions/YYYY/MM/DD/rollout-<ts>-<id>.jsonl`` (and ``archived_sessions/``): the transcript;
  its first line (``session_meta``) names the cwd and, for a sub-agent, ``parent_thread_id``;
- SQLite databases (``$CODEX_SQLITE_HOME`` / ``sqlite_home`` or ``$CODEX_HOME``): ``state_5.sqlite``
  (``threads``, ``thread_spawn_edges`` for sub-agents, …), ``thread_history_1.sqlite``, ``logs_2.sqlite``,
  ``goals_1.sqlite``, ``memories_1.sqlite``, ``queue_1.sqlite``;
- ``history.jsonl`` (one line per typed prompt, ``session_id``), ``session_index.jsonl`` (``id``),
  ``shell_snapshots/<id>.*``, ``tui-thread-reference-capabilities/<id>``, ``thread-writer-locks/<id>.lock``.

A running codex holds an exclusive ``flock`` on ``thread-writer-locks/<id>.lock`` for every thread it
writes (its sub-agents' threads included) and keeps the file open: that is how "in use" is told.

The npm package starts ``node …/bin/codex.js``, which runs the native ``codex`` as its child: both
carry the name ``codex`` (the wrapper as node's script argument), so both are one agent.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Iterable, Iterator
from urllib.parse import quote

import psutil

import muxhost
from muxhost import Agent, AgentContext, Launch
from muxhost.fsutil import drop_lines, remove
from muxhost.procs import RECORD_ENV, ProcessTable, argv_holders

try:  # Python 3.11+
    import tomllib as _toml
except ImportError:  # pragma: no cover - Python 3.10
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ImportError:
        _toml = None  # type: ignore[assignment]

__version__ = "0.1.0"

log = logging.getLogger("muxhost.codex")

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_LOCK_RE = re.compile(rf"({_UUID})\.lock")
_ROLLOUT_RE = re.compile(rf"rollout-.*-({_UUID})\.jsonl")
#: the ``-c`` override that keeps codex from handing the conversation to a detached daemon
DAEMON_OFF = ("-c", "features.daemon_auto_start=false")
#: columns that hold a thread id, in any table of any codex database
ID_COLUMNS = ("thread_id", "child_thread_id", "parent_thread_id", "session_id", "conversation_id")
#: (table, column) pairs whose column name does not say "thread"
EXTRA_ID_COLUMNS = (("threads", "id"), ("jobs", "job_key"))
_RO_TIMEOUT = 0.2  # seconds: reads never wait long for a writer
_RW_TIMEOUT = 5.0

_help_cache: dict[tuple[str, float], str] = {}


# ---------------------------------------------------------------------------------------------
# where things are


def codex_home(ctx: AgentContext) -> Path:
    """``$CODEX_HOME`` from the agent's environment, else ``<home>/.codex``."""
    value = ctx.env.get("CODEX_HOME")
    if value:
        return _abs(ctx, value)
    return Path(ctx.home) / ".codex"


def _abs(ctx: AgentContext, value: str) -> Path:
    if value == "~" or value.startswith("~/"):
        value = str(ctx.home) + value[1:]
    p = Path(value)
    if not p.is_absolute():
        p = Path(ctx.cwd or ctx.home) / p
    return p


_config_cache: dict[str, tuple[tuple[int, int, int], dict]] = {}


def read_config(home: Path) -> dict:
    """``config.toml`` as a dict ({} when missing or unreadable); parsed again only when it changed."""
    path = home / "config.toml"
    try:
        st = path.stat()
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = _config_cache.get(str(path))
        if cached and cached[0] == key:
            return cached[1]
        data = path.read_bytes()
    except OSError:
        return {}
    _config_cache[str(path)] = (key, _parse_config(data))
    return _config_cache[str(path)][1]


def _parse_config(data: bytes) -> dict:
    if _toml is None:
        return _toml_fallback(data.decode("utf-8", "replace"))
    try:
        return _toml.loads(data.decode("utf-8", "replace"))
    except Exception:  # a broken config: codex itself will say so
        return _toml_fallback(data.decode("utf-8", "replace"))


def _toml_fallback(text: str) -> dict:
    """Just enough TOML for the two keys we read (no tomllib on this Python)."""
    out: dict = {}
    section = ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        m = re.fullmatch(r"\[([^\]]+)\]", line)
        if m:
            section = m.group(1).strip()
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-\"]+)\s*=\s*(.+)", line)
        if not m:
            continue
        key, value = m.group(1).strip('"'), m.group(2).strip()
        full = f"{section}.{key}" if section else key
        if value in ("true", "false"):
            v: object = value == "true"
        else:
            v = value.strip('"')
        node = out
        parts = full.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node[parts[-1]] = v
    return out


def sqlite_home(ctx: AgentContext, home: Path | None = None) -> Path:
    """Where codex keeps its SQLite files: ``$CODEX_SQLITE_HOME``, config ``sqlite_home``, else CODEX_HOME."""
    home = home or codex_home(ctx)
    value = ctx.env.get("CODEX_SQLITE_HOME")
    if value:
        return _abs(ctx, value)
    cfg = read_config(home).get("sqlite_home")
    if isinstance(cfg, str) and cfg:
        return _abs(ctx, cfg)
    return home


def find_binary(ctx: AgentContext) -> str | None:
    """``config.binary`` when set, else ``codex`` on the agent's PATH."""
    configured = ctx.config.get("binary")
    path = ctx.env.get("PATH") or os.environ.get("PATH")
    if configured:
        configured = str(_abs(ctx, str(configured))) if "/" in str(configured) else str(configured)
        if os.path.isabs(configured):
            return configured if os.access(configured, os.X_OK) else None
        return shutil.which(configured, path=path)
    return shutil.which("codex", path=path)


def _help_text(binary: str, base_env: dict[str, str] | None = None) -> str:
    """``codex --help`` (cached per binary and mtime). It runs with the agent's environment (node must
    be on its PATH) but a CODEX_HOME that does not exist: then it writes nothing anywhere."""
    try:
        real = os.path.realpath(binary)
        key = (real, os.stat(real).st_mtime)
    except OSError:
        return ""
    if key not in _help_cache:
        env = {k: v for k, v in (base_env or os.environ).items() if not k.startswith("CODEX") and k != RECORD_ENV}
        env["CODEX_HOME"] = os.path.join(os.path.dirname(real), ".muxhost-no-such-codex-home")
        try:
            p = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=20,
                               stdin=subprocess.DEVNULL, env=env)
            _help_cache[key] = p.stdout + p.stderr
        except (OSError, subprocess.SubprocessError):
            _help_cache[key] = ""
    return _help_cache[key]


def in_process_switch(binary: str | None, env: dict[str, str] | None = None) -> list[str]:
    """``--no-daemon`` when the binary has it, else ``-c features.daemon_auto_start=false``."""
    if binary and "--no-daemon" in _help_text(binary, env):
        return ["--no-daemon"]
    return list(DAEMON_OFF)


def daemon_warning(ctx: AgentContext, home: Path) -> str | None:
    """Why codex, left alone, would hand this conversation to a detached daemon (None: it would not)."""
    features = read_config(home).get("features")
    auto = features.get("daemon_auto_start") if isinstance(features, dict) else None
    if auto is False:
        return None
    where = ctx.expand(home / "config.toml")
    why = "sets features.daemon_auto_start = true" if auto is True else "does not set features.daemon_auto_start = false"
    return (f"codex: {where} {why}, so codex would start a detached app-server daemon that outlives the pane "
            "and holds the conversation")


# ---------------------------------------------------------------------------------------------
# read-only access


def _ro(db: Path, errors: list[tuple[Path, str]] | None = None) -> sqlite3.Connection | None:
    """A read-only connection that never waits long (None when the file is missing or unreadable;
    why it was unreadable is appended to ``errors``)."""
    if not db.is_file():
        return None
    try:
        con = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=_RO_TIMEOUT)
        con.row_factory = sqlite3.Row
        con.execute("select 1 from sqlite_master limit 1").fetchall()
        return con
    except sqlite3.Error as e:
        if errors is not None:
            errors.append((db, str(e)))
        return None


def _databases(ctx: AgentContext, home: Path) -> list[Path]:
    dirs = [sqlite_home(ctx, home)]
    if dirs[0] != home:
        dirs.append(home)
    out: list[Path] = []
    for d in dirs:
        try:
            out.extend(sorted(p for p in d.glob("*.sqlite") if p.is_file()))
        except OSError:
            continue
    return out


def _id_columns(con: sqlite3.Connection) -> list[tuple[str, str]]:
    """(table, column) pairs in this database that hold a thread id."""
    pairs = []
    tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
    for table in tables:
        if table.startswith("sqlite_") or table.startswith("_sqlx"):
            continue
        cols = [r[1] for r in con.execute(f'pragma table_info("{table}")')]
        for col in cols:
            if col in ID_COLUMNS or (table, col) in EXTRA_ID_COLUMNS:
                pairs.append((table, col))
    return pairs


def _naming(ctx: AgentContext, home: Path, tids: list[str]) -> list[tuple[Path, list[tuple[str, str]]]]:
    """(database, its (table, column) pairs that hold thread ids) for each database that has a row
    naming one of ``tids`` (read-only; every connection is closed on return)."""
    marks = ",".join("?" * len(tids))
    out = []
    for db in _databases(ctx, home):
        con = _ro(db)
        if con is None:
            continue
        try:
            pairs = _id_columns(con)
            if any(con.execute(f'select 1 from "{t}" where "{c}" in ({marks}) limit 1', tids).fetchone()
                   for t, c in pairs):
                out.append((db, pairs))
        except sqlite3.Error:
            continue
        finally:
            con.close()
    return out


def _state_db(ctx: AgentContext, home: Path) -> Path:
    base = sqlite_home(ctx, home)
    candidates = sorted(base.glob("state_*.sqlite"), key=lambda p: _version_of(p), reverse=True)
    return candidates[0] if candidates else base / "state_5.sqlite"


def _version_of(p: Path) -> int:
    m = re.search(r"_(\d+)\.sqlite$", p.name)
    return int(m.group(1)) if m else 0


def _thread_rows(ctx: AgentContext, home: Path, where: str = "", args: tuple = ()) -> list[dict]:
    con = _ro(_state_db(ctx, home))
    if con is None:
        return []
    try:
        return [dict(r) for r in con.execute(f"select * from threads {where}", args)]
    except sqlite3.Error:
        return []
    finally:
        con.close()


def _rollout_dirs(home: Path) -> list[Path]:
    return [home / "sessions", home / "archived_sessions"]


def rollouts(home: Path, conversation_id: str) -> list[Path]:
    """Rollout files of one thread (live and archived)."""
    out = []
    for d in _rollout_dirs(home):
        if d.is_dir():
            out.extend(d.glob(f"**/rollout-*-{conversation_id}.jsonl"))
    return sorted(out)


def _iter_rollouts(home: Path) -> Iterator[Path]:
    for d in _rollout_dirs(home):
        if d.is_dir():
            yield from d.glob("**/rollout-*.jsonl")


def session_meta(path: Path) -> dict:
    """The payload of a rollout's first line (``session_meta``), or {}."""
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
        d = json.loads(first)
        if d.get("type") == "session_meta" and isinstance(d.get("payload"), dict):
            return d["payload"]
    except (OSError, ValueError):
        pass
    return {}


def _parent_of_source(source: object) -> str | None:
    """The parent thread id named by a ``threads.source`` / ``session_meta.source`` value."""
    if isinstance(source, str) and source.startswith("{"):
        try:
            source = json.loads(source)
        except ValueError:
            return None
    if isinstance(source, dict):
        sub = source.get("subagent")
        if isinstance(sub, dict):
            for v in sub.values():
                if isinstance(v, dict) and isinstance(v.get("parent_thread_id"), str):
                    return v["parent_thread_id"]
    return None


# ---------------------------------------------------------------------------------------------
# processes and locks


def _proc_locks() -> list[tuple[str, int, str]] | None:
    """``/proc/locks`` as (kind, pid, "maj:min:inode"); None when not available (not Linux)."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[1] in ("FLOCK", "POSIX", "OFDLCK"):
            try:
                out.append((parts[1], int(parts[4]), parts[5]))
            except ValueError:
                continue
    return out


def _lock_key(st: os.stat_result) -> str:
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"


def lock_state(path: Path) -> bool | None:
    """True when someone holds a lock on ``path``, False when no one does, None when it cannot be told."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    locks = _proc_locks()
    if locks is not None:
        key = _lock_key(st)
        return any(k == key for _, _, k in locks)
    # no /proc/locks (macOS): probe with a shared non-blocking flock and let go at once
    try:
        import fcntl

        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return True
        return None
    finally:
        os.close(fd)


def _open_paths(pid: int) -> list[str]:
    """Paths a process has open (regular files). Raises psutil.AccessDenied when we may not look."""
    return [f.path for f in psutil.Process(pid).open_files()]


def _holders_of(paths: Iterable[Path]) -> tuple[dict[str, list[psutil.Process]], bool]:
    """Processes that have one of ``paths`` open, and whether some processes could not be read."""
    want = {os.path.realpath(p): str(p) for p in paths}
    found: dict[str, list[psutil.Process]] = {}
    blind = False
    if not want:
        return found, blind
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            for path in _open_paths(proc.pid):
                real = path if path in want else os.path.realpath(path)
                if real in want:
                    found.setdefault(want[real], []).append(proc)
        except psutil.AccessDenied:
            blind = True
        except (psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
    return found, blind


def _describe(proc: psutil.Process) -> str:
    try:
        import shlex

        cmd = shlex.join(proc.cmdline()) or proc.name()
    except (psutil.Error, OSError):
        cmd = "?"
    if len(cmd) > 200:
        cmd = cmd[:199] + "…"
    return f"pid {proc.pid} {cmd}"


# ---------------------------------------------------------------------------------------------
# the agent


class CodexAgent(Agent):
    """The OpenAI Codex CLI (TUI) as a muxhost agent."""

    name = "codex"
    install_hint = "npm install -g @openai/codex, or set agents.codex.binary in config.yaml"
    #: the node wrapper (``node …/bin/codex``, matched by its script name) and the native ``codex``
    process_names = ("codex", "codex.js")
    #: the native binary under the node wrapper is the agent itself, not work it runs
    resident_children = ("codex",)
    exit_text = "/exit"
    exit_pause = 0.5  # codex takes text followed at once by Enter as a paste
    id_pattern = _UUID

    def __init__(self) -> None:
        # thread id -> ids of its descendants, remembered across a purge: `codex delete` removes
        # the spawn edges, and the residual check must still look at the children's leftovers
        self._families: dict[tuple[str, str], list[str]] = {}

    # -- launch / resume ----------------------------------------------------------------------

    def _command(self, ctx: AgentContext) -> tuple[str, list[str]]:
        binary = find_binary(ctx)
        if binary is None:
            where = ctx.config.get("binary") or "codex on the agent's PATH"
            raise muxhost.MuxhostError(f"codex: cannot find {where} (install @openai/codex, or set "
                                       "agents.codex.binary in config.yaml)")
        switch = in_process_switch(binary, ctx.env or None)
        home = codex_home(ctx)
        warning = daemon_warning(ctx, home)
        if warning:
            how = " ".join(switch)
            note = f"{warning}; muxhost runs it in-process with `{how}`"
            ctx.notes.append(note)
            log.warning("muxhost: warning: %s", note)
        if any(a == "--remote" or a.startswith("--remote=") for a in ctx.args):
            ctx.notes.append("codex: --remote connects to a server muxhost does not own: the conversation lives "
                             "there, and stop/purge cannot reach it")
        return binary, switch

    def launch(self, ctx: AgentContext) -> Launch:
        binary, switch = self._command(ctx)
        return Launch([binary, *switch, *ctx.args])

    def resume(self, ctx: AgentContext, conversation_id: str) -> Launch:
        binary, switch = self._command(ctx)
        return Launch([binary, "resume", *switch, conversation_id])

    # -- discover -------------------------------------------------------------------------------

    def held_threads(self, ctx: AgentContext, home: Path | None = None) -> list[str]:
        """Thread ids whose writer lock (or rollout) the agent's processes have open, oldest first."""
        home = home or codex_home(ctx)
        if not ctx.pids:
            return []
        seen = self._held_by(home, ctx.pids)
        if not seen:
            # the host passes the whole pane tree; another caller may pass only its root
            table = ProcessTable.snapshot()
            tree = [p.pid for pid in ctx.pids for p in table.tree(pid) if p.pid not in ctx.pids]
            seen = self._held_by(home, tree)
        return sorted(seen, key=lambda t: (seen[t], t))

    @staticmethod
    def _held_by(home: Path, pids: Iterable[int]) -> dict[str, float]:
        """{thread id: lock file ctime} for the writer locks and rollouts ``pids`` have open."""
        locks_dir = os.path.realpath(home / "thread-writer-locks")
        roll_dirs = [os.path.realpath(d) + "/" for d in _rollout_dirs(home)]
        seen: dict[str, float] = {}
        for pid in pids:
            try:
                paths = _open_paths(pid)
            except (psutil.Error, OSError):
                continue
            for real in paths:  # the kernel's own, resolved path of each open file
                tid = None
                if os.path.dirname(real) == locks_dir:
                    m = _LOCK_RE.fullmatch(os.path.basename(real))
                    tid = m.group(1) if m else None
                elif any(real.startswith(d) for d in roll_dirs):
                    m = _ROLLOUT_RE.fullmatch(os.path.basename(real))
                    tid = m.group(1) if m else None
                if tid and tid not in seen:
                    try:
                        seen[tid] = os.stat(real).st_ctime
                    except OSError:
                        seen[tid] = time.time()
        return seen

    def parent_of(self, ctx: AgentContext, home: Path, tid: str) -> str | None:
        """The thread that spawned ``tid`` (spawn edge, threads.source, or the rollout's session_meta)."""
        con = _ro(_state_db(ctx, home))
        if con is not None:
            try:
                row = con.execute("select parent_thread_id from thread_spawn_edges where child_thread_id = ?",
                                  (tid,)).fetchone()
                if row:
                    return row[0]
                row = con.execute("select * from threads where id = ?", (tid,)).fetchone()
                if row:
                    row = dict(row)
                    parent = _parent_of_source(row.get("source")) or row.get("attached_thread_parent_id")
                    if parent:
                        return parent
            except sqlite3.Error:
                pass
            finally:
                con.close()
        for path in rollouts(home, tid):
            meta = session_meta(path)
            parent = meta.get("parent_thread_id") or _parent_of_source(meta.get("source"))
            if isinstance(parent, str):
                return parent
        return None

    def discover(self, ctx: AgentContext) -> str | None:
        home = codex_home(ctx)
        held = self.held_threads(ctx, home)
        if held:
            heldset = set(held)
            roots = []
            for tid in held:
                parent = self.parent_of(ctx, home, tid)
                if parent and parent in heldset:
                    continue  # a sub-agent of a thread this agent also holds
                roots.append(tid)
            roots = [t for t in roots if t not in ctx.claimed and self.valid_id(t)]
            # the newest (after /new the TUI moves on to a new thread); when every thread it holds is
            # claimed by another record, guessing from the folder would name one it does not hold
            return roots[-1] if roots else None
        return self.newest_for_cwd(ctx, home)

    def newest_for_cwd(self, ctx: AgentContext, home: Path | None = None) -> str | None:
        """The newest top-level thread in ``ctx.cwd`` created after ``ctx.launched_at``, not claimed."""
        home = home or codex_home(ctx)
        cwds = {ctx.cwd, os.path.realpath(ctx.cwd)} if ctx.cwd else set()
        # created_at_ms and the rollout's timestamp are in milliseconds; allow a little clock skew
        since_ms = int((ctx.launched_at - 0.1) * 1000) if ctx.launched_at else 0
        rows = _thread_rows(ctx, home, "order by created_at desc, id desc")
        candidates: list[tuple[int, str]] = []
        for row in rows:
            created = row.get("created_at_ms") or (row.get("created_at") or 0) * 1000
            if created < since_ms or row.get("cwd") not in cwds:
                continue
            if _parent_of_source(row.get("source")) or row.get("attached_thread_parent_id"):
                continue
            candidates.append((created, row["id"]))
        known = {tid for _, tid in candidates} | {r["id"] for r in rows}
        # rollouts not (yet) in the database
        for path in _iter_rollouts(home):
            m = _ROLLOUT_RE.fullmatch(path.name)
            if not m or m.group(1) in known:
                continue
            try:
                if path.stat().st_mtime * 1000 < since_ms:
                    continue
            except OSError:
                continue
            meta = session_meta(path)
            if meta.get("cwd") not in cwds or meta.get("parent_thread_id") or _parent_of_source(meta.get("source")):
                continue
            created = _parse_ts_ms(meta.get("timestamp"))
            if created is None or created < since_ms:
                continue
            candidates.append((created, m.group(1)))
        for _, tid in sorted(candidates, reverse=True):
            if tid not in ctx.claimed and self.valid_id(tid):
                return tid
        return None

    # -- exists / in_use ----------------------------------------------------------------------------

    def exists(self, ctx: AgentContext, conversation_id: str) -> bool:
        home = codex_home(ctx)
        # the row first: one primary-key lookup, where the rollouts would need a walk of sessions/
        if _thread_rows(ctx, home, "where id = ?", (conversation_id,)):
            return True
        return bool(rollouts(home, conversation_id))

    def family(self, ctx: AgentContext, conversation_id: str, home: Path | None = None) -> list[str]:
        """The thread and every descendant (spawned sub-agents, attached threads), parent first."""
        home = home or codex_home(ctx)
        key = (str(home), conversation_id)
        out = [conversation_id]
        edges: dict[str, set[str]] = {}
        con = _ro(_state_db(ctx, home))
        if con is not None:
            try:
                for r in con.execute("select parent_thread_id, child_thread_id from thread_spawn_edges"):
                    edges.setdefault(r[0], set()).add(r[1])
            except sqlite3.Error:
                pass
            try:
                try:  # only sub-agent and attached threads name a parent
                    rows = con.execute("select id, source, attached_thread_parent_id from threads "
                                       "where attached_thread_parent_id is not null or source like '{%'").fetchall()
                except sqlite3.OperationalError:  # an older schema
                    rows = con.execute("select * from threads where source like '{%'").fetchall()
                for r in rows:
                    r = dict(r)
                    parent = _parent_of_source(r.get("source")) or r.get("attached_thread_parent_id")
                    if parent:
                        edges.setdefault(parent, set()).add(r["id"])
            except sqlite3.Error:
                pass
            finally:
                con.close()
        else:
            # no readable database: the rollouts' session_meta names each sub-agent's parent
            for path in _iter_rollouts(home):
                meta = session_meta(path)
                parent = meta.get("parent_thread_id") or _parent_of_source(meta.get("source"))
                m = _ROLLOUT_RE.fullmatch(path.name)
                if isinstance(parent, str) and m:
                    edges.setdefault(parent, set()).add(m.group(1))
        for child in self._families.get(key, ()):
            edges.setdefault(conversation_id, set()).add(child)
        i = 0
        while i < len(out):
            for child in sorted(edges.get(out[i], ())):
                if child not in out and self.valid_id(child):
                    out.append(child)
            i += 1
        self._families[key] = sorted(set(self._families.get(key, ())) | set(out[1:]))
        return out

    def in_use(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        home = codex_home(ctx)
        fam = self.family(ctx, conversation_id, home)
        locks = {tid: home / "thread-writer-locks" / f"{tid}.lock" for tid in fam}
        present = {tid: p for tid, p in locks.items() if p.exists()}
        holders, blind = _holders_of(present.values())
        out: list[str] = []
        reported: set[int] = set()
        for tid, path in present.items():
            rel = f"thread-writer-locks/{tid}.lock"
            procs = holders.get(str(path), [])
            for proc in procs:
                if proc.pid not in reported:
                    reported.add(proc.pid)
                    out.append(f"{_describe(proc)} (holds {rel})")
            if procs:
                continue
            state = lock_state(path)
            if state is True:
                out.append(f"{ctx.expand(path)} is locked by a process muxhost cannot see")
            elif state is None and blind:
                raise RuntimeError(f"cannot tell whether {ctx.expand(path)} is held")
        table = ProcessTable.snapshot()
        for tid in fam:
            for line in argv_holders(tid, table):
                pid = int(line.split(" ", 2)[1])
                if pid not in reported:
                    reported.add(pid)
                    out.append(line)
        return out

    # -- artifacts / purge --------------------------------------------------------------------------

    def _row_counts(self, ctx: AgentContext, home: Path, tids: list[str]
                    ) -> tuple[dict[str, dict[str, int]], list[tuple[Path, str]]]:
        """{thread id: {table: rows}} over every codex database (read-only), and the databases that
        could not be read (with why): what cannot be read cannot be called gone."""
        counts: dict[str, dict[str, int]] = {t: {} for t in tids}
        errors: list[tuple[Path, str]] = []
        for db in _databases(ctx, home):
            con = _ro(db, errors)
            if con is None:
                continue
            try:
                for table, col in _id_columns(con):
                    marks = ",".join("?" * len(tids))
                    for tid, n in con.execute(
                            f'select "{col}", count(*) from "{table}" where "{col}" in ({marks}) group by 1', tids):
                        counts[tid][table] = counts[tid].get(table, 0) + n
            except sqlite3.Error as e:
                errors.append((db, str(e)))
            finally:
                con.close()
        return counts, errors

    def _files(self, home: Path, tid: str) -> list[Path]:
        out = list(rollouts(home, tid))
        snaps = home / "shell_snapshots"
        if snaps.is_dir():
            out.extend(sorted(snaps.glob(f"{tid}.*")))
        for p in (home / "tui-thread-reference-capabilities" / tid, home / "thread-writer-locks" / f"{tid}.lock"):
            if os.path.lexists(p):
                out.append(p)
        return out

    @staticmethod
    def _jsonl_matcher(key: str, ids: set[str]):
        def match(line: bytes) -> bool:
            if not line.strip():
                return False
            try:
                d = json.loads(line)
            except ValueError:
                return False
            return isinstance(d, dict) and d.get(key) in ids
        return match

    @staticmethod
    def _count_lines(path: Path, match) -> int:
        try:
            with open(path, "rb") as f:
                return sum(1 for line in f if match(line.rstrip(b"\r\n")))
        except OSError:
            return 0

    def artifacts(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        home = codex_home(ctx)
        fam = self.family(ctx, conversation_id, home)
        counts, errors = self._row_counts(ctx, home, fam)
        out: list[str] = [f"{ctx.expand(db)} (could not be read: {why})" for db, why in errors]
        for tid in fam:
            suffix = "" if tid == conversation_id else f" [child thread {tid}]"
            items = [ctx.expand(p) for p in self._files(home, tid)]
            for name, key in (("history.jsonl", "session_id"), ("session_index.jsonl", "id")):
                n = self._count_lines(home / name, self._jsonl_matcher(key, {tid}))
                if n:
                    items.append(f"{ctx.expand(home / name)} ({n} line{'s' if n != 1 else ''} of {tid})")
            for table, n in sorted(counts[tid].items()):
                items.append(f"{table}:{tid}" + (f" ({n} rows)" if n > 1 else ""))
            out.extend(i + suffix for i in items)
        return out

    def purge(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        home = codex_home(ctx)
        fam = self.family(ctx, conversation_id, home)
        before = self.artifacts(ctx, conversation_id)
        dbs = self._dbs_naming(ctx, home, fam)
        removed: list[str] = []
        binary = find_binary(ctx)
        if not self.exists(ctx, conversation_id):
            pass  # no rollout and no row: nothing for `codex delete` to find; the sweep takes the leftovers
        elif binary is None:
            ctx.notes.append("codex: the codex binary was not found; removed the thread with the SQL and file fallback")
        else:
            argv = [binary, "delete", "--force", *DAEMON_OFF, conversation_id]
            env = dict(ctx.env)
            env.pop(RECORD_ENV, None)  # not one of the record's processes: a stop must not take it
            env.setdefault("HOME", str(ctx.home))
            env["CODEX_HOME"] = str(home)
            cwd = ctx.cwd if ctx.cwd and os.path.isdir(ctx.cwd) else str(home if home.is_dir() else ctx.home)
            try:
                p = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                                   text=True, timeout=60)
                if p.returncode == 0:
                    removed.append(f"codex delete --force {conversation_id}")
                else:
                    why = _last_line(p.stderr) or _last_line(p.stdout) or "no message"
                    ctx.notes.append(f"codex: `codex delete --force` failed (exit {p.returncode}: {why}); "
                                     "removed the thread with the SQL and file fallback")
            except (OSError, subprocess.SubprocessError) as e:
                ctx.notes.append(f"codex: `codex delete --force` could not run ({e}); "
                                 "removed the thread with the SQL and file fallback")
        # what `codex delete` leaves (or everything, when it did not run), for the thread and its children
        try:
            left_rows = self._sql_sweep(ctx, home, fam)
        except sqlite3.Error as e:
            left_rows = set()
            ctx.notes.append(f"codex: the SQL sweep failed ({e}); rows may be left (see the residual)")
        if left_rows and removed:
            ctx.notes.append("codex: `codex delete` left rows in " + ", ".join(sorted(left_rows)) + "; removed them")
        ids = set(fam)
        for tid in fam:
            for path in self._files(home, tid):
                try:
                    remove(path)
                except OSError as e:
                    ctx.notes.append(f"codex: could not remove {ctx.expand(path)} ({e.strerror or e})")
        for name, key in (("history.jsonl", "session_id"), ("session_index.jsonl", "id")):
            path = home / name
            if path.exists():
                try:
                    with _flocked(home / f"{name}.lock" if name == "session_index.jsonl" else None):
                        drop_lines(path, self._jsonl_matcher(key, ids))
                except OSError as e:
                    ctx.notes.append(f"codex: could not rewrite {ctx.expand(path)} ({e})")
        if ctx.config.get("vacuum", True):
            for db in dbs:
                self._scrub(ctx, db)
        after = set(self.artifacts(ctx, conversation_id))
        removed.extend(item for item in before if item not in after)
        return removed

    def _dbs_naming(self, ctx: AgentContext, home: Path, tids: list[str]) -> list[Path]:
        """The databases that have a row naming one of ``tids`` (read-only)."""
        return [db for db, _ in _naming(ctx, home, tids)]

    @staticmethod
    def _scrub(ctx: AgentContext, db: Path) -> None:
        """Deleted rows stay readable in free pages and in the WAL until SQLite reuses them:
        checkpoint the WAL and VACUUM, so the thread's text is gone from the file too."""
        from muxhost.fsutil import compact_sqlite

        problem = compact_sqlite(db, timeout=_RW_TIMEOUT)
        if problem:
            ctx.notes.append(f"codex: {ctx.expand(db)}: {problem}")

    def _sql_sweep(self, ctx: AgentContext, home: Path, tids: list[str]) -> set[str]:
        """Delete every row naming one of ``tids``: one read-write transaction per database.
        Returns the tables that had rows."""
        touched: set[str] = set()
        marks = ",".join("?" * len(tids))
        for db, pairs in _naming(ctx, home, tids):
            con = sqlite3.connect(str(db), timeout=_RW_TIMEOUT, isolation_level=None)
            try:
                con.execute("begin immediate")
                for _ in range(3):  # triggers may write rows back (queue revisions): sweep until none left
                    changed = 0
                    for table, col in pairs:
                        cur = con.execute(f'delete from "{table}" where "{col}" in ({marks})', tids)
                        if cur.rowcount > 0:
                            touched.add(table)
                            changed += cur.rowcount
                    if not changed:
                        break
                con.execute("commit")
            except sqlite3.Error:
                if con.in_transaction:
                    con.execute("rollback")
                raise
            finally:
                con.close()
        return touched


class _flocked:
    """Hold an exclusive flock on ``path`` (codex's own lock file for a jsonl index) while rewriting."""

    def __init__(self, path: Path | None, timeout: float = 5.0):
        self.path, self.timeout, self.fd = path, timeout, None

    def __enter__(self):
        if self.path is None or not self.path.exists():
            return self
        try:
            import fcntl
        except ImportError:  # pragma: no cover
            return self
        self.fd = os.open(self.path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() > deadline:
                    os.close(self.fd)
                    self.fd = None
                    raise OSError(f"{self.path} stayed locked; left {self.path.name[:-5]} as it was") from e
                time.sleep(0.05)

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock
        return False


def _parse_ts_ms(value: object) -> int | None:
    if not isinstance(value, str):
        return None
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _last_line(text: str) -> str:
    """The line that says what went wrong: codex's ``Error: …`` line, else the last plain line
    (never its PATH-alias warning or a backtrace frame)."""
    lines = [ln.strip() for ln in (text or "").splitlines()
             if ln.strip() and "could not create PATH aliases" not in ln]
    errors = [ln for ln in lines if ln.lower().startswith("error")]
    plain = [ln for ln in lines if not re.match(r"(\d+:|at |Stack backtrace)", ln)]
    pick = errors or plain
    return pick[0 if errors else -1][:200] if pick else ""


@muxhost.hookimpl
def muxhost_register_agents(register):
    register(CodexAgent())
