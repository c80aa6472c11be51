"""``muxhost notify test``: one message to every notification channel (``notify.urls``), and which failed."""

from __future__ import annotations

import sys


def add_arguments(sp) -> None:
    from muxhost.cli.output import json_flag

    sp.description = (
        "The watch tells notify.urls (apprise URLs: ntfy://TOPIC, json://HOST:PORT/PATH, Slack,\n"
        "Telegram, e-mail, …; the notify extra: pip install 'muxhost[notify]') when an agent waits,\n"
        "is done, stalls or fails. `notify test` sends one message to every channel now and says\n"
        "which failed and why; exit 1 if any did, 2 when no URL is set. A channel is named by its\n"
        "number, scheme and host: never its whole URL (it may hold a token).")
    actions = sp.add_subparsers(dest="notify_command", metavar="ACTION", required=True)
    t = actions.add_parser("test", help="send one message to every channel; say which failed and why")
    json_flag(t)


def run(host, args) -> int:
    from muxhost import notify
    from muxhost.cli.output import out_json
    from muxhost.config import find_config
    from muxhost.errors import MuxhostError, UsageError

    urls = host.config.notify("urls")
    if not urls:
        where = host.config.path or find_config(getattr(args, "config", None))
        raise UsageError(f"notify test: no notification channel: set notify.urls in {where} (docs/activity.md)")
    readable = notify.guard_config(host.config)
    if readable:
        print(readable, file=sys.stderr)
    if notify.load_apprise() is None:
        raise MuxhostError(f"notify test: {notify.INSTALL}")
    results = notify.send_test(list(urls))
    if args.json:
        out_json([{"channel": name, "ok": error is None, "error": error} for name, error in results])
    else:
        for name, error in results:
            print(f"{name}: {'ok' if error is None else 'failed: ' + error}")
    failed = sum(error is not None for _, error in results)
    if failed:
        print(f"muxhost: notify test: {failed} of {len(results)} channel(s) failed", file=sys.stderr)
    return 1 if failed else 0
