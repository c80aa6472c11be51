"""``muxhost ui``: the dashboard — every record live, a preview of the selected agent's screen, and a
key for everything muxhost does (see docs/ui.md). Built on Textual, the ``ui`` extra.

:mod:`muxhost.ui.rows` is what a row shows and how rows sort; :mod:`muxhost.ui.ops` what each key
does (the host's own methods) and the feed; :mod:`muxhost.ui.app` the Textual app.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from muxhost.errors import MuxhostError

INSTALL = "the dashboard needs Textual: pip install 'muxhost[ui]' (or pip install textual)"


def have_textual() -> bool:
    try:
        import textual  # noqa: F401
    except ImportError:
        return False
    return True


def run(make_host: Callable[[], Any], popup: bool = False) -> int:
    """Run the dashboard until ``q``; Enter outside tmux then execs the attach (this terminal
    becomes a tmux client on the agent's pane)."""
    if not have_textual():
        raise MuxhostError(INSTALL)
    if not sys.stdout.isatty() or not sys.stdin.isatty():
        raise MuxhostError("the dashboard needs a terminal (stdin and stdout); `muxhost ls` prints the table")
    import libtmux  # noqa: F401  (it reads sys.stdout.encoding when imported: before Textual replaces stdout)

    from muxhost.ui.app import Dashboard

    host = make_host()
    b = host.current()
    app = Dashboard(make_host, popup=popup, where=f"{b.name} {b.where()}")
    app.run()
    if app.attach_argv:
        sys.stdout.flush()
        os.execvp(app.attach_argv[0], app.attach_argv)
    return 0
