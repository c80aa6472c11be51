"""``muxhost stop``: the stop ladder for REF… or --all (and how ``stop`` and ``sleep`` print outcomes)."""

from __future__ import annotations

import sys

from muxhost.cli.output import json_flag, out_json
from muxhost.errors import MuxhostError, UsageError


def add_arguments(sp) -> None:
    sp.description = (
        "The stop ladder: Ctrl-U + the agent's exit text + Enter; wait stop.exit_grace; kill the\n"
        "session (or pane); SIGTERM every survivor; wait stop.term_grace; SIGKILL. The outcome names\n"
        "the step that ended it: exit, hup, term or kill.")
    sp.add_argument("refs", metavar="REF", nargs="*", help="records to stop (all at once, concurrently)")
    sp.add_argument("--all", action="store_true", help="every live record (running, exited or starting)")
    grace_flag(sp)
    sp.epilog = ("Many records go down the ladder together: 50 take about as long as one.\n"
                 "--json prints the record (one REF) or a list of records (several, or --all).")
    json_flag(sp)


def grace_flag(sp) -> None:
    sp.add_argument("--grace", type=float, metavar="S", help="seconds to wait after the exit text (stop.exit_grace)")


def run(host, args) -> int:
    check_grace(args)
    if args.all == bool(args.refs):
        raise UsageError("stop takes REF… or --all")
    view = None
    if args.all:
        records, view = host.live_records()
    else:
        records = records_of(host, args.refs)
    results = host.stop_many(records, grace=args.grace, view=view) if records else []
    if args.all and not records and not args.json:
        print("nothing to stop")
    return outcomes(records, results, args, len(args.refs) == 1 and not args.all, "stopped")


def records_of(host, refs) -> list:
    """The records REF… name, each once, in order."""
    records, seen = [], set()
    for ref in refs:
        rec = host.resolve(ref)
        if rec.id not in seen:
            seen.add(rec.id)
            records.append(rec)
    return records


def check_grace(args) -> None:
    from muxhost.config import MAX_SECONDS, seconds_ok

    if args.grace is not None and not seconds_ok(args.grace):
        raise UsageError(f"--grace must be a number of seconds from 0 to {MAX_SECONDS}")


def outcomes(records, results, args, single: bool, done: str) -> int:
    """Print what the ladder did to each record (``stop``, ``sleep``); the worst exit code."""
    failed = [r for r in results if isinstance(r, MuxhostError)]
    if args.json:
        docs = [{"id": rec.id, "name": rec.name, "error": str(r)} if isinstance(r, MuxhostError) else r.to_dict()
                for rec, r in zip(records, results)]
        out_json(docs[0] if single else docs)
    else:
        for rec, r in zip(records, results):
            if isinstance(r, MuxhostError):  # (most errors name the record already)
                print(f"muxhost: {r}" if rec.id in str(r) else f"muxhost: {rec.name} ({rec.id}): {r}", file=sys.stderr)
            elif r.already == "stopped":
                print(f"{rec.name} ({rec.id}) was stopped already")
                continue
            elif r.skipped == "asleep":
                print(f"{rec.name} ({rec.id}) was asleep already")
                continue
            elif r.skipped == "not idle":
                print(f"{rec.name} ({rec.id}) was not idle that long ({r.activity or 'no activity known'}): left awake")
                continue
            else:
                print(f"{done} {rec.name} ({rec.id}): {rec.outcome} after {rec.seconds:.2f}s")
            for note in getattr(r, "notes", ()) or ():
                print(f"muxhost: note: {note}", file=sys.stderr)
    return max((e.exit_code for e in failed), default=0)
