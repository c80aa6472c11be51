"""The plugin manager: built-ins first, then entry points of group ``muxhost``.

``MUXHOST_LOAD_PLUGINS`` limits which entry points load: unset = all installed, empty = built-ins
only, ``a,b`` = only the entry points (or distributions) named ``a`` and ``b``.

Listing entry points with ``importlib.metadata`` imports it and reads every installed distribution:
a large share of each command's start-up. So the list is kept in ``$XDG_CACHE_HOME/muxhost/plugins.json``
(``~/.cache/muxhost/plugins.json``) with a fingerprint of everything that scan reads (see
:func:`installed_entrypoints`), and listed again only when that fingerprint changes. Plugin modules
are still all imported and registered on each run: what a plugin registers (its hooks, its agents)
is known only by running it.

(CONTRACT §1 draws ``muxhost/plugins.py`` beside a ``muxhost/plugins/`` folder of built-ins; Python
cannot have both, so ``get_plugin_manager`` lives here and ``from muxhost.plugins import
get_plugin_manager`` works as drawn.)
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import pluggy

from muxhost import hookspecs
from muxhost.errors import MuxhostError, UsageError

if TYPE_CHECKING:
    from muxhost.agent import Agent
    from muxhost.config import Config

GROUP = "muxhost"
# built-in plugins that add commands (the CLI calls their hook directly to build `--help`)
COMMAND_PLUGINS = ("muxhost.plugins.purge_key",)
DEFAULT_PLUGINS = ("muxhost.plugins.tmux", "muxhost.plugins.demo", *COMMAND_PLUGINS)
CONFIG_PLUGIN = "muxhost.plugins.config_agents"
CACHE_FORMAT = 1
# importlib.metadata.EntryPoint.pattern: ``module``, ``module:attr.attr``, optional ``[extras]``
_EP_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")
_DIST_SUFFIXES = (".dist-info", ".egg-info", ".egg")
# a fingerprint with metadata changed this recently is not cached (the next run scans again): a file
# rewritten again within one file-system timestamp tick would keep its mtime
_RACY_SECONDS = 2.0


@dataclass
class Source:
    plugin: str
    package: str
    version: str


@dataclass(frozen=True)
class EntryPoint:
    """One installed entry point of group ``muxhost``, as ``importlib.metadata`` lists it."""

    name: str
    value: str    # "module" or "module:attr"
    package: str  # the distribution's name, as its metadata spells it
    version: str

    def load(self) -> Any:
        """The object ``value`` names, imported the way ``importlib.metadata.EntryPoint.load`` does."""
        m = _EP_VALUE.match(self.value)
        if m is None:
            raise ValueError(f"malformed entry point value {self.value!r}")
        obj: Any = importlib.import_module(m.group("module"))
        for attr in filter(None, (m.group("attr") or "").split(".")):
            obj = getattr(obj, attr)
        return obj


class PluginManager(pluggy.PluginManager):
    """pluggy's manager for project ``muxhost``; :attr:`sources` has the package and version of each
    entry-point plugin it loaded, by plugin name (``muxhost plugins --json`` shows them)."""

    def __init__(self) -> None:
        super().__init__("muxhost")
        self.sources: dict[str, Source] = {}


def get_plugin_manager(config: "Config | None" = None, load_entrypoints: bool = True) -> PluginManager:
    """A new plugin manager with every hook spec, the built-in plugins, the config-defined agents
    and (unless ``load_entrypoints`` is false) the installed plugin packages."""
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    from muxhost.plugins.config_agents import ConfigAgents

    pm.register(ConfigAgents(config), name=CONFIG_PLUGIN)
    if load_entrypoints:
        _load_entrypoints(pm)
    if os.environ.get("MUXHOST_TRACE_HOOKS"):
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        raise MuxhostError(f"plugin {e.plugin!r} has a hook muxhost does not know: {e}")
    return pm


def _load_entrypoints(pm: PluginManager) -> None:
    """Register the installed entry points that ``MUXHOST_LOAD_PLUGINS`` selects. (Not pluggy's
    ``load_setuptools_entrypoints``: it scans every distribution on each call, selects by entry point
    name only, and its errors do not say which plugin failed.)"""
    wanted = os.environ.get("MUXHOST_LOAD_PLUGINS")
    names = None if wanted is None else {n.strip() for n in wanted.split(",") if n.strip()}
    if names is not None and not names:
        return
    found = set()
    for ep in installed_entrypoints():
        if names is not None and ep.name not in names and ep.package not in names:
            continue
        found |= {ep.name, ep.package}
        if pm.has_plugin(ep.name) or pm.is_blocked(ep.name):
            continue
        try:
            plugin = ep.load()
        except Exception as e:  # a broken plugin package is the user's to know about, in one line
            raise MuxhostError(f"plugin {ep.name!r} (package {ep.package or '?'}) failed to load: "
                               f"{type(e).__name__}: {_first_line(e)}")
        try:
            pm.register(plugin, name=ep.name)
        except ValueError as e:  # pluggy adds every registered plugin on further lines
            raise MuxhostError(f"plugin {ep.name!r} (package {ep.package or '?'}) cannot be registered: {_first_line(e)}")
        pm.sources[ep.name] = Source(ep.name, ep.package, ep.version)
    if names is not None and names - found:
        missing = ", ".join(sorted(names - found))
        raise UsageError(f"MUXHOST_LOAD_PLUGINS names {missing}, but no installed plugin has that name")


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [""])[0]


# -- the entry point cache ------------------------------------------------------------------------
def installed_entrypoints() -> list[EntryPoint]:
    """Every installed entry point of group ``muxhost``, in ``importlib.metadata.entry_points`` order.

    From the cache file when its fingerprint is the one of now, else from ``importlib.metadata``
    (then the cache is written). The fingerprint is what that scan reads: each ``sys.path`` entry,
    the names of its ``*.dist-info`` / ``*.egg-info`` / ``*.egg`` children in listing order, and the
    stat (mtime, size, inode) of each one, of its ``entry_points.txt`` and of its ``METADATA`` /
    ``PKG-INFO``. A package installed, removed, upgraded or rewritten, or another ``sys.path``
    (``PYTHONPATH``, another venv), is another fingerprint: the cache never answers for it. The
    fingerprint is taken before the scan, so a change during the scan makes the next run scan again.
    """
    fp = _fingerprint()
    path = _cache_path()
    if fp is not None and path:
        cached = _read_cache(path, fp[0])
        if cached is not None:
            return cached
    from importlib.metadata import entry_points

    eps = [EntryPoint(ep.name, ep.value, ep.dist.name if ep.dist else "", ep.dist.version if ep.dist else "")
           for ep in entry_points(group=GROUP)]
    if fp is not None and path and fp[1] < (time.time() - _RACY_SECONDS) * 1e9:
        _write_cache(path, fp[0], eps)
    return eps


def _cache_path() -> str | None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "muxhost", "plugins.json") if os.path.isabs(base) else None


def _stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def _fingerprint() -> tuple[list[Any], int] | None:
    """(fingerprint, newest mtime in it in ns), or None when a finder other than the standard path
    finder can list distributions (what it reads is unknown: no cache then)."""
    from importlib.machinery import PathFinder

    if any(f is not PathFinder and hasattr(f, "find_distributions") for f in sys.meta_path):
        return None
    fp: list[Any] = [CACHE_FORMAT, sys.version]
    newest = 0
    for entry in sys.path:
        root = entry or "."
        try:
            children = os.listdir(root)
        except OSError:  # not a folder: a zip file (or nothing); importlib.metadata reads it whole
            st = _stat(root)
            fp.append([entry, st])
            newest = max(newest, st[0] if st else 0)
            continue
        dists: list[Any] = [entry]
        for name in children:
            low = name.lower()
            if not low.endswith(_DIST_SUFFIXES):
                continue
            p = os.path.join(root, name)
            meta = os.path.join(p, "EGG-INFO") if low.endswith(".egg") else p
            stats = [_stat(p), _stat(os.path.join(meta, "entry_points.txt")),
                     _stat(os.path.join(meta, "METADATA" if low.endswith(".dist-info") else "PKG-INFO"))]
            newest = max([newest] + [s[0] for s in stats if s])
            dists.append([name, stats])
        fp.append(dists)
    return fp, newest


def _read_cache(path: str, fp: list[Any]) -> list[EntryPoint] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("fingerprint") != fp:
            return None
        return [EntryPoint(*map(str, row)) for row in data["entry_points"]]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # missing, unreadable or not ours: scan


def _write_cache(path: str, fp: list[Any], eps: list[EntryPoint]) -> None:
    data = {"fingerprint": fp, "entry_points": [[e.name, e.value, e.package, e.version] for e in eps]}
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)  # readers see the old file or the new one, never half of one
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _source(pm: pluggy.PluginManager, plugin: object) -> Source:
    name = pm.get_name(plugin) or repr(plugin)
    known = getattr(pm, "sources", {}).get(name)
    if known is not None:
        return known
    for p, dist in pm.list_plugin_distinfo():  # loaded with pluggy's own load_setuptools_entrypoints
        if p is plugin:
            return Source(name, dist.metadata["name"], dist.version)
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
