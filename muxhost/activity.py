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
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

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


class Verdict(NamedTuple):
    """The rule's answer: the state, and which branch of the rule decided, in words (``explain``)."""

    state: str
    rule: str


def decide(ev: Evidence, now: float, stall_after: float) -> Verdict:
    """The state the evidence shows, and why (the rule, for every agent):

    - the plugin says ``waiting`` (or ``stalled``): that;
    - the plugin says ``idle``: ``working`` while a non-resident child uses CPU (a tool still runs;
      a sub-agent's conversation that ended does not make its parent idle), else ``idle``;
    - the plugin says ``working``: ``stalled`` once nothing printed and no non-resident process used
      CPU for ``stall_after`` seconds, else ``working``;
    - no opinion: ``working`` while it prints or uses CPU (for :data:`RECENT` seconds after), else
      ``idle``."""
    if ev.plugin in ("waiting", "stalled"):
        return Verdict(ev.plugin, f"the plugin says {ev.plugin}")
    if ev.plugin == "idle":
        if ev.tool_busy:
            return Verdict("working", "the plugin says idle, but a non-resident child used CPU (a tool still runs)")
        return Verdict("idle", "the plugin says idle, and no non-resident child used CPU")
    silent = None if ev.progress is None else now - ev.progress
    if ev.plugin == "working":
        if not ev.busy and silent is not None and silent >= stall_after:
            return Verdict("stalled", f"the plugin says working, but nothing printed and no non-resident process "
                                      f"used CPU for {silent:.0f} s >= stall_after {stall_after:g} s")
        why = ("a non-resident process used CPU" if ev.busy else "no output seen yet" if silent is None
               else f"last output or CPU {silent:.0f} s ago < stall_after {stall_after:g} s")
        return Verdict("working", f"the plugin says working ({why})")
    if ev.busy:
        return Verdict("working", "no opinion from the plugin; a non-resident process used CPU")
    if silent is not None and silent < RECENT:
        return Verdict("working", f"no opinion from the plugin; output {silent:.1f} s ago < {RECENT:g} s")
    return Verdict("idle", "no opinion from the plugin; no CPU, and " + (
        "no output seen" if silent is None else f"no output for {silent:.0f} s >= {RECENT:g} s"))


def judge(ev: Evidence, now: float, stall_after: float) -> str:
    """The state the evidence shows: :func:`decide`'s, without the words."""
    return decide(ev, now, stall_after).state


def first_since(state: str, last_output: float | None, progress: float | None, stall_after: float,
                now: float, started: float | None = None) -> float | None:
    """Since when ``state`` holds, seen in one look: :func:`clock`'s time."""
    return clock(state, last_output, progress, stall_after, now, started)[0]


def clock(state: str, last_output: float | None, progress: float | None, stall_after: float,
          now: float, started: float | None = None) -> tuple[float | None, str]:
    """Since when ``state`` holds, seen in one look, and what set that time: ``idle`` and
    ``waiting`` since the last output (the prompt, the question), ``stalled`` since ``stall_after``
    after the last sign of life; ``working`` is not known from one look (None). Never before
    ``started`` (the record's ``launched_at``: a launch, resume, wake or restore starts the clock
    afresh; the pane's last output may be its stub's, from before the wake)."""
    if state in ("idle", "waiting") and last_output is not None:
        at, what = last_output, "the pane's last output"
    elif state == "stalled" and progress is not None:
        at, what = progress + stall_after, f"stall_after ({stall_after:g} s) after the last output or CPU"
    elif state == "working":
        return None, "one look cannot tell since when it works"
    else:
        return None, "unknown: the backend does not tell when the pane last printed"
    if started is not None and started > at:
        at, what = started, "its launch, resume, wake or restore (launched_at)"
    return min(at, now), what


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


@dataclass
class Look:
    """One look at one running record: the evidence the rule weighs, and what it was made of
    (``explain`` shows it)."""

    live: object
    agent: Agent | None
    evidence: Evidence
    resident: list[procs.Proc]                 # processes that matched the agent's resident_children
    tools: list[procs.Proc]                    # everything else under the agent
    screen: str | None = None                  # the screen the plugin was asked with (None: none)
    sampled: list[procs.Proc] = field(default_factory=list)   # the processes whose CPU was sampled
    cpu: dict[tuple[int, float], float] = field(default_factory=dict)  # each one's share of a core


class ActivityOps:
    """What each running record is doing, by one look, given the host's :class:`muxhost.core.Core`
    (the watch is :mod:`muxhost.watching`)."""

    def __init__(self, core):
        self.core = core

    def activities(self, lives: list, view) -> None:
        """Set ``activity`` and ``activity_since`` of every running record of ``lives``.

        When a watch runs on the record's server (its ``@muxhost_watch`` names a live process), what
        it published for the pane is the answer: it has watched output and CPU over time.

        Otherwise one look (:meth:`look`), and only what one look can know. ``since`` is the last
        output for ``idle`` and ``waiting``, ``stall_after`` after it for ``stalled``, and unknown
        (None) for ``working``."""
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
        for lk in self.look(todo, view.table, now, stall_after) if todo else ():
            lv = lk.live
            lv.activity = judge(lk.evidence, now, stall_after)
            lv.activity_since = first_since(lv.activity, lv.pane.last_output, lk.evidence.progress, stall_after, now,
                                            lv.rec.launched_at)

    def look(self, todo: list, table: procs.ProcessTable, now: float, stall_after: float,
             sample: float | None = None) -> list[Look]:
        """One look at each running record of ``todo``: the plugin's answer from what it reads
        itself (``screen`` None), asked again with the screen (one capture round trip for all of
        them) where it said ``working`` or nothing and reads screens — a question on the screen may
        be all there is to see; the time of the pane's last output (the backend's), and — only for
        the records whose state depends on it, or all of them when ``sample`` is given (seconds) —
        the CPU their non-resident processes use over one short sample (:data:`SAMPLE`, shared; with
        ``sample``, every process of the tree is sampled, the resident ones shown but never counted)."""
        answers, screens = self._answers(todo, table)
        looks = []
        for lv in todo:
            agent = self.core.registry.agents.get(lv.rec.agent)
            out = lv.pane.last_output  # (to the second, maybe: the end of that second, to be sure)
            ev = Evidence(answers[id(lv)], progress=None if out is None else min(out + 1, now))
            resident, tools = split_tree(agent, lv.tree)
            silent = None if ev.progress is None else now - ev.progress
            wanted = (sample is not None or (ev.plugin == "idle" and tools)
                      or (ev.plugin == "working" and silent is not None and silent >= stall_after)
                      or (ev.plugin is None and not (silent is not None and silent < RECENT)))
            sampled = list(lv.tree) if sample is not None else [*lv.tree[:1], *tools] if wanted else []
            looks.append(Look(lv, agent, ev, resident, tools, screens.get(id(lv)), sampled))
        _sample_cpu(looks, SAMPLE if sample is None else sample)
        return looks

    def _answers(self, todo: list, table: procs.ProcessTable) -> tuple[dict[int, str | None], dict[int, str]]:
        """Each record's plugin answer (by ``id`` of its Live) from one look: what the plugin reads
        itself, then — an answer of "working" (or none) from a plugin that reads screens may hide a
        question on the screen (an approval prompt writes nothing to disk) — with its screen, one
        capture round trip per server; and the screens it was asked with."""
        agents = self.core.registry.agents
        answers = {id(lv): ask_plugin(self.core, a, lv, None, table) if (a := agents.get(lv.rec.agent)) else None
                   for lv in todo}
        asked: dict[int, str] = {}
        again = [lv for lv in todo if answers[id(lv)] in (None, "working") and needs_screen(agents.get(lv.rec.agent))]
        for backend in {id(b): b for b in (self.core.backend_of(lv.rec) for lv in again)}.values():
            mine = [lv for lv in again if self.core.backend_of(lv.rec) is backend]
            screens = backend.screens([lv.pane.pane_id for lv in mine])
            for lv in mine:
                if lv.pane.pane_id in screens:
                    asked[id(lv)] = screens[lv.pane.pane_id]
                    answers[id(lv)] = ask_plugin(self.core, agents[lv.rec.agent], lv, asked[id(lv)], table)
        return answers, asked


def _sample_cpu(looks: list[Look], seconds: float) -> None:
    """One short CPU sample (``seconds``) shared by every look that needs one: sets each one's
    ``busy`` (its non-resident processes used CPU), ``tool_busy`` (its tools did) and ``cpu``."""
    keys = {p.key for lk in looks for p in lk.sampled}
    if not keys:
        return
    t0, before = time.monotonic(), _cpu(keys)
    time.sleep(seconds)
    after, dt = _cpu(keys), time.monotonic() - t0
    for lk in looks:
        used = {k: after[k] - before[k] for k in (p.key for p in lk.sampled) if k in before and k in after}
        tool_keys = {p.key for p in lk.tools}
        lk.cpu = {k: v / dt for k, v in used.items()}
        own = tool_keys | {p.key for p in lk.live.tree[:1]}  # (a resident's CPU is never work)
        lk.evidence.busy = sum(v for k, v in used.items() if k in own) >= CPU_BUSY * dt
        lk.evidence.tool_busy = sum(v for k, v in used.items() if k in tool_keys) >= CPU_BUSY * dt
