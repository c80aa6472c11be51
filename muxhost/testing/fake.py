"""The fake pane backend (panes as plain child processes with pipes) and an in-process Host on it:
the host's rules tried without a pane server or the CLI's start-up."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import types
from pathlib import Path
from typing import Any, Iterable

from muxhost.backends import Backend, PaneInfo


class FakeBackend(Backend):
    """Panes as plain child processes with pipes: what the host needs of a backend, nothing more.
    ``calls`` logs what the host asked (``("type", pane, text)``, ``("keys", pane, *keys)``, …)."""

    name = "fake"

    def __init__(self, address=None, config=None):
        self.procs: dict[str, subprocess.Popen] = {}
        self.meta: dict[str, dict] = {}
        self.calls: list[tuple] = []
        self._pending: dict[str, str] = {}
        self.printed: dict[str, list[str]] = {}  # pane -> the lines its program printed

    def snapshot(self):
        self.calls.append(("snapshot",))
        return [PaneInfo(pane_id=pid, pid=p.pid, dead=p.poll() is not None, dead_status=p.poll(),
                         session_id="$" + pid, session_name=self.meta[pid]["name"], record=self.meta[pid]["record"],
                         agent=self.meta[pid]["agent"]) for pid, p in self.procs.items()]

    def create(self, argv, *, cwd, env, name, target=None, split=None, options={}):
        pane = f"f{len(self.procs) + 1}"
        p = self.procs[pane] = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=subprocess.PIPE,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                                errors="replace", start_new_session=True)
        self.meta[pane] = {"name": name, "record": options.get("@muxhost_record"), "agent": options.get("@muxhost_agent")}
        self.printed[pane] = screen = []
        threading.Thread(target=lambda: screen.extend(p.stdout), daemon=True).start()  # what it prints
        return self.snapshot()[-1], True

    def respawn(self, pane_id, argv, *, cwd, env):
        raise NotImplementedError

    def type_text(self, pane_id, text):
        self.calls.append(("type", pane_id, text))
        self._pending[pane_id] = self._pending.get(pane_id, "") + text

    def send_keys(self, pane_id, *keys):
        self.calls.append(("keys", pane_id, *keys))
        for key in keys:
            if key == "enter":
                p = self.procs[pane_id]
                try:
                    p.stdin.write(self._pending.pop(pane_id, "") + "\n")
                    p.stdin.flush()
                except OSError:
                    pass
            elif key == "ctrl+u":
                self._pending.pop(pane_id, None)

    def capture(self, pane_id):
        """The last 50 lines the pane's program printed (its screen, roughly)."""
        return "".join(self.printed.get(pane_id, [])[-50:])

    def kill_pane(self, pane_id):
        self.calls.append(("kill_pane", pane_id))
        p = self.procs[pane_id]
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGHUP)

    def kill_session(self, session_id):
        self.calls.append(("kill_session", session_id))
        self.kill_pane(session_id[1:])

    def close(self) -> None:
        """End every pane's process group (SIGKILL) and reap it: the teardown of :func:`fake_host`."""
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait()
            if p.stdin:
                try:
                    p.stdin.close()
                except OSError:
                    pass


def fake_host(state: Path, agents: Iterable[Any] = (), backend: FakeBackend | None = None, config=None):
    """A real :class:`~muxhost.host.Host` (its store at ``state/state.db``) on ``backend`` (a new
    :class:`FakeBackend` by default, also at ``host.fake``), with the built-in plugins and the
    ``agents`` given (Agent instances); no installed plugin package is loaded."""
    import muxhost
    from muxhost.host import Host
    from muxhost.plugins import get_plugin_manager
    from muxhost.store import Store

    fake = backend or FakeBackend()
    Path(state).mkdir(mode=0o700, parents=True, exist_ok=True)
    agents = list(agents)
    plugin = types.SimpleNamespace()
    plugin.muxhost_register_backends = muxhost.hookimpl(lambda register: register("fake", lambda a=None, c=None: fake))

    def register_agents(register):
        for agent in agents:
            register(agent)

    plugin.muxhost_register_agents = muxhost.hookimpl(register_agents)
    pm = get_plugin_manager(config, load_entrypoints=False)
    pm.register(plugin, name="muxhost.testing.fake")
    host = Host(config=config, pm=pm, store=Store(Path(state) / "state.db"), backend="fake")
    host.fake = fake
    return host
