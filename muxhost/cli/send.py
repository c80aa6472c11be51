"""``muxhost send``: a line typed into the agent (Ctrl-U, TEXT, Enter)."""

from __future__ import annotations

import sys

from muxhost.cli.output import json_flag, out_json


def add_arguments(sp) -> None:
    sp.description = (
        "Typed as the stop ladder types its exit text: Ctrl-U, the literal TEXT, a pause, Enter.\n"
        "Refused (exit 4) when the record's agent is not running. With `wait` and `read`:\n"
        "  muxhost send a \"run the tests\" && muxhost wait a --until idle && muxhost read a")
    sp.add_argument("ref", metavar="REF")
    sp.add_argument("text", metavar="TEXT", help="one line; - reads it from stdin")
    json_flag(sp)


def run(host, args) -> int:
    text = sys.stdin.read().rstrip("\n") if args.text == "-" else args.text
    live = host.send(host.resolve(args.ref), text)
    if args.json:
        out_json(live.to_dict())
    return 0
