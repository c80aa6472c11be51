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
  ``os.tmpdir()``: ``$TMPDIR`` or ``/tmp``).
- The live registry ``sessions/<pid>.json`` (``pid``, ``sessionId``, ``cwd``, ``startedAt`` in ms,
  ``procStart`` = field 22 of ``/proc/<pid>/stat``) names the conversation a running claude is in; it
  follows ``/clear`` and ``/resume``; it is removed on a clean exit and left behind by SIGKILL.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import struct
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import psutil

import muxhost
from muxhost import fsutil
from muxhost.agent import UUID_PATTERN, AgentContext, Launch

__all__ = ["ClaudeAgent", "project_folder_name", "java_string_hash", "muxhost_register_agents"]

_MAX_FOLDER = 200
# never part of one conversation (AGENTS.md): shared by every conversation of a project / the user
_SHARED = frozenset({"memory", "shell-snapshots", "backups"})
# handled on their own (registry, transcripts) or never per conversation
_NOT_SCANNED = _SHARED | {"projects", "sessions", "plans", "plugins", "commands", "agents", "skills", "statsig", "ide"}


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
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    if n == 0:
        return "0"
    out = []
    while n:
        n, r = divmod(n, 36)
        out.append(digits[r])
    return "".join(reversed(out))


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


def _describe(pid: int) -> str:
    try:
        cmd = psutil.Process(pid).cmdline()
    except psutil.Error:
        cmd = []
    text = shlex.join(cmd) if cmd else "claude"
    return f"pid {pid} {text}"


def _env_holders(cid: str) -> list[int]:
    """Our processes whose environment says ``CLAUDE_CODE_SESSION_ID=<cid>``: the tool processes claude
    starts (Bash, background shells) carry it, and they outlive a killed claude in their own session,
    still writing into the conversation's temp folder."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    me = os.getpid()
    out = []
    for p in psutil.process_iter(["pid", "uids"]):
        try:
            if p.pid == me or (uid is not None and p.info["uids"] is not None and p.info["uids"].real != uid):
                continue
            if p.environ().get("CLAUDE_CODE_SESSION_ID") == cid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return out


# --------------------------------------------------------------------------------------------------
# where things are, for one context

@dataclass
class _Item:
    """One artifact: its label for reports and how to remove it."""

    label: str
    remove: Callable[[], bool]


@dataclass
class ClaudePaths:
    ctx: AgentContext
    config_dir: Path = field(init=False)
    global_config: Path = field(init=False)

    def __post_init__(self) -> None:
        env = self.ctx.env or {}
        custom = env.get("CLAUDE_CONFIG_DIR")
        if custom:
            self.config_dir = Path(self._abs(custom))
        else:
            self.config_dir = Path(self.ctx.home) / ".claude"
        legacy = self.config_dir / ".config.json"
        if legacy.exists():
            self.global_config = legacy
        else:
            base = Path(self._abs(custom)) if custom else Path(self.ctx.home)
            self.global_config = base / ".claude.json"

    def _abs(self, value: str) -> str:
        if value == "~" or value.startswith("~/"):
            value = self.ctx.home + value[1:]
        if not os.path.isabs(value):
            value = os.path.join(self.ctx.cwd or self.ctx.home, value)
        return os.path.normpath(value)

    @property
    def projects(self) -> Path:
        return self.config_dir / "projects"

    @property
    def sessions(self) -> Path:
        return self.config_dir / "sessions"

    @property
    def history(self) -> Path:
        return self.config_dir / "history.jsonl"

    def cwd_candidates(self) -> list[str]:
        out = []
        for c in (self.ctx.cwd, os.path.realpath(self.ctx.cwd) if self.ctx.cwd else ""):
            if c and c not in out:
                out.append(c)
        return out

    def cwd_folders(self) -> list[str]:
        return list(dict.fromkeys(project_folder_name(c) for c in self.cwd_candidates()))

    def tmp_roots(self) -> list[Path]:
        env = self.ctx.env or {}
        uid = os.getuid() if hasattr(os, "getuid") else 0
        bases = []
        for b in (env.get("CLAUDE_CODE_TMPDIR"), (env.get("TMPDIR") or "").rstrip("/") or None, "/tmp"):
            if b and os.path.isabs(b) and b not in bases:
                bases.append(b)
        return [Path(b) / f"claude-{uid}" for b in bases]

    def project_dirs(self, cid: str) -> list[Path]:
        """Project folders that hold a transcript or a folder of ``cid``: the cwd's folder first,
        then any other (a conversation purged from elsewhere, a long cwd whose hash changed)."""
        found: list[Path] = []
        for name in self.cwd_folders():
            d = self.projects / name
            if (d / f"{cid}.jsonl").exists() or (d / cid).is_dir():
                found.append(d)
        if self.projects.is_dir():
            for p in sorted(self.projects.glob(f"*/{cid}.jsonl")) + sorted(self.projects.glob(f"*/{cid}")):
                if p.parent not in found:
                    found.append(p.parent)
        return found

    def transcript(self, cid: str) -> Path | None:
        """The transcript claude resumes from ``ctx.cwd`` (None when it is not in the cwd's folder)."""
        for name in self.cwd_folders():
            p = self.projects / name / f"{cid}.jsonl"
            if p.is_file():
                return p
        # a long cwd: claude also accepts any folder with the same 200-character prefix
        for name in self.cwd_folders():
            if len(name) > _MAX_FOLDER and self.projects.is_dir():
                for p in self.projects.glob(f"{name[:_MAX_FOLDER]}-*/{cid}.jsonl"):
                    return p
        return None

    def registry(self, unreadable: list[Path] | None = None) -> list[tuple[Path, dict]]:
        """The live registry entries; files that cannot be read (caught half-written, say) are
        read once more and then listed in ``unreadable``."""
        out = []
        try:
            files = sorted(self.sessions.glob("*.json"))
        except OSError:
            return out
        for f in files:
            data = None
            for attempt in range(2):
                try:
                    data = json.loads(f.read_text(encoding="utf-8"))
                    break
                except FileNotFoundError:
                    break
                except (OSError, ValueError):
                    if attempt == 0:
                        time.sleep(0.05)
            if isinstance(data, dict):
                out.append((f, data))
            elif unreadable is not None and f.exists():
                unreadable.append(f)
        return out


def _names_id(name: str, cid: str) -> bool:
    """A file or folder name that belongs to conversation ``cid`` (``<id>``, ``<id>.txt``,
    ``<id>-agent-<id>.json``, ``…_<id>.json``), not one that merely mentions it after another id."""
    if name == cid or name.startswith((cid + ".", cid + "-", cid + "_")):
        return True
    stem = name[:-5] if name.endswith(".json") else name
    if stem.endswith("_" + cid):
        return re.match(UUID_PATTERN, name) is None
    return False


class ClaudeLock:
    """The lock claude itself takes before it writes ``history.jsonl`` or ``.claude.json``
    (proper-lockfile: the folder ``<file>.lock`` made with mkdir, stale after 10 s without an mtime
    update). Held while we rewrite such a file, so a running claude of another conversation never
    writes between our read and our rename."""

    STALE = 10.0
    TIMEOUT = 5.0

    def __init__(self, target: str | os.PathLike, timeout: float | None = None):
        self.path = f"{target}.lock"
        self.timeout = self.TIMEOUT if timeout is None else timeout
        self.held = False

    def __enter__(self) -> "ClaudeLock":
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                os.mkdir(self.path)
                self.held = True
                return self
            except FileExistsError:
                try:
                    if time.time() - os.stat(self.path).st_mtime > self.STALE:
                        os.rmdir(self.path)  # what proper-lockfile does with a stale lock
                        continue
                except OSError:
                    continue
            if time.monotonic() > deadline:
                raise OSError(f"{self.path} is held (a claude is writing the file); left as it was")
            time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        if self.held:
            try:
                os.rmdir(self.path)
            except OSError:
                pass
            self.held = False


def _locked(target: Path, action: Callable[[], Any], lock_path: str | os.PathLike | None = None) -> Callable[[], Any]:
    def run() -> Any:
        with ClaudeLock(lock_path or target):
            return action()

    return run


def _history_match(cid: str) -> Callable[[bytes], bool]:
    needle = cid.encode()

    def match(line: bytes) -> bool:
        if needle not in line:
            return False
        try:
            entry = json.loads(line)
        except ValueError:
            return False
        return isinstance(entry, dict) and entry.get("sessionId") == cid

    return match


def _json_refs(obj: Any, cid: str, path: str = "") -> list[str]:
    """JSON paths of every string value equal to ``cid``."""
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _json_refs(v, cid, f"{path}[{json.dumps(k)}]" if path or not k.isidentifier() else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _json_refs(v, cid, f"{path}[{i}]")
    elif obj == cid:
        out.append(path)
    return out


def _last_session_projects(obj: Any, cid: str) -> list[str]:
    projects = obj.get("projects") if isinstance(obj, dict) else None
    if not isinstance(projects, dict):
        return []
    return [k for k, v in projects.items() if isinstance(v, dict) and v.get("lastSessionId") == cid]


def _detect_indent(text: str) -> int | str | None:
    m = re.search(r"\n([ \t]+)\S", text)
    if not m:
        return None
    ws = m.group(1)
    return "\t" if ws.startswith("\t") else len(ws)


def clear_last_session_id(data: bytes, cid: str) -> bytes:
    """``data`` (a global config) without ``projects[*].lastSessionId`` where it equals ``cid``; every
    other byte kept. The member is cut out of the text; the result is checked by parsing it; only if
    that check fails is the document re-serialised (key order kept, indentation as the file had it)."""
    text = data.decode("utf-8")
    obj = json.loads(text)
    targets = _last_session_projects(obj, cid)
    if not targets:
        return data
    expected = json.loads(text)
    for k in targets:
        del expected["projects"][k]["lastSessionId"]
    value = re.escape(json.dumps(cid))
    new = re.sub(r',\s*"lastSessionId"\s*:\s*' + value + r'(?=\s*[,}])', "", text)
    new = re.sub(r'"lastSessionId"\s*:\s*' + value + r'\s*,\s*', "", new)
    new = re.sub(r'"lastSessionId"\s*:\s*' + value + r'\s*(?=})', "", new)
    try:
        if json.loads(new) == expected:
            return new.encode("utf-8")
    except ValueError:
        pass
    indent = _detect_indent(text)
    out = json.dumps(expected, indent=indent, ensure_ascii=False)
    if text.endswith("\n"):
        out += "\n"
    return out.encode("utf-8")


# --------------------------------------------------------------------------------------------------
# the agent

class ClaudeAgent(muxhost.Agent):
    """Claude Code."""

    name = "claude"
    install_hint = "npm install -g @anthropic-ai/claude-code, or set agents.claude.binary in config.yaml"
    process_names = ("claude", "claude.exe")
    resident_children = ()
    exit_text = "/exit"
    id_pattern = UUID_PATTERN

    # -- helpers
    @staticmethod
    def binary(ctx: AgentContext) -> str:
        return (ctx.config or {}).get("binary") or shutil.which("claude", path=(ctx.env or {}).get("PATH")) or "claude"

    @staticmethod
    def paths(ctx: AgentContext) -> ClaudePaths:
        return ClaudePaths(ctx)

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
        from muxhost.errors import NotFound

        if not ctx.cwd or not os.path.isdir(ctx.cwd):
            raise NotFound(f"cannot resume claude conversation {conversation_id}: its cwd {ctx.cwd or '(unknown)'} no longer exists")
        paths = self.paths(ctx)
        if paths.transcript(conversation_id) is None:
            elsewhere = paths.project_dirs(conversation_id)
            if elsewhere and any((d / f"{conversation_id}.jsonl").is_file() for d in elsewhere):
                where = _transcript_cwd(next(d / f"{conversation_id}.jsonl" for d in elsewhere
                                             if (d / f"{conversation_id}.jsonl").is_file()))
                raise NotFound(f"claude conversation {conversation_id} belongs to {where or 'another directory'}, "
                               f"not {ctx.cwd}")
            raise NotFound(f"claude conversation {conversation_id} has no transcript in {ctx.expand(paths.projects)} "
                           "(nothing was said in it, or it was purged)")
        extra = _without_conversation_options(list(ctx.args or ()))
        return Launch([self.binary(ctx), "--resume", conversation_id, *extra], conversation_id=conversation_id)

    # -- follow
    def discover(self, ctx: AgentContext) -> str | None:
        paths = self.paths(ctx)
        claimed = set(ctx.claimed or ())
        for pid in ctx.pids or ():
            f = paths.sessions / f"{int(pid)}.json"
            try:
                entry = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(entry, dict) or str(entry.get("pid", pid)) != str(pid):
                continue
            if not registry_entry_live(entry, pid):
                continue
            sid = entry.get("sessionId")
            if self.valid_id(sid) and sid not in claimed:
                return sid
        if ctx.conversation_id and ctx.conversation_id not in claimed:
            return ctx.conversation_id
        return None

    def exists(self, ctx: AgentContext, conversation_id: str) -> bool:
        paths = self.paths(ctx)
        if ctx.cwd:
            return paths.transcript(conversation_id) is not None
        return bool(paths.projects.is_dir() and any(paths.projects.glob(f"*/{conversation_id}.jsonl")))

    # -- guard
    def in_use(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        from muxhost.procs import argv_holders

        holders: dict[int, str] = {}
        unreadable: list[Path] = []
        for f, entry in self.paths(ctx).registry(unreadable):
            if entry.get("sessionId") != conversation_id:
                continue
            try:
                pid = int(entry.get("pid") or f.stem)
            except ValueError:
                continue
            if registry_entry_live(entry, pid):
                holders[pid] = _describe(pid)
        for f in unreadable:  # fail closed: a running claude whose registry we cannot read may hold it
            if f.stem.isdigit() and psutil.pid_exists(int(f.stem)):
                holders.setdefault(int(f.stem), _describe(int(f.stem)) + f" (its registry {ctx.expand(f)} cannot be read)")
        for pid in _env_holders(conversation_id):
            holders.setdefault(pid, _describe(pid) + " (a tool process of the conversation)")
        for line in argv_holders(conversation_id):
            m = re.match(r"pid (\d+)", line)
            pid = int(m.group(1)) if m else -1
            holders.setdefault(pid, line)
        return list(holders.values())

    # -- purge
    def _items(self, ctx: AgentContext, cid: str) -> list[_Item]:
        paths = self.paths(ctx)
        items: list[_Item] = []
        seen: set[str] = set()

        def add_path(p: Path) -> None:
            key = os.path.abspath(p)
            if key in seen or not os.path.lexists(p):
                return
            seen.add(key)
            label = ctx.expand(p) + ("/" if p.is_dir() and not p.is_symlink() else "")
            items.append(_Item(label, lambda p=p: fsutil.remove(p)))

        # the transcript and its folder (sub-agents, tool results), in every project folder that has them
        folders = paths.project_dirs(cid)
        for d in folders:
            add_path(d / f"{cid}.jsonl")
            add_path(d / cid)
            try:  # anything else named for it there (a temp or backup copy of the transcript)
                extra = sorted(e for e in d.iterdir() if _names_id(e.name, cid) and e.name != "memory")
            except OSError:
                extra = []
            for e in extra:
                add_path(e)
        # per-conversation folders and files in the config dir (file-history, tasks, session-env,
        # uploads, debug, todos, …): any entry one or two levels down named for the id
        cfg = paths.config_dir
        if cfg.is_dir():
            for top in sorted(cfg.iterdir()):
                if top.name in _NOT_SCANNED:
                    continue
                if _names_id(top.name, cid):
                    add_path(top)
                elif top.is_dir() and not top.is_symlink():
                    try:
                        children = sorted(top.iterdir())
                    except OSError:
                        continue
                    for child in children:
                        if _names_id(child.name, cid):
                            add_path(child)
            # debug/latest is a symlink to the newest debug log: it goes with that log
            latest = cfg / "debug" / "latest"
            if latest.is_symlink() and _names_id(os.path.basename(os.readlink(latest)), cid):
                add_path(latest)
        # /tmp/claude-<uid>/<folder>/<id>/ (background task outputs, sub-agent outputs)
        names = list(dict.fromkeys([d.name for d in folders] + paths.cwd_folders()))
        for root in paths.tmp_roots():
            if not root.is_dir():
                continue
            for name in names:
                add_path(root / name / cid)
            for p in sorted(root.glob(f"*/{cid}")):
                add_path(p)
        # stale registry files naming the id (a live one means in use: purge never gets here)
        for f, entry in paths.registry():
            if entry.get("sessionId") == cid and not registry_entry_live(entry, _int(f.stem)):
                add_path(f)
        # history.jsonl lines
        hist = paths.history
        if hist.is_file():
            match = _history_match(cid)
            try:
                n = sum(1 for line in hist.read_bytes().splitlines() if match(line))
            except OSError:
                n = 0
            if n:
                # claude locks the realpath of history.jsonl
                items.append(_Item(f"{ctx.expand(hist)}: {n} line{'s' if n != 1 else ''}",
                                   _locked(hist, lambda: fsutil.drop_lines(os.path.realpath(hist), match) > 0,
                                           os.path.realpath(hist))))
        # lastSessionId in the global config (and, reported only, any other mention of the id)
        gc = paths.global_config
        if gc.is_file():
            try:
                obj = json.loads(gc.read_bytes())
            except (OSError, ValueError):
                obj = None
            if obj is not None:
                last = _last_session_projects(obj, cid)
                for proj in last:
                    items.append(_Item(f"{ctx.expand(gc)}: lastSessionId of {proj}",
                                       _locked(gc, lambda: fsutil.rewrite(os.path.realpath(gc),  # a symlinked dotfile stays a symlink
                                                                          lambda b: clear_last_session_id(b, cid)))))
                for ref in _json_refs(obj, cid):
                    if any(ref == f"projects[{json.dumps(p)}][\"lastSessionId\"]" for p in last):
                        continue
                    items.append(_Item(f"{ctx.expand(gc)}: {ref}", lambda: False))
        return items

    def artifacts(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        return [i.label for i in self._items(ctx, conversation_id)]

    def purge(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        removed: list[str] = []
        done_global = False
        for item in self._items(ctx, conversation_id):
            if ": lastSessionId of " in item.label:
                # one rewrite clears every project's lastSessionId naming the id
                if done_global:
                    removed.append(item.label)
                    continue
                done_global = True
            try:
                if item.remove():
                    removed.append(item.label)
            except OSError as e:
                ctx.notes.append(f"could not remove {item.label}: {e}")
        backups = self.paths(ctx).config_dir / "backups"
        needle = conversation_id.encode()
        try:
            named = [b for b in backups.iterdir() if b.is_file() and needle in b.read_bytes()]
        except OSError:
            named = []
        if named:
            ctx.notes.append(f"kept {ctx.expand(backups)}/ (shared): {len(named)} old copies of .claude.json there "
                             "still name this conversation; claude keeps at most 5 and rotates them out")
        return removed


def _int(s: str) -> int | None:
    try:
        return int(s)
    except ValueError:
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


def _transcript_cwd(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and isinstance(entry.get("cwd"), str):
                    return entry["cwd"]
    except OSError:
        pass
    return None


@muxhost.hookimpl
def muxhost_register_agents(register):
    register(ClaudeAgent())
