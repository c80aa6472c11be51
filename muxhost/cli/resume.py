"""``muxhost resume``: the record's conversation again, in a new pane (the same record)."""

from __future__ import annotations

from muxhost.cli.output import attach_hint, json_flag, notes, out_json


def add_arguments(sp) -> None:
    sp.add_argument("ref", metavar="REF")
    sp.add_argument("--target", metavar="SESSION[:WINDOW]")
    sp.add_argument("--split", choices=("right", "below"))
    json_flag(sp)


def run(host, args) -> int:
    rec = host.resolve(args.ref)
    live = host.resume(rec, target=args.target, split=args.split)
    notes(live)
    if args.json:
        out_json(live.to_dict())
    else:
        print(f"resumed {rec.conversation_id} as {rec.name} (record {rec.id}) in pane {live.pane.pane_id}")
        print(attach_hint(live))
    return 0
