"""``muxhost unpurge``: put a purge archive back (files, rows, lines, JSON members) and say what came back."""

from __future__ import annotations

from muxhost.cli.output import json_flag, out_json


def add_arguments(sp) -> None:
    sp.description = (
        "Every sha256 of the archive is checked first (a mismatch: exit 4, nothing restored). Refused\n"
        "(exit 4, nothing restored) while the conversation is in use, when something else stands where a\n"
        "file goes, a row with the same key holds other values, a table's columns changed, or the text\n"
        "around a line or JSON member no longer says where it goes. What is still there identical is\n"
        "left as it is. The archive stays until `muxhost archives rm`.")
    sp.add_argument("archive", metavar="ARCHIVE", help="an archive's path, or its name (or a unique prefix) "
                    "in <state dir>/archive/ (`muxhost archives` lists them)")
    sp.add_argument("--dry-run", action="store_true", help="check it and say what would come back; change nothing")
    json_flag(sp)


def run(host, args) -> int:
    report = host.unpurge(args.archive, dry_run=args.dry_run)
    if args.json:
        out_json(report)
        return 0
    verb = "would restore" if report["dry_run"] else "restored"
    print(f"{verb} {report['agent']} conversation {report['conversation_id']} from {report['archive']}: "
          f"{len(report['restored'])} item(s)")
    for item in report["restored"]:
        print(f"  + {item}")
    for item in report["in_place"]:
        print(f"  = {item} (still there, identical)")
    return 0
