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

from muxhost.ui.rows import Row, remote_rows, row_of


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


def there(host, rid: str, verb: str, *args: str):
    """``verb REF …`` run on the remote host of the row ``REF@HOST`` (:func:`muxhost.remote.transport.ask`,
    the request every ``REF@HOST`` verb makes): its answer, or its error as a :class:`MuxhostError`."""
    from muxhost.remote import hosts, transport

    ref, _, name = rid.rpartition("@")
    if not ref:
        raise MuxhostError(f"host {name} is offline: no record of it to act on")
    table = hosts.load(cfg=host.config)
    answer = transport.ask(table.get(name), [verb, ref, *args], table.timeout)
    if not answer.ok:
        raise MuxhostError(f"{name}: {answer.reason or answer.err.strip() or 'no answer'}", answer.rc or 1)
    return answer


def _said(answer) -> str:
    """A remote verb's last line of output, as its status line."""
    return (answer.out.strip().splitlines() or [""])[-1]


def remote(rid: str) -> bool:
    """Whether ``rid`` is a remote row's (``ID@HOST``, or ``@HOST`` for a host offline)."""
    return "@" in rid


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
    if remote(rid):
        return _said(there(host, rid, "stop"))
    rec = record(host, rid)
    return _one(rec, host.stop_many([rec])[0], "stopped")


def sleep(host, rid: str) -> str:
    if remote(rid):
        return _said(there(host, rid, "sleep"))
    rec = record(host, rid)
    return _one(rec, host.sleep_many([rec])[0], "asleep:")


def wake(host, rid: str) -> str:
    if remote(rid):
        return _said(there(host, rid, "wake"))
    rec = record(host, rid)
    live = host.wake(rec)
    if live.already:
        return f"{rec.name} is awake already"
    return f"woke {rec.name} in pane {live.pane.pane_id}"


def resume(host, rid: str) -> str:
    if remote(rid):
        return _said(there(host, rid, "resume"))
    rec = record(host, rid)
    live = host.resume(rec)
    return f"resumed {rec.name} ({rec.conversation_id}) in pane {live.pane.pane_id}"


def send(host, rid: str, text: str) -> str:
    if remote(rid):
        there(host, rid, "send", text)
        return f"sent to {rid}: {text}"
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
    if remote(rid):
        import types

        doc = there(host, rid, "purge", "--stop", "--dry-run", "--json").doc or {}
        return types.SimpleNamespace(**{"plan": [], "notes": [], "refused": None, "agent": "?",
                                        "conversation_id": None, **doc})
    return host.purge(rec=record(host, rid), dry_run=True, stop=True)


def purge(host, rid: str, conversation_id: str) -> str:
    """Purge exactly ``conversation_id`` (the one the confirmation showed), stopping the record first
    (``Host.purge``'s ``confirmed``: refused when the record was never in it)."""
    if remote(rid):
        doc = there(host, rid, "purge", "--stop", "--yes", "--confirmed", conversation_id, "--json").doc or {}
        return f"purged {doc.get('agent')} conversation {conversation_id} on {rid.rpartition('@')[2]}: " \
               f"{len(doc.get('removed') or [])} removed"
    rec = record(host, rid)
    report = host.purge(rec=rec, stop=True, confirm=None, confirmed=conversation_id)
    first = f"stopped {rec.name} ({report.stopped['outcome']}), " if report.stopped else ""
    if report.residual:
        raise MuxhostError(f"purge incomplete: {len(report.residual)} item(s) left: {report.residual[0]}", 5)
    kept = f"; archived: muxhost unpurge {report.archive.rsplit('/', 1)[-1]}" if report.archive else ""
    return f"{first}purged {report.agent} conversation {report.conversation_id}: {len(report.removed)} removed{kept}"


def rm_plan(host, rid: str) -> list[str]:
    """What ``rm`` would do, for the confirmation (it refuses by itself what it must)."""
    if remote(rid):
        ref, _, name = rid.rpartition("@")
        return [f"forget record {ref} on host {name} (and its worktree there, as `muxhost rm {rid}` does)"]
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
    if remote(rid):
        return "; ".join((there(host, rid, "rm", "--json").doc or {}).get("done") or []) or f"forgot {rid}"
    done = host.rm(record(host, rid))
    return "; ".join(done["done"]) or f"forgot {rid}"


def attach(host, rid: str, env) -> list[str] | None:
    """Go to the record's pane: inside its tmux server the client switches (None); outside, the
    argv that attaches this terminal (run it after the dashboard quit). A remote row: what
    ``muxhost attach REF@HOST`` opens (a new window running ``ssh -t``; outside tmux, its argv)."""
    if remote(rid):
        from muxhost.remote import hosts, transport

        ref, _, name = rid.rpartition("@")
        if not ref:
            raise MuxhostError(f"host {name} is offline: no record of it to go to")
        table = hosts.load(cfg=host.config)
        return transport.open_attach(table.get(name), [ref], table.timeout, ref, env)
    rec = record(host, rid)
    live = host.live(rec, host.view([rec]), check_resumable=False)
    if live.pane is None:
        raise NotFound(f"{rec.name} has no pane ({live.state}); r resumes it")
    return host.backend_of(rec).attach(live.pane, env)


def diff_stat(host, rid: str) -> str:
    """``git diff --stat`` of the record's worktree, with its untracked files."""
    from muxhost import worktrees

    if remote(rid):
        raise NotFound(f"g shows a worktree of this machine: `muxhost show {rid}` tells the remote one")
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
    """The record's last ``lines`` screen lines (``muxhost read --lines``; a remote row's, over ssh)."""
    if remote(rid):
        return there(host, rid, "read", "--lines", str(lines)).out
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

    def __init__(self, hosts: Hosts, follower=None):
        self.hosts = hosts
        #: the remote hosts' watches (:class:`muxhost.remote.following.Follower`): their rows too
        self.follower = follower
        self._remote_seen = -1
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
        if self.follower is not None and self.follower.version != self._remote_seen:
            return True  # (a remote change: no gap, it was a line from its watch)
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
        rows = [row_of(lv) for lv in lives]
        if self.follower is not None:
            self._remote_seen = self.follower.version
            rows += remote_rows(self.follower.snapshot())
        return Look(rows, time.time(), notes, marks)
