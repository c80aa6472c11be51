"""``muxhost prune``: purge every conversation last updated before a cutoff (children with their
parent), each through the one purge; skip, and say why, those in use, held by a record that runs or
sleeps, or vetoed."""

from __future__ import annotations

import sys

from muxhost.cli.conversations import filters, human_size, older_than
from muxhost.cli.output import json_flag, out_json
from muxhost.errors import INCOMPLETE, MuxhostError, UsageError


def add_arguments(sp) -> None:
    sp.description = (
        "Purge every conversation on disk (as `muxhost conversations` lists them) last updated more\n"
        "than D ago, each with its child conversations, each through `purge`'s own path (every check\n"
        "of a purge holds: the id, in use, the plan's rules, the plugins' veto, the residual). Skipped,\n"
        "and listed with why: one in use (the plugin sees a holder), one a record that runs or sleeps\n"
        "is in, one with a child updated since, one a plugin vetoes. --dry-run lists what would go and\n"
        "what is skipped, changing nothing; --yes purges. One summary line: purged, bytes freed,\n"
        "skipped, archives. Exit 5 when a purge left something, 1 when one failed.")
    filters(sp, "required: those last updated more than D ago go (a child updated since keeps its parent)")
    sp.add_argument("--dry-run", action="store_true", help="list what would go and what is skipped; change nothing")
    sp.add_argument("--yes", "-y", action="store_true", help="purge them (prune never asks)")
    sp.add_argument("--archive", action="store_true", help="archive each conversation before it goes (purge --archive)")
    json_flag(sp)


def run(host, args) -> int:
    if args.dry_run == args.yes:
        raise UsageError("prune needs one of --dry-run (list what would go) or --yes (purge them)")
    seconds = older_than(args, required=True)
    bar = _Bar() if sys.stderr.isatty() and not args.json else None
    try:
        report = host.prune(seconds, agent=args.agent, cwd=args.cwd, dry_run=args.dry_run, archive=args.archive,
                            progress=bar)
    finally:
        if bar is not None:
            bar.done()
    if args.json:
        out_json(report)
    else:
        _print(report)
    if report["errors"]:
        raise MuxhostError(f"prune: {len(report['errors'])} purge(s) failed: {report['errors'][0]['error']}")
    left = [p for p in report["purged"] if p["residual"]]
    if left:
        raise MuxhostError(f"prune incomplete: {len(left)} purge(s) left something: {left[0]['residual'][0]}",
                           INCOMPLETE)
    return 0


def _print(report) -> None:
    dry = report["dry_run"]
    for p in report["purged"]:
        kids = f" (+{len(p['children'])} child{'ren' if len(p['children']) != 1 else ''})" if p["children"] else ""
        left = f", left {len(p['residual'])}" if p["residual"] else ""
        print(f"{'would purge' if dry else 'purged'} {p['agent']} {p['id']}{kids} {human_size(p['size'])}{left}"
              f"{'  ' + p['title'] if p['title'] else ''}")
    for s in report["skipped"]:
        print(f"skipped {s['agent']} {s['id']}: {s['reason']}")
    for e in report["errors"]:
        print(f"failed {e['agent']} {e['id']}: {e['error']}")
    archives = f", archived in {', '.join(report['archives'])}" if report["archives"] else ""
    failed = f", {len(report['errors'])} failed" if report["errors"] else ""
    print(f"{'would purge' if dry else 'purged'} {len(report['purged'])} conversation(s), "
          f"{human_size(report['bytes_freed'])} {'would be ' if dry else ''}freed, {len(report['skipped'])} skipped"
          f"{failed}{archives}")


class _Bar:
    """A progress bar on stderr (a terminal only): ``prune [#######.....] 12/200``."""

    def __init__(self, width: int = 30):
        self.width, self.shown = width, False

    def __call__(self, n: int, total: int) -> None:
        filled = self.width * n // max(1, total)
        sys.stderr.write(f"\rprune [{'#' * filled}{'.' * (self.width - filled)}] {n}/{total}")
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
