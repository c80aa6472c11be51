"""Explain: why muxhost thinks what it thinks of one record — ``muxhost explain``. The evidence of a
fresh look (the plugin's answer and what it read, the pane's last output and screen, the CPU of
each process of the pane's tree and whether it counted), the branch of the rule that decided
(:func:`muxhost.activity.decide`, the one rule of ``ls``, ``show``, ``wait`` and the watch), the
idle clock and what set it, and, while a watch runs on the record's server, what it published.
A record not running: its state and why. Part of :class:`muxhost.host.Host`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from muxhost.activity import STATES, Look, clock, decide, needs_screen, untouched_since, watcher_alive
from muxhost.agent import Agent
from muxhost.state import left_alone
from muxhost.store import Record

if TYPE_CHECKING:
    from muxhost.activity import ActivityOps
    from muxhost.core import Core
    from muxhost.state import Live, State, View

#: the CPU sample of an explain (seconds): longer than ``ls``'s, for a CPU share per process worth reading
EXPLAIN_SAMPLE = 0.5
#: the last lines of the screen an explain shows of an agent whose plugin reads screens
SCREEN_LINES = 3


class Explaining:
    """``explain``: one record, with what its judgement read and which rule decided."""

    def __init__(self, core: "Core", state: "State", activity: "ActivityOps"):
        self.core, self.state, self.activity = core, state, activity

    def explain(self, rec: Record) -> dict[str, Any]:
        """The explanation of ``rec`` as a document (``explain --json``; the CLI prints it as lines)."""
        view = self.state.view([rec])
        live = self.state.live(rec, view, check_resumable=False)
        self.state.refresh([live], view)  # (as `ls` does: the plugin reads the conversation it is in now)
        rec = live.rec
        doc: dict[str, Any] = {"id": rec.id, "name": rec.name, "agent": rec.agent, "state": live.state,
                               "conversation_id": rec.conversation_id, "pane": live.pane.pane_id if live.pane else None,
                               "launched_at": rec.launched_at, "sent_at": rec.sent_at}
        if live.state != "running" or live.pane is None:
            doc["why"] = why_not_running(live, view)
            return doc
        now = time.time()
        stall_after = float(self.core.config.watch("stall_after"))
        look = self.activity.look([live], view.table, now, stall_after, sample=EXPLAIN_SAMPLE)[0]
        verdict = decide(look.evidence, now, stall_after)
        since, set_by = clock(verdict.state, live.pane.last_output, look.evidence.progress, stall_after, now,
                              rec.launched_at)
        fresh = {"activity": verdict.state, "since": since, "rule": verdict.rule,
                 "plugin": plugin_part(look), "output": self._output(look, now), "processes": processes(look),
                 "cpu_sample": EXPLAIN_SAMPLE if look.sampled else None}
        watched = live.pane.activity in STATES and watcher_alive(live.pane.watcher, view.table)
        if watched:
            pid = int(live.pane.watcher.split()[0])
            doc.update(activity=live.pane.activity, activity_since=live.pane.activity_since,
                       judged_by={"watch": pid}, look=fresh)
            set_by = f"the watch (pid {pid}): when its pass saw the change (or a turn restarted the clock)"
            since = live.pane.activity_since
        else:
            doc.update(activity=verdict.state, activity_since=since, judged_by={"watch": None}, look=fresh)
        doc["last_input"] = live.pane.last_input
        doc["warnings"] = list(live.warnings)  # (a hook that failed: its answer is no opinion)
        doc["clock"] = {"since": since, "set_by": set_by,
                        "untouched_since": untouched_since(since, live.pane.last_input)
                        if doc["activity"] == "idle" else None}
        return doc

    def _output(self, look: Look, now: float) -> dict[str, Any]:
        """The pane's last output, and the last lines of its screen where the plugin reads screens."""
        pane, out = look.live.pane, look.live.pane.last_output
        screen = look.screen
        if screen is None and needs_screen(look.agent):
            screen = self.core.backend_of(look.live.rec).screens([pane.pane_id]).get(pane.pane_id)
        lines = [ln.rstrip() for ln in (screen or "").splitlines() if ln.strip()][-SCREEN_LINES:]
        return {"last_output": out, "ago": None if out is None else max(now - out, 0.0),
                "reads_screen": needs_screen(look.agent), "asked_with_screen": look.screen is not None,
                "last_lines": lines if needs_screen(look.agent) else None}


def plugin_part(look: Look) -> dict[str, Any]:
    """The plugin's answer and what it read (its :class:`muxhost.api.Activity` reason)."""
    agent = look.agent
    answer = look.evidence.plugin
    hook = agent is not None and type(agent).activity is not Agent.activity
    return {"hook": hook, "answer": None if answer is None else str.__str__(answer),
            "reason": (getattr(answer, "reason", "") or None) if answer is not None else None}


def processes(look: Look) -> list[dict[str, Any]]:
    """The pane's process tree, root first: the agent, its resident children, its tools, each with
    its share of a core over the sample (None: not sampled, or gone before the sample ended)."""
    resident = {p.key for p in look.resident}
    out = []
    for i, p in enumerate(look.live.tree):
        role = "agent" if i == 0 else "resident" if p.key in resident else "tool"
        share = look.cpu.get(p.key)
        out.append({"pid": p.pid, "ppid": p.ppid, "name": p.name, "cmdline": list(p.cmdline), "role": role,
                    "cpu_percent": None if share is None else round(share * 100, 1)})
    return out


def why_not_running(live: "Live", view: "View") -> str:
    """Why a record runs no agent, for the user: stopped, exited (with its status), asleep, lost…"""
    rec = live.rec
    when = lambda t: time.strftime("%H:%M:%S", time.localtime(t)) if t else "?"  # noqa: E731
    if live.state == "stopped":
        how = f" (outcome {rec.outcome}, after {rec.seconds:.1f} s)" if rec.outcome and rec.seconds is not None else ""
        return f"stopped by `muxhost stop` at {when(rec.stopped_at)}{how}"
    if live.state == "asleep":
        return (f"asleep since {when(rec.slept_at)}: its pane shows the stub; Enter there or "
                f"`muxhost wake {rec.name}` resumes it")
    if live.state == "exited":
        found = view.foreign(rec)
        if found is not None:
            return f"exited: {left_alone(found)}"
        if live.pane is not None and live.pane.dead:
            return f"exited with status {live.pane.dead_status}: its pane {live.pane.pane_id} is kept, dead"
        return "exited: its pane runs no process of it any more"
    if live.state == "stopping":
        return f"a stop was cut short and something of it still runs: `muxhost stop {rec.id}` finishes it"
    if live.state == "starting":
        return f"launched at {when(rec.launched_at)}, its pane is not there yet"
    return "lost: its pane (or its pane server) is gone; `muxhost restore` resumes it"
