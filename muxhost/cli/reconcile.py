"""``muxhost reconcile``: records compared with the panes and the process table; drift fixed and said."""

from __future__ import annotations

from muxhost.cli.output import json_flag, out_json


def add_arguments(sp) -> None:
    json_flag(sp)


def run(host, args) -> int:
    changes = host.reconcile()
    if args.json:
        out_json({"changes": changes})
    else:
        print("\n".join(changes) if changes else "nothing drifted")
    return 0
