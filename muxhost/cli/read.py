"""``muxhost read``: the agent's screen as plain text."""

from __future__ import annotations

from muxhost.cli.output import json_flag, out_json


def add_arguments(sp) -> None:
    sp.add_argument("ref", metavar="REF")
    sp.add_argument("--lines", type=int, metavar="N", help="the last N lines, scrollback included")
    json_flag(sp)


def run(host, args) -> int:
    rec = host.resolve(args.ref)
    text = host.read(rec, lines=args.lines)
    if args.json:
        out_json({"id": rec.id, "name": rec.name, "text": text})
    else:
        print(text)
    return 0
