"""``muxhost plugins``: the agents and backends, with their package, version and hooks."""

from __future__ import annotations

from muxhost.cli.output import json_flag, out_json, table


def add_arguments(sp) -> None:
    json_flag(sp)


def run(host, args) -> int:
    info = host.registry.describe()
    if args.json:
        out_json(info)
        return 0
    print(table([[a["name"], a["package"], a["version"] or "-", ", ".join(a["hooks"])] for a in info["agents"]],
                ["AGENT", "PACKAGE", "VERSION", "HOOKS"]))
    print()
    print(table([[b["name"], b["package"], b["version"] or "-", ", ".join(b["hooks"])] for b in info["backends"]],
                ["BACKEND", "PACKAGE", "VERSION", "HOOKS"]))
    return 0
