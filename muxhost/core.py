"""What every operation of the host shares: the config, the plugins (pm, registry), the record store,
the pane backends, an agent's context from its record, and what a command noticed (warnings, notes).

Each operation (:mod:`muxhost.state`, :mod:`muxhost.ladder`, …) is an object given this and the other
operation objects it calls; :class:`muxhost.host.Host` builds them all."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable

from muxhost.agent import Agent, AgentContext
from muxhost.backends import Backend
from muxhost.config import Config
from muxhost.errors import MuxhostError, UsageError
from muxhost.store import Record, Store

if TYPE_CHECKING:
    from muxhost import procs
    from muxhost.state import Live


class Core:
    """One muxhost's config, plugins, record store and pane backends."""

    def __init__(self, config: Config | None = None, socket: str | None = None, pm=None,
                 store: Store | None = None, backend: str | None = None):
        from muxhost.plugins import Registry, get_plugin_manager  # (the plugins' loading: what every command pays)

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

    def no_server(self) -> str:
        b = self.current()
        return f"no {b.name} server running on {b.where()}"

    def client_vars(self) -> set[str]:
        """What every installed backend's multiplexer tells its processes about their client (tmux:
        TMUX, TMUX_PANE): never handed on to a process muxhost starts in a pane."""
        drop = set(self.current().client_env)
        for factory in self.registry.backends.values():
            drop |= set(getattr(factory, "client_env", ()))
        return drop

    def stop_setting(self, key: str) -> float:
        return self.config.stop(key)

    def exit_pause(self, agent: Agent | None) -> float:
        """Seconds between the exit text and Enter (:meth:`agent_stop_setting`)."""
        return self.agent_stop_setting(agent, "exit_pause")

    def exit_grace(self, agent: Agent | None) -> float:
        """Seconds the ladder waits for the agent to leave after its exit text (:meth:`agent_stop_setting`)."""
        return self.agent_stop_setting(agent, "exit_grace")

    def exit_still(self, agent: Agent | None) -> float | None:
        """Seconds of stillness after the exit text that show the agent did not take it (docs/stop.md):
        its config entry's ``exit_still`` (null: never judged so), else the plugin's own."""
        entry = self.config.agent(agent.name) if agent is not None else {}
        return entry["exit_still"] if "exit_still" in entry else getattr(agent, "exit_still", None)

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

    def context(self, rec: Record, pids: Iterable[int] = (), claimed: Iterable[str] = (),
                table: "procs.ProcessTable | None" = None) -> AgentContext:
        """What a plugin is told of a record's agent."""
        cfg = self.config.agent(rec.agent)
        return AgentContext(home=rec.home, env=dict(rec.env), cwd=rec.cwd, launched_at=rec.launched_at,
                            pids=list(pids), claimed=frozenset(claimed), config=cfg,
                            args=list(cfg.get("args") or []), conversation_id=rec.conversation_id,
                            record_id=rec.id, processes=table, stall_after=float(self.config.watch("stall_after")))

    def warn(self, agent: str, hook: str, error: BaseException, rec: Record | None = None,
             live: "Live | None" = None) -> dict[str, str]:
        """A plugin hook failed: carry on, but say so (``ls --json`` ``warnings``, a line on stderr;
        ``MUXHOST_DEBUG=1`` prints the traceback)."""
        w = {"agent": agent, "hook": hook, "error": f"{type(error).__name__}: {error}"}
        if rec is not None:
            w["record"] = rec.id
        if os.environ.get("MUXHOST_DEBUG"):
            import sys
            import traceback

            traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        if w not in self.warnings:
            self.warnings.append(w)
        if live is not None and w not in live.warnings:
            live.warnings.append(w)
        return w

    def resumable(self, agent: Agent | None, rec: Record, live: "Live | None" = None) -> bool:
        """The record's conversation is on disk (the plugin's ``exists``; a failure is a warning, and no)."""
        if agent is None or not agent.valid_id(rec.conversation_id):
            return False
        try:
            return bool(agent.exists(self.context(rec), rec.conversation_id))
        except Exception as e:  # not resumable as far as we can tell, and the user is told why
            self.warn(agent.name, "exists", e, rec, live)
            return False
