"""``muxhost sleep``: the stop ladder that keeps the pane, with a stub that wakes the agent on Enter."""

from __future__ import annotations

from muxhost.cli.output import json_flag
from muxhost.cli.stop import check_grace, grace_flag, outcomes, records_of
from muxhost.errors import UsageError


def add_arguments(sp) -> None:
    sp.description = (
        "The stop ladder, except that the pane stays: it shows a small muxhost stub (\"the claude\n"
        "conversation 1a2b… is asleep since 14:02 — Enter wakes it\") and the agent's memory is free.\n"
        "Enter in that pane, or `muxhost wake REF`, resumes the same conversation there. Refused (exit 4)\n"
        "for an agent with no conversation on disk yet. `ls` shows it asleep.")
    sp.add_argument("refs", metavar="REF", nargs="*", help="records to put to sleep (all at once)")
    sp.add_argument("--idle-for", metavar="D", help="every running agent (with REFs: of those) idle, and not typed "
                                                   "to, at least this long (30m, 2h, 90s)")
    grace_flag(sp)
    json_flag(sp)


def run(host, args) -> int:
    from muxhost.fleet import parse_duration

    check_grace(args)
    if args.idle_for is None and not args.refs:
        raise UsageError("sleep takes REF… and/or --idle-for D")
    idle_for = parse_duration(args.idle_for, "--idle-for") if args.idle_for is not None else None
    records = records_of(host, args.refs) if args.refs else host.idle_for(idle_for)
    results = host.sleep_many(records, grace=args.grace, idle_for=idle_for) if records else []
    if args.idle_for is not None and not records and not args.json:
        print("no agent has been idle that long")
    return outcomes(records, results, args, len(args.refs) == 1, "asleep")
