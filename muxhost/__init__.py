"""muxhost: a plugin host that runs AI coding agents in tmux panes.

Kept light on purpose: ``muxhost --help`` imports this and nothing heavy, so the public names below
are loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Agent", "AgentContext", "Launch", "PurgeReport", "MuxhostError", "hookimpl", "__version__"]

if TYPE_CHECKING:
    import pluggy

    from muxhost.agent import Agent, AgentContext, Launch, PurgeReport
    from muxhost.errors import MuxhostError

    hookimpl: pluggy.HookimplMarker


def __getattr__(name: str) -> Any:
    if name == "hookimpl":
        import pluggy

        value: Any = pluggy.HookimplMarker("muxhost")
    elif name in ("Agent", "AgentContext", "Launch", "PurgeReport"):
        from muxhost import agent

        value = getattr(agent, name)
    elif name == "MuxhostError":
        from muxhost.errors import MuxhostError as value
    else:
        raise AttributeError(f"module 'muxhost' has no attribute {name!r}")
    globals()[name] = value
    return value
