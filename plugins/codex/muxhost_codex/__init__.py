"""muxhost plugin for the OpenAI Codex CLI (``codex``, npm ``@openai/codex``). Where codex keeps a
conversation ("thread"), under ``$CODEX_HOME`` (default ``~/.codex``):

- ``sessions/YYYY/MM/DD/rollout-<ts>-<id>.jsonl`` (and ``archived_sessions/``): the transcript;
  its first line (``session_meta``) names the cwd and, for a sub-agent, its parent thread;
- SQLite databases (in ``$CODEX_SQLITE_HOME`` / ``sqlite_home`` or ``$CODEX_HOME``): ``state_5``
  (``threads``, ``thread_spawn_edges`` for sub-agents, …), ``thread_history_1``, ``logs_2``, ``goals_1``,
  ``memories_1``, ``queue_1`` (``.sqlite``);
- ``history.jsonl`` (one line per typed prompt, ``session_id``), ``session_index.jsonl`` (``id``,
  guarded by codex's ``session_index.jsonl.lock``), ``shell_snapshots/<id>.*``,
  ``tui-thread-reference-capabilities/<id>``, ``thread-writer-locks/<id>.lock``.

A running codex holds an exclusive ``flock`` on ``thread-writer-locks/<id>.lock`` for every thread it
writes (sub-agents' too) and keeps it open: that is how "in use" is told. A purge is a typed plan the
host carries out: ``codex delete --force`` while the thread is on disk, then every row of every codex
database naming it, its lines in the shared JSONL files, its files; the host walks ``children``.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from muxhost.api import Activity, Agent, AgentContext, Launch, hookimpl, kit
from muxhost_codex.activity import (APPROVAL_FOOTER, APPROVAL_WORDS, QUESTION_FOOTER, TURN_CLOSED, TURN_OPEN,
                                    _turns, asks_user, last_turn, parse_ts_ms, rollout_stalled)  # noqa: F401  (the names it had)

__version__ = "0.1.0"

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_LOCK_RE = re.compile(rf"({_UUID})\.lock")
_ROLLOUT_RE = re.compile(rf"rollout-.*-({_UUID})\.jsonl")
#: the ``-c`` override that keeps codex from handing the conversation to a detached daemon
DAEMON_OFF = ("-c", "features.daemon_auto_start=false")
#: columns that hold a thread id, in any table of any codex database
ID_COLUMNS = ("thread_id", "child_thread_id", "parent_thread_id", "session_id", "conversation_id")
#: (table, column) pairs whose column name does not say "thread"
EXTRA_ID_COLUMNS = (("threads", "id"), ("jobs", "job_key"))
ROLLOUT_DIRS = ("sessions", "archived_sessions")  # of CODEX_HOME
#: variables codex gives the commands it runs: a tool that outlives codex still works in the thread
ENV_VARS = ("CODEX_THREAD_ID", "CODEX_SESSION_ID")

_help_cache: dict[tuple[str, float], str] = {}
_config_cache: dict[str, tuple[tuple[int, int, int], dict]] = {}
_rollout_paths: dict[str, Path] = {}  # thread id -> its rollout


# -- where things are ---------------------------------------------------------------------------


def codex_home(ctx: AgentContext) -> Path:
    """``$CODEX_HOME`` from the agent's environment (``~`` is the agent's HOME), else ``<home>/.codex``."""
    value = ctx.env.get("CODEX_HOME")
    return ctx.resolve(value) if value else Path(ctx.home) / ".codex"


def read_config(home: Path) -> dict:
    """``config.toml`` as a dict ({} when missing or unreadable); parsed again only when it changed."""
    path = home / "config.toml"
    try:
        st = path.stat()
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if _config_cache.get(str(path), (None,))[0] != key:
            _config_cache[str(path)] = (key, _parse_config(path.read_text("utf-8", "replace")))
    except OSError:
        return {}
    return _config_cache[str(path)][1]


def _parse_config(text: str) -> dict:
    try:  # imported here: most muxhost commands never read codex's config
        import tomllib as toml
    except ImportError:  # pragma: no cover - Python 3.10
        try:
            import tomli as toml  # type: ignore[no-redef]
        except ImportError:
            return _toml_fallback(text)
    try:
        return toml.loads(text)
    except Exception:  # a broken config (codex itself will say so) may still move the databases
        return _toml_fallback(text)


def _toml_fallback(text: str) -> dict:
    """The two keys we read, ``sqlite_home`` and ``features.daemon_auto_start``, from a config that
    tomllib refuses (or with no tomllib at all): a purge must still find the databases."""
    out: dict = {}
    section = ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            section = line.strip("[] ").replace('"', "")
        elif m := re.fullmatch(r'"?([\w.-]+)"?\s*=\s*(.+)', line):
            key, value = f"{section}.{m[1]}".lstrip("."), m[2].strip()
            if key == "sqlite_home":
                out[key] = value.strip('"')
            elif key == "features.daemon_auto_start" and value in ("true", "false"):
                out["features"] = {"daemon_auto_start": value == "true"}
    return out


def sqlite_home(ctx: AgentContext, home: Path | None = None) -> Path:
    """Where codex keeps its SQLite files: ``$CODEX_SQLITE_HOME``, config ``sqlite_home``, else CODEX_HOME."""
    home = home or codex_home(ctx)
    value = ctx.env.get("CODEX_SQLITE_HOME") or read_config(home).get("sqlite_home")
    return ctx.resolve(value) if isinstance(value, str) and value else home


def _help_text(binary: str, base_env: dict[str, str] | None = None) -> str:
    """``codex --help`` (cached per binary and mtime). It runs with the agent's environment (node must
    be on its PATH) but a CODEX_HOME that does not exist: then it writes nothing anywhere."""
    import subprocess

    from muxhost.api import RECORD_ENV

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
    return ["--no-daemon"] if binary and "--no-daemon" in _help_text(binary, env) else list(DAEMON_OFF)


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


def _databases(ctx: AgentContext, home: Path) -> list[Path]:
    """Every codex database (``*.sqlite`` of the SQLite home, and of CODEX_HOME when that differs)."""
    return [p for d in dict.fromkeys([sqlite_home(ctx, home), home]) for p in sorted(d.glob("*.sqlite")) if p.is_file()]


def _state_db(ctx: AgentContext, home: Path) -> Path:
    """The newest ``state_<N>.sqlite`` (``threads``, ``thread_spawn_edges``)."""
    base = sqlite_home(ctx, home)
    found = sorted(base.glob("state_*.sqlite"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    return found[-1] if found else base / "state_5.sqlite"


def _threads(ctx: AgentContext, home: Path, where: str = "", args: tuple = ()) -> list[dict]:
    """Rows of ``threads`` ([] when there is no state database, or none that can be read)."""
    try:
        return [dict(r) for r in kit.sqlite.rows(_state_db(ctx, home), f"select * from threads {where}", args)]
    except kit.sqlite.DatabaseError:
        return []


def rollouts(home: Path, conversation_id: str = "*") -> list[Path]:
    """Rollout files of one thread, live and archived (``"*"``: of every thread)."""
    return sorted(p for d in ROLLOUT_DIRS for p in (home / d).glob(f"**/rollout-*-{conversation_id}.jsonl"))


def session_meta(path: Path) -> dict:
    """The payload of a rollout's first line (``session_meta``), or {}."""
    try:
        with open(path, "rb") as f:
            d = json.loads(f.readline(1 << 20))
        if d.get("type") == "session_meta" and isinstance(d.get("payload"), dict):
            return d["payload"]
    except (OSError, ValueError, AttributeError):
        pass
    return {}


def _parent(d: dict) -> str | None:
    """The parent thread a ``threads`` row or a ``session_meta`` names: ``parent_thread_id``, the
    sub-agent ``source`` (``{"subagent": {<how>: {"parent_thread_id": …}}}``, JSON text in a row) or
    ``attached_thread_parent_id``. None: a top-level thread."""
    source = d.get("source")
    if isinstance(source, str) and source.startswith("{"):
        try:
            source = json.loads(source)
        except ValueError:
            source = None
    sub = source.get("subagent") if isinstance(source, dict) else None
    named = [v.get("parent_thread_id") for v in sub.values() if isinstance(v, dict)] if isinstance(sub, dict) else []
    parent = (d.get("parent_thread_id") or next((p for p in named if isinstance(p, str)), None)
              or d.get("attached_thread_parent_id"))
    return parent if isinstance(parent, str) else None


def rollout_of(ctx: AgentContext, home: Path, tid: str) -> Path | None:
    """The live rollout of thread ``tid``: its ``threads.rollout_path`` (one primary-key lookup),
    else in the ``sessions/`` folders of the days its id (a UUIDv7) and today name; remembered once
    found. None before its first prompt."""
    from datetime import datetime, timezone

    path = _rollout_paths.get(tid)
    if path is not None and path.is_file():
        return path
    try:
        found = [Path(r[0]) for r in kit.sqlite.rows(_state_db(ctx, home), "select rollout_path from threads where id = ?",
                                                      (tid,), timeout=0.2) if isinstance(r[0], str)]
    except kit.sqlite.DatabaseError:
        found = []
    if not (found and found[0].is_file()):
        try:
            stamps = (int(tid.replace("-", "")[:12], 16) / 1000, time.time())
            days = {d.strftime("%Y/%m/%d") for t in stamps for d in (datetime.fromtimestamp(t),
                                                                   datetime.fromtimestamp(t, timezone.utc))}
        except (ValueError, OverflowError, OSError):
            days = set()
        found = sorted(p for d in days for p in (home / "sessions" / d).glob(f"rollout-*-{tid}.jsonl"))
    if found and found[0].is_file():
        _rollout_paths[tid] = found[0]
        return found[0]
    return None


# -- the agent -----------------------------------------------------------------------------------


class CodexAgent(Agent):
    """The OpenAI Codex CLI (TUI) as a muxhost agent."""

    name = "codex"
    install_hint = "npm install -g @openai/codex, or set agents.codex.binary in config.yaml"
    #: the npm wrapper ``node …/bin/codex.js`` (matched by its script name) and the native ``codex``
    #: it runs as its child: one agent
    process_names = ("codex", "codex.js")
    #: the native binary under the node wrapper is the agent itself, not work it runs
    resident_children = ("codex",)
    exit_pause = 0.5  # codex takes text followed at once by Enter as a paste
    # /exit to gone: 0.12-0.14 s measured under load 5-6, 0.3-0.5 s under load 21 (docs/stop.md);
    # quiet for 0.03 s at most
    exit_grace, exit_still = 3.0, 1.0
    id_pattern = _UUID

    # -- launch / resume ----------------------------------------------------------------------
    def _command(self, ctx: AgentContext) -> tuple[str, list[str]]:
        binary = ctx.find_binary("codex", self.install_hint)
        switch = in_process_switch(binary, ctx.env or None)
        warning = daemon_warning(ctx, codex_home(ctx))
        if warning:
            import logging

            note = f"{warning}; muxhost runs it in-process with `{' '.join(switch)}`"
            ctx.notes.append(note)
            logging.getLogger("muxhost.codex").warning("muxhost: warning: %s", note)
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
            table = ctx.process_table()
            seen = self._held_by(home, [p.pid for pid in ctx.pids for p in table.tree(pid) if p.pid not in ctx.pids])
        return sorted(seen, key=lambda t: (seen[t], t))

    @staticmethod
    def _held_by(home: Path, pids: list[int]) -> dict[str, float]:
        """{thread id: lock file ctime} for the writer locks and rollouts ``pids`` have open."""
        import psutil

        locks_dir = os.path.realpath(home / "thread-writer-locks")
        roll_dirs = [os.path.realpath(home / d) + "/" for d in ROLLOUT_DIRS]
        seen: dict[str, float] = {}
        for pid in pids:
            try:
                paths = kit.holders.open_paths(pid)
            except (psutil.Error, OSError):
                continue
            for real in paths:  # the kernel's own, resolved path of each open file
                m = None
                if os.path.dirname(real) == locks_dir:
                    m = _LOCK_RE.fullmatch(os.path.basename(real))
                elif any(real.startswith(d) for d in roll_dirs):
                    m = _ROLLOUT_RE.fullmatch(os.path.basename(real))
                if m and m.group(1) not in seen:
                    try:
                        seen[m.group(1)] = os.stat(real).st_ctime
                    except OSError:
                        seen[m.group(1)] = time.time()
        return seen

    def parent_of(self, ctx: AgentContext, home: Path, tid: str) -> str | None:
        """The thread that spawned ``tid`` (spawn edge, threads.source, or the rollout's session_meta)."""
        try:
            edge = kit.sqlite.rows(_state_db(ctx, home), "select parent_thread_id from thread_spawn_edges"
                                                         " where child_thread_id = ?", (tid,))
        except kit.sqlite.DatabaseError:
            edge = []
        if edge and isinstance(edge[0][0], str):
            return edge[0][0]
        for row in _threads(ctx, home, "where id = ?", (tid,)):
            if _parent(row):
                return _parent(row)
        return next((p for p in map(_parent, map(session_meta, rollouts(home, tid))) if p), None)

    def discover(self, ctx: AgentContext) -> str | None:
        home = codex_home(ctx)
        held = self.held_threads(ctx, home)
        if held:
            # not a sub-agent of a thread this agent also holds
            roots = [t for t in held if self.parent_of(ctx, home, t) not in held]
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
        rows = _threads(ctx, home, "order by created_at desc, id desc")
        candidates: list[tuple[int, str]] = []
        for row in rows:
            created = row.get("created_at_ms") or (row.get("created_at") or 0) * 1000
            if created >= since_ms and row.get("cwd") in cwds and not _parent(row):
                candidates.append((created, row["id"]))
        known = {r["id"] for r in rows}
        for path in rollouts(home):  # rollouts not (yet) in the database
            m = _ROLLOUT_RE.fullmatch(path.name)
            try:
                if not m or m.group(1) in known or path.stat().st_mtime * 1000 < since_ms:
                    continue
            except OSError:
                continue
            meta = session_meta(path)
            created = parse_ts_ms(meta.get("timestamp"))
            if meta.get("cwd") in cwds and not _parent(meta) and created is not None and created >= since_ms:
                candidates.append((created, m.group(1)))
        for _, tid in sorted(candidates, reverse=True):
            if tid not in ctx.claimed and self.valid_id(tid):
                return tid
        return None

    # -- activity -------------------------------------------------------------------------------

    def activity(self, ctx: AgentContext, screen: str | None) -> Activity | None:
        """``waiting`` while the screen ends in an approval prompt or a question (codex writes
        neither to its rollout). Else the rollout of the record's thread (which thread that is, is
        ``discover``'s to say: the watch asks it every pass until the record has one): ``working``
        while its last turn is open (a request or a tool in flight), or closed while a sub-agent's
        is open; ``idle`` once closed. A turn opened before this launch (a killed codex left it) is
        closed. An open turn that waits on the model with no sign of life is ``stalled``
        (:func:`rollout_stalled`). No thread or no rollout yet: no opinion."""
        if screen is not None and asks_user(screen):
            return Activity("waiting", "screen: an approval prompt or a question at the bottom")
        home = codex_home(ctx)
        tid = ctx.conversation_id
        path = rollout_of(ctx, home, tid) if tid else None
        turn = last_turn(path) if path else None
        if turn is None:
            return None
        if self._open(turn, ctx):
            return rollout_stalled(path, ctx) or Activity("working", f"rollout: the last turn of {path.name} is open")
        if self._sub_agent_working(ctx, home, tid):
            return Activity("working", "rollout: a sub-agent's last turn is open (state database: its spawn edge)")
        return Activity("idle", f"rollout: the last turn of {path.name} closed")

    @staticmethod
    def _open(turn: tuple[bool, float] | None, ctx: AgentContext) -> bool:
        """An open turn of this launch (one opened before it was left by a codex that is gone)."""
        return bool(turn and turn[0] and not (ctx.launched_at and turn[1] and turn[1] < ctx.launched_at))

    def _sub_agent_working(self, ctx: AgentContext, home: Path, tid: str) -> bool:
        """True when a sub-agent ``tid`` spawned (a spawn edge: one indexed query) has an open turn."""
        try:
            kids = kit.sqlite.rows(_state_db(ctx, home), "select child_thread_id from thread_spawn_edges"
                                                         " where parent_thread_id = ?", (tid,), timeout=0.2)
        except kit.sqlite.DatabaseError:
            return False
        return any(self._open(last_turn(path), ctx) for (kid,) in kids
                   if isinstance(kid, str) and (path := rollout_of(ctx, home, kid)))

    def conversations(self, ctx: AgentContext) -> list:
        """Every rollout (live and archived): cwd, creation time, parent and first prompt from its
        first lines (``session_meta``, the first ``user_message``); the ``threads`` row's first user
        message or title when there is one; children from the parents the rollouts name."""
        home = codex_home(ctx)
        parents: dict[str, str | None] = {}

        def describe(path: Path, entries: list[dict]) -> dict:
            meta = next((e["payload"] for e in entries[:1] if e.get("type") == "session_meta"
                         and isinstance(e.get("payload"), dict)), {})
            if m := _ROLLOUT_RE.fullmatch(path.name):
                parents[m.group(1)] = _parent(meta)
            said = next((e["payload"].get("message") for e in entries if e.get("type") == "event_msg"
                         and isinstance(e.get("payload"), dict) and e["payload"].get("type") == "user_message"), "")
            ms = parse_ts_ms(meta.get("timestamp"))
            return {"cwd": meta.get("cwd") if isinstance(meta.get("cwd"), str) else None,
                    "created": ms / 1000 if ms else None, "title": kit.conversations.title(said)}

        found = [c for d in ROLLOUT_DIRS for c in kit.conversations.rollouts(home / d, _UUID, describe,
                                                                             limit=1 << 18)]
        rows = {r["id"]: r for r in _threads(ctx, home)}
        for tid, row in rows.items():  # (a sub-agent's row names its parent too)
            parents[tid] = parents.get(tid) or _parent(row)
        for conv in found:
            row = rows.get(conv.id) or {}
            conv.title = conv.title or kit.conversations.title(row.get("first_user_message") or row.get("title"))
            conv.children = sorted(k for k, p in parents.items() if p == conv.id)
        return found

    # -- exists / children / in_use -------------------------------------------------------------
    def exists(self, ctx: AgentContext, conversation_id: str) -> bool:
        home = codex_home(ctx)
        # the row first: one primary-key lookup, where the rollouts would need a walk of sessions/
        return bool(_threads(ctx, home, "where id = ?", (conversation_id,)) or rollouts(home, conversation_id))

    def children(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        """The sub-agent (and attached) threads ``conversation_id`` started: spawn edges and
        ``threads.source``; without a state database it can read, the rollouts' ``session_meta``.
        A database that reads but cannot be queried raises: the host then refuses the purge."""
        home = codex_home(ctx)
        db = _state_db(ctx, home)
        try:
            tables = kit.sqlite.columns(db)
        except kit.sqlite.DatabaseError:
            tables = {}
        if not tables:
            return sorted({m.group(1) for path in rollouts(home) if (m := _ROLLOUT_RE.fullmatch(path.name))
                           and _parent(session_meta(path)) == conversation_id})
        kids = set()
        if "thread_spawn_edges" in tables:
            kids |= {r[0] for r in kit.sqlite.rows(db, "select child_thread_id from thread_spawn_edges"
                                                       " where parent_thread_id = ?", (conversation_id,))}
        if "threads" in tables:  # only sub-agent and attached threads name a parent
            attached = "attached_thread_parent_id" in tables["threads"]
            sql = "select * from threads where source like '{%'" + (" or attached_thread_parent_id = ?" if attached else "")
            kids |= {r["id"] for r in kit.sqlite.rows(db, sql, (conversation_id,) if attached else ())
                     if _parent(dict(r)) == conversation_id}
        return sorted(k for k in kids if isinstance(k, str))

    def in_use(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        """A process with the thread's writer lock locked or open (a lock file a killed codex left
        holds nothing), or its rollout open; one whose argv names the thread; one with the thread in
        ``CODEX_THREAD_ID``. A lock held by a process muxhost cannot see counts (fail closed)."""
        home = codex_home(ctx)
        lock = home / "thread-writer-locks" / f"{conversation_id}.lock"
        return kit.holders.holders(ctx, conversation_id, env_vars=ENV_VARS, files=[lock, *rollouts(home, conversation_id)],
                                   locks=[lock], names=self.process_names)

    # -- the purge plan -------------------------------------------------------------------------
    def roots(self, ctx: AgentContext) -> list[Path]:
        home = codex_home(ctx)
        return [*super().roots(ctx), home, sqlite_home(ctx, home)]

    def _own_delete(self, ctx: AgentContext, home: Path, tid: str) -> list:
        """``codex delete --force ID`` while the thread is on disk. Not for a sub-agent whose parent is
        there too: codex deletes a thread's sub-agents with it, and would fail on one already gone."""
        from muxhost.api import MuxhostError, artifacts

        if not self.exists(ctx, tid):
            return []  # nothing for it to find (a TUI killed before its first prompt): it would fail
        parent = self.parent_of(ctx, home, tid)
        if parent and self.valid_id(parent) and self.exists(ctx, parent):
            return []
        try:
            binary = ctx.find_binary("codex", self.install_hint)
        except MuxhostError:  # the host notes it did not run; the rest of the plan removes it all
            binary = str(ctx.config.get("binary") or "codex")
        return [artifacts.Command([binary, "delete", "--force", *DAEMON_OFF, tid], env={"CODEX_HOME": str(home)})]

    def artifacts(self, ctx: AgentContext, conversation_id: str) -> list:
        """The thread's own delete, then what it leaves: every row of every codex database with a
        thread-id column naming it (read from the live schema; a database that cannot be read is a
        Leftover, never absent), its lines in ``history.jsonl`` and ``session_index.jsonl`` (the
        latter under codex's own lock), its rollouts, shell snapshots, capabilities and lock files."""
        from muxhost.api import artifacts

        cid = conversation_id
        home = codex_home(ctx)
        out: list = self._own_delete(ctx, home, cid)
        for db in _databases(ctx, home):
            try:
                tables = kit.sqlite.columns(db)
            except kit.sqlite.DatabaseError as e:
                out.append(artifacts.Leftover(db, f"could not be read: {e.__cause__ or e}"))
                continue
            out += [artifacts.Rows(db, table, col, value=cid) for table, cols in tables.items() for col in cols
                    if col in ID_COLUMNS or (table, col) in EXTRA_ID_COLUMNS]
        out += [artifacts.Lines(home / "history.jsonl", key="session_id", value=cid),
                artifacts.Lines(home / "session_index.jsonl", key="id", value=cid,
                                lock=artifacts.FlockFile(home / "session_index.jsonl.lock"))]
        files = [*rollouts(home, cid), *sorted((home / "shell_snapshots").glob(f"{cid}.*")),
                 home / "tui-thread-reference-capabilities" / cid, home / "thread-writer-locks" / f"{cid}.lock"]
        out += [artifacts.Dir(p) if p.is_dir() and not p.is_symlink() else artifacts.File(p) for p in files]
        return out


@hookimpl
def muxhost_register_agents(register):
    register(CodexAgent())
