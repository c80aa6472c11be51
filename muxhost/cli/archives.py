"""``muxhost archives [ls | show A | rm A | prune --older-than D]``: the purge archives kept in the state dir."""

from __future__ import annotations

from muxhost.cli.output import human_size, json_flag, out_json, table


def add_arguments(sp) -> None:
    sp.description = ("The archives `purge --archive` wrote (<state dir>/archive/, oldest first). A is an\n"
                      "archive's path, or its name or a unique prefix of it.")
    sp.add_argument("action", nargs="?", default="ls", choices=("ls", "show", "rm", "prune"),
                    help="ls (the default), show A (its manifest, every sum checked), rm A, prune --older-than D")
    sp.add_argument("name", metavar="A", nargs="?", help="the archive, for show and rm")
    sp.add_argument("--older-than", metavar="D", help="with prune: archives written longer ago than D (30d, 12h)")
    sp.add_argument("--dry-run", action="store_true", help="with prune: say which would go, remove none")
    json_flag(sp)


def run(host, args) -> int:
    from muxhost.errors import UsageError
    from muxhost.fleet import parse_duration

    if args.action in ("show", "rm") and not args.name:
        raise UsageError(f"archives {args.action} needs an archive (A)")
    if args.action in ("ls", "prune") and args.name:
        raise UsageError(f"archives {args.action} takes no archive name")
    if (args.action == "prune") != (args.older_than is not None):
        raise UsageError("--older-than D goes with prune (and prune needs it)")
    ops = host.unpurging
    if args.action == "show":
        _show(ops.show(args.name), args.json)
    elif args.action == "rm":
        gone = ops.rm(args.name)
        out_json({"removed": [gone]}) if args.json else print(f"removed {gone}")
    elif args.action == "prune":
        gone = ops.prune(parse_duration(args.older_than, "--older-than"), dry_run=args.dry_run)
        if args.json:
            out_json({"removed": gone, "dry_run": args.dry_run})
        else:
            print(f"{'would remove' if args.dry_run else 'removed'} {len(gone)} archive(s)")
            for p in gone:
                print(f"  - {p}")
    else:
        _ls(ops.archives(), args.json)
    return 0


def _ls(rows: list[dict], as_json: bool) -> None:
    if as_json:
        out_json(rows)
        return
    if not rows:
        print("no archives (`muxhost purge --archive` writes one)")
        return
    print(table([[r["name"], r.get("agent") or "?", r.get("conversation_id") or r.get("error", "?"),
                  str(r.get("items", "?")), human_size(r["size"])] for r in rows],
                ["ARCHIVE", "AGENT", "CONVERSATION", "ITEMS", "SIZE"]))


def _show(m: dict, as_json: bool) -> None:
    if as_json:
        out_json(m)
        return
    print(f"{m['name']}: {m['agent']} conversation {m['conversation']}, written {m['created']} by muxhost "
          f"{m['muxhost']} (HOME {m['home']}); every sum matches")
    kids = [c for c in m.get("members") or [] if c != m["conversation"]]
    if kids:
        print(f"  child conversations: {', '.join(kids)}")
    for it in m["items"]:
        print(f"  {it['kind']:5} {it['label']}")


