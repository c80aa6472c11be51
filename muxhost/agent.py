"""What a plugin author works with: :class:`Agent`, :class:`AgentContext`, :class:`Launch`,
:class:`PurgeReport`, :class:`Conversation` (CONTRACT §2).

An agent plugin says what differs between agents: how to start and resume one, how to find the
conversation it is in, whether that conversation is in use, and how to purge it completely. The host
does everything else (panes, the stop ladder, records, the purge order, id validation).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

UUID_PATTERN = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

_XDG = {
    "data": ("XDG_DATA_HOME", ".local/share"),
    "config": ("XDG_CONFIG_HOME", ".config"),
    "state": ("XDG_STATE_HOME", ".local/state"),
    "cache": ("XDG_CACHE_HOME", ".cache"),
}


def _same_path(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    if os.fspath(a) == os.fspath(b):  # the usual case, asked for every record on every `ls`: no realpath
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


class Activity(str):
    """A plugin's :meth:`Agent.activity` answer with what it read: the state (``working``,
    ``waiting``, ``idle``, ``stalled``) and ``reason``, one short line naming the source and what it
    showed (``"registry: status busy"``, ``"transcript: last entry a tool call"``, ``"screen: the
    approval footer"``). It is the state string itself (``Activity("idle", "…") == "idle"``), so a
    bare string stays a valid answer; ``muxhost explain`` shows the reason."""

    reason: str

    def __new__(cls, state: str, reason: str = "") -> "Activity":
        self = super().__new__(cls, state)
        self.reason = reason
        return self

    @property
    def state(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"Activity({self.state!r}, {self.reason!r})"

    def __reduce__(self):
        return (Activity, (self.state, self.reason))


@dataclass
class Launch:
    """What to run in the pane: an argv list (never a shell string), extra environment, and the
    conversation id when the agent lets the launcher choose it up front."""

    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    conversation_id: str | None = None


@dataclass
class Conversation:
    """One conversation on disk, as :meth:`Agent.conversations` tells it: its ``id``, ``created`` and
    ``updated`` (epoch seconds: the first and the last write), ``cwd`` (the folder it ran in; "" when
    unknown), ``title`` (its title or first prompt: one short line), ``size`` (bytes on disk, from
    ``stat``) and ``children`` (the ids of its direct child conversations: listed under it, and purged
    with it)."""

    id: str
    created: float = 0.0
    updated: float = 0.0
    cwd: str = ""
    title: str = ""
    size: int = 0
    children: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AgentContext:
    """Everything a plugin may need to know about one agent run (or a conversation without a run).

    ``home`` is the HOME the agent runs (or ran) with, ``env`` its whole environment, ``cwd`` its
    working directory, ``launched_at`` epoch seconds, ``pids`` its live process ids (the whole pane
    tree, root first; may be empty),
    ``claimed`` conversation ids bound to other live records (never discover one of these),
    ``config`` this agent's mapping from config.yaml, ``args`` the extra arguments given after
    ``--`` on ``muxhost launch``, ``conversation_id`` the id the record knows so far (or None), and
    ``notes``: a list a plugin may append human-readable remarks to (they appear in reports), and
    ``processes``: the process table the host already read (see :meth:`process_table`), and
    ``stall_after``: ``watch.stall_after``, the seconds a turn may go without a sign of life before
    :meth:`Agent.activity` may answer ``stalled`` from its own evidence.
    """

    home: str
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    launched_at: float = 0.0
    pids: list[int] = field(default_factory=list)
    claimed: frozenset[str] = frozenset()
    config: dict[str, Any] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    conversation_id: str | None = None
    record_id: str | None = None
    notes: list[str] = field(default_factory=list)
    #: the process table the host just read (a muxhost.procs.ProcessTable), or None: reuse it
    #: instead of scanning the process table again (``procs.ProcessTable.snapshot()``)
    processes: Any = field(default=None, repr=False, compare=False)
    stall_after: float = 600.0

    def process_table(self):
        """The host's snapshot when there is one, else a fresh one."""
        if self.processes is None:
            from muxhost.procs import ProcessTable

            self.processes = ProcessTable.snapshot()
        return self.processes

    def _xdg(self, kind: str) -> Path:
        var, default = _XDG[kind]
        value = self.env.get(var)
        caller_home = os.environ.get("HOME") or os.path.expanduser("~")
        if value and os.path.isabs(value) and _same_path(self.home, caller_home):
            return Path(value)
        return Path(self.home) / default

    def data_home(self) -> Path:
        """``$XDG_DATA_HOME`` when set and ``home`` is the caller's own home, else ``home/.local/share``."""
        return self._xdg("data")

    def config_home(self) -> Path:
        """``$XDG_CONFIG_HOME`` when set and ``home`` is the caller's own home, else ``home/.config``."""
        return self._xdg("config")

    def state_home(self) -> Path:
        """``$XDG_STATE_HOME`` when set and ``home`` is the caller's own home, else ``home/.local/state``."""
        return self._xdg("state")

    def cache_home(self) -> Path:
        """``$XDG_CACHE_HOME`` when set and ``home`` is the caller's own home, else ``home/.cache``."""
        return self._xdg("cache")

    def expand(self, path: str | os.PathLike) -> str:
        """A path for reports: ``~/…`` when under ``home``, else absolute."""
        p = os.path.abspath(path)
        home = os.path.abspath(self.home)
        if p == home or p.startswith(home.rstrip("/") + "/"):
            return "~" + p[len(home):]
        return p

    def resolve(self, path: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
        """An absolute path for a path the agent was given (``CODEX_HOME=~/x``, a config value):
        ``~`` and ``~/…`` against the AGENT's HOME (``home``, not the caller's), ``~user/…`` as the
        system says, and a relative path against ``base`` (default: ``cwd``, else ``home``).
        Normalised (``a/../b`` is ``b``); symlinks are not resolved."""
        value = os.fspath(path)
        if value == "~" or value.startswith("~/"):
            value = str(self.home) + value[1:]
        elif value.startswith("~"):
            value = os.path.expanduser(value)
        if not os.path.isabs(value):
            value = os.path.join(os.fspath(base) if base is not None else (self.cwd or self.home), value)
        return Path(os.path.normpath(value))

    def find_binary(self, name: str, install_hint: str = "") -> str:
        """The absolute path of the agent's program: config ``binary`` when set (a path, resolved
        with :meth:`resolve`, must be an executable file; a bare name is looked up on the PATH),
        else ``name`` on the AGENT's PATH (``env["PATH"]``; the caller's when the agent's
        environment has none). Raises :class:`~muxhost.errors.MuxhostError` (exit 1) with one line
        naming the program and ``install_hint`` (the agent's :attr:`Agent.install_hint`)."""
        import shutil

        from muxhost.errors import MuxhostError

        search = self.env.get("PATH") or os.environ.get("PATH") or os.defpath
        hint = f" ({install_hint})" if install_hint else ""
        configured = str((self.config or {}).get("binary") or "")
        if configured and ("/" in configured or configured.startswith("~")):
            p = self.resolve(configured)
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
            raise MuxhostError(f"{name}: the configured binary {configured} is not an executable file{hint}")
        found = shutil.which(configured or name, path=search)
        if found:
            return os.path.abspath(found)
        if configured:
            raise MuxhostError(f"{name}: the configured binary {configured} is not on the agent's PATH{hint}")
        raise MuxhostError(f"{name} is not installed: no {name} on the agent's PATH{hint}")


@dataclass
class PurgeReport:
    """The outcome of a purge: the plan (``artifacts`` before), what ``purge`` removed, and the
    residual (``artifacts`` after). ``notes`` carries the plugin's remarks (``ctx.notes``)."""

    agent: str
    conversation_id: str
    plan: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    residual: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False
    record: str | None = None
    home: str | None = None  # the HOME purged in, when it is not the caller's
    #: a dry run of a purge that would be refused now (in use, vetoed): why; None: it would go ahead
    refused: str | None = None
    #: ``purge --stop``: how the ladder ended the record's agent first (``{"outcome", "seconds"}``)
    stopped: dict[str, Any] | None = None
    #: ``purge --archive``: the archive that holds what went (``unpurge`` puts it back)
    archive: str | None = None

    @property
    def complete(self) -> bool:
        return not self.residual

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["complete"] = self.complete
        return d


class Agent:
    """Base class for agent plugins. Subclass it, set the class attributes, implement the methods,
    and register an instance from a ``muxhost_register_agents(register)`` hook.

    Every ``conversation_id`` a method receives has already been checked by the host to fullmatch
    :attr:`id_pattern` (:meth:`valid_id`, which no subclass may override), so it is safe in a path,
    an argv or SQL parameters.
    """

    #: the agent's name on the command line (``muxhost launch NAME``)
    name: str = ""
    #: comm / argv[0] basenames of a running agent (used to find a hand-started agent in a pane)
    process_names: tuple[str, ...] = ()
    #: names of child processes that are part of the agent itself, not work it runs (language
    #: servers, MCP servers): their CPU is never taken for work; a tool running under one is work
    resident_children: tuple[str, ...] = ()
    #: typed into the pane by the stop ladder (then a pause, then Enter); None = no graceful exit
    exit_text: str | None = "/exit"
    #: seconds between typing ``exit_text`` and pressing Enter
    exit_pause: float = 0.5
    #: seconds the stop ladder waits for the agent to leave after its exit text, at most (the
    #: longest exit measured, with room for a busy machine); None: ``stop.exit_grace``
    exit_grace: float | None = None
    #: seconds of stillness after the exit text (its screen changed, then no output, no CPU, no
    #: process running) after which the ladder judges the text was not taken and goes on at once;
    #: None: never judged so (its whole exit grace). An agent that keeps quiet while it leaves
    #: (waiting on the network, say) needs None or more than it keeps quiet
    exit_still: float | None = 0.5
    #: a conversation id must fullmatch this before it is used anywhere
    id_pattern: str = UUID_PATTERN
    #: how to install the agent's program, shown when it is not found (``npm install -g …``)
    install_hint: str = ""
    #: False when :meth:`activity` never reads its ``screen`` (it answers from a transcript, a
    #: database, a status command): the host then captures no screen for this agent
    activity_reads_screen: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "valid_id" in vars(cls):
            raise TypeError(f"{cls.__qualname__} overrides valid_id: the id check is the host's, built from "
                            "id_pattern (set id_pattern instead)")

    def valid_id(self, conversation_id: object) -> bool:
        """True when ``conversation_id`` fullmatches :attr:`id_pattern`: the host's one id check
        (before any argv, path, SQL or pane sees an id). A subclass cannot override it."""
        return isinstance(conversation_id, str) and re.fullmatch(self.id_pattern, conversation_id) is not None

    def launch(self, ctx: AgentContext) -> Launch:
        """The command that starts a new conversation in ``ctx.cwd``."""
        raise NotImplementedError

    def resume(self, ctx: AgentContext, conversation_id: str) -> Launch:
        """The command that resumes ``conversation_id`` (run in ``ctx.cwd``, the record's cwd)."""
        raise NotImplementedError(f"agent {self.name!r} cannot resume a conversation")

    def discover(self, ctx: AgentContext) -> str | None:
        """The conversation the agent of ``ctx`` is really in now, or None. Never an id in ``ctx.claimed``."""
        return ctx.conversation_id

    def exists(self, ctx: AgentContext, conversation_id: str) -> bool:
        """True when the conversation can be resumed from disk."""
        return False

    def activity(self, ctx: AgentContext, screen: str | None) -> str | None:
        """What the agent of ``ctx`` (in conversation ``ctx.conversation_id``) is doing now, from the
        best source the plugin has (its transcript or database, a marker on ``screen``, a status
        command of the agent itself): ``"working"``, ``"waiting"`` (it asks the user something: a
        permission, a question), ``"idle"`` (done, at its prompt), ``"stalled"`` (a turn is open and
        its own evidence shows no progress for ``ctx.stall_after``: :func:`muxhost.kit.net.stalled`),
        or None: no opinion. Return :class:`Activity` (``state``,
        ``reason``) to say what it read; a bare string is the state with no reason.

        ``screen`` is the pane's visible screen (None when the host read none). The host calls this
        once per watch pass (every ``watch.interval``, default 1 s) for every running agent, and on
        ``ls``: keep it cheap. It combines the answer with its own evidence (CONTRACT §6; README,
        Activity): ``waiting`` stands; ``idle`` becomes ``working`` while a non-resident child of the
        agent (a tool, a sub-agent) uses CPU — so a child conversation ending never makes a parent
        that still works idle; ``working`` becomes ``stalled`` after ``watch.stall_after`` seconds
        with no new output and no CPU in any non-resident process; with no opinion the host says
        ``working`` while output changes or the agent's processes use CPU, else ``idle``."""
        return None

    def conversations(self, ctx: AgentContext) -> Iterable[Conversation]:
        """Every conversation of the agent on disk for ``ctx`` (its HOME and environment: every
        project, not only ``ctx.cwd``), child conversations included (each a :class:`Conversation`
        of its own, its id in its parent's ``children``). Read-only and cheap: a title from the first
        lines of a transcript, never the whole of it; sizes from ``stat`` (``kit.conversations``
        does both for a folder of JSONL transcripts, rollout files, a sessions table). The host drops
        every id :meth:`valid_id` refuses. Default: none."""
        return ()

    def in_use(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        """Who holds the conversation, one line each (``"pid 812 claude --resume …"``); [] = free.
        Raising is treated as "in use" by the host."""
        from muxhost.procs import argv_holders

        return argv_holders(conversation_id)

    def children(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        """The conversation's direct child conversations (sub-agents, forks). The host walks them at
        every depth, asks :meth:`artifacts` for each, and refuses a purge while any is in use."""
        return []

    def roots(self, ctx: AgentContext) -> list[Path]:
        """The folders the agent keeps its files in: every path of a typed purge plan must lie
        inside one (after symlinks). Default: its data, config, state and cache homes; a plugin whose
        agent keeps files elsewhere (``~/.claude``) adds them."""
        return [ctx.data_home(), ctx.config_home(), ctx.state_home(), ctx.cache_home()]

    def artifacts(self, ctx: AgentContext, conversation_id: str) -> list:
        """Where the conversation (not its children: see :meth:`children`) has bytes on disk.

        Return typed artifacts (:mod:`muxhost.artifacts`: ``File``, ``Dir``, ``Rows``, ``Lines``,
        ``JsonMember``, ``Command``, ``Leftover``) and the host prints the plan, removes them in its
        fixed order and computes the residual — no :meth:`purge` needed. Older plugins return strings
        (paths as absolute or ``~/`` paths, rows as ``table:id``) and implement :meth:`purge`."""
        return []

    def purge(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        """For plugins whose :meth:`artifacts` returns strings: remove every artifact of the
        conversation and its child conversations; return what went. (With typed artifacts the host
        does this itself and never calls it.)"""
        raise NotImplementedError(f"agent {self.name!r} cannot purge a conversation")
