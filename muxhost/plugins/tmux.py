"""Built-in plugin: the tmux pane backend."""

from __future__ import annotations

import muxhost


def _factory(socket_name=None, config=None):
    from muxhost.backends.tmux import TmuxBackend

    return TmuxBackend(socket_name, config)


def _resolve_address(given, config=None):
    from muxhost.backends.tmux import resolve_address

    return resolve_address(given, config)


_factory.resolve_address = _resolve_address
_factory.client_env = ("TMUX", "TMUX_PANE")  # TmuxBackend.client_env, known without making one


@muxhost.hookimpl
def muxhost_register_backends(register):
    register("tmux", _factory)
