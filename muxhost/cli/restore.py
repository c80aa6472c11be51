"""``muxhost restore``: after the pane server died, every agent that was running resumed, the asleep ones shown."""

from __future__ import annotations

from muxhost.cli.output import json_flag, out_json


def add_arguments(sp) -> None:
    sp.description = (
        "Every record that was running when its pane went away (a reboot, a crash, `tmux\n"
        "kill-server`) is resumed in a session named as before, in its own conversation; one that was\n"
        "asleep gets its stub again there (Enter wakes it; --wake wakes it now). A record whose\n"
        "conversation is gone from disk (or runs elsewhere) is reported, not started. Safe to run\n"
        "twice: what runs is not started again.")
    sp.add_argument("--dry-run", action="store_true", help="list what would be started; start nothing")
    sp.add_argument("--wake", action="store_true", help="wake the records that were asleep too, instead of "
                    "showing their stub")
    json_flag(sp)


def run(host, args) -> int:
    report = host.restore(dry_run=args.dry_run, wake=args.wake)
    if args.json:
        out_json(report)
    elif not report:
        print("nothing to restore: every record that was running still is")
    for e in report if not args.json else ():
        what = f"{e['name']} ({e['id']}, {e['agent']} {e['conversation_id'] or '-'})"
        what += " asleep" if e.get("asleep") else ""
        if e["action"] == "restored":
            print(f"restored {what} in session {e['session']}, pane {e['pane']}")
        elif e["action"] == "would restore":
            print(f"would restore {what} in session {e['session']}")
        else:
            print(f"{'not restored' if e['action'] == 'skipped' else 'failed'}: {what}: {e['reason']}")
    return 1 if any(e["action"] == "failed" for e in report) else 0
