"""muxhost: a plugin host that runs AI coding agents in tmux panes.

Kept light on purpose: ``muxhost --help`` imports this and nothing heavy. The names of
:mod:`muxhost.api` (what a plugin needs: ``muxhost.Agent``, ``muxhost.hookimpl``, …) are also
here, loaded on first use.
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


#: the lower-case names of muxhost.api that are no submodule here (``from muxhost import plans`` asks
#: this module first: that must not load muxhost.api)
_API_FUNCTIONS = ("hookimpl", "same_process", "launch_file")


def __getattr__(name: str) -> Any:
    if not (name[:1].isupper() or name in _API_FUNCTIONS):
        raise AttributeError(f"module 'muxhost' has no attribute {name!r}")
    from muxhost import api

    if name not in api.__all__:
        raise AttributeError(f"module 'muxhost' has no attribute {name!r}")
    value = getattr(api, name)
    globals()[name] = value
    return value
