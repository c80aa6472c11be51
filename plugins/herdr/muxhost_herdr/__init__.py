"""muxhost-herdr: the herdr pane backend for muxhost (``muxhost --backend herdr``).

herdr (https://github.com/herdrdev/herdr) is a terminal workspace manager for coding agents; its
server owns the panes and answers JSON on a Unix socket. This plugin registers the backend
``herdr`` (:mod:`muxhost_herdr.backend`, imported on first use: a command that needs a backend or
calls a hook of this plugin imports this module) and, after a launch or resume on herdr, lets herdr show which conversation runs in the pane.
"""

from __future__ import annotations

import functools

from muxhost.api import hookimpl

@functools.lru_cache(maxsize=None)
def _made(path: str):
    """The :class:`~muxhost_herdr.backend.HerdrBackend` of the server at ``path``: one ping per server
    and process (a ``functools`` cache, so muxhost's in-process test runs start without it)."""
    from muxhost_herdr.backend import HerdrBackend

    return HerdrBackend(path)


def factory(address=None, config=None):
    """The backend of the herdr server at socket ``address`` (None: where herdr itself looks)."""
    from muxhost_herdr.backend import default_socket

    return _made(address or default_socket())


def _resolve_address(given, config=None):
    from muxhost_herdr.backend import resolve_address

    return resolve_address(given, config)


factory.resolve_address = _resolve_address
# HerdrBackend.client_env, known without making one (the host drops every backend's at launch)
factory.client_env = ("HERDR_ENV", "HERDR_SOCKET_PATH", "HERDR_BIN_PATH", "HERDR_WORKSPACE_ID", "HERDR_TAB_ID",
                      "HERDR_PANE_ID")


@hookimpl
def muxhost_register_backends(register):
    register("herdr", factory)


@hookimpl
def muxhost_agent_launched(record):
    """Show the record's conversation in its herdr pane (a metadata token and the pane title)."""
    if record.get("backend") != "herdr" or not record.get("pane") or not record.get("conversation_id"):
        return
    from muxhost.api import MuxhostError

    try:
        factory(record.get("socket")).show_conversation(record["pane"], record["agent"], record["conversation_id"])
    except MuxhostError:
        pass  # only what herdr shows: the agent runs either way (its pane may be gone already)
