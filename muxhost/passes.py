"""One pass over the agents of a pane server, in pieces: observe (what the server and the process
table show) → judge (a pure function: the new states, idle clocks and changes). Shared by the
watch (:mod:`muxhost.watching`, which publishes what the judge finds) and ``wait`` (:class:`Poller`,
which publishes nothing).

:class:`Observer` makes, per pass, ONE pane query, ONE process-table pass (a
:class:`muxhost.procs.Sampler`: each process's stat read once), a refresh of the conversation ids
where one is due, the screens of only the panes whose output moved (and whose plugin reads screens),
batched in ONE round trip, and asks each plugin its answer: a :class:`Sight`. :func:`judge_pass`
turns a sight and what the previous pass judged (a :class:`Track` per record) into the new tracks
and the :class:`Change` list, with :func:`muxhost.activity.judge` as the rule for each record. It
reads no clock and no process: tests give it recorded observations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple

from muxhost import procs
from muxhost.activity import CPU_BUSY, Evidence, ask_plugin, first_since, judge, needs_screen, split_tree
from muxhost.agent import Agent
from muxhost.backends import Backend, PaneInfo
from muxhost.state import Live, View
from muxhost.store import Record

#: seconds between two refreshes of every running agent's conversation id (and at once for a new one)
REFRESH_EVERY = 10.0


@dataclass(slots=True)
class Track:
    """What a pass judged of one running record: what the next pass compares with."""

    rec: Record
    pane: PaneInfo
    activity: str | None = None
    since: float | None = None
    progress: float | None = None          # the latest time it printed or used CPU
    mark: str = ""                         # the pane's output_mark at the last look
    screen: str | None = None              # its visible screen, as last captured
    cpu: dict[tuple[int, float], float] = field(default_factory=dict)  # non-resident process -> CPU s
    #: the latest last_input seen: the backend tells it only while the pane is the active one, and
    #: a line typed before the user moved to another pane is still there
    typed: float | None = None


@dataclass(slots=True)
class Seen:
    """What one pass observed of one running record."""

    live: Live                 # the record, its pane and its process tree (root first), "running"
    own: list[procs.Proc]      # the agent and its tools (its non-resident processes): whose CPU is work
    plugin: str | None = None  # the plugin's answer (None: no opinion)
    screen: str | None = None  # the pane's screen, when this pass captured it


class Sight(NamedTuple):
    """What one pass observed: when, and each running record (in the store's order)."""

    now: float
    running: list[Seen]


class Change(NamedTuple):
    """A record's activity changed: ``live`` as the change leaves it (``activity`` set; state
    ``running``, ``exited`` or ``lost``), since when the new state holds, whether it may alert, and
    why a record left (``note``), where known."""

    live: Live
    old: str | None
    new: str | None
    since: float
    alert: bool
    note: str | None = None


class Judged(NamedTuple):
    tracks: dict[str, Track]   # every running record's, after this pass
    changes: list[Change]
    left: list[Track]          # the records that left the watch (their last track)


def afresh(prev: Track | None, rec: Record, pane: PaneInfo) -> bool:
    """A new pane, or a new agent in it (a wake, a resume: ``launched_at`` moved), starts afresh,
    even when no pass saw the record asleep or its pane dead in between."""
    return prev is None or prev.pane.pane_id != pane.pane_id or prev.rec.launched_at != rec.launched_at


def blind(pane: PaneInfo) -> bool:
    """A backend that cannot tell when a pane printed (no mark, no time): its screen, every pass, tells."""
    return not pane.output_mark and pane.last_output is None


def moved(pane: PaneInfo, prev: Track, looked: float | None) -> bool:
    """Output since the last look: the mark moved, or the (whole-second) output time is not older
    than the second of the last look."""
    return pane.output_mark != prev.mark or (
        pane.last_output is not None and looked is not None and pane.last_output >= int(looked))


def cpu_used(seen: Seen, prev: Track, new: bool, looked: float | None) -> tuple[float, float]:
    """CPU seconds the agent's non-resident processes used since the last look: ``(all, its tools)``.
    A process first seen that started since the last look used all of its CPU since."""
    used = tool_used = 0.0
    root = seen.live.tree[0]
    for p in seen.own:
        if p.cpu is None:
            continue
        before = prev.cpu.get(p.key)
        if before is not None:
            d = max(p.cpu - before, 0.0)
        elif not new and looked is not None and p.create_time >= looked - 0.01:
            d = p.cpu
        else:
            d = 0.0
        used += d
        if p is not root:
            tool_used += d
    return used, tool_used


def judge_one(seen: Seen, prev: Track | None, now: float, looked: float | None,
              stall_after: float) -> tuple[Track, Change | None]:
    """One record's pass: its new track, and its change (None: its state holds)."""
    rec, pane = seen.live.rec, seen.live.pane
    new = afresh(prev, rec, pane)
    if new:
        prev = Track(rec, pane, progress=pane.last_output)
    dt = None if looked is None else max(now - looked, 1e-3)
    used, tool_used = cpu_used(seen, prev, new, looked)
    busy = dt is not None and used >= CPU_BUSY * dt
    progress = prev.progress
    if not new and moved(pane, prev, looked):
        progress = max(progress or 0.0, min(pane.last_output + 1, now) if pane.last_output else now)
    if busy:
        progress = now
    screen = prev.screen
    if seen.screen is not None:
        if not new and screen is not None and seen.screen != screen and blind(pane):
            progress = now  # (a blind backend's pane: its screen changed since the last look)
        screen = seen.screen
    typed = prev.typed if pane.last_input is None else max(prev.typed or 0.0, pane.last_input)
    state = judge(Evidence(seen.plugin, busy, dt is not None and tool_used >= CPU_BUSY * dt, progress),
                  now, stall_after)
    track = Track(rec, pane, prev.activity, prev.since, progress, pane.output_mark, screen,
                  {p.key: p.cpu for p in seen.own if p.cpu is not None}, typed)
    if state == prev.activity:
        # idle before and after this pass, but a turn came and went in between: a prompt (a `send`,
        # a user's key) and output after it restart the idle clock. (Output alone does not: an idle
        # TUI redraws itself, claude every few seconds.)
        poke = max(rec.sent_at or 0.0, typed or 0.0)
        if state == "idle" and track.since is not None and poke > track.since and (progress or 0.0) >= poke:
            track.since = min(progress, now)
        return track, None
    if new:
        since = first_since(state, pane.last_output, progress, stall_after, now, rec.launched_at) or now
    elif state == "stalled" and progress is not None:
        since = min(progress + stall_after, now)
    else:
        since = now
    track.activity, track.since = state, since
    live = Live(rec, "running", pane, seen.live.tree, activity=state, activity_since=since)
    return track, Change(live, prev.activity, state, since, alert=looked is not None or prev.activity is not None)


def judge_pass(sight: Sight, tracks: Mapping[str, Track], looked: float | None, stall_after: float,
               notes: Mapping[str, str] | None = None) -> Judged:
    """The pass's judgement, from its observations and the previous pass's ``tracks`` (``looked``:
    the time of that pass, None for the first). Pure: no I/O, nothing given is changed. A record
    the pass did not see running has left (``exited``; ``notes`` says why, where known)."""
    after: dict[str, Track] = {}
    changes: list[Change] = []
    for seen in sight.running:
        rid = seen.live.rec.id
        after[rid], change = judge_one(seen, tracks.get(rid), sight.now, looked, stall_after)
        if change is not None:
            changes.append(change)
    left = [tr for rid, tr in tracks.items() if rid not in after]
    for tr in left:
        if tr.activity is not None:
            changes.append(Change(Live(tr.rec, "exited", tr.pane, []), tr.activity, None, sight.now, False,
                                  (notes or {}).get(tr.rec.id)))
    return Judged(after, changes, left)


def lost(tracks: Mapping[str, Track], now: float) -> list[Change]:
    """The server ended, and every agent on it: each judged record's last change."""
    return [Change(Live(tr.rec, "lost", None, []), tr.activity, None, now, False)
            for tr in tracks.values() if tr.activity is not None]


def instance_of(panes: list[PaneInfo]) -> str | None:
    """The server instance of a snapshot's panes (:attr:`PaneInfo.server`), None when unknown."""
    return next((p.server for p in panes if p.server), None)


def _discovers(agent: Agent) -> bool:
    """Whether the plugin finds its agent's conversation itself (overrides ``discover``)."""
    return getattr(type(agent), "discover", Agent.discover) is not Agent.discover


class Observer:
    """The observing of one server, pass after pass: :meth:`look`. What it needs of the host comes
    as arguments: the server's ``backend`` and key ``(backend name, address)``, ``agent_of`` (a
    record's plugin, or None), ``ask`` (the plugin's checked answer: ``(agent, live, screen, table)``,
    :func:`muxhost.activity.ask_plugin`) and ``refresh`` (``(lives, view, records)``: the host's
    conversation-id refresh)."""

    def __init__(self, backend: Backend, server: tuple[str, str | None],
                 agent_of: Callable[[Record], Agent | None], ask: Callable[..., str | None],
                 refresh: Callable[[list[Live], View, list[Record] | None], None], instance: str | None = None):
        self.backend, self.server, self.agent_of, self.ask, self.refresh = backend, server, agent_of, ask, refresh
        self.sampler = procs.Sampler()
        self.residents: dict[tuple[int, float, str], bool] = {}
        self.refreshed: float | None = None    # the last time conversation ids were refreshed
        #: the server instance watched (PaneInfo.server): a new server on the same address is not it
        self.instance = instance

    def look(self, records: list[Record], tracks: Mapping[str, Track], looked: float | None,
             everyone: list[Record] | None = None) -> Sight | None:
        """One pass's observations of ``records`` (``tracks``, ``looked``: what the previous pass
        judged, and when: which screens moved); None when the server is gone (another server on
        its address is not it). ``everyone``: every record, on every server, that the refresh
        weighs (a conversation another record holds elsewhere is never handed to one of these;
        None: read from the store)."""
        panes = self.backend.snapshot()
        if panes is not None and self.instance is None:
            self.instance = instance_of(panes)
        if panes is None or instance_of(panes) not in (None, self.instance):
            return None
        table = self.sampler.snapshot()
        if len(self.residents) > 4 * len(table.procs) + 100:  # forget processes long gone
            self.residents = {k: v for k, v in self.residents.items() if k[0] in table.procs}
        now = time.time()
        view = View({self.server: panes}, table)
        running, wanted = self._running(records, view, tracks, looked)
        # which conversation each is in (a new agent's first, after a /new or /clear), as `ls` would
        # say: the plugins' activity reads that conversation. Every pass while an agent that can
        # find its conversation has none yet (its first prompt is what makes one), else every 10 s.
        unknown = any(s.live.rec.conversation_id is None and a is not None and _discovers(a) for s, a, _ in running)
        if running and (unknown or any(prev is None for _, _, prev in running) or self.refreshed is None
                        or now - self.refreshed >= REFRESH_EVERY):
            self.refresh([s.live for s, _, _ in running], view, everyone)
            self.refreshed = now
        screens = self.backend.screens(wanted) if wanted else {}
        for seen, agent, prev in running:
            seen.screen = screens.get(seen.live.pane.pane_id)
            if agent is not None:
                screen = seen.screen if seen.screen is not None else prev.screen if prev is not None else None
                seen.plugin = self.ask(agent, seen.live, screen, table)
        return Sight(now, [seen for seen, _, _ in running])

    def _running(self, records: list[Record], view: View, tracks: Mapping[str, Track], looked: float | None
                 ) -> tuple[list[tuple[Seen, Agent | None, Track | None]], list[str]]:
        """The records that run an agent in a pane, each with its plugin and its previous track (None:
        it starts afresh); and the panes whose screens this pass wants."""
        running: list[tuple[Seen, Agent | None, Track | None]] = []
        wanted: list[str] = []
        for rec in records:
            pane = view.pane_for(rec)
            # (a pane that runs another program now is not the agent's: not watched)
            if rec.state in ("stopped", "asleep") or pane is None or pane.dead or view.foreign(rec) is not None:
                continue
            tree = view.table.tree(pane.pid)
            if not tree:
                continue
            agent = self.agent_of(rec)
            _, tools = split_tree(agent, tree, self.residents)
            prev = tracks.get(rec.id)
            if afresh(prev, rec, pane):
                prev = None
            if blind(pane) or (needs_screen(agent) and (prev is None or prev.screen is None
                                                        or moved(pane, prev, looked))):
                wanted.append(pane.pane_id)
            running.append((Seen(Live(rec, "running", pane, tree), [tree[0], *tools]), agent, prev))
        return running, wanted


def observer_of(host, backend: Backend, server: tuple[str, str | None], instance: str | None = None) -> Observer:
    """The observer of one server of ``host``, with what it needs of the host."""
    return Observer(backend, server, lambda rec: host.registry.agents.get(rec.agent),
                    lambda agent, live, screen, table: ask_plugin(host, agent, live, screen, table),
                    host.refresh, instance)


class Poller:
    """``wait``'s look at one record, pass after pass: observe + judge as the watch does, on the
    record's own server, publishing nothing (no options, no hook, no alert, no sleeping)."""

    def __init__(self, host, rec: Record, stall_after: float):
        self.observer = observer_of(host, host.backend_of(rec), (rec.backend or "tmux", rec.socket))
        self.stall_after = stall_after
        self.tracks: dict[str, Track] = {}
        self.looked: float | None = None

    def step(self, stored: Record | None) -> Track | None:
        """One pass over the record as ``stored`` now (None: gone from the store): its track, None
        when no agent of it runs in a pane (or the server is gone)."""
        sight = self.observer.look([stored] if stored is not None else [], self.tracks, self.looked)
        if sight is None:
            self.tracks = {}
            return None
        self.tracks = judge_pass(sight, self.tracks, self.looked, self.stall_after).tracks
        self.looked = sight.now
        return self.tracks.get(stored.id) if stored is not None else None
