"""muxhost plugin for Claude Code (the ``claude`` CLI).

What it knows about the CLI (checked against claude 2.1.197):

- ``claude --session-id <uuid>`` lets the launcher choose the conversation id; ``claude --resume <id>``
  must run in the conversation's own cwd.
- The config dir is ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``; the global config is
  ``<config dir>/.config.json`` when that exists, else ``($CLAUDE_CONFIG_DIR or ~)/.claude.json``.
- A conversation lives in ``projects/<folder>/<id>.jsonl`` and ``projects/<folder>/<id>/`` (sub-agents,
  tool results), where ``<folder>`` is the cwd with every ``[^a-zA-Z0-9]`` turned into ``-`` (over 200
  characters: the first 200, ``-``, base36 of abs(Java ``String.hashCode`` of the cwd)); plus
  ``file-history/<id>/``, ``tasks/<id>/``, ``session-env/<id>/``, ``uploads/<id>/``, ``debug/<id>.txt``,
  the ``history.jsonl`` lines whose ``sessionId`` is the id, ``projects[<cwd>].lastSessionId`` in the global
  config, and ``<tmp>/claude-<uid>/<folder>/<id>/`` (``<tmp>`` = ``$CLAUDE_CODE_TMPDIR``, else node's
  ``os.tmpdir()``: ``$TMPDIR`` or ``/tmp``). claude takes proper-lockfile's lock (the folder
  ``<realpath>.lock``) before it writes ``history.jsonl`` or the global config.
- The live registry ``sessions/<pid>.json`` (``pid``, ``sessionId``, ``cwd``, ``startedAt`` in ms,
  ``procStart`` = field 22 of ``/proc/<pid>/stat``) names the conversation a running claude is in; it
  follows ``/clear`` and ``/resume``; it is removed on a clean exit and left behind by SIGKILL. claude
  rewrites it in place (not atomically) with its UI's ``status``: ``busy``, ``waiting`` (+ ``waitingFor``),
  ``idle``, ``shell`` — the source of :meth:`ClaudeAgent.activity`.
- Sub-agents (the Agent / Task tool) are no conversations of their own: they carry the parent's
  ``sessionId`` and live in its folders (``projects/<folder>/<id>/subagents/``, ``<tmp>/…/<id>/tasks/``),
  so the parent's artifacts take them and ``children`` stays ``[]``. No claude command deletes one
  conversation (``claude project purge`` takes a whole project): the typed plan has no ``Command``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import time
import uuid
from pathlib import Path
from typing import Any, Iterable

import psutil

from muxhost.api import UUID_PATTERN, Activity, Agent, AgentContext, Launch, NotFound, artifacts, hookimpl, kit
from muxhost_claude.activity import registry_activity, transcript_activity, transcript_stalled

__all__ = ["ClaudeAgent", "project_folder_name", "java_string_hash", "registry_entry_live", "registry_activity",
           "transcript_activity", "transcript_stalled", "muxhost_register_agents"]

_MAX_FOLDER = 200
# config-dir folders never scanned for per-conversation entries: shared by every conversation of a
# project or of the user (memory, shell-snapshots, backups: AGENTS.md), or handled on their own
_NOT_SCANNED = frozenset({"memory", "shell-snapshots", "backups", "projects", "sessions", "plans", "plugins",
                          "commands", "agents", "skills", "statsig", "ide"})


# --------------------------------------------------------------------------------------------------
# the project-folder encoding

def _utf16_units(s: str) -> tuple[int, ...]:
    b = s.encode("utf-16-le", "surrogatepass")
    return struct.unpack(f"<{len(b) // 2}H", b)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit signed), as claude computes it."""
    h = 0
    for u in _utf16_units(s):
        h = (h * 31 + u) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def _base36(n: int) -> str:
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + out
        if not n:
            return out


def project_folder_name(cwd: str) -> str:
    """The folder name claude uses under ``projects/`` (and ``/tmp/claude-<uid>/``) for ``cwd``.

    Every UTF-16 code unit that is not ``[a-zA-Z0-9]`` becomes ``-`` (JavaScript's
    ``replace(/[^a-zA-Z0-9]/g, "-")``); a name over 200 units is cut to 200 and gets
    ``-`` + base36(abs(String.hashCode(cwd))).
    """
    units = _utf16_units(cwd)
    name = "".join(chr(u) if (48 <= u <= 57 or 65 <= u <= 90 or 97 <= u <= 122) else "-" for u in units)
    if len(name) <= _MAX_FOLDER:
        return name
    return f"{name[:_MAX_FOLDER]}-{_base36(abs(java_string_hash(cwd)))}"


# --------------------------------------------------------------------------------------------------
# the live registry

def _proc_start_ticks(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks since boot), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    # rest[0] is field 3 (state), so field 22 is rest[19]
    return rest[19] if len(rest) > 19 else None


def registry_entry_live(entry: dict, pid: int | None = None) -> bool:
    """True when the registry entry's process is running and is the one that wrote the entry
    (same start time: ``procStart`` against ``/proc``, else ``startedAt`` against the create time)."""
    try:
        pid = int(entry.get("pid") if entry.get("pid") is not None else pid)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        create_time = p.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True  # it exists and is not ours to read: count it (fail closed)
    proc_start = entry.get("procStart")
    if proc_start is not None:
        ticks = _proc_start_ticks(pid)
        if ticks is not None:
            return str(proc_start) == ticks
    started_at = entry.get("startedAt")
    if isinstance(started_at, (int, float)):
        # claude writes startedAt after it started; a later process reusing the pid was created after
        # the writer died, so after its startedAt.
        return create_time <= started_at / 1000.0 + 0.05
    return True  # nothing to compare: the pid is alive, count it (fail closed)


def _names_id(name: str, cid: str) -> bool:
    """A file or folder name that belongs to conversation ``cid`` (``<id>``, ``<id>.txt``,
    ``<id>-agent-<id>.json``, ``…_<id>.json``), not one that merely mentions it after another id."""
    if name == cid or name.startswith((cid + ".", cid + "-", cid + "_")):
        return True
    stem = name[:-5] if name.endswith(".json") else name
    if stem.endswith("_" + cid):
        return re.match(UUID_PATTERN, name) is None
    return False


def _read_json(path: Path) -> tuple[Any, str | None]:
    """``(document, None)``; ``(None, None)`` when there is no file; ``(None, why)`` when it cannot be
    read or parsed, once more after a moment (claude may be caught writing it)."""
    why = ""
    for attempt in range(2):
        try:
            return json.loads(path.read_bytes()), None
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError) as e:
            why = getattr(e, "strerror", None) or str(e)
            if attempt == 0:
                time.sleep(0.05)
    return None, why


def _live_entry(sessions: Path, pids: Iterable[int] | None, patient: bool) -> dict | None:
    """The live registry entry (``sessions/<pid>.json``, its pid and start time checked) of the
    first of ``pids`` that has one: the pane's claude. ``patient``: a file that cannot be parsed
    is read once more after a moment (claude may be caught writing it); else it is no entry."""
    for pid in pids or ():
        path = sessions / f"{int(pid)}.json"
        if patient:
            entry, _why = _read_json(path)
        else:
            try:
                entry = json.loads(path.read_bytes())
            except FileNotFoundError:
                continue
            except (OSError, ValueError):
                return None
        if isinstance(entry, dict) and str(entry.get("pid", pid)) == str(pid) and registry_entry_live(entry, pid):
            return entry
    return None


def _listdir(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def _last_session(ref: tuple) -> bool:
    """True for ``projects[<dir>].lastSessionId``, the one mention of a conversation in the global
    config (and its backups) a purge removes."""
    return len(ref) == 3 and ref[0] == "projects" and ref[2] == "lastSessionId" and isinstance(ref[1], str)


def _json_refs(obj: Any, cid: str, path: tuple = ()) -> list[tuple]:
    """The key paths of every value equal to ``cid``."""
    if isinstance(obj, dict):
        items: Iterable = obj.items()
    elif isinstance(obj, list):
        items = enumerate(obj)
    else:
        return [path] if obj == cid else []
    return [ref for k, v in items for ref in _json_refs(v, cid, (*path, k))]


# --------------------------------------------------------------------------------------------------
# where things are, for one context

class ClaudePaths:
    """claude's files for one context (its HOME, environment and cwd)."""

    def __init__(self, ctx: AgentContext):
        self.ctx = ctx
        custom = (ctx.env or {}).get("CLAUDE_CONFIG_DIR")
        base = ctx.resolve(custom) if custom else Path(ctx.home)  # ~ is the agent's HOME
        self.config_dir = base if custom else base / ".claude"
        legacy = self.config_dir / ".config.json"
        self.global_config = legacy if legacy.exists() else base / ".claude.json"
        self.projects = self.config_dir / "projects"
        self.sessions = self.config_dir / "sessions"
        self.history = self.config_dir / "history.jsonl"

    def cwd_folders(self) -> list[str]:
        cwd = self.ctx.cwd
        return list(dict.fromkeys(project_folder_name(c) for c in (cwd, os.path.realpath(cwd) if cwd else "") if c))

    def tmp_roots(self) -> list[Path]:
        env = self.ctx.env or {}
        uid = os.getuid() if hasattr(os, "getuid") else 0
        bases = [env.get("CLAUDE_CODE_TMPDIR"), (env.get("TMPDIR") or "").rstrip("/") or None, "/tmp"]
        return [Path(b) / f"claude-{uid}" for b in dict.fromkeys(bases) if b and os.path.isabs(b)]

    def project_dirs(self, cid: str) -> list[Path]:
        """Project folders that hold a transcript or a folder of ``cid``: the cwd's folder first,
        then any other (a conversation purged from elsewhere, a long cwd whose hash changed)."""
        found = [self.projects / n for n in self.cwd_folders()
                 if (self.projects / n / f"{cid}.jsonl").exists() or (self.projects / n / cid).is_dir()]
        for p in sorted(self.projects.glob(f"*/{cid}.jsonl")) + sorted(self.projects.glob(f"*/{cid}")):
            if p.parent not in found:
                found.append(p.parent)
        return found

    def transcript(self, cid: str) -> Path | None:
        """The transcript claude resumes from ``ctx.cwd`` (None when it is not in the cwd's folder)."""
        here = [self.projects / n / f"{cid}.jsonl" for n in self.cwd_folders()]
        # a long cwd: claude also accepts any folder with the same 200-character prefix
        here += [p for n in self.cwd_folders() if len(n) > _MAX_FOLDER
                 for p in sorted(self.projects.glob(f"{n[:_MAX_FOLDER]}-*/{cid}.jsonl"))]
        return next((p for p in here if p.is_file()), None)

    def anywhere(self, cid: str) -> bool:
        """A transcript of ``cid`` in any project folder."""
        return any(self.projects.glob(f"*/{cid}.jsonl"))

    def registry(self, unreadable: list[Path] | None = None) -> list[tuple[Path, dict]]:
        """The live registry entries; files that cannot be read (caught half-written, say) are
        read once more and then listed in ``unreadable``."""
        out = []
        for f in sorted(self.sessions.glob("*.json")):
            data, _why = _read_json(f)
            if isinstance(data, dict):
                out.append((f, data))
            elif unreadable is not None and f.exists():
                unreadable.append(f)
        return out


# --------------------------------------------------------------------------------------------------
# the agent

#: (projects folder, conversation id) whose transcript is in another cwd's folder, as seen once
_ELSEWHERE: set[tuple[str, str]] = set()


class ClaudeAgent(Agent):
    """Claude Code."""

    name = "claude"
    install_hint = "npm install -g @anthropic-ai/claude-code, or set agents.claude.binary in config.yaml"
    process_names = ("claude", "claude.exe")
    resident_children = ()
    activity_reads_screen = False  # (the registry's status says "waiting" when the screen asks)
    exit_text = "/exit"
    # /exit to gone: 0.06-1.3 s measured under load 9-12, 1.6-2.3 s under load 22 (docs/stop.md), busy
    # throughout
    exit_grace, exit_still = 8.0, 1.0
    id_pattern = UUID_PATTERN

    def binary(self, ctx: AgentContext) -> str:
        return ctx.find_binary("claude", self.install_hint)

    # -- start
    def launch(self, ctx: AgentContext) -> Launch:
        args = list(ctx.args or ())
        given = _option_value(args, ("--session-id",))
        if given is not None:
            return Launch([self.binary(ctx), *args], conversation_id=given if self.valid_id(given) else None)
        if any(a in ("-r", "--resume", "-c", "--continue", "--fork-session") or a.startswith("--resume=") for a in args):
            # the user picked a conversation (or claude will): discover follows it
            resumed = _option_value(args, ("-r", "--resume"))
            cid = resumed if resumed and self.valid_id(resumed) and "--fork-session" not in args else None
            return Launch([self.binary(ctx), *args], conversation_id=cid)
        cid = str(uuid.uuid4())
        return Launch([self.binary(ctx), "--session-id", cid, *args], conversation_id=cid)

    def resume(self, ctx: AgentContext, conversation_id: str) -> Launch:
        if not ctx.cwd or not os.path.isdir(ctx.cwd):
            raise NotFound(f"cannot resume claude conversation {conversation_id}: its cwd {ctx.cwd or '(unknown)'} no longer exists")
        paths = ClaudePaths(ctx)
        if paths.transcript(conversation_id) is None:
            elsewhere = [t for d in paths.project_dirs(conversation_id)
                         if (t := d / f"{conversation_id}.jsonl").is_file()]
            if elsewhere:
                raise NotFound(f"claude conversation {conversation_id} belongs to "
                               f"{_transcript_cwd(elsewhere[0]) or 'another directory'}, not {ctx.cwd}")
            raise NotFound(f"claude conversation {conversation_id} has no transcript in {ctx.expand(paths.projects)} "
                           "(nothing was said in it, or it was purged)")
        extra = _without_conversation_options(list(ctx.args or ()))
        return Launch([self.binary(ctx), "--resume", conversation_id, *extra], conversation_id=conversation_id)

    # -- follow
    def discover(self, ctx: AgentContext) -> str | None:
        claimed = set(ctx.claimed or ())
        entry = _live_entry(ClaudePaths(ctx).sessions, ctx.pids, patient=True)
        sid = entry.get("sessionId") if entry else None
        if self.valid_id(sid):  # claude's own word for its own pid, even for a claimed id (an in-session
            return sid          # /resume of a stopped record's conversation): the host asks in_use for proof
        if ctx.conversation_id and ctx.conversation_id not in claimed:
            return ctx.conversation_id
        return None

    def activity(self, ctx: AgentContext, screen: str | None) -> Activity | None:
        """claude's own ``status`` in the live registry of the pane's claude (its start time checked):
        :func:`registry_activity`. No live entry, or none with a status (a torn read: claude rewrites
        the file in place): the end of the conversation's own transcript, :func:`transcript_activity`
        (it cannot see a permission prompt: a tool call waiting for one is ``working``); no transcript
        of that conversation anywhere yet: ``idle`` (claude writes it with the first prompt; without
        this, a fresh claude's timer redraws and CPU made the host's own evidence say ``working``)."""
        paths, cid = ClaudePaths(ctx), ctx.conversation_id
        entry = _live_entry(paths.sessions, ctx.pids, patient=False)  # (every watch pass: no retry pause)
        if entry is not None:
            answer = registry_activity(entry)
            cid = entry.get("sessionId") if self.valid_id(entry.get("sessionId")) else cid
            if answer is not None:
                said = Activity(answer, f"registry: sessions/{entry.get('pid')}.json status {entry.get('status')!r}")
                if answer == "working" and self.valid_id(cid) and ctx.cwd:
                    return transcript_stalled(paths.transcript(cid), ctx) or said
                return said
        if not self.valid_id(cid):
            return None
        transcript = paths.transcript(cid) if ctx.cwd else None
        if transcript is not None:
            answer = transcript_activity(transcript)
            if answer is None:
                return None
            return (answer == "working" and transcript_stalled(transcript, ctx)) or \
                Activity(answer, f"transcript: the last entries of {transcript.name}")
        key = (str(paths.projects), cid)
        if key not in _ELSEWHERE:
            if not paths.anywhere(cid):
                # claude writes the transcript with the first prompt: none yet, at its prompt
                return Activity("idle", "transcript: none yet (claude writes it with the first prompt)")
            _ELSEWHERE.add(key)  # (a transcript does not go while claude runs: not globbed every pass)
        return None

    def conversations(self, ctx: AgentContext) -> list:
        """Every ``projects/<folder>/<id>.jsonl`` (of every project): cwd, creation time and the first
        prompt (or a ``summary``) from its first lines; size: the transcript and its folder
        (sub-agents, tool results), which are no conversations of their own."""
        projects = ClaudePaths(ctx).projects
        found = []
        for folder in _listdir(projects):
            if folder.is_dir() and not folder.is_symlink():
                found += kit.conversations.folder(folder, _describe_transcript)
        return found

    def exists(self, ctx: AgentContext, conversation_id: str) -> bool:
        paths = ClaudePaths(ctx)
        if ctx.cwd:
            return paths.transcript(conversation_id) is not None
        return paths.anywhere(conversation_id)

    # -- guard
    def in_use(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        """A live registry file naming the id (an unreadable one of a live pid counts: fail closed), a process
        with ``CLAUDE_CODE_SESSION_ID=<id>`` (claude's tools, which outlive it), one whose argv names the id."""
        table = ctx.process_table()

        def describe(pid: int) -> str:
            p = table.get(pid)
            return p.describe() if p is not None else f"pid {pid} claude"

        found: dict[object, str] = {}
        unreadable: list[Path] = []
        for f, entry in ClaudePaths(ctx).registry(unreadable):
            pid = _int(entry.get("pid") or f.stem)
            if entry.get("sessionId") == conversation_id and pid and registry_entry_live(entry, pid):
                found[pid] = describe(pid)
        for f in unreadable:
            pid = _int(f.stem)
            if pid and psutil.pid_exists(pid):
                found.setdefault(pid, describe(pid) + f" (its registry {ctx.expand(f)} cannot be read)")
        for line in kit.holders.holders(ctx, conversation_id, env_vars=("CLAUDE_CODE_SESSION_ID",)):
            found.setdefault(_int(line.split()[1]) if line.startswith("pid ") else line, line)
        return list(found.values())

    # -- purge: a typed plan the host carries out
    def roots(self, ctx: AgentContext) -> list[Path]:
        """The config dir, the tmp folders, and the global config and ``history.jsonl`` themselves
        (the host resolves symlinks: a dotfile's target, wherever it is, is then inside)."""
        paths = ClaudePaths(ctx)
        shared = [p for p in (paths.global_config, paths.history) if p.is_file()]
        return [*super().roots(ctx), paths.config_dir, *shared, *paths.tmp_roots()]

    def artifacts(self, ctx: AgentContext, conversation_id: str) -> list:
        cid, paths = conversation_id, ClaudePaths(ctx)
        out: list = []

        def named(p: Path) -> None:  # a file, symlink or folder named for the conversation
            out.append(artifacts.Dir(p) if p.is_dir() and not p.is_symlink() else artifacts.File(p))

        # the transcript, its folder (sub-agents, tool results) and anything else named for it, in
        # every project folder that has them
        folders = paths.project_dirs(cid)
        for d in folders:
            for e in _listdir(d):
                if _names_id(e.name, cid):
                    named(e)
        # per-conversation entries one or two levels down in the config dir (file-history, tasks,
        # session-env, uploads, debug, todos, …)
        for top in _listdir(paths.config_dir):
            if top.name in _NOT_SCANNED:
                continue
            if _names_id(top.name, cid):
                named(top)
            elif top.is_dir() and not top.is_symlink():
                for child in _listdir(top):
                    if _names_id(child.name, cid):
                        named(child)
        latest = paths.config_dir / "debug" / "latest"  # a symlink to the newest debug log: it goes with it
        if latest.is_symlink() and _names_id(os.path.basename(os.readlink(latest)), cid):
            out.append(artifacts.File(latest))
        # <tmp>/claude-<uid>/<folder>/<id>/ (background task and sub-agent outputs)
        names = list(dict.fromkeys([d.name for d in folders] + paths.cwd_folders()))
        for root in paths.tmp_roots():
            out += [artifacts.Dir(root / n / cid) for n in names]
            out += [artifacts.Dir(p) for p in sorted(root.glob(f"*/{cid}"))]
        # stale registry files naming the id (a live one means in use: the host refuses before this)
        out += [artifacts.File(f) for f, e in paths.registry()
                if e.get("sessionId") == cid and not registry_entry_live(e, _int(f.stem))]
        # the shared files, rewritten in place under claude's own lock (of the file's realpath)
        hist = paths.history
        out.append(artifacts.Lines(hist, key="sessionId", value=cid,
                                   lock=artifacts.MkdirLock(os.path.realpath(hist) + ".lock")))
        gc = paths.global_config
        doc, why = _read_json(gc)
        if why:
            out.append(artifacts.Leftover(gc, f"could not be read: {why}"))
        lock = artifacts.MkdirLock(os.path.realpath(gc) + ".lock")
        for ref in _json_refs(doc, cid):
            if _last_session(ref):
                out.append(artifacts.JsonMember(gc, ref, equals=cid, lock=lock))
            else:  # another mention: reported, never guessed at
                out.append(artifacts.Leftover(gc, "".join(f"[{json.dumps(k)}]" for k in ref) + " names the conversation"))
        # backups/ is shared (claude's own copies of the global config): the same member goes from
        # each copy (claude writes them whole, without a lock); any other mention is said, never touched
        backups, copies = paths.config_dir / "backups", 0
        for b in _listdir(backups):
            with contextlib.suppress(OSError):
                if not (b.is_file() and cid.encode() in b.read_bytes()):
                    continue
                copy, why = _read_json(b) if b.name.startswith(".claude.json.backup") else (None, "")
                refs = _json_refs(copy, cid) if not why else []
                out += [artifacts.JsonMember(b, ref, equals=cid) for ref in refs if _last_session(ref)]
                copies += bool(why) or any(not _last_session(ref) for ref in refs) or not refs
        note = (f"kept {ctx.expand(backups)}/ (shared): {copies} old copies of the global config there still "
                "name this conversation; claude keeps at most 5 and rotates them out")
        if copies and note not in ctx.notes:  # (artifacts is asked again for the residual)
            ctx.notes.append(note)
        return out


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _option_value(args: list[str], names: Iterable[str]) -> str | None:
    names = tuple(names)
    for i, a in enumerate(args):
        if a in names and i + 1 < len(args):
            return args[i + 1]
        for n in names:
            if n.startswith("--") and a.startswith(n + "="):
                return a[len(n) + 1:]
    return None


_CONVERSATION_OPTIONS = {"--session-id": 1, "--resume": 1, "-r": 1, "--continue": 0, "-c": 0, "--fork-session": 0}


def _without_conversation_options(args: list[str]) -> list[str]:
    """``args`` without the options that pick a conversation (resume picks its own)."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        name = a.split("=", 1)[0]
        if name in _CONVERSATION_OPTIONS:
            takes = _CONVERSATION_OPTIONS[name] and "=" not in a
            # --resume's value is optional: only a following non-option word is its value
            i += 1 + (1 if takes and i + 1 < len(args) and not args[i + 1].startswith("-") else 0)
            continue
        out.append(a)
        i += 1
    return out


def _describe_transcript(path: Path, entries: list[dict]) -> dict:
    """cwd, created, title of a transcript from its first entries; its folder counts in its size."""
    from datetime import datetime

    cwd = next((e["cwd"] for e in entries if isinstance(e.get("cwd"), str)), None)
    stamp = next((e["timestamp"] for e in entries if isinstance(e.get("timestamp"), str)), None)
    try:
        created = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None
    except ValueError:
        created = None
    prompts = [kit.conversations.title((e.get("message") or {}).get("content")) for e in entries
               if e.get("type") == "user" and not e.get("isMeta") and isinstance(e.get("message"), dict)]
    summary = next((e["summary"] for e in entries if e.get("type") == "summary" and isinstance(e.get("summary"), str)), "")
    first = next((t for t in prompts if t and not t.startswith("<")), "")
    return {"cwd": cwd, "created": created, "title": first or kit.conversations.title(summary),
            "also": [path.with_suffix("")]}


def _transcript_cwd(path: Path) -> str | None:
    try:
        lines = kit.jsonl.matching_lines(path, lambda entry: isinstance(entry.get("cwd"), str))
    except OSError:
        return None
    return json.loads(lines[0])["cwd"] if lines else None


@hookimpl
def muxhost_register_agents(register):
    register(ClaudeAgent())
