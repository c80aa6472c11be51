"""``muxhost ls``: the records with their live state, as a table or JSON (and the cells ``show`` shares)."""

from __future__ import annotations

import sys

from muxhost.cli.output import ago, json_flag, line_width, out_json, short_id, short_path, table


def add_arguments(sp) -> None:
    sp.description = (
        "List live records (running or exited), or every record with --all. States: running, exited,\n"
        "stopped, lost. The conversation id of running records is refreshed from the agent. ACTIVITY:\n"
        "working, waiting, idle or stalled, and how long it has held (from `muxhost watch` when one\n"
        "runs, else from one look).")
    sp.add_argument("--all", action="store_true", help="every record, stopped and lost ones too")
    sp.add_argument("--wide", action="store_true", help="whole conversation ids and folders (the table fits "
                    "the terminal, or 100 columns, without it: ids cut like git's, folders from the left)")
    sp.add_argument("--host", metavar="NAME", help="only this host's records (local: this machine's)")
    json_flag(sp)


def run(host, args) -> int:
    from muxhost.remote.listing import Fleet
    from muxhost.state import LIVE_STATES

    fleet = Fleet.start(host, args)  # the remote hosts' ls, asked while this one runs (None: no hosts)
    try:
        every = host.ls() if fleet is None or fleet.local else []
    except BaseException:
        if fleet is not None:
            fleet.cancel()
        raise
    for note in host.notes:
        print(f"muxhost: note: {note}", file=sys.stderr)
    lives = every if args.all else [lv for lv in every if lv.state in LIVE_STATES]
    lost = [lv for lv in every if lv.state == "lost" and lv.rec.state in ("running", "starting")]
    if lost and not args.all and not args.json:  # (their server went: a reboot, a crash, kill-server)
        print(f"muxhost: note: {len(lost)} record(s) that were running lost their pane; `muxhost restore` "
              "resumes them (`muxhost ls --all` lists them)", file=sys.stderr)
    if fleet is not None:
        return fleet.finish(lives)
    if args.json:
        out_json([lv.to_dict() for lv in lives])
        return 0
    if not lives:
        print("no records" + ("" if args.all else " running (see `muxhost ls --all`)"))
        return 0
    ids = [o.rec.conversation_id for o in lives]
    rows = [[lv.rec.id, lv.rec.name, lv.rec.agent, lv.state, activity(lv), lv.pane.pane_id if lv.pane else "-",
             _conversation(host, lv, args.wide, ids),
             "yes" if lv.resumable else "no", lv.rec.cwd] for lv in lives]
    headers = ["ID", "NAME", "AGENT", "STATE", "ACTIVITY", "PANE", "CONVERSATION", "RESUMABLE", "CWD"]
    if not args.wide:  # the folder gets what is left of the line, shortened from the left
        used = len(table([r[:-1] for r in rows], headers[:-1]).splitlines()[0]) + 2
        for r in rows:
            r[-1] = short_path(r[-1], max(16, line_width() - used))
    print(table(rows, headers))
    return 0


def _conversation(host, lv, wide: bool, others) -> str:
    """The CONVERSATION cell: its id (short unless ``wide``), and ``+N`` for its child
    conversations at every depth, as the plugin's ``children`` tells them — for the live records
    only (``ls --all`` of a long history would ask the plugin once per record; ``show`` lists them)."""
    from muxhost.state import LIVE_STATES

    cid = lv.rec.conversation_id
    if not cid:
        return "-"
    kids = len(children_of(host, lv.rec)) if lv.state in LIVE_STATES else 0
    return (cid if wide else short_id(cid, others)) + (f" +{kids}" if kids else "")


def children_of(host, rec) -> list[str]:
    """The record's conversation's descendants, parent first ([] when the plugin cannot tell)."""
    agent = host.registry.agents.get(rec.agent)
    if agent is None or not rec.conversation_id or not agent.valid_id(rec.conversation_id):
        return []
    from muxhost import plans

    try:
        return plans.family(agent, host.context(rec), rec.conversation_id)[1:]
    except Exception as e:  # the table still shows; the warning says why the count is missing
        host.warn(agent.name, "children", e, rec)
        return []


def activity(lv) -> str:
    """``idle 12m`` (the state and how long it has held), ``working`` when since is unknown, or -."""
    if not lv.activity:
        return "-"
    import time

    return lv.activity if lv.activity_since is None else f"{lv.activity} {ago(time.time() - lv.activity_since)}"
