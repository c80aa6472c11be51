"""muxhost plugin for the OpenCode CLI (``opencode``, tested with 1.18.33); its README says what it
declares and why.

A session ``ses_…`` lives in one SQLite database (WAL): ``$OPENCODE_DB`` (``~`` is the agent's HOME,
a relative path the data folder's), else ``<data home>/opencode/opencode.db``; a sub-agent (the
``task`` tool) is a session whose ``parent_id`` is the one that started it, at any depth. Its typed
artifacts: opencode's own ``opencode session delete ID`` (a :class:`Command`, for a session whose
parent row is not there: it takes the sub-agents too); the :class:`Rows` of every table with a
``session_id`` column, of ``event`` / ``event_sequence`` by ``aggregate_id``, of parts of its
messages that name another session, and its ``session`` row; its files in ``storage/`` and its plan
(``plans/``, ``<worktree>/.opencode/plans/`` in a git project); the lines naming it in ``log/*.log``
(a :class:`Leftover` while a process has the log open); the lines of the TUI's
``prompt-history.jsonl`` (which names no session) whose text is a prompt of it and of no other.

A process holds a session when its argv names it (``-s ID``); any process that has the database
open may hold any session of it, except an ``opencode serve`` no client is connected to. A database
that cannot be read is a :class:`Leftover` ("could not be read"), never an empty one.

Activity: a permission or question dialog at the bottom of the screen is ``waiting``; else the
session's last message says whether its turn is open (:func:`turn_state`).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import psutil

from muxhost.api import Activity, Agent, AgentContext, Launch, MuxhostError, Proc, artifacts, hookimpl, kit
from muxhost_opencode.activity import ACTIVITY_TIMEOUT, NEXT_STEP_MS, asks_user, session_stalled, turn_state  # noqa: F401

__all__ = ["OpenCodeAgent", "asks_user", "muxhost_register_agents", "session_from_argv", "session_stalled", "turn_state"]

ID_PATTERN = r"ses_[0-9A-Za-z]{26}"
_ID_RE = re.compile(ID_PATTERN)
#: seconds ``opencode session delete`` may take (its start-up may npm-install a plugin)
DELETE_TIMEOUT = 60.0
#: per-session tables keyed by ``aggregate_id`` (no foreign key); the others have ``session_id``
_AGGREGATE_TABLES = ("event", "event_sequence")

#: language servers opencode starts for itself (``lsp`` in its config): resident, not work
LSP_SERVERS = (
    "typescript-language-server", "pyright-langserver", "gopls", "rust-analyzer", "clangd",
    "bash-language-server", "yaml-language-server", "lua-language-server", "ruby-lsp", "jdtls",
    "elixir-ls", "zls", "svelteserver", "astro-ls", "vue-language-server", "sourcekit-lsp",
    "haskell-language-server-wrapper", "nixd", "ocamllsp", "terraform-ls", "texlab", "tinymist",
    "clojure-lsp", "docker-langserver", "fsautocomplete", "intelephense", "csharp-ls",
    "vscode-eslint-language-server", "kotlin-lsp",
)
#: git: opencode's own snapshots and VCS queries run ``git`` as its direct child (in a git project, at
#: start-up and after each step); a tool's git runs under the tool's shell and stays work
RESIDENT_CHILDREN = ("git", *LSP_SERVERS)



@dataclass
class _Facts:
    """What the plan needs from the database, read once, before anything is removed."""

    tables: dict[str, list[str]]
    session: tuple | None  # (time_created, slug, git worktree or None, no parent row) or None
    messages: list[str]    # its messages whose parts name another session
    prompts: frozenset     # its user prompts that no other session has


class OpenCodeAgent(Agent):
    name = "opencode"
    install_hint = "npm install -g opencode-ai, or set agents.opencode.binary in config.yaml"
    process_names = ("opencode", "opencode.exe")
    #: the TUI and its server are one process; what it starts for itself: language servers, git
    resident_children = RESIDENT_CHILDREN
    exit_text = "/exit"
    # /exit to gone: 1.7-3.9 s measured under load 7-8, 2.5-8.3 s under load 25, its screen blank
    # meanwhile but its CPU busy throughout (docs/stop.md): more than stop.exit_grace's 5 s
    exit_grace, exit_still = 15.0, 1.0
    id_pattern = ID_PATTERN

    # -- where things are ----------------------------------------------------------------------
    def data_dir(self, ctx: AgentContext) -> Path:
        return ctx.data_home() / "opencode"

    def db_path(self, ctx: AgentContext) -> Path | None:
        """The database opencode uses with this environment (None for ``OPENCODE_DB=:memory:``)."""
        value = ctx.env.get("OPENCODE_DB")
        if value == ":memory:":
            return None
        return ctx.resolve(value, base=self.data_dir(ctx)) if value else self.data_dir(ctx) / "opencode.db"

    def history_path(self, ctx: AgentContext) -> Path:
        return ctx.state_home() / "opencode" / "prompt-history.jsonl"

    def roots(self, ctx: AgentContext) -> list[Path]:
        """The XDG homes, the database itself (``OPENCODE_DB`` may be anywhere) and the plan folder
        ``<worktree>/.opencode/plans`` of each git project opencode knows."""
        db, worktrees = self.db_path(ctx), self._query(ctx, "select worktree from project where vcs is not null")
        return super().roots(ctx) + ([db] if db else []) + [Path(w[0]) / ".opencode" / "plans" for w in worktrees if w[0]]

    def _read(self, ctx: AgentContext, work: Callable[[kit.sqlite.Reader], Any], empty: Any) -> Any:
        """``work`` on a read-only connection (``empty`` when there is no database); raises
        :class:`~muxhost.kit.sqlite.DatabaseError` when it cannot be read."""
        db = self.db_path(ctx)
        if db is None or not db.is_file():
            return empty
        con = kit.sqlite.connect_ro(db)
        try:
            return work(kit.sqlite.Reader(con))
        except sqlite3.Error as e:
            raise kit.sqlite.DatabaseError(db, f"cannot read {db}: {e}") from e
        finally:
            con.close()

    def _query(self, ctx: AgentContext, sql: str, params: Iterable = ()) -> list:
        """Rows of one query; [] when the database is missing or cannot be read (discover, roots)."""
        try:
            return self._read(ctx, lambda r: r.rows(sql, tuple(params)), [])
        except kit.sqlite.DatabaseError:
            return []

    # -- the Agent API -------------------------------------------------------------------------
    # opencode takes its directory (the session's ``directory``) from $PWD when it is set, so a
    # PWD inherited from whoever ran muxhost would file the session under the wrong folder
    def launch(self, ctx: AgentContext) -> Launch:
        return self._launch(ctx, ctx.args)

    def resume(self, ctx: AgentContext, conversation_id: str) -> Launch:
        return self._launch(ctx, ["-s", conversation_id], conversation_id)

    def _launch(self, ctx: AgentContext, args: Iterable[str], cid: str | None = None) -> Launch:
        return Launch([ctx.find_binary("opencode", self.install_hint), *args], env={"PWD": ctx.cwd} if ctx.cwd else {},
                      conversation_id=cid)

    def discover(self, ctx: AgentContext) -> str | None:
        """The parent session the agent is in: the newest top-level session created in its cwd since
        launch (a sub-agent's child row never counts; of two TUIs in one folder, only the sessions
        this agent created, when opencode's log tells: see :meth:`_mine`), else the id after
        ``-s``/``--session`` in its argv, else (``-c``/``--continue``) the last updated top-level
        session in its cwd, else what the record knew."""
        claimed = set(ctx.claimed)
        argvs = [argv for _ps, argv in self._opencodes(ctx.pids)]
        dirs, where = _folder(ctx)
        fresh = [sid for sid in self._fresh(ctx) if sid not in claimed]
        sid = self._mine(ctx, fresh) if fresh else None
        if sid:
            return sid
        for argv in argvs:
            sid = session_from_argv(argv)
            if sid and self.valid_id(sid) and sid not in claimed:
                return sid
        if dirs and any(a in ("-c", "--continue") for argv in argvs for a in argv):
            for r in self._query(ctx, f"select id from session where {where} order by time_updated desc, id desc", dirs):
                if r[0] not in claimed and self.valid_id(r[0]):
                    return r[0]
        return ctx.conversation_id

    def _fresh(self, ctx: AgentContext) -> list[str]:
        """The top-level sessions created in the agent's folder since its launch, newest first."""
        dirs, where = _folder(ctx)
        rows = self._query(ctx, f"select id from session where {where} and time_created >= ? order by time_created desc,"
                                " id desc", (*dirs, int(ctx.launched_at * 1000))) if dirs else []
        return [r[0] for r in rows if self.valid_id(r[0])]

    def _mine(self, ctx: AgentContext, fresh: list[str]) -> str | None:
        """The newest of ``fresh`` (new top-level sessions in the folder, newest first) that this
        agent created. When the log cannot tell which run this agent is: the newest. When it can, a
        session the log gives to another run is never taken; one it does not name yet (opencode
        writes its log lazily) only while no other process has the database open."""
        runs = self._own_runs(ctx)
        if not runs:
            return fresh[0]
        creators = {sid: run for sid, (run, _p) in self._logged_sessions(ctx, ctx.launched_at - 60).items()}
        for sid in fresh:
            if creators.get(sid) in runs:
                return sid
        unknown = [sid for sid in fresh if sid not in creators]
        db = self.db_path(ctx)
        if unknown and db is not None:
            mine = set(ctx.pids)
            files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
            if not kit.holders.holders(ctx, [], argv=False, files=files, locks=files, exclude=lambda p: p.pid in mine):
                return unknown[0]
        return None

    # opencode's log (one file every opencode process appends to) tags each line with the process's
    # run id, and says ``message=created id=ses_…`` when a run creates a session. On Linux the offset
    # of a process's O_APPEND log descriptor is the end of the last line that process wrote.
    def _own_runs(self, ctx: AgentContext) -> set[str]:
        """The run ids of the opencode processes among ``ctx.pids`` (empty when unknown)."""
        logdir = os.path.realpath(self.data_dir(ctx) / "log")
        runs: set[str] = set()
        for ps, _argv in self._opencodes(ctx.pids):
            try:
                files = ps.open_files()
            except (psutil.Error, OSError):
                continue
            for f in files:
                position = getattr(f, "position", None)
                if position and os.path.dirname(f.path) == logdir and f.path.endswith(".log"):
                    runs.add(_run_ending_at(f.path, position) or "")
        return runs - {""}

    def _logged_sessions(self, ctx: AgentContext, since: float | None = None) -> dict[str, tuple[str, str | None]]:
        """session id -> (run id that created it, parent id or None), from ``message=created`` lines
        (of lines logged at or after ``since`` epoch seconds, roughly, when given: `ls` asks this
        for every running agent, so then only the log's tail is read)."""
        out: dict[str, tuple[str, str | None]] = {}
        logs = self.data_dir(ctx) / "log"
        for path in sorted(logs.glob("*.log")) if logs.is_dir() else ():
            try:
                with open(path, "rb") as f:
                    if since:
                        f.seek(_offset_since(f, since))
                    for line in f:
                        m = _CREATED_RE.search(line) if b"message=created" in line else None
                        if m and m.group(2).decode() not in out:
                            parent = _PARENT_RE.search(line)
                            out[m.group(2).decode()] = (m.group(1).decode(), parent.group(1).decode() if parent else None)
            except OSError:
                continue
        return out

    def _opencodes(self, pids: Iterable[int]) -> list[tuple[psutil.Process, list[str]]]:
        """(process, argv) of each opencode process among ``pids`` (the pane's tree holds tools too)."""
        out = []
        for pid in pids:
            try:
                ps = psutil.Process(pid)
                proc = Proc(pid, 0, 0.0, ps.name(), tuple(ps.cmdline()))
            except (psutil.Error, OSError):
                continue
            if proc.matches_name(self.process_names):
                out.append((ps, list(proc.cmdline)))
        return out

    def exists(self, ctx: AgentContext, conversation_id: str) -> bool:
        return bool(self._query(ctx, "select 1 from session where id = ?", (conversation_id,)))

    def activity(self, ctx: AgentContext, screen: str | None) -> Activity | None:
        """``waiting`` while a dialog asks at the bottom of ``screen`` (:func:`asks_user`); else what
        the record's session's last message says (:func:`turn_state`), ``stalled`` when its open turn
        shows no sign of life (:func:`session_stalled`); None when it cannot be read.
        Before the host knows the session (the watch asks ``discover`` every pass until it does):
        ``idle`` while no session was made in its folder since the launch (not prompted yet), else
        no opinion — which session is this agent's is for ``discover``, with every other record's claimed."""
        if screen is not None and asks_user(screen):
            return Activity("waiting", "screen: a permission or question dialog at the bottom")
        sid, db = ctx.conversation_id, self.db_path(ctx)
        if sid is None and db is not None:
            try:
                fresh = not ctx.cwd or self._fresh(ctx)
                return None if fresh else Activity("idle", f"database: no session in {ctx.cwd} since the launch")
            except (OSError, sqlite3.Error, MuxhostError):
                return None
        if sid is None or db is None or not db.is_file():
            return None
        try:
            con = kit.sqlite.connect_ro(db, timeout=ACTIVITY_TIMEOUT)
        except (OSError, sqlite3.Error, MuxhostError):
            return None
        try:
            answer = turn_state(con, sid, int(ctx.launched_at * 1000))
            if answer is None:
                return None
            return (answer == "working" and session_stalled(con, sid, ctx)) or \
                Activity(answer, f"database: the last message of session {sid}")
        except (sqlite3.Error, TypeError):  # malformed JSON, another schema, a value of another type
            return None
        finally:
            con.close()

    def in_use(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        """Processes whose argv names the session, and every process that has the database open or
        locked (any session of it), except an idle ``opencode serve``; one whose open files cannot
        be read counts when it is ours or an opencode (fail closed)."""
        db = self.db_path(ctx)
        files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")] if db is not None else []
        return kit.holders.holders(ctx, conversation_id, files=files, locks=files, names=self.process_names,
                               exclude=_idle_server)

    def children(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        """Sessions whose ``parent_id`` is this one, and those opencode's log created with ``parentID=``
        it (still named when a purge stopped half way took the rows). With a database that cannot be
        read, the log's only: :meth:`artifacts` says so and the purge stays incomplete."""
        kids = {sid for sid, (_run, parent) in self._logged_sessions(ctx).items() if parent == conversation_id}
        kids.update(r[0] for r in self._query(ctx, "select id from session where parent_id = ?", (conversation_id,)))
        return sorted(k for k in kids if self.valid_id(k))

    def conversations(self, ctx: AgentContext) -> list:
        """The ``session`` table (read-only): directory, times, opencode's own title (the first
        prompt while it has only its default one), children by ``parent_id``; size: the bytes of its
        messages and parts in the database. A database that cannot be read raises (a warning)."""
        return self._read(ctx, _sessions, [])

    def artifacts(self, ctx: AgentContext, conversation_id: str) -> list[artifacts.Artifact]:
        """Everywhere the session may have bytes (see the module's docstring); the host keeps what is there."""
        sid, data, db = conversation_id, self.data_dir(ctx), self.db_path(ctx)
        out: list[artifacts.Artifact] = []
        try:
            facts = self._read(ctx, lambda r: _facts(r, sid), None)
        except kit.sqlite.DatabaseError as e:
            facts = None
            out.append(artifacts.Leftover(db, f"could not be read: {e}"))
        if facts is not None and db is not None:
            if facts.session and facts.session[3]:  # no parent row: opencode's delete (children too)
                out += self._delete(ctx, db, sid)
            out += [artifacts.Rows(db, t, "session_id", sid) for t, cols in facts.tables.items()
                    if t != "session" and "session_id" in cols]
            out += [artifacts.Rows(db, t, "aggregate_id", sid) for t in _AGGREGATE_TABLES
                    if "aggregate_id" in facts.tables.get(t, ())]
            if facts.messages:
                out.append(artifacts.Rows(db, "part", "message_id", values=facts.messages))
            out.append(artifacts.Rows(db, "session", "id", sid))
            if facts.prompts:
                out.append(artifacts.Lines(self.history_path(ctx), key="input", values=facts.prompts))
            if facts.session:
                created, slug, worktree, _top = facts.session
                name = f"{created}-{slug}.md"
                out.append(artifacts.File(data / "plans" / name))
                if worktree and (Path(worktree) / ".opencode" / "plans" / name).is_file():
                    out.append(artifacts.File(Path(worktree) / ".opencode" / "plans" / name))
        return out + _storage(data / "storage", sid) + self._logs(ctx, data / "log", sid)

    def _delete(self, ctx: AgentContext, db: Path, sid: str) -> list[artifacts.Artifact]:
        """``opencode session delete ID``, on the very database read here (whatever XDG says)."""
        try:
            binary = ctx.find_binary("opencode", self.install_hint)
        except MuxhostError as e:
            note = f"opencode binary not found, so `opencode session delete` does not run: the plan removes the rows ({e})"
            if note not in ctx.notes:
                ctx.notes.append(note)
            return []
        return [artifacts.Command([binary, "session", "delete", sid], env={"OPENCODE_DB": str(db)},
                                  timeout=DELETE_TIMEOUT)]

    def _logs(self, ctx: AgentContext, logs: Path, sid: str) -> list[artifacts.Artifact]:
        out: list[artifacts.Artifact] = []
        for log in sorted(logs.glob("*.log")) if logs.is_dir() else ():
            scan = kit.holders.with_open(ctx.process_table(), [log], self.process_names)
            if not (scan.found or scan.unreadable):
                out.append(artifacts.Lines(log, contains=sid))
                continue
            try:
                named = kit.jsonl.count_lines(log, kit.jsonl.contains(sid)) > 0
            except OSError:
                named = True
            if named:
                out.append(artifacts.Leftover(log, "lines naming the session, left: a running process has the log open"))
        return out


def _folder(ctx: AgentContext) -> tuple[list[str], str]:
    """The agent's folder as opencode may have filed it (as given, and real), and the SQL that picks
    the top-level sessions there."""
    dirs = sorted({ctx.cwd, os.path.realpath(ctx.cwd)} - {""}) if ctx.cwd else []
    return dirs, f"parent_id is null and directory in ({','.join('?' * len(dirs))})"


def _idle_server(p: Proc) -> bool:
    """``opencode serve …`` with no client connected: it keeps the database open without holding a
    conversation (an ``opencode attach`` TUI or a ``run --attach`` is a client)."""
    args = list(p.cmdline[1:])
    if args and os.path.basename(p.cmdline[0]).startswith(("node", "bun")):
        args = args[1:]
    words = [a for a in args if not a.startswith("-")]
    return bool(words) and words[0] == "serve" and p.matches_name(OpenCodeAgent.process_names) \
        and kit.holders.server_clients(p.pid) is None


def _facts(r: kit.sqlite.Reader, sid: str) -> _Facts:
    tables = r.columns()
    part, message = set(tables.get("part", ())), set(tables.get("message", ()))
    row = r.rows("select s.time_created, s.slug, case when p.vcs is not null then p.worktree end,"
                 " s.parent_id is null or not exists (select 1 from session q where q.id = s.parent_id)"
                 " from session s left join project p on p.id = s.project_id where s.id = ?", (sid,)) \
        if "session" in tables else []
    foreign, mine, others = [], set(), set()
    if {"message_id", "data"} <= part and {"id", "session_id", "data"} <= message:
        other = " and p.session_id != m.session_id" if "session_id" in part else ""
        foreign = [x[0] for x in r.rows("select distinct p.message_id from part p join message m on m.id = p.message_id"
                                        f" where m.session_id = ?{other}", (sid,))]
        for owner, mdata, pdata in r.rows("select m.session_id, m.data, p.data from part p join message m"
                                          " on m.id = p.message_id where m.data like '%\"user\"%'"):
            text = _user_text(mdata, pdata)
            if text is not None:
                (mine if owner == sid else others).add(text)
    return _Facts(tables, tuple(row[0]) if row else None, foreign, frozenset(mine - others))


def _storage(storage: Path, sid: str) -> list[artifacts.Artifact]:
    """The session's JSON storage: ``session_diff/<id>.json``, older versions' ``*/<id>.json`` and
    ``message/<id>/``, whose message ids name their ``part/<message id>/`` folders."""
    out: list[artifacts.Artifact] = []
    # storage/part/<message id>/<part id>.json never names a session: not walked, found below
    for path in _walk_names(storage, {sid, f"{sid}.json"}, depth=3, skip={storage / "part"}):
        folder = path.is_dir() and not path.is_symlink()
        out.append(artifacts.Dir(path) if folder else artifacts.File(path))
        if folder and path.parent.name == "message":
            out += [artifacts.Dir(storage / "part" / m.stem) for m in path.glob("*.json") if _NAME_RE.fullmatch(m.stem)]
    return out


def _walk_names(root: Path, wanted: set[str], depth: int, skip: set[Path]) -> list[Path]:
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


_NAME_RE = re.compile(r"[0-9A-Za-z_]+")  # a message id as a folder name (never "..")
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


_DEFAULT_TITLE = re.compile(r"(New|Child) session - \d{4}-")


def _sessions(r: kit.sqlite.Reader) -> list:
    """Every session of the database as a :class:`Conversation` (see ``conversations``)."""
    from muxhost.api import Conversation

    tables = r.columns()
    if "session" not in tables:
        return []
    sizes: dict[str, int] = {}
    for table in ("message", "part"):
        if "session_id" in tables.get(table, ()) and "data" in tables[table]:
            for sid, n in r.rows(f"select session_id, sum(length(data)) from {table} group by session_id"):
                sizes[sid] = sizes.get(sid, 0) + int(n or 0)
    rows = r.rows("select id, parent_id, directory, title, time_created, time_updated from session")
    kids: dict[str, list[str]] = {}
    for row in rows:
        kids.setdefault(row["parent_id"], []).append(row["id"])
    out = []
    for row in rows:
        title = row["title"] if isinstance(row["title"], str) else ""
        if not title or _DEFAULT_TITLE.match(title):
            title = _first_prompt(r, row["id"]) or title
        out.append(Conversation(id=row["id"], created=(row["time_created"] or 0) / 1000,
                                updated=(row["time_updated"] or 0) / 1000, cwd=row["directory"] or "",
                                title=kit.conversations.title(title), size=sizes.get(row["id"], 0),
                                children=sorted(kids.get(row["id"], []))))
    return out


def _first_prompt(r: kit.sqlite.Reader, sid: str) -> str:
    sql = ("select m.data, p.data from part p join message m on m.id = p.message_id where p.session_id = ?"
           " order by p.time_created limit 20")
    return next((t for m, p in r.rows(sql, (sid,)) if (t := _user_text(m, p))), "")


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


@hookimpl
def muxhost_register_agents(register) -> None:
    register(OpenCodeAgent())
