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


def _first_look(feed) -> Callable[[], Any]:
    """``feed``'s first look, taken in a thread of its own from now on (while Textual is imported
    and starts); the returned function waits for it (and raises its error)."""
    import threading

    out: dict[str, Any] = {}

    def take() -> None:
        try:
            out["look"] = feed.look()
        except BaseException as e:  # (the dashboard says it in its status line)
            out["error"] = e

    thread = threading.Thread(target=take, name="muxhost-ui-first", daemon=True)
    thread.start()

    def give() -> Any:
        thread.join()
        if "error" in out:
            raise out["error"]
        return out["look"]

    return give


def run(make_host: Callable[[], Any], popup: bool = False) -> int:
    """Run the dashboard until ``q``; Enter outside tmux then execs the attach (this terminal
    becomes a tmux client on the agent's pane)."""
    if not have_textual():
        raise MuxhostError(INSTALL)
    if not sys.stdout.isatty() or not sys.stdin.isatty():
        raise MuxhostError("the dashboard needs a terminal (stdin and stdout); `muxhost ls` prints the table")
    import libtmux  # noqa: F401  (it reads sys.stdout.encoding when imported: before Textual replaces stdout)

    from muxhost.ui import ops

    from muxhost.remote import following

    local = make_host()
    follower = following.for_config(local.config)  # (remote hosts: each one's watch, followed over ssh)
    feed = ops.Feed(ops.Hosts(make_host), follower)
    if follower is not None:
        follower.start()
    try:
        first = _first_look(feed)
        from muxhost.ui.app import Dashboard

        b = local.current()
        app = Dashboard(make_host, popup=popup, where=f"{b.name} {b.where()}", feed=feed, first=first)
        app.run()
    finally:
        if follower is not None:
            follower.close()  # (its ssh children, by pid: their remote watches end with them)
    if app.attach_argv:
        app.settle()  # (a stop or purge of another row still under way ends first)
        sys.stdout.flush()
        os.execvp(app.attach_argv[0], app.attach_argv)
    return 0
