"""Built-in plugin: the tmux pane backend."""

from __future__ import annotations

import muxhost


def _factory(socket_name=None, config=None):
    from muxhost.backends.tmux import TmuxBackend

    return TmuxBackend(socket_name, config)


@muxhost.hookimpl
def muxhost_register_backends(register):
    register("tmux", _factory)
