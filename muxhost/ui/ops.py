"""What the dashboard's keys do, as the CLI does it: the same :class:`~muxhost.host.Host` methods,
in the dashboard's own process, each call's outcome one status line (a :class:`MuxhostError` is a
message, never a crash) — and the feed, the one look per refresh the table shows.

A :class:`Host` holds a SQLite connection that only its own thread may use, so each thread gets its
own host (:class:`Hosts`): the feed's thread one, each action worker one.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from muxhost.errors import MuxhostError, NotFound

from muxhost.ui.rows import Row, row_of


class Hosts:
    """One :class:`~muxhost.host.Host` per thread, made by ``make()`` on the thread's first call."""

    def __init__(self, make: Callable[[], Any]):
        self.make = make
        self._local = threading.local()

    def get(self):
        host = getattr(self._local, "host", None)
        if host is None:
            host = self._local.host = self.make()
        host.warnings.clear()
        host.notes.clear()
        return host


def record(host, rid: str):
    """The record as it is now: another muxhost may have changed or forgotten it meanwhile."""
    rec = host.store.get(rid)
    if rec is None:
        raise NotFound(f"record {rid} is gone (another muxhost removed it meanwhile)")
    return rec


def _one(rec, result, done: str) -> str:
    """The status line of one record's ladder (``stop``, ``sleep``), as ``muxhost stop`` says it."""
    if isinstance(result, MuxhostError):
        raise result
    if result.already == "stopped":
        return f"{rec.name} was stopped already"
    if result.skipped == "asleep":
        return f"{rec.name} was asleep already"
    if result.skipped == "not idle":
        return f"{rec.name} was not idle: left awake"
    r = result.rec
    return f"{done} {rec.name} ({rec.id}): {r.outcome} after {r.seconds:.2f}s" if r.outcome else f"{done} {rec.name}"


def stop(host, rid: str) -> str:
    rec = record(host, rid)
    return _one(rec, host.stop_many([rec])[0], "stopped")


def sleep(host, rid: str) -> str:
    rec = record(host, rid)
    return _one(rec, host.sleep_many([rec])[0], "asleep:")


def wake(host, rid: str) -> str:
    rec = record(host, rid)
    live = host.wake(rec)
    if live.already:
        return f"{rec.name} is awake already"
    return f"woke {rec.name} in pane {live.pane.pane_id}"


def resume(host, rid: str) -> str:
    rec = record(host, rid)
    live = host.resume(rec)
    return f"resumed {rec.name} ({rec.conversation_id}) in pane {live.pane.pane_id}"


def send(host, rid: str, text: str) -> str:
    rec = record(host, rid)
    host.send(rec, text)
    return f"sent to {rec.name}: {text}"


def launch(host, agent: str, cwd: str | None, name: str | None, worktree: str | None) -> str:
    live = host.launch(agent, cwd=cwd or None, name=name or None, worktree=worktree or None)
    where = f" in worktree {live.rec.worktree['path']}" if live.rec.worktree else ""
    return f"launched {live.rec.agent} as {live.rec.name} in pane {live.pane.pane_id}{where}"


def agents(host) -> list[str]:
    """The installed agents' names, the default one first."""
    names = sorted(host.registry.agents)
    first = host.config.data.get("default_agent") or "demo"
    return sorted(names, key=lambda n: n != first)


def purge_plan(host, rid: str):
    """The dry run of ``purge REF --stop``: the report with its plan, what refuses, the notes."""
    return host.purge(rec=record(host, rid), dry_run=True, stop=True)


def purge(host, rid: str, conversation_id: str) -> str:
    """Purge exactly ``conversation_id`` (the one the confirmation showed), stopping the record first
    (``Host.purge``'s ``confirmed``: refused when the record was never in it)."""
    rec = record(host, rid)
    report = host.purge(rec=rec, stop=True, confirm=None, confirmed=conversation_id)
    first = f"stopped {rec.name} ({report.stopped['outcome']}), " if report.stopped else ""
    if report.residual:
        raise MuxhostError(f"purge incomplete: {len(report.residual)} item(s) left: {report.residual[0]}", 5)
    kept = f"; archived: muxhost unpurge {report.archive.rsplit('/', 1)[-1]}" if report.archive else ""
    return f"{first}purged {report.agent} conversation {report.conversation_id}: {len(report.removed)} removed{kept}"


def rm_plan(host, rid: str) -> list[str]:
    """What ``rm`` would do, for the confirmation (it refuses by itself what it must)."""
    rec = record(host, rid)
    lines = [f"forget record {rec.id} ({rec.name}, {rec.state})"]
    there = host.removal.agent_there(rec)
    if there:
        lines.append(f"refused now: {there} (s stops it)")
    wt = rec.worktree
    if wt:
        from muxhost import worktrees

        lines.append(f"remove the worktree {wt['path']}; delete its branch {wt['branch']} if it has no commits")
        try:
            dirty = worktrees.changes(wt["path"])
        except MuxhostError:
            dirty = []
        if dirty:
            lines.append(f"refused: it has uncommitted changes ({worktrees.describe(dirty)})")
    return lines


def rm(host, rid: str) -> str:
    done = host.rm(record(host, rid))
    return "; ".join(done["done"]) or f"forgot {rid}"


def attach(host, rid: str, env) -> list[str] | None:
    """Go to the record's pane: inside its tmux server the client switches (None); outside, the
    argv that attaches this terminal (run it after the dashboard quit)."""
    rec = record(host, rid)
    live = host.live(rec, host.view([rec]), check_resumable=False)
    if live.pane is None:
        raise NotFound(f"{rec.name} has no pane ({live.state}); r resumes it")
    return host.backend_of(rec).attach(live.pane, env)


def diff_stat(host, rid: str) -> str:
    """``git diff --stat`` of the record's worktree, with its untracked files."""
    from muxhost import worktrees

    rec = record(host, rid)
    if not rec.worktree:
        raise NotFound(f"{rec.name} runs in no worktree of muxhost's (launch with a worktree name)")
    path = rec.worktree["path"]
    p = worktrees.git(path, "diff", "--stat", "HEAD", check=False)
    if p.returncode != 0:
        raise MuxhostError(f"git diff in {path}: {worktrees.why(p)}")
    untracked = [ln[3:] for ln in worktrees.changes(path) if ln.startswith("??")]
    text = p.stdout.rstrip() or "no changes to tracked files"
    if untracked:
        text += f"\n{len(untracked)} untracked: " + ", ".join(untracked[:10]) + (" …" if len(untracked) > 10 else "")
    return f"git diff --stat ({rec.worktree['branch']}, {path}):\n{text}"


def preview(host, rid: str, lines: int) -> str:
    """The record's last ``lines`` screen lines (``muxhost read --lines``)."""
    return host.read(record(host, rid), lines=lines)


# -- the feed --------------------------------------------------------------------------------------
#: seconds between two probes (one pane query per server, no process table: ~15 ms of CPU, tmux's
#: share included, at 100 agents)
PROBE_EVERY = 2.0
#: seconds after which a look is taken even when the probe saw nothing change (activity ages: idle
#: turns to stalled, `since` moves; a plugin's answer may change without output)
LOOK_EVERY = 15.0
#: seconds at least between two looks the probe asked for (agents at work print all the time)
LOOK_GAP = 2.0


@dataclass
class Look:
    """One refresh: every record's row, and what the host said beside it."""

    rows: list[Row]
    at: float
    notes: list[str] = field(default_factory=list)
    marks: dict[str, tuple] = field(default_factory=dict)  # record id -> its pane's output marks


class Feed:
    """The table's data: a full look (``Host.ls``: one pane query per server, one process-table
    pass, the watch's published activity when a watch runs) when something changed, else a probe.

    A probe is what a watch costs tmux and less: the pane list (one query per server) and the
    store's change counter. It changed (a pane came, went, printed, a watch published, another
    muxhost wrote a record): look again. Nothing changed for :data:`LOOK_EVERY`: look anyway."""

    def __init__(self, hosts: Hosts):
        self.hosts = hosts
        self._signature: Any = None
        self._looked = 0.0
        self.servers: set = set()

    def probe(self) -> Any:
        host = self.hosts.get()
        panes = []
        for server in sorted(self.servers | {host.server}, key=str):
            snap = host.backend(server[1], server[0]).snapshot()
            # (only the records' panes: the dashboard's own pane, beside them, prints at each redraw)
            panes.append(None if snap is None else tuple(
                (p.pane_id, p.record, p.dead, p.last_output, p.output_mark, p.activity, p.activity_since)
                for p in snap if p.record))
        return host.store.version(), tuple(panes)

    def due(self, force: bool = False) -> bool:
        """Whether a full look is due now (probing when none is forced)."""
        since = time.monotonic() - self._looked
        if force or since >= LOOK_EVERY:
            return True
        if since < LOOK_GAP:
            return False
        try:
            return self.probe() != self._signature
        except MuxhostError:
            return True

    def look(self) -> Look:
        """``Host.ls`` as ``muxhost ls --all`` sees it, as rows."""
        from muxhost.state import server_of

        host = self.hosts.get()
        # (the probe's state before the look: what changes while it looks is a change the next
        # probe sees — taken after, a pane that printed meanwhile would wait for LOOK_EVERY)
        signature = self.probe()
        lives = host.ls()
        self.servers = {server_of(lv.rec) for lv in lives}
        self._signature, self._looked = signature, time.monotonic()
        marks = {lv.rec.id: (lv.pane.pane_id, lv.pane.last_output, lv.pane.output_mark)
                 for lv in lives if lv.pane is not None}
        notes = list(host.notes) + [f"warning: {w['agent']}: {w['hook']} failed: {w['error']}" for w in host.warnings]
        return Look([row_of(lv) for lv in lives], time.time(), notes, marks)
