"""``ls`` and ``show``: every record judged by one look — its live state, its conversation (refreshed),
resumable, its activity — and the stops that were cut short finished where nothing of them is left."""

from __future__ import annotations

from typing import TYPE_CHECKING

from muxhost.state import Live, View
from muxhost.store import Record

if TYPE_CHECKING:
    from muxhost.activity import ActivityOps
    from muxhost.core import Core
    from muxhost.ladder import Ladder
    from muxhost.state import State


class Listing:
    """What ``ls`` and ``show`` say of the records."""

    def __init__(self, core: "Core", state: "State", ladder: "Ladder", activity: "ActivityOps"):
        self.core, self.state, self.ladder, self.activity = core, state, ladder, activity

    def ls(self) -> list[Live]:
        """Every record, judged: its live state, conversation (refreshed), resumable, activity.
        A stop cut short (``stopping``) that left nothing is written stopped
        (:meth:`muxhost.ladder.Ladder.finish_stops`)."""
        store = self.core.store
        records = store.all()
        view = self.state.view(records)
        cut_short = [r for r in records if r.state == "stopping"]
        if cut_short:  # (written stopped when nothing of them is left; the rest is `stop`'s to finish)
            for rec in self.ladder.finish_stops(cut_short, view):
                self.core.notes.append(f"the stop of {rec.name} ({rec.id}) was cut short and something of it still "
                                       f"runs: `muxhost stop {rec.id}` finishes it")
        lives = [self.state.live(r, view, check_resumable=False) for r in records]
        for lv in lives:
            if lv.state == "running" and lv.rec.state == "asleep":  # (see State.live: a wake cut short)
                store.update(lv.rec, state="running", slept_at=None)
        self.judge(lives, view, records)
        return lives

    def judge(self, lives: list[Live], view: View, records: list[Record] | None = None) -> None:
        """What `ls` and `show` say of each record, one judgement for both: its conversation
        (refreshed), resumable (its conversation is on disk, whatever the state), activity."""
        self.state.refresh(lives, view, records)
        for lv in lives:
            lv.resumable = self.core.resumable(self.core.registry.agents.get(lv.rec.agent), lv.rec, lv)
        self.activity.activities(lives, view)  # muxhost.activity: the watch's knowledge, else one look
