"""``muxhost wait``: until the agent is idle, waiting for you, or exited (exit 1 on --timeout)."""

from __future__ import annotations

from muxhost.cli.output import json_flag, out_json


def add_arguments(sp) -> None:
    sp.description = (
        "Exit 0 when the state is reached, 1 on --timeout, 4 when it can no longer be reached (the\n"
        "agent is gone). Judged as `muxhost watch` judges; after `send`, idle counts only once the\n"
        "agent has been seen doing something else (or 3 s passed): it may not have started yet.")
    sp.add_argument("ref", metavar="REF")
    sp.add_argument("--until", required=True, choices=("idle", "waiting", "exited"))
    sp.add_argument("--timeout", metavar="S", help="give up after this long (seconds, or 30s, 5m); default: never")
    json_flag(sp)


def run(host, args) -> int:
    from muxhost.fleet import parse_duration

    timeout = None if args.timeout is None else parse_duration(args.timeout, "--timeout")
    rec = host.resolve(args.ref)
    state = host.wait(rec, args.until, timeout=timeout)
    if args.json:
        out_json({"id": rec.id, "name": rec.name, "state": state})
    return 0
