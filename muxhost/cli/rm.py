"""``muxhost rm``: a stopped record forgotten, and the git worktree muxhost made for it removed."""

from __future__ import annotations

from muxhost.cli.output import json_flag, out_json


def add_arguments(sp) -> None:
    sp.description = (
        "Refused (exit 4, nothing removed) while the record's agent runs, is starting, asleep or\n"
        "exited in its pane (stop it first), and while its worktree has uncommitted or untracked\n"
        "changes (unless --force). Then: --purge purges each of its conversations, the worktree is\n"
        "removed, its branch is deleted only if it still points at the commit it started from (a\n"
        "branch with commits is kept), and the record is forgotten.")
    sp.add_argument("ref", metavar="REF")
    sp.add_argument("--purge", action="store_true", help="also purge every conversation of the record")
    sp.add_argument("--force", action="store_true", help="remove the worktree even with uncommitted or untracked "
                    "changes (they are lost; a branch with commits is still kept)")
    json_flag(sp)


def run(host, args) -> int:
    done = host.rm(host.resolve(args.ref), purge=args.purge, force=args.force)
    if args.json:
        out_json(done)
    else:
        print("\n".join(done["done"]))
    return 0
