"""The dashboard's rows: what each record shows (status, symbol, colour, how long), their order,
the filter and the header's counts — plain data from the host's :class:`~muxhost.state.Live`, no Textual.

A row's *status* is what a user asks first: for a running agent its activity (``waiting``,
``working``, ``stalled``, ``idle``), else the record's state (``asleep``, ``exited``, ``stopped``,
…). Rows sort by :data:`ORDER` (the one that waited longest first), then by name.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: every status, in the order rows sort: what needs the user first, what is over last
ORDER = ("waiting", "working", "stalled", "idle", "running", "starting", "stopping", "asleep", "exited",
         "lost", "offline", "stopped")
#: a symbol per status, so the table reads without colour too
SYMBOL = {"waiting": "?", "working": "▶", "stalled": "!", "idle": "○", "running": "●", "starting": "+",
          "stopping": "↓", "asleep": "z", "exited": "×", "lost": "~", "stopped": "■", "offline": "⨯"}
#: a Rich style per status
STYLE = {"waiting": "bold black on yellow", "working": "bold green", "stalled": "bold red", "idle": "cyan",
         "running": "green", "starting": "green", "stopping": "magenta", "asleep": "blue", "exited": "red",
         "lost": "dim red", "stopped": "dim", "offline": "bold red"}


@dataclass(frozen=True)
class Row:
    """One record as the dashboard shows it."""

    id: str
    name: str
    agent: str
    status: str              # see ORDER
    since: float | None      # epoch seconds the status has held since (None: unknown)
    state: str               # the record's live state (running, asleep, ...)
    conversation: str | None
    cwd: str
    branch: str | None       # the worktree's branch, for a worktree record
    worktree: str | None     # the worktree's folder
    pane: str | None
    resumable: bool
    host: str | None = None  # a remote host's name (its record's id is then ``ID@HOST``); None: here

    def how_long(self, now: float | None = None) -> str:
        """``waiting 2m``, ``working`` (since unknown)."""
        if self.since is None:
            return self.status
        from muxhost.cli.output import ago

        return f"{self.status} {ago((now or time.time()) - self.since)}"

    def where(self, width: int) -> str:
        """The worktree branch (``⎇ fix-login``), else the folder, shortened to ``width`` (a host
        offline: the reason)."""
        from muxhost.cli.output import short_path

        if self.branch:
            return f"⎇ {self.branch}"[:width]
        if self.status == "offline":  # (a host offline: why)
            return self.cwd
        return short_path(self.cwd, width)

    def matches(self, text: str) -> bool:
        """The filter: ``text`` (case-insensitive; words all must match) in the name, agent, folder,
        branch, state or status."""
        hay = " ".join(x for x in (self.name, self.agent, self.cwd, self.branch or "", self.state, self.status,
                                   self.host or "",
                                   self.id, self.conversation or "") if x).lower()
        return all(word in hay for word in text.lower().split())


def row_of(lv) -> Row:
    """The row of a :class:`~muxhost.state.Live` as ``ls`` judged it."""
    rec = lv.rec
    if lv.state == "running":
        status, since = (lv.activity, lv.activity_since) if lv.activity else ("running", None)
    else:
        status = lv.state if lv.state in ORDER else "lost"
        since = {"asleep": rec.slept_at, "stopped": rec.stopped_at}.get(lv.state)
    wt = rec.worktree or {}
    return Row(id=rec.id, name=rec.name, agent=rec.agent, status=status, since=since, state=lv.state,
               conversation=rec.conversation_id, cwd=rec.cwd, branch=wt.get("branch"), worktree=wt.get("path"),
               pane=lv.pane.pane_id if lv.pane is not None else None, resumable=bool(lv.resumable))


def remote_rows(states) -> list[Row]:
    """The rows of the remote hosts a :class:`muxhost.remote.following.Follower` follows (its
    ``snapshot()``): each running agent as its watch last told it, keyed ``ID@HOST``; a host offline
    one ``offline`` row whose folder column says why."""
    rows = []
    for s in states:
        if s.online is False:
            rows.append(Row(id=f"@{s.name}", name=s.name, agent="-", status="offline", since=None, state="offline",
                            conversation=None, cwd=s.reason or "unreachable", branch=None, worktree=None, pane=None,
                            resumable=False, host=s.name))
            continue
        for rid, line in s.records.items():
            since = line.get("since")
            rows.append(Row(id=f"{rid}@{s.name}", name=str(line.get("name") or rid), agent=str(line.get("agent") or "?"),
                            status=str(line.get("new")), since=since if isinstance(since, (int, float)) else None,
                            state="running", conversation=None, cwd="-", branch=None, worktree=None,
                            pane=line.get("pane"), resumable=False, host=s.name))
    return rows


def sort_key(row: Row, now: float | None = None):
    """ORDER first; within a status the one that has held it longest first (the longest waiting
    agent on top), then by name."""
    held = -(((now or time.time()) - row.since)) if row.since is not None else 0.0
    return (ORDER.index(row.status) if row.status in ORDER else len(ORDER), held, row.name, row.id)


def ordered(rows: list[Row], text: str = "", now: float | None = None) -> list[Row]:
    now = now or time.time()
    return sorted((r for r in rows if not text or r.matches(text)), key=lambda r: sort_key(r, now))


def counts(rows: list[Row]) -> str:
    """``2 waiting · 3 working · 1 asleep`` in :data:`ORDER` (``no agents`` for none)."""
    n: dict[str, int] = {}
    for r in rows:
        n[r.status] = n.get(r.status, 0) + 1
    return " · ".join(f"{n[s]} {s}" for s in ORDER if n.get(s)) or "no agents"


def short_conversation(cid: str, others) -> str:
    """A conversation id as ``ls`` cuts it (like git's short commits)."""
    from muxhost.cli.output import short_id

    return short_id(cid, others)
