"""``muxhost explain``: why muxhost thinks what it thinks of one agent — what its judgement read and which rule decided."""

from __future__ import annotations

import time

from muxhost.cli.output import json_flag, out_json


def add_arguments(sp) -> None:
    sp.description = (
        "Why muxhost thinks the agent is working, waiting, idle or stalled: the plugin's answer and\n"
        "what it read (registry, transcript, database, screen), the pane's last output (and screen\n"
        "when the plugin reads it), the CPU of each process of the pane's tree over a 0.5 s sample\n"
        "and whether it counted (resident children do not, tools do), child conversations, the last\n"
        "key typed, the idle clock and what set it, and the branch of the rule that decided. While\n"
        "`muxhost watch` runs, the state is the watch's (its pid), with this fresh look beside it.\n"
        "A record not running: its state and why. Exit 0 either way.")
    sp.add_argument("ref", metavar="REF", help="a record id (or unique prefix), name, pane id, or REF@HOST")
    json_flag(sp)


def run(host, args) -> int:
    from muxhost import __version__
    from muxhost.cli.ls import children_of
    from muxhost.remote.protocol import SCHEMA

    rec = host.resolve(args.ref)
    doc = {"muxhost": __version__, "schema": SCHEMA, **host.explain(rec)}
    doc["children"] = children_of(host, rec)
    if args.json:
        out_json(doc)
    else:
        print_explanation(doc)
    return 0


def _ago(t: float | None, now: float) -> str:
    """``12 s ago (03:50:01)``, or ``-``."""
    if t is None:
        return "-"
    return f"{max(now - t, 0):.0f} s ago ({time.strftime('%H:%M:%S', time.localtime(t))})"


def _line(key: str, value) -> None:
    print(f"{key + ':':14}{value}")


def print_explanation(doc: dict) -> None:
    """The explanation as a few aligned lines."""
    now = time.time()
    _line("record", f"{doc['id']} ({doc['name']}), {doc['agent']}")
    _line("state", doc["state"])
    if "why" in doc:
        _line("why", doc["why"])
        return
    look, watch = doc["look"], doc["judged_by"]["watch"]
    since = f", since {_ago(doc['activity_since'], now)}" if doc["activity_since"] is not None else ""
    _line("activity", f"{doc['activity']}{since}")
    if watch is not None:
        _line("judged by", f"the watch (pid {watch}); this look says {look['activity']}")
    else:
        _line("judged by", "this look (no watch runs on its server)")
    _line("rule", look["rule"] + (" (this look)" if watch is not None else ""))
    plugin = look["plugin"]
    answer = ("the plugin has no activity hook" if not plugin["hook"] else "no opinion" if plugin["answer"] is None
              else plugin["answer"] + (f" ({plugin['reason']})" if plugin["reason"] else " (no reason given)"))
    _line("plugin", answer + (", asked with the screen" if look["output"]["asked_with_screen"] else ""))
    _line("last output", _ago(look["output"]["last_output"], now) if look["output"]["last_output"] else "unknown")
    if look["output"]["reads_screen"]:
        _line("screen", "(its last lines)" if look["output"]["last_lines"] else "(empty)")
        for ln in look["output"]["last_lines"]:
            print(f"  | {ln}")
    sample = f" (CPU over {look['cpu_sample']:g} s)" if look["cpu_sample"] else ""
    _line("processes", f"{len(look['processes'])}{sample}")
    for p in look["processes"]:
        cpu = "-" if p["cpu_percent"] is None else f"{p['cpu_percent']:.1f}%"
        command = " ".join(p["cmdline"]).replace("\n", "\\n") or p["name"]
        print(f"  {p['pid']:>7}  {p['role']:<8} {cpu:>6}  {command[:100]}")
    _line("children", ", ".join(doc["children"]) or "none")
    _line("last key", _ago(doc["last_input"], now) if doc["last_input"] else "none seen")
    _line("last send", _ago(doc["sent_at"], now))
    _line("launched", f"{_ago(doc['launched_at'], now)} (its launch, resume, wake or restore)")
    clock = doc["clock"]
    _line("clock", f"since {_ago(clock['since'], now)}: {clock['set_by']}" if clock["since"] is not None
          else clock["set_by"])
    if clock["untouched_since"] is not None and clock["untouched_since"] != clock["since"]:
        _line("untouched", f"since {_ago(clock['untouched_since'], now)} (the last key: what sleep_after counts from)")
