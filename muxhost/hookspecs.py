"""Hook specifications of the ``muxhost`` project (CONTRACT §2).

A plugin is a module (or object) with functions marked ``@muxhost.hookimpl`` whose names are the
hooks below. Collector hooks take a ``register`` callback so one hook can add many things.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Callable

import pluggy

if TYPE_CHECKING:
    from muxhost.agent import Agent

hookspec = pluggy.HookspecMarker("muxhost")


@hookspec
def muxhost_register_agents(register: Callable[["Agent"], None]) -> None:
    """Register agents: call ``register(agent)`` once for each :class:`muxhost.Agent` instance.

    :param register: takes an Agent instance; two agents with the same name are an error.
    """


@hookspec
def muxhost_register_backends(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register pane backends: call ``register(name, factory)``.

    :param register: takes a backend name and a factory ``factory(socket_name, config) -> Backend``
        (see :class:`muxhost.backends.Backend`). ``tmux`` is built in.
    """


@hookspec
def muxhost_register_commands(subparsers: "argparse._SubParsersAction") -> None:
    """Add CLI subcommands.

    :param subparsers: the ``muxhost`` argparse subparsers; set ``func(args) -> int`` as the
        parser default (``parser.set_defaults(func=...)``) to run the command.
    """


@hookspec
def muxhost_agent_launched(record: dict[str, Any]) -> None:
    """Called after an agent's pane was started (launch or resume).

    :param record: the record as ``muxhost show --json`` prints it.
    """


@hookspec
def muxhost_agent_stopped(record: dict[str, Any], outcome: str) -> None:
    """Called after the stop ladder ended.

    :param record: the record as ``muxhost show --json`` prints it (with ``outcome`` and ``seconds``).
    :param outcome: the step that ended the agent: ``exit``, ``hup``, ``term`` or ``kill``.
    """


@hookspec(firstresult=True)
def muxhost_purge_veto(agent: str, conversation_id: str, artifacts: list[str]) -> str | None:
    """Refuse a purge: return a reason (a non-None string) and the purge exits 4 with it.

    Stops at first non-None result.

    :param agent: the agent's name.
    :param conversation_id: the (validated) conversation id.
    :param artifacts: the plan: what would be removed.
    :returns: None to allow, or the reason for refusing.
    """


@hookspec
def muxhost_conversation_purged(agent: str, conversation_id: str, report: dict[str, Any]) -> None:
    """Called after a purge ran (also when something was left: see ``report["residual"]``).

    :param agent: the agent's name.
    :param conversation_id: the purged conversation id.
    :param report: the purge report as ``muxhost purge --json`` prints it.
    """


@hookspec
def muxhost_activity_changed(record: dict[str, Any], old: str | None, new: str | None) -> None:
    """Called by ``muxhost watch`` when what an agent is doing changes (notify someone, log it).

    Runs in the watch's process, once per change: keep it short (a slow hook delays every agent's
    next look). An exception is a warning on the watch's stderr, never the watch's end.

    :param record: the record as ``muxhost show --json`` prints it, with ``activity`` and
        ``activity_since`` of now.
    :param old: the state before: ``working``, ``waiting``, ``idle`` or ``stalled``; None when the
        watch had not seen the agent yet.
    :param new: the state now; None when the agent is no longer running (it exited, was stopped).
    """
