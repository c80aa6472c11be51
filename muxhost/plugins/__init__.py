"""The plugin manager: built-ins first, then entry points of group ``muxhost``.

``MUXHOST_LOAD_PLUGINS`` limits which entry points load: unset = all installed, empty = built-ins
only, ``a,b`` = only the entry points (or distributions) named ``a`` and ``b``.

(CONTRACT §1 draws ``muxhost/plugins.py`` beside a ``muxhost/plugins/`` folder of built-ins; Python
cannot have both, so ``get_plugin_manager`` lives here and ``from muxhost.plugins import
get_plugin_manager`` works as drawn.)
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import pluggy

from muxhost import hookspecs
from muxhost.errors import MuxhostError, UsageError

if TYPE_CHECKING:
    from muxhost.agent import Agent
    from muxhost.config import Config

GROUP = "muxhost"
DEFAULT_PLUGINS = ("muxhost.plugins.tmux", "muxhost.plugins.demo")
CONFIG_PLUGIN = "muxhost.plugins.config_agents"


def get_plugin_manager(config: "Config | None" = None, load_entrypoints: bool = True) -> pluggy.PluginManager:
    """A new plugin manager with every hook spec, the built-in plugins, the config-defined agents
    and (unless ``load_entrypoints`` is false) the installed plugin packages."""
    pm = pluggy.PluginManager("muxhost")
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    from muxhost.plugins.config_agents import ConfigAgents

    pm.register(ConfigAgents(config), name=CONFIG_PLUGIN)
    if load_entrypoints:
        _load_entrypoints(pm)
    if os.environ.get("MUXHOST_TRACE_HOOKS"):
        import sys

        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        raise MuxhostError(f"plugin {e.plugin!r} has a hook muxhost does not know: {e}")
    return pm


def _load_entrypoints(pm: pluggy.PluginManager) -> None:
    wanted = os.environ.get("MUXHOST_LOAD_PLUGINS")
    names = None if wanted is None else {n.strip() for n in wanted.split(",") if n.strip()}
    if names is not None and not names:
        return
    from importlib.metadata import entry_points

    found = set()
    for ep in entry_points(group=GROUP):
        dist = ep.dist.name if ep.dist else ""
        if names is not None and ep.name not in names and dist not in names:
            continue
        found |= {ep.name, dist}
        if pm.get_plugin(ep.name) is not None:
            continue
        try:
            plugin = ep.load()
        except Exception as e:  # a broken plugin package is the user's to know about, in one line
            raise MuxhostError(f"plugin {ep.name!r} (package {dist or '?'}) failed to load: {type(e).__name__}: {e}")
        try:
            pm.register(plugin, name=ep.name)
        except ValueError as e:
            raise MuxhostError(f"plugin {ep.name!r} (package {dist or '?'}) cannot be registered: {e}")
        pm._plugin_distinfo.append((plugin, pluggy._manager.DistFacade(ep.dist)))  # what load_setuptools_entrypoints records
    if names is not None and names - found:
        missing = ", ".join(sorted(names - found))
        raise UsageError(f"MUXHOST_LOAD_PLUGINS names {missing}, but no installed plugin has that name")


@dataclass
class Source:
    plugin: str
    package: str
    version: str


def _source(pm: pluggy.PluginManager, plugin: object) -> Source:
    name = pm.get_name(plugin) or repr(plugin)
    for p, dist in pm.list_plugin_distinfo():
        if p is plugin:
            return Source(name, dist.project_name, dist.version)
    from muxhost import __version__

    if name == CONFIG_PLUGIN:
        return Source(name, "config.yaml", "")
    return Source(name, "muxhost", __version__)


class Registry:
    """The agents and backends the plugins registered, each with where it came from."""

    def __init__(self, pm: pluggy.PluginManager):
        self.pm = pm
        self.agents: dict[str, "Agent"] = {}
        self.agent_sources: dict[str, Source] = {}
        self.backends: dict[str, Callable[..., Any]] = {}
        self.backend_sources: dict[str, Source] = {}
        for impl in pm.hook.muxhost_register_agents.get_hookimpls():
            impl.function(register=self._agent_register(_source(pm, impl.plugin)))
        for impl in pm.hook.muxhost_register_backends.get_hookimpls():
            impl.function(register=self._backend_register(_source(pm, impl.plugin)))

    def _agent_register(self, source: Source):
        from muxhost.agent import Agent

        def register(agent: "Agent") -> None:
            if not isinstance(agent, Agent) or not getattr(agent, "name", ""):
                raise MuxhostError(f"package {source.package} registered {agent!r}, which is not a named muxhost.Agent")
            if agent.name in self.agents:
                other = self.agent_sources[agent.name]
                raise MuxhostError(
                    f"agent {agent.name!r} is registered twice: by package {other.package} "
                    f"(plugin {other.plugin}) and by package {source.package} (plugin {source.plugin})")
            self.agents[agent.name] = agent
            self.agent_sources[agent.name] = source

        return register

    def _backend_register(self, source: Source):
        def register(name: str, factory: Callable[..., Any]) -> None:
            if name in self.backends:
                other = self.backend_sources[name]
                raise MuxhostError(f"backend {name!r} is registered twice: by package {other.package} and by package {source.package}")
            self.backends[name] = factory
            self.backend_sources[name] = source

        return register

    def agent(self, name: str) -> "Agent":
        try:
            return self.agents[name]
        except KeyError:
            known = ", ".join(sorted(self.agents)) or "none"
            raise UsageError(f"unknown agent {name!r} (known: {known})") from None

    def describe(self) -> dict[str, Any]:
        """What ``muxhost plugins --json`` prints: each agent and backend with the package, version
        and hooks of the plugin that registered it, and every plugin."""
        plugins = []
        hooks_of: dict[str, list[str]] = {}
        for plugin in self.pm.get_plugins():
            src = _source(self.pm, plugin)
            hooks = sorted(h.name for h in self.pm.get_hookcallers(plugin) or [])
            hooks_of[src.plugin] = hooks
            plugins.append({"name": src.plugin, "package": src.package, "version": src.version, "hooks": hooks})
        agents = [{"name": n, "package": s.package, "version": s.version, "plugin": s.plugin,
                   "hooks": hooks_of.get(s.plugin, []), "process_names": list(self.agents[n].process_names)}
                  for n, s in sorted(self.agent_sources.items())]
        backends = [{"name": n, "package": s.package, "version": s.version, "plugin": s.plugin,
                     "hooks": hooks_of.get(s.plugin, [])}
                    for n, s in sorted(self.backend_sources.items())]
        return {"agents": agents, "backends": backends, "plugins": sorted(plugins, key=lambda p: p["name"])}
