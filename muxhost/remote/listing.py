"""``ls`` across hosts: every remote host asked at once while the local ``ls`` runs, one table or list.

The JSON is today's records, each with a ``host`` field (``"local"`` for this machine's); a host
that does not answer within ``hosts.timeout`` is one ``offline`` row with the reason in the table
(in ``--json``: a ``muxhost: note:`` line on stderr), and is shown offline from cache for 30 s.
"""

from __future__ import annotations

import json
import sys
import time

from muxhost.remote import hosts as hosts_mod
from muxhost.remote import protocol

HEADERS = ["HOST", "ID", "NAME", "AGENT", "STATE", "ACTIVITY", "PANE", "CONVERSATION", "RESUMABLE", "CWD"]


class Fleet:
    """The remote half of one ``ls``, under way (:meth:`start`), then merged (:meth:`finish`). (ssh and
    threads are imported only when there is a host to ask: a plain ``ls`` pays nothing for them.)"""

    def __init__(self, table, targets: list, local: bool, args):
        from concurrent.futures import ThreadPoolExecutor

        from muxhost.remote import transport

        self.table, self.targets, self.local, self.args = table, targets, local, args
        self._pool = ThreadPoolExecutor(max_workers=1)
        argv = ["ls", "--json", *(["--all"] if args.all else [])]
        self._answers = self._pool.submit(transport.ask_all, targets, argv, table.timeout)

    @classmethod
    def start(cls, host, args) -> "Fleet | None":
        """The remote hosts' ``ls`` started, or None when there are none to ask (today's ``ls``)."""
        want = getattr(args, "host", None)
        if protocol.serving() or (want is None and not hosts_mod.any_configured(host.config)):
            return None
        table = hosts_mod.load(cfg=host.config)
        if want not in (None, hosts_mod.LOCAL):
            table.get(want)  # (not found: exit 3)
        targets = [h for n, h in sorted(table.hosts.items()) if want in (None, n)]
        if not targets and want is None:
            return None
        return cls(table, targets, want in (None, hosts_mod.LOCAL), args)

    def cancel(self) -> None:
        """The local look failed: ask no more (an ssh under way ends within ``hosts.timeout``)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def finish(self, lives) -> int:
        answers = self._answers.result()
        self._pool.shutdown()
        docs = [{**lv.to_dict(), "host": hosts_mod.LOCAL} for lv in lives] if self.local else []
        offline = []
        for h in self.targets:
            a = answers[h.name]
            if a.ok and isinstance(a.doc, list):
                docs += [{**d, "host": h.name} for d in a.doc if isinstance(d, dict)]
            else:
                offline.append((h.name, a.reason or "no answer"))
        if self.args.json:
            print(json.dumps(docs, indent=2, default=str))
            for name, why in offline:
                print(f"muxhost: note: host {name} is offline: {why}", file=sys.stderr)
            return 0
        print(table(docs, offline, wide=self.args.wide))
        if not self.args.wide:
            for name, why in offline:
                print(f"muxhost: note: host {name} is offline: {why}", file=sys.stderr)
        return 0


def table(docs: list[dict], offline: list[tuple[str, str]], wide: bool = False) -> str:
    from muxhost.cli.output import line_width, short_id, short_path
    from muxhost.cli.output import table as _table

    if not docs and not offline:
        return "no records"
    ids = [d.get("conversation_id") for d in docs]
    rows = []
    for d in docs:
        cid = d.get("conversation_id")
        rows.append([str(d.get("host")), str(d.get("id")), str(d.get("name")), str(d.get("agent")),
                     str(d.get("state")), _activity(d), d.get("pane") or "-",
                     "-" if not cid else (cid if wide else short_id(cid, ids)),
                     "yes" if d.get("resumable") else "no", str(d.get("cwd") or "-")])
    rows += [[name, "-", "-", "-", "offline", "-", "-", "-", "-", why] for name, why in offline]
    if not wide:  # the folder, or an offline host's reason, gets what is left of the line
        room = line_width() - len(_table([r[:-1] for r in rows], HEADERS[:-1]).splitlines()[0]) - 2
        for r in rows:
            if r[4] != "offline":
                r[-1] = short_path(r[-1], max(16, room))
            else:  # (its kind, `unreachable`, `authentication refused`: the whole reason is a note)
                r[-1] = r[-1].split(" (")[0].split(":")[0]
    return _table(rows, HEADERS)


def _activity(d: dict) -> str:
    what, since = d.get("activity"), d.get("activity_since")
    if not what:
        return "-"
    if not isinstance(since, (int, float)):
        return str(what)
    from muxhost.cli.output import ago

    return f"{what} {ago(time.time() - since)}"
