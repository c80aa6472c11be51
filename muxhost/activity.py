"""Activity: what each running agent is doing — ``working``, ``waiting`` (for the user), ``idle``
(done, at its prompt) or ``stalled`` (working, but silent and using no CPU for
``watch.stall_after``). Part of :class:`muxhost.host.Host`.

The host combines two kinds of evidence, the same way for every agent:

- the plugin's answer, :meth:`muxhost.Agent.activity` (``ctx``, the visible screen) -> a state or
  None (no opinion);
- its own: did the pane print anything since the last look (the backend's ``last_output`` and
  ``output_mark``), and did the agent's NON-resident processes use CPU. A process of the pane's tree
  that matches the agent's ``resident_children`` (a language server, an MCP server) is part of the
  agent: its CPU is not work. A tool running under a resident child is work.

:func:`judge` is the rule, the one for ``ls``, ``show``, ``wait`` and the watch. A pass
(:mod:`muxhost.passes`: the watch's, ``wait``'s) applies it with what it remembers between passes;
without a watch, :meth:`ActivityOps.activities` applies it to one look (``ls``, ``show``),
honestly: see its docstring.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

import psutil

from muxhost import procs
from muxhost.agent import Activity, Agent

STATES = ("working", "waiting", "idle", "stalled")
#: the share of one core a process must use over a look for its CPU to count (a TUI's timer ticks
#: and a poll loop stay below it; a tool at work does not)
CPU_BUSY = 0.02
#: seconds new output (or CPU) keeps an agent whose plugin has no opinion ``working``
RECENT = 3.0
#: the CPU sample of a look without a watch, for the agents whose state depends on it
SAMPLE = 0.1


@dataclass
class Evidence:
    """What one look found for one running agent."""

    plugin: str | None = None       # the plugin's answer (None: no opinion)
    busy: bool = False              # a non-resident process (the agent's own included) used CPU
    tool_busy: bool = False         # a non-resident child of the agent (not the agent itself) used CPU
    progress: float | None = None   # the latest time it printed or used CPU, as far as known


def judge(ev: Evidence, now: float, stall_after: float) -> str:
    """The state the evidence shows (the rule, for every agent):

    - the plugin says ``waiting`` (or ``stalled``): that;
    - the plugin says ``idle``: ``working`` while a non-resident child uses CPU (a tool still runs;
      a sub-agent's conversation that ended does not make its parent idle), else ``idle``;
    - the plugin says ``working``: ``stalled`` once nothing printed and no non-resident process used
      CPU for ``stall_after`` seconds, else ``working``;
    - no opinion: ``working`` while it prints or uses CPU (for :data:`RECENT` seconds after), else
      ``idle``."""
    if ev.plugin in ("waiting", "stalled"):
        return ev.plugin
    if ev.plugin == "idle":
        return "working" if ev.tool_busy else "idle"
    silent = None if ev.progress is None else now - ev.progress
    if ev.plugin == "working":
        return "stalled" if not ev.busy and silent is not None and silent >= stall_after else "working"
    return "working" if ev.busy or (silent is not None and silent < RECENT) else "idle"


def first_since(state: str, last_output: float | None, progress: float | None, stall_after: float,
                now: float, started: float | None = None) -> float | None:
    """Since when ``state`` holds, seen in one look: ``idle`` and ``waiting`` since the last output
    (the prompt, the question), ``stalled`` since ``stall_after`` after the last sign of life;
    ``working`` is not known from one look (None). Never before ``started`` (the record's
    ``launched_at``: a launch, resume, wake or restore starts the clock afresh; the pane's last
    output may be its stub's, from before the wake)."""
    if state in ("idle", "waiting") and last_output is not None:
        return min(max(last_output, started or 0.0), now)
    if state == "stalled" and progress is not None:
        return min(max(progress + stall_after, started or 0.0), now)
    return None


def untouched_since(idle_since: float | None, last_input: float | None) -> float | None:
    """Since when an ``idle`` agent has been idle with nobody typing into its pane: the later of
    ``idle_since`` and ``last_input`` (its backend's ``PaneInfo.last_input``, or what the watch
    remembers of it), so an agent is never put to sleep (its half-typed line wiped by the
    ladder's Ctrl-U) while someone is typing to it. What ``sleep --idle-for`` and
    ``watch.sleep_after`` measure."""
    if idle_since is None:
        return None
    return max(idle_since, last_input) if last_input is not None else idle_since


def split_tree(agent: Agent | None, tree: list[procs.Proc],
               cache: dict[tuple[int, float, str], bool] | None = None) -> tuple[list[procs.Proc], list[procs.Proc]]:
    """``(resident, tools)`` of a pane's process tree (root first; the root is the agent itself and is
    in neither): residents match the agent's ``resident_children``; everything else under the agent —
    a tool under a resident child included — is a tool. ``cache`` keeps each process's answer
    between looks (by pid, create time and name: an exec is asked again)."""
    names = tuple(agent.resident_children) if agent is not None else ()
    if not names:
        return [], list(tree[1:])
    resident, tools = [], []
    for p in tree[1:]:
        key = (p.pid, p.create_time, p.name)
        hit = cache.get(key) if cache is not None else None
        if hit is None:
            hit = p.matches_name(names)
            if cache is not None:
                cache[key] = hit
        (resident if hit else tools).append(p)
    return resident, tools


def watcher_alive(watcher: str | None, table: procs.ProcessTable) -> bool:
    """True when ``watcher`` (a pane's ``watcher``: "<pid> <create time>") names a running process."""
    try:
        pid, ct = (watcher or "").split()
        p = table.get(int(pid))
        return p is not None and abs(p.create_time - float(ct)) <= 0.01
    except ValueError:
        return False


def ask_plugin(host, agent: Agent, live, screen: str | None, table: procs.ProcessTable) -> Activity | None:
    """The plugin's answer, checked: an :class:`Activity` (one of :data:`STATES`, with the plugin's
    reason) or None. A hook that fails or answers
    something else is a warning (``host.warn``) and no opinion."""
    if type(agent).activity is Agent.activity:
        return None
    try:
        answer = agent.activity(host.context(live.rec, [p.pid for p in live.tree], table=table), screen)
    except Exception as e:
        host.warn(agent.name, "activity", e, live.rec, live)
        return None
    if answer is not None and (not isinstance(answer, str) or answer not in STATES):
        host.warn(agent.name, "activity", ValueError(f"returned {answer!r}, not one of {', '.join(STATES)} or None"),
                  live.rec, live)
        return None
    return answer if answer is None or isinstance(answer, Activity) else Activity(answer)


def needs_screen(agent: Agent | None) -> bool:
    return agent is not None and type(agent).activity is not Agent.activity and agent.activity_reads_screen


def _cpu(keys: Iterable[tuple[int, float]]) -> dict[tuple[int, float], float]:
    out = {}
    for pid, ct in keys:
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - ct) > 0.01:
                continue
            t = p.cpu_times()
            out[(pid, ct)] = t.user + t.system
        except (psutil.Error, OSError):
            continue
    return out


class ActivityOps:
    """What each running record is doing, by one look, given the host's :class:`muxhost.core.Core`
    (the watch is :mod:`muxhost.watching`)."""

    def __init__(self, core):
        self.core = core

    def activities(self, lives: list, view) -> None:
        """Set ``activity`` and ``activity_since`` of every running record of ``lives``.

        When a watch runs on the record's server (its ``@muxhost_watch`` names a live process), what
        it published for the pane is the answer: it has watched output and CPU over time.

        Otherwise one look, and only what one look can know: the plugin's answer from what it reads
        itself (``screen`` None), asked again with the screen (one capture round trip for all of
        them) where it said ``working`` or nothing and reads screens — a question on the screen may
        be all there is to see; the time of the pane's last output (the backend's), and — only for
        the records whose state depends on it — the CPU their non-resident processes use over one
        short sample (:data:`SAMPLE`, shared by all). ``since`` is the last output for ``idle`` and
        ``waiting``, ``stall_after`` after it for ``stalled``, and unknown (None) for ``working``."""
        now = time.time()
        stall_after = float(self.core.config.watch("stall_after"))
        todo = []
        for lv in lives:
            if lv.state != "running" or lv.pane is None:
                continue
            if lv.pane.activity in STATES and watcher_alive(lv.pane.watcher, view.table):
                lv.activity, lv.activity_since = lv.pane.activity, lv.pane.activity_since
            else:
                todo.append(lv)
        if not todo:
            return
        answers = self._answers(todo, view.table)
        looks = []
        for lv in todo:
            agent = self.core.registry.agents.get(lv.rec.agent)
            out = lv.pane.last_output  # (to the second, maybe: the end of that second, to be sure)
            ev = Evidence(answers[id(lv)], progress=None if out is None else min(out + 1, now))
            _, tools = split_tree(agent, lv.tree)
            silent = None if ev.progress is None else now - ev.progress
            sample = ((ev.plugin == "idle" and tools)
                      or (ev.plugin == "working" and silent is not None and silent >= stall_after)
                      or (ev.plugin is None and not (silent is not None and silent < RECENT)))
            looks.append((ev, [*lv.tree[:1], *tools] if sample else [], {p.key for p in tools}))
        _sample_cpu(looks)
        for lv, (ev, _, _) in zip(todo, looks):
            lv.activity = judge(ev, now, stall_after)
            lv.activity_since = first_since(lv.activity, lv.pane.last_output, ev.progress, stall_after, now,
                                            lv.rec.launched_at)

    def _answers(self, todo: list, table: procs.ProcessTable) -> dict[int, str | None]:
        """Each record's plugin answer (by ``id`` of its Live) from one look: what the plugin reads
        itself, then — an answer of "working" (or none) from a plugin that reads screens may hide a
        question on the screen (an approval prompt writes nothing to disk) — with its screen, one
        capture round trip per server."""
        agents = self.core.registry.agents
        answers = {id(lv): ask_plugin(self.core, a, lv, None, table) if (a := agents.get(lv.rec.agent)) else None
                   for lv in todo}
        again = [lv for lv in todo if answers[id(lv)] in (None, "working") and needs_screen(agents.get(lv.rec.agent))]
        for backend in {id(b): b for b in (self.core.backend_of(lv.rec) for lv in again)}.values():
            mine = [lv for lv in again if self.core.backend_of(lv.rec) is backend]
            screens = backend.screens([lv.pane.pane_id for lv in mine])
            for lv in mine:
                if lv.pane.pane_id in screens:
                    answers[id(lv)] = ask_plugin(self.core, agents[lv.rec.agent], lv, screens[lv.pane.pane_id], table)
        return answers


def _sample_cpu(looks: list[tuple[Evidence, list[procs.Proc], set[tuple[int, float]]]]) -> None:
    """One short CPU sample (:data:`SAMPLE`) shared by every look that needs one: sets each one's
    ``busy`` (its processes used CPU) and ``tool_busy`` (those of ``tool keys`` did)."""
    keys = {p.key for _, own, _ in looks for p in own}
    if not keys:
        return
    t0, before = time.monotonic(), _cpu(keys)
    time.sleep(SAMPLE)
    after, dt = _cpu(keys), time.monotonic() - t0
    for ev, own, tool_keys in looks:
        used = {k: after[k] - before[k] for k in (p.key for p in own) if k in before and k in after}
        ev.busy = sum(used.values()) >= CPU_BUSY * dt
        ev.tool_busy = sum(v for k, v in used.items() if k in tool_keys) >= CPU_BUSY * dt
