"""``muxhost conversations``: every conversation on disk, of every agent, one row each (children under
their parent), with the record that has it and whether it is in use."""

from __future__ import annotations

import shutil
import sys
import time

from muxhost.cli.output import ago, json_flag, out_json, short_id, short_path, table


def add_arguments(sp) -> None:
    sp.description = (
        "Every conversation the agents keep on disk (what each plugin's `conversations` finds in your\n"
        "HOME and in the HOMEs of your records), not only those of records: newest first, one row\n"
        "each, child conversations indented under their parent (they go with it). RECORD: the record\n"
        "that has been in it; USE: `in use` while the agent's plugin sees a holder or a record that\n"
        "runs or sleeps is in it. `muxhost prune` purges the old ones.")
    filters(sp)
    sp.add_argument("--grep", metavar="TEXT", help="only those whose id, title or folder holds TEXT (any case)")
    sp.add_argument("--wide", action="store_true", help="whole ids, folders and titles (no 100-column fit)")
    json_flag(sp)


def filters(sp, older: str = "only those last updated (children too) more than D ago") -> None:
    """``--agent``, ``--cwd``, ``--older-than`` (its help: ``older``), ``--host``: what
    ``conversations`` and ``prune`` share."""
    sp.add_argument("--agent", metavar="A", help="only this agent's")
    sp.add_argument("--cwd", metavar="DIR", help="only those that ran in DIR or a folder under it")
    sp.add_argument("--older-than", metavar="D", help=f"{older} (30d, 12h, 90m, 45s)")
    sp.add_argument("--host", metavar="NAME", help="on that remote host (`muxhost hosts`; local: this machine)")


def older_than(args, required: bool = False) -> float | None:
    """``--older-than`` in seconds (a usage error, exit 2, when it is no duration)."""
    from muxhost.errors import UsageError
    from muxhost.fleet import parse_duration

    if args.older_than is None:
        if required:
            raise UsageError("prune needs --older-than D (30d, 12h, 90m)")
        return None
    return parse_duration(args.older_than, "--older-than")


def run(host, args) -> int:
    rows = host.conversations(agent=args.agent, cwd=args.cwd, older_than=older_than(args), grep=args.grep)
    if args.json:
        out_json([r.to_dict() for r in rows])
        return 0
    if not rows:
        print("no conversations on disk" + (" that match" if (args.agent or args.cwd or args.older_than or args.grep)
                                            else ""))
        return 0
    print(render(rows, args.wide))
    return 0


def render(rows, wide: bool = False) -> str:
    """The table: the title gets what is left of 100 columns (of the terminal's width on one)."""
    ids = [m.conv.id for r in rows for m in r.family()]
    now = time.time()
    lines = []
    for top in rows:
        for depth, row in _walk(top, 0):
            cid = row.conv.id if wide else short_id(row.conv.id, ids)
            lines.append([row.agent if depth == 0 else "", "  " * depth + ("└ " if depth else "") + cid,
                          ago(now - row.conv.updated), human_size(row.total_size if depth == 0 else row.conv.size),
                          row.record.name if row.record else "-", "in use" if row.holders else "-",
                          row.conv.cwd or "-", row.conv.title or "-"])
    headers = ["AGENT", "CONVERSATION", "UPDATED", "SIZE", "RECORD", "USE", "CWD", "TITLE"]
    if not wide:
        width = shutil.get_terminal_size((100, 24)).columns if sys.stdout.isatty() else 100
        for r in lines:
            r[6] = short_path(r[6], 24)
        used = len(table([r[:-1] for r in lines], headers[:-1]).splitlines()[0]) + 2
        room = max(10, width - used)
        for r in lines:
            r[7] = r[7] if len(r[7]) <= room else r[7][:room - 1] + "…"
    return table(lines, headers)


def _walk(row, depth: int):
    yield depth, row
    for child in row.children:
        yield from _walk(child, depth + 1)


def human_size(n: int) -> str:
    """Bytes as ``ls -h`` shows them: ``812``, ``4.1K``, ``23M``, ``1.2G``."""
    size = float(n)
    for unit in ("", "K", "M", "G", "T"):
        if size < 1024 or unit == "T":
            if not unit:
                return str(int(size))
            return f"{size:.1f}{unit}" if size < 10 else f"{size:.0f}{unit}"
        size /= 1024
    return str(n)
