"""The plugin manager: built-ins first, then entry points of group ``muxhost``, on pluggy's public API.

``MUXHOST_LOAD_PLUGINS`` limits which entry points load: unset = all installed, empty = built-ins
only, ``a,b`` = only the entry points (or distributions) named ``a`` and ``b``.

Listing entry points with ``importlib.metadata`` imports it and reads every installed distribution,
so the list is kept in ``$XDG_CACHE_HOME/muxhost/plugins.json`` with a fingerprint of everything
that scan reads (:meth:`_Cache.load`). The same file says, for each entry-point plugin, what
importing it showed (its hooks, agents and backends, with the stat of its package's module files).
A plugin whose hooks are only ``muxhost_register_agents`` / ``muxhost_register_backends`` and whose
entry still holds is *pending*: named by the :class:`Registry`, imported when one of its agents or
backends is looked up or all are listed. Every other plugin is imported and registered up front, in
entry point order, so pluggy calls each hook's plugins as it would with all of them loaded.

(CONTRACT §1 draws ``muxhost/plugins.py`` beside a ``muxhost/plugins/`` folder of built-ins; Python
cannot have both, so ``get_plugin_manager`` lives here.)
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, TypeVar

import pluggy

from muxhost import hookspecs
from muxhost.errors import MuxhostError, UsageError

if TYPE_CHECKING:
    from muxhost.agent import Agent
    from muxhost.config import Config

GROUP = "muxhost"
COMMAND_PLUGINS = ("muxhost.plugins.purge_key",)  # built-ins that add commands (the CLI's --help calls them)
DEFAULT_PLUGINS = ("muxhost.plugins.tmux", "muxhost.plugins.demo", *COMMAND_PLUGINS)
CONFIG_PLUGIN = "muxhost.plugins.config_agents"
CACHE_FORMAT = 3
REGISTER_HOOKS = ("muxhost_register_agents", "muxhost_register_backends")  # the Registry calls these itself
# importlib.metadata.EntryPoint.pattern: ``module``, ``module:attr.attr``, optional ``[extras]``
_EP_VALUE = r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"
_DIST_SUFFIXES = (".dist-info", ".egg-info", ".egg")
_RACY_SECONDS = 2.0  # metadata or code changed this recently is not cached (one timestamp tick)


class Source:
    """Where a plugin came from: its name, package and version (``muxhost plugins``)."""

    __slots__ = ("plugin", "package", "version")

    def __init__(self, plugin: str, package: str, version: str):
        self.plugin, self.package, self.version = plugin, package, version

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Source) and (self.plugin, self.package, self.version) == (
            other.plugin, other.package, other.version)

    def __repr__(self) -> str:
        return f"Source({self.plugin!r}, {self.package!r}, {self.version!r})"


class EntryPoint:
    """One installed entry point of group ``muxhost``, as ``importlib.metadata`` lists it: ``value``
    is "module" or "module:attr", ``package`` the distribution's name as its metadata spells it.
    (Plain classes here: a dataclass costs every command's start-up its code generation.)"""

    __slots__ = ("name", "value", "package", "version")

    def __init__(self, name: str, value: str, package: str, version: str):
        self.name, self.value, self.package, self.version = name, value, package, version

    def load(self) -> Any:
        """The object ``value`` names, imported as ``importlib.metadata.EntryPoint.load`` does."""
        m = re.match(_EP_VALUE, self.value)
        if m is None:
            raise ValueError(f"malformed entry point value {self.value!r}")
        obj: Any = importlib.import_module(m.group("module"))
        for attr in filter(None, (m.group("attr") or "").split(".")):
            obj = getattr(obj, attr)
        return obj


class PluginManager(pluggy.PluginManager):
    """pluggy's manager for project ``muxhost``, with :attr:`sources` (package and version of each
    entry-point plugin) and the pending plugins (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__("muxhost")
        self.sources: dict[str, Source] = {}
        self.pending: dict[str, tuple[EntryPoint, dict[str, Any]]] = {}  # in entry point order
        self.on_load: list[Callable[[list[Any]], None]] = []  # each Registry: take what they provide
        self.fresh: list[EntryPoint] = []  # imported up front: the cache learns what they showed
        self.cache: _Cache | None = None

    def load_pending(self, names: Iterable[str] | None = None) -> None:
        """Import and register the pending plugins ``names`` (None: all)."""
        want = set(self.pending) if names is None else set(names) & set(self.pending)
        loaded = [_register(self, self.pending.pop(n)[0]) for n in list(self.pending) if n in want]
        if loaded:
            _check(self)
            for absorb in self.on_load:
                absorb(loaded)


def _impls(pm: pluggy.PluginManager, hook: str) -> list[Any]:
    return getattr(pm.hook, hook).get_hookimpls()


def _check(pm: pluggy.PluginManager) -> None:
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        raise MuxhostError(f"plugin {e.plugin!r} has a hook muxhost does not know: {e}")


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
    _check(pm)
    return pm


def _load_entrypoints(pm: PluginManager) -> None:
    """Register (or leave pending) the installed entry points ``MUXHOST_LOAD_PLUGINS`` selects. (Not
    pluggy's ``load_setuptools_entrypoints``: it scans every distribution on each call, selects by
    entry point name only, and its errors do not say which plugin failed.)"""
    wanted = os.environ.get("MUXHOST_LOAD_PLUGINS")
    names = None if wanted is None else {n.strip() for n in wanted.split(",") if n.strip()}
    if names is not None and not names:
        return
    pm.cache = cache = _Cache.load()
    found: set[str] = set()
    chosen: dict[str, EntryPoint] = {}
    for ep in cache.entry_points:
        if names is not None and ep.name not in names and ep.package not in names:
            continue
        found |= {ep.name, ep.package}
        if ep.name not in chosen and not pm.has_plugin(ep.name) and not pm.is_blocked(ep.name):
            chosen[ep.name] = ep
    twice = len({ep.value for ep in chosen.values()}) < len(chosen)  # two names, one object: up front
    for n, ep in chosen.items():
        info = cache.plugins.get(n)
        if _still_true(info, ep):
            if not twice and set(info["hooks"]) <= set(REGISTER_HOOKS):
                pm.pending[n] = (ep, info)
                pm.sources[n] = Source(n, ep.package, ep.version)
                continue
        else:
            pm.fresh.append(ep)
        _register(pm, ep)
    if names is not None and names - found:
        missing = ", ".join(sorted(names - found))
        raise UsageError(f"MUXHOST_LOAD_PLUGINS names {missing}, but no installed plugin has that name")


def _register(pm: PluginManager, ep: EntryPoint) -> Any:
    """Import the entry point's object and register it as plugin ``ep.name``; a failure is one line."""
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
    return plugin


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [""])[0]


# -- the entry point cache and the registry cache -----------------------------------------------
class _Cache:
    """The cache file as read (or scanned) now: the entry points, and what each entry-point plugin
    showed when imported, by name (``{"ep": [name, value, package, version], "files": [[path, stat],
    …], "hooks": […], "agents": […], "backends": […]}``; only under the same fingerprint)."""

    def __init__(self, path: str | None, fp: list[Any] | None, entry_points: list[EntryPoint],
                 plugins: dict[str, Any]):
        self.path, self.fp, self.entry_points, self.plugins = path, fp, entry_points, plugins

    @classmethod
    def load(cls) -> "_Cache":
        """The installed entry points of group ``muxhost``, from the cache file while its fingerprint
        is the one of now, else from ``importlib.metadata`` (then the file is written). The
        fingerprint is what that scan reads: each ``sys.path`` entry, its ``*.dist-info`` /
        ``*.egg-info`` / ``*.egg`` children in listing order, with the stat of each, of its
        ``entry_points.txt`` and of its ``METADATA`` / ``PKG-INFO``; taken before the scan, so a
        change during the scan makes the next run scan again."""
        fp = _fingerprint()
        path = _cache_path()
        if fp is not None and path:
            cached = _read_cache(path, fp[0])
            if cached is not None:
                return cls(path, fp[0], *cached)
        from importlib.metadata import entry_points

        eps = [EntryPoint(ep.name, ep.value, ep.dist.name if ep.dist else "", ep.dist.version if ep.dist else "")
               for ep in entry_points(group=GROUP)]
        stable = fp is not None and path is not None and fp[1] < (time.time() - _RACY_SECONDS) * 1e9
        cache = cls(path, fp[0], eps, {}) if stable and fp is not None else cls(None, None, eps, {})
        cache.write()
        return cache

    def write(self) -> None:
        if self.path and self.fp is not None:
            _write_cache(self.path, self.fp, self.entry_points, self.plugins)

    def remember(self, pm: PluginManager, registry: "Registry", eps: list[EntryPoint]) -> None:
        """Keep what each of ``eps`` (imported up front, unknown to the cache) showed, unless its
        files are changing right now or its registration has call-order options."""
        changed = False
        for ep in eps:
            plugin = pm.get_plugin(ep.name)
            if plugin is None:
                continue
            if any(_impl_opts(impl) for hook in REGISTER_HOOKS for impl in _impls(pm, hook) if impl.plugin is plugin):
                continue
            files = _module_files(ep)
            if any(st is None or st[0] > (time.time() - _RACY_SECONDS) * 1e9 for _, st in files):
                continue
            info = {"ep": [ep.name, ep.value, ep.package, ep.version], "files": files,
                    "hooks": sorted(h.name for h in pm.get_hookcallers(plugin) or []),
                    "agents": [n for n, s in registry.agent_sources.items() if s.plugin == ep.name],
                    "backends": [n for n, s in registry.backend_sources.items() if s.plugin == ep.name]}
            if self.plugins.get(ep.name) != info:
                self.plugins[ep.name] = info
                changed = True
        if changed:
            self.write()


def _impl_opts(impl: Any) -> bool:
    return bool(impl.tryfirst or impl.trylast or impl.hookwrapper or impl.wrapper)


def _module_files(ep: EntryPoint) -> list[list[Any]]:
    """``[path, stat]`` of every imported module file of the entry point's top-level package."""
    top = ep.value.split(":")[0].strip().split(".")[0]
    files = []
    for name, mod in list(sys.modules.items()):
        if name == top or name.startswith(top + "."):
            path = getattr(mod, "__file__", None)
            if isinstance(path, str):
                files.append([path, _stat(path)])
    return sorted(files)


def _still_true(info: Any, ep: EntryPoint) -> bool:
    """True when the registry cache entry ``info`` is of this entry point and its files are as then."""
    try:
        if info["ep"] != [ep.name, ep.value, ep.package, ep.version] or not all(
                isinstance(info[k], list) and all(isinstance(x, str) for x in info[k])
                for k in ("hooks", "agents", "backends")):
            return False
        return bool(info["files"]) and all(_stat(path) == st for path, st in info["files"])
    except (KeyError, TypeError, ValueError):
        return False


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


def _read_cache(path: str, fp: list[Any]) -> tuple[list[EntryPoint], dict[str, Any]] | None:
    """What the cache file says, when it is yours (it names the modules muxhost imports), else None."""
    try:
        with open(path, encoding="utf-8") as f:
            if os.fstat(f.fileno()).st_uid != os.geteuid():
                return None
            data = json.load(f)
        if data.get("fingerprint") != fp:
            return None
        plugins = data.get("plugins")
        return ([EntryPoint(*map(str, row)) for row in data["entry_points"]],
                plugins if isinstance(plugins, dict) else {})
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # missing, unreadable or not ours: scan


def _write_cache(path: str, fp: list[Any], eps: list[EntryPoint], plugins: dict[str, Any]) -> None:
    data = {"fingerprint": fp, "entry_points": [[e.name, e.value, e.package, e.version] for e in eps],
            "plugins": plugins}
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        # a new file, never through a link put there (a cache folder another user may write to)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        with open(fd, "w", encoding="utf-8") as f:
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


V = TypeVar("V")


class _Provided(Mapping[str, V]):
    """The agents (or backends) by name: the loaded plugins', and those the cache says a pending
    plugin gives. Names, ``in`` and ``len`` import nothing; a value imports the plugin giving it."""

    def __init__(self, load: Callable[[Iterable[str] | None], None]):
        self._load = load
        self._owner: dict[str, str | None] = {}  # name -> the pending plugin that provides it (None: loaded)
        self._items: dict[str, V] = {}

    def _put(self, name: str, value: V) -> None:
        self._items[name] = value
        self._owner[name] = None

    def _expect(self, name: str, plugin: str) -> None:
        self._owner[name] = plugin

    def _settle(self, plugins: Iterable[str]) -> None:
        """Forget what loaded plugins were expected to provide but did not."""
        gone = set(plugins)
        for name in [n for n, owner in self._owner.items() if owner in gone]:
            del self._owner[name]

    def __getitem__(self, name: str) -> V:
        owner = self._owner.get(name)
        if owner is not None:
            self._load([owner])
        return self._items[name]

    def __contains__(self, name: object) -> bool:
        return name in self._owner

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._owner))

    def __len__(self) -> int:
        return len(self._owner)

    def _load_all(self) -> None:
        self._load({o for o in self._owner.values() if o is not None})

    def values(self) -> list[V]:  # type: ignore[override]
        self._load_all()
        return [self._items[n] for n in self._owner if n in self._items]

    def items(self) -> list[tuple[str, V]]:  # type: ignore[override]
        self._load_all()
        return [(n, self._items[n]) for n in self._owner if n in self._items]

    def __repr__(self) -> str:
        return f"{{{', '.join(repr(n) for n in self._owner)}}}"


class Registry:
    """The agents and backends the plugins registered, each with where it came from; a pending
    plugin's are named from the cache (when two plugins would give one name, every pending plugin
    is imported here, so the error is the one of importing them all up front)."""

    def __init__(self, pm: pluggy.PluginManager):
        self.pm = pm
        self.agents: _Provided["Agent"] = _Provided(self._load)
        self.agent_sources: dict[str, Source] = {}
        self.backends: _Provided[Callable[..., Any]] = _Provided(self._load)
        self.backend_sources: dict[str, Source] = {}
        self._absorb(None)
        pending: dict[str, tuple[EntryPoint, dict[str, Any]]] = getattr(pm, "pending", {})
        if pending:
            pm.on_load.append(self._absorb)  # type: ignore[attr-defined]
            given = [(kind, name) for _, info in pending.values() for kind in ("agents", "backends")
                     for name in info[kind]]
            if len(set(given)) < len(given) or any(name in getattr(self, kind) for kind, name in given):
                self._load(None)
            else:
                for plugin, (_, info) in pending.items():
                    for kind in ("agents", "backends"):
                        for name in info[kind]:
                            getattr(self, kind)._expect(name, plugin)
        cache: _Cache | None = getattr(pm, "cache", None)
        if cache is not None and cache.path and pm.fresh:  # type: ignore[attr-defined]
            cache.remember(pm, self, pm.fresh)  # type: ignore[arg-type, attr-defined]

    def _load(self, plugins: Iterable[str] | None) -> None:
        load = getattr(self.pm, "load_pending", None)
        if load is not None:
            load(plugins)

    def _absorb(self, plugins: list[Any] | None) -> None:
        """Take what the plugins (None: every registered one) provide, by their registration hooks."""
        for impl in _impls(self.pm, "muxhost_register_agents"):
            if plugins is None or any(impl.plugin is p for p in plugins):
                impl.function(register=self._agent_register(_source(self.pm, impl.plugin)))
        for impl in _impls(self.pm, "muxhost_register_backends"):
            if plugins is None or any(impl.plugin is p for p in plugins):
                impl.function(register=self._backend_register(_source(self.pm, impl.plugin)))
        names = [self.pm.get_name(p) for p in plugins or ()]
        self.agents._settle(n for n in names if n)
        self.backends._settle(n for n in names if n)

    def _agent_register(self, source: Source):
        from muxhost.agent import Agent

        def register(agent: "Agent") -> None:
            if not isinstance(agent, Agent) or not getattr(agent, "name", ""):
                raise MuxhostError(f"package {source.package} registered {agent!r}, which is not a named muxhost.Agent")
            if agent.name in self.agents._items or self.agents._owner.get(agent.name) not in (None, source.plugin):
                other = self.agent_sources.get(agent.name) or self._expected(agent.name, "agents")
                raise MuxhostError(
                    f"agent {agent.name!r} is registered twice: by package {other.package} "
                    f"(plugin {other.plugin}) and by package {source.package} (plugin {source.plugin})")
            self.agents._put(agent.name, agent)
            self.agent_sources[agent.name] = source

        return register

    def _backend_register(self, source: Source):
        def register(name: str, factory: Callable[..., Any]) -> None:
            if name in self.backends._items or self.backends._owner.get(name) not in (None, source.plugin):
                other = self.backend_sources.get(name) or self._expected(name, "backends")
                raise MuxhostError(f"backend {name!r} is registered twice: by package {other.package} and by package {source.package}")
            self.backends._put(name, factory)
            self.backend_sources[name] = source

        return register

    def _expected(self, name: str, kind: str) -> Source:
        """The source of the pending plugin the registry cache says gives ``name``."""
        plugin = (self.agents if kind == "agents" else self.backends)._owner[name] or ""
        return getattr(self.pm, "sources", {}).get(plugin) or Source(plugin, "?", "")

    def agent(self, name: str) -> "Agent":
        try:
            return self.agents[name]
        except KeyError:
            known = ", ".join(sorted(self.agents)) or "none"
            raise UsageError(f"unknown agent {name!r} (known: {known})") from None

    def describe(self) -> dict[str, Any]:
        """What ``muxhost plugins --json`` prints: each agent and backend with the package, version
        and hooks of the plugin that registered it, and every plugin."""
        self._load(None)
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
