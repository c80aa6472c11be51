"""Restore after the pane server died: every record that was running (or asleep) when its server went
away is resumed (:mod:`muxhost.launching`), in a session named as before, each in its own
conversation, or gets its stub again (:mod:`muxhost.sleeping`); one restore at a time, and never a
conversation that another record runs already."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from muxhost.errors import MuxhostError, Refused
from muxhost.kit.flock import LockTimeout, flock
from muxhost.store import Record, private_folder

if TYPE_CHECKING:
    from muxhost.core import Core
    from muxhost.launching import Launching
    from muxhost.locks import Locks
    from muxhost.sleeping import Sleeping
    from muxhost.state import State


class Restoring:
    """``restore``."""

    def __init__(self, core: "Core", state: "State", locks: "Locks", launching: "Launching", sleeping: "Sleeping"):
        self.core, self.state, self.locks, self.launching, self.sleeping = core, state, locks, launching, sleeping

    def restore(self, dry_run: bool = False, wake: bool = False) -> list[dict[str, Any]]:
        """Resume every record that was running when its pane went away (the server died), each in a
        session named as before, in its own conversation; one that was asleep gets its stub there
        again (``asleep: true`` in its entry), or, with ``wake``, is woken. One entry per such record:
        ``action`` is ``restored`` (``would restore`` with ``dry_run``), ``skipped`` (and why: no
        conversation, gone from disk, run by another record, the agent not installed) or ``failed``."""
        if dry_run:
            return self._restore(dry_run, wake)
        path = os.path.join(private_folder(os.path.join(os.path.dirname(self.core.store.path), "locks")), "restore.lock")
        try:  # one restore at a time: a second one waits, then finds them running
            with flock(path, 60.0, private=True, label=f"restore pid {os.getpid()}"):
                return self._restore(dry_run, wake)
        except LockTimeout as e:
            raise Refused(f"another restore is still running ({e.holder or 'unknown'})") from None

    def _restore(self, dry_run: bool, wake: bool) -> list[dict[str, Any]]:
        records = self.core.store.all()
        view = self.state.view(records)
        lives = [self.state.live(r, view, check_resumable=False) for r in records]
        running = {(lv.rec.agent, lv.rec.conversation_id): lv.rec for lv in lives if lv.rec.conversation_id
                   and (lv.state in ("running", "starting", "exited") or (lv.state == "asleep" and lv.pane is not None))}
        todo = [lv for lv in lives if (lv.state == "lost" and lv.rec.state in ("running", "starting"))
                or (lv.state == "asleep" and lv.pane is None)]
        sessions: dict[tuple[str, str | None], set[str]] = {}
        report = []
        for lv in todo:
            rec = lv.rec
            entry: dict[str, Any] = {"id": rec.id, "name": rec.name, "agent": rec.agent,
                                     "conversation_id": rec.conversation_id, "was": lv.state,
                                     "session": rec.session_name or rec.name, "pane": None,
                                     "asleep": lv.state == "asleep" and not wake}
            report.append(entry)
            why = self._unrestorable(rec, running)
            if why:
                entry.update(action="skipped", reason=why)
                continue
            if dry_run:
                entry["action"] = "would restore"
                continue
            server = (rec.backend or "tmux", rec.socket)
            if server not in sessions:
                sessions[server] = {p.session_name for p in (self.core.backend_of(rec).snapshot() or [])}
            name = entry["session"]
            target = name if name in sessions[server] else None  # made by this restore: a window in it
            pane = self._stub_again(rec, target, entry) if entry["asleep"] else self._resume(rec, target, entry)
            if pane is not None:
                sessions[server].add(pane.session_name)
                if not entry["asleep"]:
                    running[(rec.agent, rec.conversation_id)] = rec
                entry.update(action="restored", pane=pane.pane_id, session=pane.session_name)
        return report

    def _stub_again(self, rec: Record, target: str | None, entry: dict[str, Any]):
        """Asleep it was, asleep it stays: its stub, no agent and none of its memory (the pane, or
        None with ``entry`` saying why)."""
        with self.locks.record(rec, "restore"):
            now = self.core.store.get(rec.id)  # (any write since the look moves updated_at)
            if now is None or now.state != "asleep" or now.updated_at != rec.updated_at:
                entry.update(action="skipped", reason="it was woken, stopped or forgotten meanwhile")
                return None
            pane, notes = self.sleeping.show_stub(now, [], target=target)
        if pane is None:
            entry.update(action="failed", reason="; ".join(notes))
        return pane

    def _resume(self, rec: Record, target: str | None, entry: dict[str, Any]):
        """The record resumed in session ``entry["session"]`` (the pane, or None with ``entry`` saying why)."""
        try:
            return self.launching.resume(rec, target=target, session_name=entry["session"]).pane
        except MuxhostError as e:
            entry.update(action="failed", reason=str(e))
            return None

    def _unrestorable(self, rec: Record, running: dict[tuple[str, str | None], Record]) -> str | None:
        agent = self.core.registry.agents.get(rec.agent)
        if agent is None:
            return f"agent {rec.agent!r} is not installed"
        if not rec.conversation_id:
            return "it has no conversation to resume"
        other = running.get((rec.agent, rec.conversation_id))
        if other is not None and other.id != rec.id:
            return f"its conversation runs in record {other.id} ({other.name})"
        if not self.core.resumable(agent, rec):
            return f"conversation {rec.conversation_id} no longer exists"
        if not os.path.isdir(rec.cwd):
            return f"its directory {rec.cwd} no longer exists"
        return None
