"""``muxhost purge``: one conversation and its child conversations deleted for good, after asking."""

from __future__ import annotations

import argparse
import os
import sys

from muxhost.cli.output import json_flag, out_json
from muxhost.errors import INCOMPLETE, MuxhostError, UsageError


def add_arguments(sp) -> None:
    sp.description = (
        "Order: validate the id; refuse if in use (exit 4); list what is on disk (the plan;\n"
        "--dry-run stops here); plugins may veto (exit 4); purge; list again: anything left is the\n"
        "residual (exit 5). A conversation with nothing on disk exits 3.")
    sp.add_argument("ref", metavar="REF", nargs="?", help="the record whose conversation to purge")
    sp.add_argument("--agent", metavar="A", help="with --conversation: purge without a record")
    sp.add_argument("--conversation", metavar="ID")
    sp.add_argument("--pane", metavar="PANE", help="the conversation of the agent in this tmux pane (e.g. %%3)")
    sp.add_argument("--home", metavar="DIR", help="with --agent: the HOME the agent ran with")
    sp.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    sp.add_argument("--yes", "-y", action="store_true", help="do not ask")
    sp.add_argument("--stop", action="store_true", help="run the stop ladder first")
    keep = sp.add_mutually_exclusive_group()
    keep.add_argument("--archive", dest="archive", action="store_true", default=None,
                      help="first keep what goes in an archive (<state dir>/archive/; `muxhost unpurge` puts it "
                           "back); default: config purge.archive")
    keep.add_argument("--no-archive", dest="archive", action="store_false", help="no archive, whatever the config says")
    sp.add_argument("--confirmed", metavar="ID", help="with REF: purge conversation ID (the one a dry run "
                    "showed) and nothing else; refused when the record was never in it")
    sp.add_argument("--tmux-prepare", action="store_true", help=argparse.SUPPRESS)
    sp.add_argument("--tmux-message", action="store_true", help=argparse.SUPPRESS)
    sp.add_argument("--client", help=argparse.SUPPRESS)
    json_flag(sp)


def run(host, args) -> int:
    if args.tmux_prepare or args.tmux_message:
        return _purge_key(host, args)
    given = [x for x in (args.ref, args.pane) if x] + (["--agent/--conversation"] if (args.agent or args.conversation) else [])
    if len(given) != 1:
        raise UsageError("purge takes one of: REF, --pane PANE, or --agent A --conversation ID")
    if (args.agent or args.conversation) and not (args.agent and args.conversation):
        raise UsageError("--agent and --conversation go together")
    if args.confirmed and not args.ref:
        raise UsageError("--confirmed goes with REF")
    confirm = None
    if not args.yes and not args.dry_run:
        if not sys.stdin.isatty():
            raise UsageError("refusing to purge without --yes when stdin is not a terminal")
        confirm = _confirm
    if args.pane:
        report = host.purge_pane(args.pane, dry_run=args.dry_run, stop=args.stop, confirm=confirm,
                                 archive=args.archive)
    elif args.ref:
        report = host.purge(rec=host.resolve(args.ref), dry_run=args.dry_run, stop=args.stop, confirm=confirm,
                            confirmed=args.confirmed, archive=args.archive)
    else:
        report = host.purge(agent_name=args.agent, conversation_id=args.conversation, home=args.home,
                            dry_run=args.dry_run, stop=args.stop, confirm=confirm, archive=args.archive)
    print_report(report, args.json)
    if report.residual:
        raise MuxhostError(f"purge incomplete: {len(report.residual)} item(s) left: {report.residual[0]}", INCOMPLETE)
    return 0


def print_report(report, as_json: bool) -> None:
    """The report as ``purge`` prints it (``report``: a PurgeReport, or anything with its fields)."""
    if as_json:
        out_json(report.to_dict())
        return
    if report.stopped:
        print(f"stopped record {report.record} first: {report.stopped['outcome']} after "
              f"{report.stopped['seconds']:.2f}s")
    if report.dry_run:
        print(f"would purge {report.agent} conversation {report.conversation_id}{_in_home(report)}:")
        for item in report.plan:
            print(f"  {item}")
        if report.refused:
            print(f"  refused now: {report.refused}")
    else:
        print(f"purged {report.agent} conversation {report.conversation_id}{_in_home(report)}: "
              f"{len(report.removed)} removed")
        for item in report.removed:
            print(f"  - {item}")
        for item in report.residual:
            print(f"  left: {item}")
        if getattr(report, "archive", None):
            print(f"archived to {report.archive} (`muxhost unpurge {os.path.basename(report.archive)}` puts it back)")
    for note in report.notes:
        print(f"  note: {note}")


def _in_home(report) -> str:
    """`` in HOME /other/home`` when the purge is not in the caller's HOME, else ""."""
    return f" in HOME {report.home}" if report.home else ""


def _confirm(report) -> bool:
    print(f"purge {report.agent} conversation {report.conversation_id}{_in_home(report)}? this removes:",
          file=sys.stderr)
    for item in report.plan:
        print(f"  {item}", file=sys.stderr)
    try:
        answer = input("purge these for good? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _purge_key(host, args) -> int:
    """``purge --tmux-prepare`` / ``--tmux-message``: the purge key's steps as earlier bindings call
    them (the key is the built-in plugin muxhost.plugins.purge_key now)."""
    from muxhost.plugins.purge_key import run_key

    return run_key(host, args.pane, args.client, prepare=args.tmux_prepare)
