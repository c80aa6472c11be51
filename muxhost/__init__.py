"""muxhost: a plugin host that runs AI coding agents in tmux panes.

Kept light on purpose: ``muxhost --help`` imports this and nothing heavy.
"""

from __future__ import annotations

import pluggy

from muxhost.agent import Agent, AgentContext, Launch, PurgeReport
from muxhost.errors import MuxhostError

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("muxhost")

__all__ = ["Agent", "AgentContext", "Launch", "PurgeReport", "MuxhostError", "hookimpl", "__version__"]
