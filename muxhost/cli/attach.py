"""``muxhost attach``: this terminal (or tmux client) goes to the agent's pane."""

from __future__ import annotations

import os
import sys


def add_arguments(sp) -> None:
    sp.description = (
        "Go to the agent's pane. Inside tmux on the agent's server: the client switches to its\n"
        "session, window and pane. Inside another tmux server: a new window there attaches to it.\n"
        "Outside tmux: this terminal becomes a tmux client of the agent's server, on its pane.")
    sp.add_argument("ref", metavar="REF")


def run(host, args) -> int:
    rec = host.resolve(args.ref)
    live = host.live(rec, host.view([rec]), check_resumable=False)
    if live.pane is None:
        from muxhost.errors import NotFound

        raise NotFound(f"{rec.name} ({rec.id}) has no pane ({live.state}); `muxhost resume {rec.name}` starts it again")
    argv = host.backend_of(rec).attach(live.pane, os.environ)
    if argv:
        sys.stdout.flush()
        os.execvp(argv[0], argv)
    return 0
