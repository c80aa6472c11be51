"""Whether an agent is leaving after its exit text or shows that it did not take it (stop ladder, step 2).

An agent that takes its exit text works as it leaves: measured here on the real claude, codex and
opencode (docs/stop.md), every one of them used CPU through its whole exit, under load too (opencode
for up to 4 s, its screen blank). An agent that did not take it goes back to waiting: its screen
changed (it read the keys, drew its prompt again), then nothing moves. The host judges that
(:class:`ExitWatch`); a plugin only says how long the stillness must last (``Agent.exit_still``)."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

import psutil

#: seconds between two looks at the screens and processes of the agents still waited for
LOOK_EVERY = 0.1
# states of a process that waits of its own accord: "running" (or runnable, waiting for a CPU on a
# busy machine) and "disk-sleep" (waiting for the disk) are an agent at work
_WAITING = frozenset({psutil.STATUS_SLEEPING, psutil.STATUS_IDLE})


def _sample(keys: Iterable[tuple[int, float]], root: tuple[int, float] | None) -> tuple | None:
    """What moves in a set of processes: which of them live, each one's CPU time, and the agent
    process's own wake-ups (voluntary context switches); None when one of them runs or waits for
    the disk, or cannot be read."""
    out = []
    for key in sorted(keys):
        try:
            p = psutil.Process(key[0])
            with p.oneshot():
                status = p.status()
                if abs(p.create_time() - key[1]) > 0.01 or status == psutil.STATUS_ZOMBIE:
                    continue  # (gone: what lives is in the sample)
                if status not in _WAITING:
                    return None
                t = p.cpu_times()
                woke = p.num_ctx_switches().voluntary if key == root else 0
        except psutil.NoSuchProcess:
            continue
        except psutil.Error:
            return None
        out.append((key, t.user + t.system, woke))
    return tuple(out)


class ExitWatch:
    """The exit text's fate for targets of the ladder (anything with ``backend``, ``pane_id``,
    ``victims`` and ``agent_proc``). ``still_of(target)``: its agent's ``exit_still`` seconds, or
    None (never judged: it gets its whole exit grace).

    :meth:`before_enter` reads each screen just before Enter; :meth:`look` (every
    :data:`LOOK_EVERY` s at most) then reads them again with the processes. A target is
    :meth:`refused` once its screen changed after Enter (the agent read the keys) and then, for
    ``exit_still`` seconds, nothing moved: the same screen, the same processes, none of them
    running or waiting for the disk, none using CPU, the agent process not woken once."""

    def __init__(self, targets: list[Any], still_of: Callable[[Any], float | None]):
        self.still = {id(t): s for t in targets if t.pane_id is not None and (s := still_of(t)) is not None}
        self.before: dict[int, str] = {}
        self.last: dict[int, tuple] = {}
        self.since: dict[int, float] = {}
        self.looked_at: dict[int, float] = {}  # the last look at each
        self.moved: set[int] = set()
        self.looked = 0.0

    def _screens(self, targets: list[Any]) -> dict[int, str]:
        """Each watched target's screen, one round trip per server; a pane gone is left out."""
        out: dict[int, str] = {}
        by_backend: dict[int, list[Any]] = {}
        for t in targets:
            if id(t) in self.still:
                by_backend.setdefault(id(t.backend), []).append(t)
        for group in by_backend.values():
            try:
                screens = group[0].backend.screens([t.pane_id for t in group])
            except Exception:  # (the server went: nothing to judge by)
                continue
            out.update({id(t): screens[t.pane_id] for t in group if t.pane_id in screens})
        return out

    def before_enter(self, targets: list[Any]) -> None:
        self.before.update(self._screens(targets))

    def look(self, targets: list[Any]) -> None:
        now = time.monotonic()
        if now - self.looked < LOOK_EVERY:
            return
        self.looked = now
        screens = self._screens([t for t in targets if id(t) in self.before])
        for t in targets:
            i = id(t)
            if i not in screens:
                continue
            root = t.agent_proc.key if t.agent_proc is not None else None
            seen = (screens[i], _sample(t.victims, root))
            if screens[i] != self.before[i]:
                self.moved.add(i)
            if seen[1] is None or seen != self.last.get(i):
                self.since.pop(i, None)  # it moved: a new stretch starts with the next look
            else:
                self.since.setdefault(i, self.looked_at.get(i, now))
            self.last[i] = seen
            self.looked_at[i] = now

    def refused(self, t: Any) -> bool:
        i = id(t)
        return i in self.moved and i in self.since and time.monotonic() - self.since[i] >= self.still[i]
