"""Scripted control: ``send`` types a line into an agent as the ladder types its exit text, ``read``
reads its screen, and what ``wait`` (:meth:`muxhost.host.Host.wait`: until the agent is ``idle``,
``waiting`` or ``exited``, judged like the watch judges, over time) and the CLI's durations need."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from muxhost import procs
from muxhost.config import MAX_SECONDS, seconds_ok
from muxhost.errors import NotFound, Refused, UsageError
from muxhost.state import Live, left_alone
from muxhost.store import Record

if TYPE_CHECKING:
    from muxhost.core import Core
    from muxhost.state import State

UNTIL = ("idle", "waiting", "exited")
#: seconds after a `send` in which `idle` (what an agent typed into was, most likely) does not count
#: for `wait` — it may not have started on the text yet — unless another state was seen meanwhile
SETTLE = 3.0
WAIT_INTERVAL = 0.5  # seconds between two looks of `wait` (one pane query, one process-table pass)


def parse_duration(text: str, what: str = "duration") -> float:
    """``90`` / ``90s``, ``30m``, ``2h``, ``1d`` -> seconds."""
    raw = str(text).strip().lower()
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(raw[-1:], None)
    number = raw[:-1] if unit else raw
    try:
        value = float(number) * (unit or 1)
    except ValueError:
        value = -1.0
    if not seconds_ok(value):
        raise UsageError(f"{what} {text!r}: expected seconds, or a number with s, m, h or d (30m), "
                         f"up to {MAX_SECONDS // 86400}d")
    return value


def other_program(view: Any, rec: Record) -> str:
    """"; its pane %3 runs another program now (…), left alone" when it does (else "")."""
    other = view.foreign(rec)
    return "" if other is None else "; " + left_alone(other)


class Scripting:
    """``send`` and ``read``."""

    def __init__(self, core: "Core", state: "State"):
        self.core, self.state = core, state

    def _running(self, rec: Record, doing: str) -> Live:
        view = self.state.view([rec])
        live = self.state.live(rec, view, check_resumable=False)
        if live.state != "running" or live.pane is None:
            hint = f"; `muxhost wake {rec.id}` first" if live.state == "asleep" else other_program(view, rec)
            raise Refused(f"record {rec.id} ({rec.name}) is {live.state}: no agent to {doing}{hint}")
        return live

    def send(self, rec: Record, text: str) -> Live:
        """Type ``text`` into the agent as the ladder types its exit text: Ctrl-U, the text, a pause,
        Enter (only while the agent itself is still the pane's process)."""
        if not text or any(ord(c) < 32 or ord(c) == 127 for c in text):
            raise UsageError("TEXT must be one line, with no control characters")
        live = self._running(rec, "type into")
        backend = self.core.backend_of(rec)
        agent = self.core.registry.agents.get(rec.agent)
        me = live.tree[0].key
        self.core.store.update(rec, sent_at=time.time())
        backend.send_keys(live.pane.pane_id, "ctrl+u")
        backend.type_text(live.pane.pane_id, text)
        time.sleep(self.core.exit_pause(agent))
        if not procs.same_process(*me):
            raise Refused(f"record {rec.id} ({rec.name}): the agent ended while the text was typed")
        backend.send_keys(live.pane.pane_id, "enter")
        return live

    def read(self, rec: Record, lines: int | None = None) -> str:
        """The agent's screen as plain text: the visible screen, or its last ``lines`` lines with the
        scrollback. A pane that has gone has nothing to read (NotFound)."""
        if lines is not None and lines < 1:
            raise UsageError("--lines must be 1 or more")
        view = self.state.pane_view(rec)  # (no pass over the whole process table: only the pane's is judged)
        pane = view.pane_for(rec)
        if view.foreign(rec) is not None:
            raise Refused(f"record {rec.id} ({rec.name}) has exited: nothing of the agent to read"
                          f"{other_program(view, rec)}")
        if pane is None:
            raise NotFound(f"record {rec.id} ({rec.name}) has no pane to read (it is {rec.state})")
        backend = self.core.backend_of(rec)
        text = backend.capture(pane.pane_id) if lines else backend.screens([pane.pane_id]).get(pane.pane_id)
        if text is None:
            raise NotFound(f"record {rec.id} ({rec.name}): its pane {pane.pane_id} went meanwhile")
        rows = [r.rstrip() for r in text.splitlines()]
        while rows and not rows[-1]:
            rows.pop()
        return "\n".join(rows[-lines:] if lines else rows)


__all__ = ["Scripting", "UNTIL", "SETTLE", "WAIT_INTERVAL", "parse_duration", "other_program"]
