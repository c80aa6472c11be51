"""``muxhost wake``: an asleep agent's conversation resumed in its own pane (as Enter there does)."""

from __future__ import annotations

from muxhost.cli.output import attach_hint, json_flag, notes, out_json


def add_arguments(sp) -> None:
    sp.description = (
        "Resume the record's conversation in the pane its stub holds (a new pane when that pane is\n"
        "gone). For a record that is not asleep, the same as `muxhost resume`.")
    sp.add_argument("ref", metavar="REF")
    json_flag(sp)


def run(host, args) -> int:
    rec = host.resolve(args.ref)
    live = host.wake(rec)
    notes(live)
    if args.json:
        out_json(live.to_dict())
    elif live.already:
        where = f", in pane {live.pane.pane_id}" if live.pane is not None else ""
        print(f"{rec.name} ({rec.id}) is awake already{where}")
    else:
        print(f"woke {rec.conversation_id} as {rec.name} (record {rec.id}) in pane {live.pane.pane_id}")
        print(attach_hint(live))
    return 0
