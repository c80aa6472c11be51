"""The one module a plugin imports: every name an agent or backend plugin needs, and no other.

Agent plugins::

    from muxhost.api import Agent, AgentContext, Launch, artifacts, hookimpl, kit

- :class:`Agent` (subclass it), :class:`AgentContext` (``ctx``), :class:`Launch` (what ``launch`` and
  ``resume`` return), :class:`Activity` (what ``activity`` returns: the state and the reason), :class:`PurgeReport` (what a purge reports), :class:`Conversation` (what ``conversations`` yields), :data:`UUID_PATTERN`;
- :data:`hookimpl`, the marker of every hook implementation (``muxhost_register_agents``, …);
- the errors that reach the user as one ``muxhost:`` line and an exit code: :class:`MuxhostError`
  (1), :class:`UsageError` (2), :class:`ConfigError` (2), :class:`NotFound` (3), :class:`Refused` (4),
  :class:`PurgeIncomplete` (5);
- :mod:`artifacts <muxhost.artifacts>`: the typed purge plan (``artifacts.File``, ``Dir``, ``Rows``,
  ``Lines``, ``JsonMember``, ``Command``, ``Leftover``; locks ``FlockFile``, ``MkdirLock``);
- :mod:`kit <muxhost.kit>`: the jobs every plugin has, done once (``kit.holders``, ``kit.sqlite``,
  ``kit.jsonl``, ``kit.flock``, ``kit.family``, ``kit.command``; each loaded on first use);
- processes: :class:`Proc` and :class:`ProcessTable` (``ctx.process_table()``), :func:`same_process`
  (is pid N still the process created at T), :data:`RECORD_ENV` (the variable naming the record).

Backend plugins: :class:`Backend` and :class:`PaneInfo`, the pane options :data:`RECORD_OPTION` and
:data:`AGENT_OPTION`, and the launcher helper :func:`launch_file` (the agent's argv, cwd and
environment in a 0600 file; the pane runs only its ``argv``) with :data:`LAUNCH_TIMEOUT`.

The id check is the host's: set :attr:`Agent.id_pattern`; :meth:`Agent.valid_id` cannot be overridden.
Nothing is imported before it is used: ``from muxhost.api import Agent`` loads ``muxhost.agent`` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

#: name -> (module, attribute in it; None: the module itself)
_WHERE: dict[str, tuple[str, str | None]] = {
    **{n: ("muxhost.agent", n) for n in ("Activity", "Agent", "AgentContext", "Conversation", "Launch",
                                         "PurgeReport", "UUID_PATTERN")},
    **{n: ("muxhost.errors", n) for n in ("MuxhostError", "UsageError", "ConfigError", "NotFound", "Refused",
                                          "PurgeIncomplete")},
    "artifacts": ("muxhost.artifacts", None),
    "kit": ("muxhost.kit", None),
    **{n: ("muxhost.procs", n) for n in ("Proc", "ProcessTable", "same_process", "RECORD_ENV")},
    **{n: ("muxhost.backends", n) for n in ("Backend", "PaneInfo", "RECORD_OPTION", "AGENT_OPTION")},
    "launch_file": ("muxhost.launcher", "write"),
    "LaunchFile": ("muxhost.launcher", "LaunchFile"),
    "LAUNCH_TIMEOUT": ("muxhost.launcher", "TAKE_TIMEOUT"),
}

__all__ = sorted([*_WHERE, "hookimpl"])

if TYPE_CHECKING:
    import pluggy

    from muxhost import artifacts, kit
    from muxhost.agent import UUID_PATTERN, Activity, Agent, AgentContext, Conversation, Launch, PurgeReport
    from muxhost.backends import AGENT_OPTION, RECORD_OPTION, Backend, PaneInfo
    from muxhost.errors import ConfigError, MuxhostError, NotFound, PurgeIncomplete, Refused, UsageError
    from muxhost.launcher import TAKE_TIMEOUT as LAUNCH_TIMEOUT
    from muxhost.launcher import LaunchFile
    from muxhost.launcher import write as launch_file
    from muxhost.procs import RECORD_ENV, Proc, ProcessTable, same_process

    hookimpl: pluggy.HookimplMarker


def __getattr__(name: str) -> Any:
    import importlib

    if name == "hookimpl":
        import pluggy

        value: Any = pluggy.HookimplMarker("muxhost")
    elif name in _WHERE:
        module, attr = _WHERE[name]
        value = importlib.import_module(module)
        value = value if attr is None else getattr(value, attr)
    else:
        raise AttributeError(f"module 'muxhost.api' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
