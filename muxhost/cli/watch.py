"""``muxhost watch``: what every agent does, published to tmux and printed, one line per change."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time


def add_arguments(sp) -> None:
    sp.description = (
        "One long-running process per server (a second one is refused, exit 4). Every watch.interval\n"
        "(1 s) it looks at every running agent and publishes the pane option @muxhost_activity and\n"
        "the global @muxhost_summary (\"2 working · 1 waiting\"), which status-right '#{@muxhost_summary}'\n"
        "shows with no process per refresh; `ls` then uses what it knows. An agent that starts\n"
        "waiting gets a tmux message and the bell (watch.alert). It prints one line per change and\n"
        "ends with its server (or Ctrl-C, SIGTERM), taking back what it published. With notify.urls\n"
        "in the config (the notify extra), what changed goes to each channel too: waiting, done,\n"
        "stalled, failed; one message a pass (`muxhost notify test` tries them). With remote hosts\n"
        "configured it follows each host's own watch over ssh too: their lines name the host, the\n"
        "summary, the alert, the notifications and prefix + W count their agents, and a host that\n"
        "cannot be reached is named offline (and tried again, 1 s doubling to 60 s).")
    sp.add_argument("--interval", type=float, metavar="S", help="seconds between passes (watch.interval, 1)")
    sp.add_argument("--json", action="store_true",
                    help='one JSON line per change: {"record", "name", "agent", "pane", "old", "new", "since", '
                         '"at", "note"} (and "host" with remote hosts: "local" here); a notification channel that '
                         'failed: {"notify", "channel", "error", …}; a remote host offline or back: '
                         '{"host", "online", "reason", "at"}')


def _clock(t: float) -> str:
    return time.strftime('%H:%M:%S', time.localtime(t))


def _line(change, as_json: bool) -> str:
    """A change, stamped with its time (in order); since when the new state holds, apart."""
    if as_json:
        return json.dumps(change)
    if "online" in change:
        state = "back online" if change["online"] else f"offline: {change.get('reason')}"
        return f"{_clock(change['at'])}  host {change['host']} {state}"
    since = (f" (since {_clock(change['since'])})"
             if change["new"] and _clock(change["since"]) != _clock(change["at"]) else "")
    where = f"@{change['host']}" if change.get("host") not in (None, "local") else ""
    return (f"{_clock(change['at'])}  {change['name']}{where} ({change['record']}) "
            f"{change['old'] or '-'} -> {change['new'] or change.get('note') or 'gone'}{since}")


def run(host, args) -> int:
    out = sys.stdout
    lost = []  # nobody reads the lines any more (run-shell's server gone): the watch goes on

    from muxhost.remote import following

    follower = following.for_config(host.config)

    def emit(change) -> None:
        if follower is not None and "record" in change and "host" not in change:
            change = {**change, "host": "local"}
        if lost or ("notify" in change and not args.json):  # (its warning is on stderr already)
            return
        try:
            print(_line(change, args.json), file=out, flush=True)
        except OSError:
            lost.append(True)

    def stop(signum, frame):
        raise KeyboardInterrupt

    # SIGTERM ends it as Ctrl-C does (in the main thread only; the handler is put back after)
    before = signal.signal(signal.SIGTERM, stop) if threading.current_thread() is threading.main_thread() else None
    try:
        host.watch(emit, interval=args.interval, follower=follower)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the watch took back what it published
        pass
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)
    return 0
