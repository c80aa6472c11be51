"""``muxhost show``: one record, judged as ``ls`` judges it, with its process tree and pane."""

from __future__ import annotations

from muxhost.cli.ls import activity, children_of
from muxhost.cli.output import json_flag, out_json


def add_arguments(sp) -> None:
    sp.add_argument("ref", metavar="REF")
    json_flag(sp)


def run(host, args) -> int:
    from muxhost import procs

    rec = host.resolve(args.ref)
    view = host.view([rec])
    live = host.live(rec, view, check_resumable=False)
    host.judge([live], view)  # as `ls` judges it
    marked = procs.marked(rec.id, view.table, since=rec.launched_at)
    seen = {p.pid for p in live.tree}
    processes = [*live.tree, *[p for p in marked if p.pid not in seen]]
    d = live.to_dict()
    d["processes"] = [{"pid": p.pid, "ppid": p.ppid, "name": p.name, "cmdline": list(p.cmdline)} for p in processes]
    d["pane_info"] = None if live.pane is None else {
        "id": live.pane.pane_id, "pid": live.pane.pid, "dead": live.pane.dead, "dead_status": live.pane.dead_status,
        "session": live.pane.session_name, "window": live.pane.window_id, "cwd": live.pane.cwd}
    d["children"] = children_of(host, rec)
    if args.json:
        out_json(d)
        return 0
    d["activity"] = activity(live) if live.activity else None  # "idle 12m"
    for k in ("id", "name", "agent", "state", "activity", "conversation_id", "resumable", "cwd", "home", "pane",
              "session", "exit_status", "outcome", "seconds"):
        if k in d:
            print(f"{k + ':':17}{d[k] if d[k] is not None else '-'}")
    if processes:
        print("processes:")
        for p in d["processes"]:
            print(f"  {p['pid']:>7}  {' '.join(p['cmdline']) or p['name']}")
    if d["children"]:
        print(f"child conversations ({len(d['children'])}):")
        for c in d["children"]:
            print(f"  {c}")
    return 0
