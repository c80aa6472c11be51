"""The host: launch / stop / resume / purge / reconcile, written once for every agent.

Nothing here names an agent: agents come from plugins (:mod:`muxhost.plugins`), panes from a backend
(:mod:`muxhost.backends`), processes from :mod:`muxhost.procs`, records from :mod:`muxhost.store`.
:class:`Host` is the facade; each operation lives in its own module: :mod:`muxhost.state` (views,
live state, refresh, REF, reconcile), :mod:`muxhost.launching` (launch, resume), :mod:`muxhost.ladder`
(the stop ladder), :mod:`muxhost.purging` (purge, with :mod:`muxhost.plans`), :mod:`muxhost.activity`
(what each agent is doing) and :mod:`muxhost.watching` (the watch).
"""

from __future__ import annotations

import os

from muxhost.activity import ActivityOps
from muxhost.agent import Agent
from muxhost.backends import Backend
from muxhost.config import Config
from muxhost.errors import MuxhostError, UsageError
from muxhost.fleet import FleetOps
from muxhost.ladder import LadderOps, _Target
from muxhost.launching import ENV_RE, NAME_RE, LaunchOps
from muxhost.purging import PurgeOps
from muxhost.state import STARTING_GRACE, Live, Located, StateOps, View
from muxhost.store import Record, Store
from muxhost.watching import WatchOps
from muxhost.worktrees import WorktreeOps

__all__ = ["Host", "Live", "Located", "View", "NAME_RE", "ENV_RE", "STARTING_GRACE", "_Target"]


class Host(StateOps, LaunchOps, LadderOps, PurgeOps, ActivityOps, WatchOps, FleetOps, WorktreeOps):
    """One muxhost: its config, plugins, record store and pane backends, and every operation."""

    def __init__(self, config: Config | None = None, socket: str | None = None, pm=None,
                 store: Store | None = None, backend: str | None = None):
        from muxhost.plugins import Registry, get_plugin_manager

        self.config = config or Config()
        self.pm = pm or get_plugin_manager(self.config)
        self.registry = Registry(self.pm)
        for name, entry in self.config.agents.items():
            if not entry.get("command") and name not in self.registry.agents:
                raise self.config.error(f"agents.{name}", f"no plugin provides agent {name!r} and the entry has no `command`")
        self._store = store
        self._backends: dict[tuple[str, str | None], Backend] = {}
        # the pane server new agents go to: --backend, $MUXHOST_BACKEND, config `backend:`, else tmux;
        # its address as given (--socket), else as the backend itself resolves it (its env, its config)
        self.backend_name = backend or os.environ.get("MUXHOST_BACKEND") or self.config.data.get("backend") or "tmux"
        factory = self.registry.backends.get(self.backend_name)
        if factory is None:
            known = ", ".join(sorted(self.registry.backends))
            raise UsageError(f"no backend {self.backend_name!r} is installed (known: {known})")
        resolve = getattr(factory, "resolve_address", None)
        self.socket = resolve(socket, self.config) if resolve else socket  # the address (a tmux socket name, …)
        self.warnings: list[dict[str, str]] = []  # plugin hooks that failed (see warn)
        self.notes: list[str] = []  # what a command noticed beside its answer (a `muxhost: note:` line each)

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store()
        return self._store

    def backend(self, socket: str | None = None, name: str | None = None) -> Backend:
        """The backend ``name`` (default: the chosen one) for the server at ``socket`` (its address;
        None = that backend's default server), made once per command."""
        key = (name or self.backend_name, socket)
        if key not in self._backends:
            factory = self.registry.backends.get(key[0])
            if factory is None:
                raise MuxhostError(f"no backend {key[0]!r} is installed (known: {', '.join(sorted(self.registry.backends))})")
            self._backends[key] = factory(socket, self.config)
        return self._backends[key]

    @property
    def server(self) -> tuple[str, str | None]:
        """The chosen server: (backend name, address)."""
        return (self.backend_name, self.socket)

    def current(self) -> Backend:
        """The chosen server's backend: where new agents go, where pane references point."""
        return self.backend(self.socket, self.backend_name)

    def backend_of(self, rec: Record) -> Backend:
        """The backend of the server a record's agent runs on (the one it was launched on)."""
        return self.backend(rec.socket, rec.backend or "tmux")

    def stop_setting(self, key: str) -> float:
        return self.config.stop(key)

    def exit_pause(self, agent: Agent | None) -> float:
        """Seconds between the exit text and Enter (:meth:`agent_stop_setting`)."""
        return self.agent_stop_setting(agent, "exit_pause")

    def exit_grace(self, agent: Agent | None) -> float:
        """Seconds the ladder waits for the agent to leave after its exit text (:meth:`agent_stop_setting`)."""
        return self.agent_stop_setting(agent, "exit_grace")

    def agent_stop_setting(self, agent: Agent | None, key: str) -> float:
        """A ``stop:`` setting for one agent: its config entry (``agents.NAME.KEY``), then
        ``stop.KEY``, then the plugin's own default (the agent's attribute), then muxhost's."""
        entry = self.config.agent(agent.name) if agent is not None else {}
        if entry.get(key) is not None:
            return float(entry[key])
        if (self.config.data.get("stop") or {}).get(key) is not None:
            return self.stop_setting(key)
        default = getattr(agent, key, None)
        return float(default) if default is not None else self.stop_setting(key)
