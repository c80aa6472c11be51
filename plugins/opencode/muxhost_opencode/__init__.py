"""muxhost plugin for the OpenCode CLI (``opencode``, tested with 1.18.33).

Where opencode keeps a conversation ("session"):

- one SQLite database in WAL mode: ``$OPENCODE_DB`` (absolute, or relative to the data folder), else
  ``<data home>/opencode/opencode.db``. A session is a ``session`` row ``ses_…``; a sub-agent (the
  ``task`` tool) is a session row whose ``parent_id`` is the session that started it, at any depth.
  Per-session rows live in ``message``, ``part``, ``todo``, ``session_share``, ``session_message``,
  ``session_input``, ``session_context_epoch`` (column ``session_id``) and in ``event`` /
  ``event_sequence`` (column ``aggregate_id``, no foreign key);
- ``<data>/opencode/storage/session_diff/<id>.json`` (and older JSON storage: ``storage/*/<id>.json``,
  ``storage/message/<id>/``, ``storage/part/<message id>/``);
- a plan file ``<data>/opencode/plans/<time_created>-<slug>.md`` (``<worktree>/.opencode/plans/…`` in
  a git project);
- lines naming the id in ``<data>/opencode/log/*.log`` (one log every opencode process appends to,
  each line tagged with the writing process's ``run=`` id; written lazily);
- the TUI's typed prompts in ``<state>/opencode/prompt-history.jsonl`` (no session id in them).

Nothing on disk says a session is open: a process holds it when its argv names the id (``-s ID``),
and any process that has the database open may hold any session of it (a TUI without ``-s``).
Every read here goes through a read-only connection that never waits long for a lock.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import psutil

import muxhost
from muxhost import fsutil, procs
from muxhost.agent import Agent, AgentContext, Launch
from muxhost.errors import MuxhostError

__all__ = ["OpenCodeAgent", "muxhost_register_agents"]

ID_PATTERN = r"ses_[0-9A-Za-z]{26}"
_ID_RE = re.compile(ID_PATTERN)

#: seconds a read waits for a lock before giving up (a reader never blocks opencode itself)
READ_TIMEOUT = 1.0
#: seconds the purge's write transaction waits for opencode's own writers
WRITE_TIMEOUT = 10.0
#: seconds ``opencode session delete`` may take (its start-up may npm-install a plugin)
DELETE_TIMEOUT = 60.0

#: language servers opencode starts for itself (``lsp`` in its config): resident, not work
LSP_SERVERS = (
    "typescript-language-server", "pyright-langserver", "gopls", "rust-analyzer", "clangd",
    "bash-language-server", "yaml-language-server", "lua-language-server", "ruby-lsp", "jdtls",
    "elixir-ls", "zls", "svelteserver", "astro-ls", "vue-language-server", "sourcekit-lsp",
    "haskell-language-server-wrapper", "nixd", "ocamllsp", "terraform-ls", "texlab", "tinymist",
    "clojure-lsp", "docker-langserver", "fsautocomplete", "intelephense", "csharp-ls",
    "vscode-eslint-language-server", "kotlin-lsp",
)

# Per-session rows are found from the live schema: every table with a ``session_id`` column (a table
# a later opencode adds is picked up, one it drops is skipped), plus these tables by ``aggregate_id``.
_AGGREGATE_TABLES = ("event", "event_sequence")
_SKIP_TABLES = ("session",)


@dataclass(frozen=True)
class Row:
    table: str
    key: str
    session: str


#: git: opencode's own snapshots and VCS queries run ``git`` as its direct child (in a git project, at
#: start-up and after each step); a tool's git runs under the tool's shell and stays work
RESIDENT_CHILDREN = ("git", *LSP_SERVERS)


class OpenCodeAgent(Agent):
    name = "opencode"
    install_hint = "npm install -g opencode-ai, or set agents.opencode.binary in config.yaml"
    process_names = ("opencode", "opencode.exe")
    #: the TUI and its server are one process; what it starts for itself: language servers, git
    resident_children = RESIDENT_CHILDREN
    exit_text = "/exit"
    id_pattern = ID_PATTERN

    # -- where things are ----------------------------------------------------------------------
    def binary(self, ctx: AgentContext) -> str | None:
        """The opencode executable: config ``binary``, else ``opencode`` on the agent's PATH."""
        configured = ctx.config.get("binary")
        if configured:
            return str(configured)
        return shutil.which("opencode", path=ctx.env.get("PATH", os.defpath))

    def data_dir(self, ctx: AgentContext) -> Path:
        return ctx.data_home() / "opencode"

    def db_path(self, ctx: AgentContext) -> Path | None:
        """The database opencode uses with this environment (None for ``OPENCODE_DB=:memory:``)."""
        value = ctx.env.get("OPENCODE_DB")
        if value:
            if value == ":memory:":
                return None
            path = Path(value).expanduser() if value.startswith("~/") else Path(value)
            return path if path.is_absolute() else self.data_dir(ctx) / path
        return self.data_dir(ctx) / "opencode.db"

    # -- the Agent API -------------------------------------------------------------------------
    # opencode takes its directory (the session's ``directory``) from $PWD when it is set, so a
    # PWD inherited from whoever ran muxhost would file the session under the wrong folder
    def launch(self, ctx: AgentContext) -> Launch:
        return Launch([self._require_binary(ctx), *ctx.args], env=self._pwd(ctx))

    def resume(self, ctx: AgentContext, conversation_id: str) -> Launch:
        return Launch([self._require_binary(ctx), "-s", conversation_id], env=self._pwd(ctx),
                      conversation_id=conversation_id)

    def discover(self, ctx: AgentContext) -> str | None:
        """The parent session the agent is in: the newest top-level session created in its cwd since
        launch (a sub-agent's child row never counts), else the id after ``-s``/``--session`` in its
        argv, else (``-c``/``--continue``) the last updated top-level session in its cwd, else what
        the record knew.

        Two opencode TUIs in one folder both see each other's new sessions. Where opencode's log
        says which run created a session and which run this agent's process is (Linux), only the
        sessions this agent created count."""
        claimed = set(ctx.claimed)
        argvs = self._argvs(ctx.pids)
        dirs = sorted({ctx.cwd, os.path.realpath(ctx.cwd)} - {""}) if ctx.cwd else []
        marks = ",".join("?" * len(dirs))
        con = self._read(ctx) if dirs else None
        try:
            if con is not None:
                fresh = [sid for sid in self._roots(con, f"directory in ({marks}) and time_created >= ?"
                                                    " order by time_created desc, id desc",
                                                    (*dirs, int(ctx.launched_at * 1000)))
                         if sid not in claimed]
                if fresh:
                    sid = self._mine(ctx, fresh)
                    if sid:
                        return sid
            for argv in argvs:
                sid = session_from_argv(argv)
                if sid and self.valid_id(sid) and sid not in claimed:
                    return sid
            if con is not None and any(a in ("-c", "--continue") for argv in argvs for a in argv):
                for sid in self._roots(con, f"directory in ({marks}) order by time_updated desc, id desc", dirs):
                    if sid not in claimed:
                        return sid
        finally:
            if con is not None:
                con.close()
        return ctx.conversation_id

    def _mine(self, ctx: AgentContext, fresh: list[str]) -> str | None:
        """The newest of ``fresh`` (new top-level sessions in the folder, newest first) that this
        agent created. When the log cannot tell which run this agent is: the newest. When it can, a
        session the log gives to another run is never taken; one it does not name yet (opencode
        writes its log lazily) only while no other process has the database open."""
        runs = self._own_runs(ctx)
        if not runs:
            return fresh[0]
        creators = self._creators(ctx)
        for sid in fresh:
            if creators.get(sid) in runs:
                return sid
        unknown = [sid for sid in fresh if sid not in creators]
        db = self.db_path(ctx)
        if unknown and db is not None:
            mine = set(ctx.pids)
            others = [p for p, _why in self._db_openers(db, procs.ProcessTable.snapshot()) if p.pid not in mine]
            if not others:
                return unknown[0]
        return None

    # opencode's log (one file every opencode process appends to) tags each line with the process's
    # run id, and says ``message=created id=ses_…`` when a run creates a session. On Linux the offset
    # of a process's O_APPEND log descriptor is the end of the last line that process wrote.
    def _own_runs(self, ctx: AgentContext) -> set[str]:
        """The run ids of the opencode processes among ``ctx.pids`` (empty when unknown)."""
        logdir = os.path.realpath(self.data_dir(ctx) / "log")
        runs: set[str] = set()
        for pid in ctx.pids:
            try:
                ps = psutil.Process(pid)
                if not procs.Proc(pid, 0, 0.0, ps.name(), tuple(ps.cmdline())).matches_name(self.process_names):
                    continue
                files = ps.open_files()
            except (psutil.Error, OSError):
                continue
            for f in files:
                position = getattr(f, "position", None)
                if position and os.path.dirname(f.path) == logdir and f.path.endswith(".log"):
                    run = _run_ending_at(f.path, position)
                    if run:
                        runs.add(run)
        return runs

    def _creators(self, ctx: AgentContext) -> dict[str, str]:
        """session id -> the run id that created it, for sessions logged since launch (only the
        log's tail is read: `ls` asks this for every running agent)."""
        since = ctx.launched_at - 60 if ctx.launched_at else None
        return {sid: run for sid, (run, _parent) in self._logged_sessions(ctx, since).items()}

    def _logged_sessions(self, ctx: AgentContext, since: float | None = None) -> dict[str, tuple[str, str | None]]:
        """session id -> (run id that created it, parent id or None), from ``message=created`` lines
        (of lines logged at or after ``since`` epoch seconds, roughly, when given)."""
        out: dict[str, tuple[str, str | None]] = {}
        logs = self.data_dir(ctx) / "log"
        for path in sorted(logs.glob("*.log")) if logs.is_dir() else ():
            try:
                with open(path, "rb") as f:
                    if since is not None:
                        f.seek(_offset_since(f, since))
                    for line in f:
                        if b"message=created" not in line:
                            continue
                        m = _CREATED_RE.search(line)
                        if m and m.group(2).decode() not in out:
                            parent = _PARENT_RE.search(line)
                            out[m.group(2).decode()] = (m.group(1).decode(), parent.group(1).decode() if parent else None)
            except OSError:
                continue
        return out

    def _roots(self, con: sqlite3.Connection, where: str, params) -> list[str]:
        try:
            rows = con.execute(f"select id from session where parent_id is null and {where}", params).fetchall()
        except sqlite3.Error:
            return []
        return [r[0] for r in rows if self.valid_id(r[0])]

    def exists(self, ctx: AgentContext, conversation_id: str) -> bool:
        con = self._read(ctx)
        if con is None:
            return False
        try:
            return con.execute("select 1 from session where id = ?", (conversation_id,)).fetchone() is not None
        except sqlite3.Error:
            return False
        finally:
            con.close()

    def in_use(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        """Processes whose argv names the session or one of its descendants, and every process that
        has the database open (it may hold any session of it), except an ``opencode serve`` that names
        none of them and has no client connected (an attached TUI, a ``run --attach``). A process
        whose open files cannot be read and that may hold it counts as a holder (fail closed)."""
        family = self.family(ctx, conversation_id)
        table = procs.ProcessTable.snapshot()
        holders: dict[int, str] = {}
        for sid in family:
            lines = set(procs.argv_holders(sid, table))
            for p in table.with_token(sid):
                if p.describe() in lines:
                    holders.setdefault(p.pid, p.describe())
        db = self.db_path(ctx)
        if db is not None:
            for proc, why in self._db_openers(db, table):
                if proc.pid in holders:
                    continue
                if self._is_server(proc):
                    # a background server holds a conversation only while a client talks to it
                    busy = _server_clients(proc.pid)
                    if busy is None:
                        continue
                    why = f"{why}; {busy}"
                holders[proc.pid] = f"{proc.describe()} ({why})"
        return list(holders.values())

    def artifacts(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        family = self.family(ctx, conversation_id)
        rows = self._rows(ctx, family)
        return [self._label(r.table + ":" + r.key, r.session, conversation_id) for r in rows] + \
            [self._label(item, sid, conversation_id) for item, sid in self._file_items(ctx, family)]

    def purge(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        before = self.artifacts(ctx, conversation_id)
        family = self.family(ctx, conversation_id)
        # what the files are found by must be read before the rows go
        info = self._session_info(ctx, family)
        self._drop_history(ctx, family)  # its lines are recognised by the rows about to go
        self._delete_with_binary(ctx, conversation_id)
        db = self.db_path(ctx)
        if db is not None and db.exists():
            self._delete_rows(db, conversation_id)
            self._compact(ctx, db)
        self._delete_files(ctx, family, info)
        after = set(self.artifacts(ctx, conversation_id))
        return [item for item in before if item not in after]

    # -- sessions ------------------------------------------------------------------------------
    def family(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        """The session and its descendants at every depth (parent first, then by depth): from the
        ``session`` rows, and from opencode's log (``created … parentID=…``), which still names the
        children when their rows are already gone (a purge that stopped half way)."""
        edges: dict[str, set[str]] = {}
        for sid, (_run, parent) in self._logged_sessions(ctx).items():
            if parent:
                edges.setdefault(parent, set()).add(sid)
        con = self._read(ctx)
        if con is not None:
            try:
                for sid, parent in con.execute("select id, parent_id from session where parent_id is not null"):
                    edges.setdefault(parent, set()).add(sid)
            except sqlite3.Error:
                pass
            finally:
                con.close()
        out, frontier = [conversation_id], [conversation_id]
        while frontier:
            frontier = [c for p in frontier for c in sorted(edges.get(p, ())) if c not in out and self.valid_id(c)]
            out += frontier
        return out

    def _argvs(self, pids: Iterable[int]) -> list[list[str]]:
        """The argv of each opencode process among ``pids`` (the pane's tree holds tools too)."""
        out = []
        for pid in pids:
            try:
                ps = psutil.Process(pid)
                proc = procs.Proc(pid, 0, 0.0, ps.name(), tuple(ps.cmdline()))
            except (psutil.Error, OSError):
                continue
            if proc.matches_name(self.process_names):
                out.append(list(proc.cmdline))
        return out

    def _session_info(self, ctx: AgentContext, family: list[str]) -> dict[str, tuple]:
        """id -> (time_created, slug, git worktree or None), read before anything is deleted."""
        con = self._read(ctx)
        if con is None:
            return {}
        try:
            marks = ",".join("?" * len(family))
            rows = con.execute(
                f"select s.id, s.time_created, s.slug, case when p.vcs is not null then p.worktree end"
                f" from session s left join project p on p.id = s.project_id where s.id in ({marks})",
                family).fetchall()
            return {r[0]: tuple(r[1:]) for r in rows}
        except sqlite3.Error:
            return {}
        finally:
            con.close()

    # -- database reads ------------------------------------------------------------------------
    def _read(self, ctx: AgentContext) -> sqlite3.Connection | None:
        db = self.db_path(ctx)
        if db is None or not db.is_file():
            return None
        return connect_ro(db)

    def _rows(self, ctx: AgentContext, family: list[str]) -> list[Row]:
        con = self._read(ctx)
        if con is None:
            return []
        try:
            return _family_rows(con, family)
        finally:
            con.close()

    # -- files ---------------------------------------------------------------------------------
    def _file_items(self, ctx: AgentContext, family: list[str]) -> list[tuple[str, str]]:
        """(report item, session id) for each file or log of the family that is on disk now."""
        items = []
        for path, sid in self._files(ctx, family):
            items.append((ctx.expand(path), sid))
        for path, sid, n in self._log_lines(ctx, family) + self._history_lines(ctx, family):
            items.append((f"{ctx.expand(path)}: {n} line{'s' if n != 1 else ''}", sid))
        return items

    # the TUI's prompt history (one JSON line per prompt typed, ``{"input": …}``) names no session:
    # a line is the family's when its text is a user prompt of the family and of no other session
    def history_path(self, ctx: AgentContext) -> Path:
        return ctx.state_home() / "opencode" / "prompt-history.jsonl"

    def _prompt_owners(self, ctx: AgentContext, family: list[str]) -> dict[str, str]:
        """user prompt text -> the family session it was typed in (texts other sessions share left out)."""
        con = self._read(ctx)
        if con is None:
            return {}
        mine: dict[str, str] = {}
        shared: set[str] = set()
        try:
            for sid, mdata, pdata in con.execute(
                    "select m.session_id, m.data, p.data from part p join message m on m.id = p.message_id"
                    " where m.data like '%\"user\"%'"):
                text = _user_text(mdata, pdata)
                if text is None:
                    continue
                if sid in family:
                    mine.setdefault(text, sid)
                else:
                    shared.add(text)
        except sqlite3.Error:
            return {}
        finally:
            con.close()
        return {t: sid for t, sid in mine.items() if t not in shared}

    def _history_lines(self, ctx: AgentContext, family: list[str]) -> list[tuple[Path, str, int]]:
        path = self.history_path(ctx)
        if not path.is_file():
            return []
        owners = self._prompt_owners(ctx, family)
        counts: dict[str, int] = {}
        try:
            with open(path, "rb") as f:
                for line in f:
                    sid = owners.get(_history_input(line))
                    if sid:
                        counts[sid] = counts.get(sid, 0) + 1
        except OSError:
            return []
        return [(path, sid, counts[sid]) for sid in family if counts.get(sid)]

    def _drop_history(self, ctx: AgentContext, family: list[str]) -> None:
        owners = self._prompt_owners(ctx, family)
        if not owners or not self.history_path(ctx).is_file():
            return
        try:
            fsutil.drop_lines(self.history_path(ctx), lambda line: _history_input(line) in owners)
        except OSError as e:
            ctx.notes.append(f"could not rewrite {ctx.expand(self.history_path(ctx))}: {e}")

    def _files(self, ctx: AgentContext, family: list[str], info: dict | None = None) -> list[tuple[Path, str]]:
        data = self.data_dir(ctx)
        info = info if info is not None else self._session_info(ctx, family)
        out: list[tuple[Path, str]] = []
        storage = data / "storage"
        wanted = {}
        for sid in family:
            wanted[sid] = sid
            wanted[sid + ".json"] = sid
        if storage.is_dir():
            message_ids: dict[str, str] = {}
            # storage/part/<message id>/<part id>.json never names a session: not walked, found below
            for path in _walk_names(storage, wanted, depth=3, skip={storage / "part"}):
                sid = wanted[path.name]
                out.append((path, sid))
                if path.is_dir() and path.parent.name == "message":
                    for m in path.glob("*.json"):
                        message_ids[m.stem] = sid
            for mid, sid in message_ids.items():
                part_dir = storage / "part" / mid
                if part_dir.is_dir():
                    out.append((part_dir, sid))
        for sid in family:
            if sid not in info:
                continue
            created, slug, worktree = info[sid]
            name = f"{created}-{slug}.md"
            candidates = [data / "plans" / name]
            if worktree:
                candidates.append(Path(worktree) / ".opencode" / "plans" / name)
            out += [(p, sid) for p in candidates if p.is_file()]
        return out

    def _log_lines(self, ctx: AgentContext, family: list[str]) -> list[tuple[Path, str, int]]:
        logs = self.data_dir(ctx) / "log"
        out = []
        if not logs.is_dir():
            return out
        needles = {sid.encode(): sid for sid in family}
        for path in sorted(logs.glob("*.log")):
            counts: dict[str, int] = {}
            try:
                with open(path, "rb") as f:
                    for line in f:
                        for needle, sid in needles.items():
                            if needle in line:
                                counts[sid] = counts.get(sid, 0) + 1
                                break
            except OSError:
                continue
            out += [(path, sid, counts[sid]) for sid in family if counts.get(sid)]
        return out

    # -- purge steps ---------------------------------------------------------------------------
    def _delete_with_binary(self, ctx: AgentContext, conversation_id: str) -> None:
        binary = self.binary(ctx)
        if not binary or not os.access(binary, os.X_OK):
            ctx.notes.append("opencode binary not found: removed the rows with SQL only"
                             " (`opencode session delete` did not run)")
            return
        env = dict(ctx.env)
        env["HOME"] = ctx.home
        env.pop("PWD", None)
        db = self.db_path(ctx)
        if db is not None:
            env["OPENCODE_DB"] = str(db)  # the very database we read, whatever XDG says
        cwd = ctx.cwd if ctx.cwd and os.path.isdir(ctx.cwd) else ctx.home
        try:
            p = subprocess.run([binary, "session", "delete", conversation_id], env=env, cwd=cwd,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=DELETE_TIMEOUT)
        except (OSError, subprocess.SubprocessError) as e:
            ctx.notes.append(f"`opencode session delete` failed ({type(e).__name__}: {e}):"
                             " removed the rows with SQL")
            return
        if p.returncode != 0:
            tail = (p.stderr or p.stdout or "").strip().splitlines()[-1:] or ["no output"]
            ctx.notes.append(f"`opencode session delete` exited {p.returncode} ({tail[0][:200]}):"
                             " removed the rows with SQL")

    def _delete_rows(self, db: Path, conversation_id: str) -> None:
        """One write transaction: every per-session row of the family, then the session rows."""
        con = sqlite3.connect(str(db), timeout=WRITE_TIMEOUT, isolation_level=None)
        try:
            con.execute(f"pragma busy_timeout = {int(WRITE_TIMEOUT * 1000)}")
            con.execute("pragma secure_delete = on")
            con.execute("begin immediate")
            try:
                family = _walk(con, conversation_id)  # again, under the write lock
                marks = ",".join("?" * len(family))
                columns = _columns(con)
                if "part" in columns and "message" in columns and "message_id" in columns["part"]:
                    con.execute(f"delete from part where message_id in"
                                f" (select id from message where session_id in ({marks}))", family)
                for table, cols in columns.items():
                    if table in _SKIP_TABLES:
                        continue
                    for col in ("session_id", "aggregate_id"):
                        if col in cols and (col == "session_id" or table in _AGGREGATE_TABLES):
                            con.execute(f'delete from "{table}" where "{col}" in ({marks})', family)
                con.execute(f"delete from session where id in ({marks})", family)
                con.execute("commit")
            except BaseException:
                con.execute("rollback")
                raise
        except sqlite3.Error as e:
            raise MuxhostError(f"could not delete the rows from {db}: {e}") from e
        finally:
            con.close()

    @staticmethod
    def _compact(ctx: AgentContext, db: Path) -> None:
        """Deleted rows leave their bytes in free pages and in the WAL (``opencode session delete``
        does not zero them): checkpoint, VACUUM, and truncate the WAL, so the text is gone from disk."""
        problem = fsutil.compact_sqlite(db, timeout=WRITE_TIMEOUT)
        if problem:
            ctx.notes.append(f"{ctx.expand(db)}: {problem}")

    def _delete_files(self, ctx: AgentContext, family: list[str], info: dict) -> None:
        for path, _sid in self._files(ctx, family, info):
            try:
                fsutil.remove(path)
            except OSError as e:
                ctx.notes.append(f"could not remove {ctx.expand(path)}: {e}")
        needles = [sid.encode() for sid in family]
        for path, _sid, _n in self._log_lines(ctx, family):
            if _open_by_anyone(path):
                ctx.notes.append(f"{ctx.expand(path)} is open in a running process: its lines were left")
                continue
            try:
                fsutil.drop_lines(path, lambda line: any(n in line for n in needles))
            except OSError as e:
                ctx.notes.append(f"could not rewrite {ctx.expand(path)}: {e}")

    # -- helpers -------------------------------------------------------------------------------
    def _require_binary(self, ctx: AgentContext) -> str:
        binary = self.binary(ctx)
        if not binary:
            raise MuxhostError("opencode is not installed (not on PATH; set `binary` in the agent's config)")
        return binary

    @staticmethod
    def _pwd(ctx: AgentContext) -> dict[str, str]:
        return {"PWD": ctx.cwd} if ctx.cwd else {}

    @staticmethod
    def _label(item: str, sid: str, root: str) -> str:
        return item if sid == root else f"{item} [child session {sid}]"

    @staticmethod
    def _is_server(proc: procs.Proc) -> bool:
        """``opencode serve …``: a background server (holds a session only if its argv names one)."""
        args = list(proc.cmdline[1:])
        if args and os.path.basename(proc.cmdline[0]).startswith(("node", "bun")):
            args = args[1:]
        words = [a for a in args if not a.startswith("-")]
        return bool(words) and words[0] == "serve" and procs.Proc.matches_name(proc, OpenCodeAgent.process_names)

    def _db_openers(self, db: Path, table: procs.ProcessTable) -> list[tuple[procs.Proc, str]]:
        """Processes that have the database (or its -wal / -shm) open.

        Every SQLite connection to a WAL database holds a POSIX read lock on its ``-shm`` for as
        long as it is open, so on Linux ``/proc/locks`` names them all, even processes whose open
        files we may not read. Where there is no ``/proc/locks`` (macOS), a process we may not read
        that is ours or is an opencode counts as a holder (fail closed)."""
        real = os.path.realpath(db)
        targets = {real, real + "-wal", real + "-shm"}
        lockers = _lock_holders(targets)
        me = {os.getpid()}
        uid = os.getuid()
        out = []
        for proc in table.procs.values():
            if proc.pid in me or _is_muxhost(proc):  # another muxhost reading it (ls, discover)
                continue
            if lockers is not None and proc.pid in lockers:
                out.append((proc, f"has {db} open"))
                continue
            try:
                ps = psutil.Process(proc.pid)
                if abs(ps.create_time() - proc.create_time) > 0.01:
                    continue
                files = ps.open_files()
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            except (psutil.AccessDenied, OSError) as e:
                if lockers is None and (_uid_of(proc.pid) == uid or proc.matches_name(self.process_names)):
                    out.append((proc, f"its open files cannot be read ({type(e).__name__}): it may hold {db}"))
                continue
            if any(f.path in targets for f in files):
                out.append((proc, f"has {db} open"))
        for pid in sorted((lockers or set()) - set(table.procs) - me):
            out.append((procs.Proc(pid, 0, 0.0, "?", ()), f"holds a lock on {db}"))
        return out


def _server_clients(pid: int) -> str | None:
    """None when the server ``pid`` has no client connected to a port it listens on; else why it
    may hold a conversation (its clients, or that its sockets cannot be read: fail closed)."""
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


# muxhost's own processes read the database for a moment (discover in `muxhost ls`); they hold nothing
_is_muxhost = procs.is_muxhost


def _lock_holders(paths: Iterable[str]) -> set[int] | None:
    """Pids holding a POSIX/OFD/flock lock on any of ``paths`` (from /proc/locks), or None when
    /proc/locks cannot be read (not Linux)."""
    wanted = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        wanted.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    pids = set()
    for line in lines:
        words = line.split()
        if len(words) > 1 and words[1] == "->":
            del words[1]
        if len(words) < 6:
            continue
        try:
            pid = int(words[4])
            major, minor, inode = words[5].split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        if key in wanted and pid > 0:
            pids.add(pid)
    return pids


def session_from_argv(argv: Iterable[str]) -> str | None:
    """The id after ``-s`` / ``--session`` (also ``--session=ID``, ``-sID``) in an opencode argv."""
    argv = list(argv)
    for i, arg in enumerate(argv):
        value = None
        if arg in ("-s", "--session") and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--session="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-s") and not arg.startswith("--") and len(arg) > 2:
            value = arg[2:].lstrip("=")
        if value and _ID_RE.fullmatch(value):
            return value
    return None


class _Snapshot(sqlite3.Connection):
    """A connection to a private copy of a database; the copy goes when the connection closes."""

    tmpdir: str | None = None

    def close(self) -> None:
        super().close()
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


def connect_ro(db: Path) -> sqlite3.Connection:
    """A read-only connection (``mode=ro``) that waits at most READ_TIMEOUT for a lock.

    A WAL database read read-only still needs its ``-shm`` (the WAL index), which SQLite creates when
    the folder is writable. When it cannot (no ``-shm``, a folder we may not write), no process has the
    database open (a live connection keeps the ``-shm``), so: with no WAL content the main file is the
    whole database and is opened ``immutable``; with WAL content, a private copy of the database and
    its WAL is read instead."""
    uri = "file:" + urllib.parse.quote(str(db)) + "?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True, timeout=READ_TIMEOUT, check_same_thread=False)
        con.execute("select count(*) from sqlite_master").fetchone()
        return con
    except sqlite3.OperationalError as e:
        error = e
    wal = Path(f"{db}-wal")
    try:
        if not (wal.exists() and wal.stat().st_size > 0):
            con = sqlite3.connect(uri + "&immutable=1", uri=True, timeout=READ_TIMEOUT, check_same_thread=False)
            con.execute("select count(*) from sqlite_master").fetchone()
            return con
        tmpdir = tempfile.mkdtemp(prefix="muxhost-opencode-")
        try:
            copy = Path(tmpdir) / "opencode.db"
            shutil.copyfile(db, copy)
            shutil.copyfile(wal, f"{copy}-wal")
            con = sqlite3.connect(str(copy), timeout=READ_TIMEOUT, check_same_thread=False, factory=_Snapshot)
            con.tmpdir = tmpdir
            con.execute("select count(*) from sqlite_master").fetchone()
            return con
        except BaseException:
            shutil.rmtree(tmpdir, ignore_errors=True)
            raise
    except (OSError, sqlite3.Error) as e:
        raise MuxhostError(f"cannot read {db} read-only: {error}; {e}") from e


_RUN_RE = re.compile(rb"(?:^| )run=([0-9A-Za-z]+)(?: |$)")
_PARENT_RE = re.compile(rb" parentID=(" + ID_PATTERN.encode() + rb")(?: |$)")
_CREATED_RE = re.compile(rb"(?:^| )run=([0-9A-Za-z]+) message=created id=(" + ID_PATTERN.encode() + rb")(?: |$)")


_TIMESTAMP_RE = re.compile(rb"^timestamp=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


def _offset_since(f, since: float, block: int = 1 << 20) -> int:
    """A line start in the log ``f`` at or before the first line logged at ``since`` (epoch
    seconds), found by stepping back from the end a block at a time; 0 when unsure."""
    f.seek(0, os.SEEK_END)
    pos = f.tell()
    while pos > 0:
        pos = max(0, pos - block)
        f.seek(pos)
        if pos:
            f.readline()  # the rest of a cut line
        start = f.tell()
        m = _TIMESTAMP_RE.match(f.readline())
        if m is None:
            return 0
        try:
            when = datetime.datetime.strptime(m.group(1).decode(), "%Y-%m-%dT%H:%M:%S")
        except ValueError:
            return 0
        if when.replace(tzinfo=datetime.timezone.utc).timestamp() < since:
            return start
    return 0


def _run_ending_at(path: str, end: int) -> str | None:
    """The run id of the log line that ends at byte ``end`` of ``path``."""
    try:
        with open(path, "rb") as f:
            start = max(0, end - 8192)
            f.seek(start)
            chunk = f.read(end - start)
    except OSError:
        return None
    if not chunk.endswith(b"\n"):
        return None  # not a line end: the file was rewritten since, or it is not ours to read
    m = _RUN_RE.search(chunk[:-1].rsplit(b"\n", 1)[-1])
    return m.group(1).decode() if m else None


def _user_text(message_data: str, part_data: str) -> str | None:
    """The text of a user's text part (None for anything else)."""
    try:
        message, part = json.loads(message_data), json.loads(part_data)
    except (ValueError, TypeError):
        return None
    if not (isinstance(message, dict) and isinstance(part, dict)) or message.get("role") != "user":
        return None
    if part.get("type") != "text" or part.get("synthetic") or not isinstance(part.get("text"), str):
        return None
    return part["text"]


def _history_input(line: bytes) -> str | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    value = entry.get("input") if isinstance(entry, dict) else None
    return value if isinstance(value, str) else None


def _walk(con: sqlite3.Connection, root: str) -> list[str]:
    out, frontier = [root], [root]
    while frontier:
        marks = ",".join("?" * len(frontier))
        rows = con.execute(f"select id from session where parent_id in ({marks}) order by time_created, id",
                           frontier).fetchall()
        frontier = [r[0] for r in rows if r[0] not in out]
        out += frontier
    return out


def _columns(con: sqlite3.Connection) -> dict[str, list[str]]:
    tables = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'"
                                        " and name not like 'sqlite_%'")]
    return {t: [c[1] for c in con.execute(f'pragma table_info("{t}")')] for t in tables}


def _keys(con: sqlite3.Connection, table: str) -> list[str]:
    info = list(con.execute(f'pragma table_info("{table}")'))
    pk = [c[1] for c in sorted(info, key=lambda c: c[5]) if c[5] > 0]
    if "id" in [c[1] for c in info]:
        return ["id"]
    return pk or ["rowid"]


def _family_rows(con: sqlite3.Connection, family: list[str]) -> list[Row]:
    """Every row of every table that belongs to a session of the family, session by session."""
    columns = _columns(con)
    marks = ",".join("?" * len(family))
    found: dict[str, list[Row]] = {sid: [] for sid in family}

    def collect(table: str, col: str, where: str, params: list) -> None:
        keys = _keys(con, table)
        expr = " || '/' || ".join(f'"{k}"' for k in keys)
        for key, sid in con.execute(f'select {expr}, "{col}" from "{table}" where {where}', params):
            if sid in found:
                found[sid].append(Row(table, str(key), sid))

    if "session" in columns:
        collect("session", "id", f"id in ({marks})", family)
    order = ["message", "part", "todo", "session_share", "session_message", "session_input",
             "session_context_epoch", "event_sequence", "event"]
    tables = [t for t in order if t in columns] + sorted(t for t in columns if t not in order)
    for table in tables:
        cols = columns[table]
        if table in _SKIP_TABLES:
            continue
        if "session_id" in cols:
            collect(table, "session_id", f'"session_id" in ({marks})', family)
        elif table in _AGGREGATE_TABLES and "aggregate_id" in cols:
            collect(table, "aggregate_id", f'"aggregate_id" in ({marks})', family)
    # parts of the family's messages that name another session (not seen in opencode; cheap to check)
    if {"part", "message"} <= set(columns) and {"message_id", "session_id"} <= set(columns["part"]):
        for key, sid in con.execute(
                f"select p.id, m.session_id from part p join message m on m.id = p.message_id"
                f" where m.session_id in ({marks}) and p.session_id not in ({marks})", family + family):
            found[sid].append(Row("part", str(key), sid))
    return [row for sid in family for row in found[sid]]


def _walk_names(root: Path, wanted: dict[str, str], depth: int, skip: set[Path] = frozenset()) -> list[Path]:
    """Entries named like one of ``wanted`` at most ``depth`` levels below ``root`` (not in ``skip``)."""
    out = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return out
    for entry in entries:
        if entry.name in wanted:
            out.append(Path(entry.path))
        elif depth > 1 and entry.is_dir(follow_symlinks=False) and Path(entry.path) not in skip:
            out += _walk_names(Path(entry.path), wanted, depth - 1, skip)
    return out


def _uid_of(pid: int) -> int | None:
    try:
        return psutil.Process(pid).uids().real
    except (psutil.Error, OSError):
        return None


def _open_by_anyone(path: Path) -> bool:
    real = os.path.realpath(path)
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            if any(f.path == real for f in p.open_files()):
                return True
        except (psutil.Error, OSError):
            continue
    return False


@muxhost.hookimpl
def muxhost_register_agents(register) -> None:
    register(OpenCodeAgent())
