"""The plugin manager: built-ins first, then entry points of group ``muxhost``.

``MUXHOST_LOAD_PLUGINS`` limits which entry points load: unset = all installed, empty = built-ins
only, ``a,b`` = only the entry points (or distributions) named ``a`` and ``b``.

Listing entry points with ``importlib.metadata`` imports it and reads every installed distribution:
a large share of each command's start-up. So the list is kept in ``$XDG_CACHE_HOME/muxhost/plugins.json``
(``~/.cache/muxhost/plugins.json``) with a fingerprint of everything that scan reads (see
:meth:`_Cache.load`), and listed again only when that fingerprint changes.

The same file is the registry cache: for each entry-point plugin, what importing and registering it
showed — the hooks it implements, the agents and backends it registered — with the stat of every
module file of its package that was imported then. While all of that still holds for every entry
point selected, no plugin package is imported up front: each one is *pending* (named, with what it
provides) and imported when first needed — its agent or backend looked up by name
(:class:`Registry`), any listing of every agent, backend or plugin (``muxhost plugins``), or a hook
it implements (``pm.hook.<name>``: launch, stop, purge, the watch, plugin commands). A hook's
plugins are always called in entry point order, as if all had been loaded up front. Anything else —
no cache, another fingerprint, a plugin file changed, two entry points naming one object, an agent
or backend name two plugins give, a registration hook with call-order options — loads every
selected plugin up front, as before, and writes what it saw. So ``muxhost ls`` over records of
built-in agents imports no plugin package. (What a plugin registers is taken to follow from its
package's code: a plugin that registers an agent only when some variable is set is cached as the
run that wrote the cache saw it.)

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
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, TypeVar

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
CACHE_FORMAT = 2
# the hooks the Registry calls itself, on each plugin as it loads (not events: a plugin that only
# registers agents or backends is imported when one of them is looked up)
REGISTER_HOOKS = ("muxhost_register_agents", "muxhost_register_backends")
# importlib.metadata.EntryPoint.pattern: ``module``, ``module:attr.attr``, optional ``[extras]``
# (compiled by ``re`` when an entry point is loaded: most runs load none)
_EP_VALUE = r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"
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
        m = re.match(_EP_VALUE, self.value)
        if m is None:
            raise ValueError(f"malformed entry point value {self.value!r}")
        obj: Any = importlib.import_module(m.group("module"))
        for attr in filter(None, (m.group("attr") or "").split(".")):
            obj = getattr(obj, attr)
        return obj


class PluginManager(pluggy.PluginManager):
    """pluggy's manager for project ``muxhost``; :attr:`sources` has the package and version of each
    entry-point plugin, by plugin name (``muxhost plugins --json`` shows them).

    Entry-point plugins the registry cache knows may be pending (see the module's docstring): not
    imported until ``pm.hook.<name>`` is read for a hook one of them implements, or the plugin is
    asked for by name (:meth:`get_plugin`, :meth:`has_plugin`, :meth:`register`), or all plugins are
    listed (:meth:`get_plugins`, :meth:`list_name_plugin`)."""

    def __init__(self) -> None:
        super().__init__("muxhost")
        self.hook = _LazyHookRelay(self)  # type: ignore[misc]  # pluggy's own, before any hook exists
        self.sources: dict[str, Source] = {}
        # entry point name -> (entry point, its registry cache entry), in entry point order
        self._pending: dict[str, tuple[EntryPoint, dict[str, Any]]] = {}
        self._loading = False
        self._on_load: list[Callable[[list[Any]], None]] = []  # each Registry: register what they provide
        self._fresh: list[EntryPoint] = []  # loaded up front this run: the cache learns what they register
        self._cache: _Cache | None = None

    def load_pending(self, names: Iterable[str] | None = None) -> None:
        """Import and register the pending plugins ``names`` (None: all), and with them every pending
        plugin before one of them (in entry point order) that shares an event hook with it: each
        hook's plugins are then registered, and called, in entry point order."""
        if self._loading or not self._pending:
            return
        order = list(self._pending)
        want = set(order) if names is None else {n for n in names if n in self._pending}
        events = {n: set(self._pending[n][1]["hooks"]) - set(REGISTER_HOOKS) for n in order}
        grown = True
        while grown:
            grown = False
            for i, n in enumerate(order):
                if n not in want and any(events[n] & events[m] for m in order[i + 1:] if m in want):
                    want.add(n)
                    grown = True
        if not want:
            return
        self._loading = True
        try:
            loaded = [_register(self, self._pending.pop(n)[0]) for n in order if n in want]
            _check(self)
        finally:
            self._loading = False
        for absorb in self._on_load:
            absorb(loaded)

    def _load_for_hook(self, hook: str) -> None:
        if self._pending and not self._loading:
            self.load_pending([n for n, (_, info) in self._pending.items() if hook in info["hooks"]])

    def get_plugin(self, name: str) -> Any | None:
        if name in self._pending:
            self.load_pending([name])
        return super().get_plugin(name)

    def get_plugins(self) -> set[Any]:
        self.load_pending()
        return super().get_plugins()

    def list_name_plugin(self) -> list[tuple[str, Any]]:
        self.load_pending()
        return super().list_name_plugin()

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        if name is not None and name in self._pending and not self._loading:
            self.load_pending([name])  # then pluggy refuses the name, as it would have with it loaded
        return super().register(plugin, name)


class _LazyHookRelay(pluggy.HookRelay):
    """``pm.hook``: reading a hook loads the pending plugins that implement it first."""

    __slots__ = ("_pm",)  # a slot, not in __dict__: pluggy takes every __dict__ entry for a hook

    def __init__(self, pm: PluginManager) -> None:
        super().__init__()
        object.__setattr__(self, "_pm", pm)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("muxhost_"):
            object.__getattribute__(self, "_pm")._load_for_hook(name)
        return object.__getattribute__(self, name)


def _impls(pm: pluggy.PluginManager, hook: str) -> list[Any]:
    """The hook's implementations among the plugins loaded now (no pending plugin is imported)."""
    caller = vars(pm.hook).get(hook)
    return caller.get_hookimpls() if caller is not None else []


def _check(pm: PluginManager) -> None:
    """pluggy's check of every registered hook implementation (it reads every hook: no pending
    plugin is loaded for that)."""
    was, pm._loading = pm._loading, True
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        raise MuxhostError(f"plugin {e.plugin!r} has a hook muxhost does not know: {e}")
    finally:
        pm._loading = was


def get_plugin_manager(config: "Config | None" = None, load_entrypoints: bool = True) -> PluginManager:
    """A new plugin manager with every hook spec, the built-in plugins, the config-defined agents
    and (unless ``load_entrypoints`` is false) the installed plugin packages (pending ones among
    them: see the module's docstring)."""
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
    """Register the installed entry points that ``MUXHOST_LOAD_PLUGINS`` selects — or, when the
    registry cache knows every one of them, leave them pending. (Not pluggy's
    ``load_setuptools_entrypoints``: it scans every distribution on each call, selects by entry point
    name only, and its errors do not say which plugin failed.)"""
    wanted = os.environ.get("MUXHOST_LOAD_PLUGINS")
    names = None if wanted is None else {n.strip() for n in wanted.split(",") if n.strip()}
    if names is not None and not names:
        return
    cache = _Cache.load()
    found: set[str] = set()
    chosen: dict[str, EntryPoint] = {}
    for ep in cache.entry_points:
        if names is not None and ep.name not in names and ep.package not in names:
            continue
        found |= {ep.name, ep.package}
        if ep.name in chosen or pm.has_plugin(ep.name) or pm.is_blocked(ep.name):
            continue
        chosen[ep.name] = ep
    infos = {n: cache.plugins.get(n) for n in chosen}
    if chosen and len({ep.value for ep in chosen.values()}) == len(chosen) and all(
            _still_true(infos[n], ep) for n, ep in chosen.items()):
        for n, ep in chosen.items():
            pm._pending[n] = (ep, infos[n])
            pm.sources[n] = Source(n, ep.package, ep.version)
    else:
        for ep in chosen.values():
            _register(pm, ep)
        pm._fresh, pm._cache = list(chosen.values()), cache
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
    """The cache file as read (or scanned) now: the entry points, and the registry cache entry of
    each entry-point plugin by name (only under the same fingerprint: a scan starts it empty).

    An entry is ``{"ep": [name, value, package, version], "files": [[path, stat], …], "hooks": […],
    "agents": […], "backends": […]}``: ``files`` every module file of the plugin's top-level package
    imported by the run that wrote it (a plugin edited in place is another stat)."""

    def __init__(self, path: str | None, fp: list[Any] | None, entry_points: list[EntryPoint],
                 plugins: dict[str, Any]):
        self.path, self.fp, self.entry_points, self.plugins = path, fp, entry_points, plugins

    @classmethod
    def load(cls) -> "_Cache":
        """Every installed entry point of group ``muxhost``, in ``importlib.metadata.entry_points``
        order: from the cache file when its fingerprint is the one of now, else from
        ``importlib.metadata`` (then the cache is written). The fingerprint is what that scan reads:
        each ``sys.path`` entry, the names of its ``*.dist-info`` / ``*.egg-info`` / ``*.egg``
        children in listing order, and the stat (mtime, size, inode) of each one, of its
        ``entry_points.txt`` and of its ``METADATA`` / ``PKG-INFO``. A package installed, removed,
        upgraded or rewritten, or another ``sys.path`` (``PYTHONPATH``, another venv), is another
        fingerprint: the cache never answers for it. The fingerprint is taken before the scan, so a
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
        """Keep what each of ``eps`` (loaded up front this run) showed, when its files are not
        changing right now, and write the file when that is new."""
        changed = False
        for ep in eps:
            plugin = pm.get_plugin(ep.name)  # (loaded up front: none is pending)
            if plugin is None:
                continue
            if any(_impl_opts(impl) for hook in REGISTER_HOOKS for impl in _impls(pm, hook) if impl.plugin is plugin):
                continue  # its registration has call-order options: loaded up front, always
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
    try:
        with open(path, encoding="utf-8") as f:
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


V = TypeVar("V")


class _Provided(Mapping[str, V]):
    """The agents (or backends) by name, in registration order: those of the loaded plugins, and the
    ones the registry cache says a pending plugin provides. Names, ``in`` and ``len`` import nothing;
    a value imports the plugin that provides it (:meth:`values` and :meth:`items`: every one)."""

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
        owners = {o for o in self._owner.values() if o is not None}
        if owners:
            self._load(owners)

    def values(self) -> list[V]:  # type: ignore[override]
        self._load_all()
        return [self._items[n] for n in self._owner if n in self._items]

    def items(self) -> list[tuple[str, V]]:  # type: ignore[override]
        self._load_all()
        return [(n, self._items[n]) for n in self._owner if n in self._items]

    def __repr__(self) -> str:
        return f"{{{', '.join(repr(n) for n in self._owner)}}}"


class Registry:
    """The agents and backends the plugins registered, each with where it came from. A pending
    plugin's (see the module's docstring) are named here from the registry cache, and the plugin is
    imported when one of them is looked up; when two plugins would give one name, every pending
    plugin is loaded here, so the error is the one of loading them all up front."""

    def __init__(self, pm: pluggy.PluginManager):
        self.pm = pm
        self.agents: _Provided["Agent"] = _Provided(self._load)
        self.agent_sources: dict[str, Source] = {}
        self.backends: _Provided[Callable[..., Any]] = _Provided(self._load)
        self.backend_sources: dict[str, Source] = {}
        for impl in _impls(pm, "muxhost_register_agents"):
            impl.function(register=self._agent_register(_source(pm, impl.plugin)))
        for impl in _impls(pm, "muxhost_register_backends"):
            impl.function(register=self._backend_register(_source(pm, impl.plugin)))
        pending: dict[str, tuple[EntryPoint, dict[str, Any]]] = getattr(pm, "_pending", {})
        if pending:
            pm._on_load.append(self._absorb)  # type: ignore[attr-defined]
            given = [(kind, name) for _, info in pending.values() for kind in ("agents", "backends")
                     for name in info[kind]]
            clash = len(set(given)) < len(given) or any(
                name in (self.agents if kind == "agents" else self.backends) for kind, name in given)
            if clash:
                self._load(None)
            else:
                for plugin, (_, info) in pending.items():
                    for name in info["agents"]:
                        self.agents._expect(name, plugin)
                    for name in info["backends"]:
                        self.backends._expect(name, plugin)
        cache: _Cache | None = getattr(pm, "_cache", None)
        if cache is not None and cache.path:
            cache.remember(pm, self, pm._fresh)  # type: ignore[arg-type, attr-defined]

    def _load(self, plugins: Iterable[str] | None) -> None:
        load = getattr(self.pm, "load_pending", None)
        if load is not None:
            load(plugins)

    def _absorb(self, plugins: list[Any]) -> None:
        """Register what the plugins just loaded provide (their registration hooks, as at start)."""
        for impl in _impls(self.pm, "muxhost_register_agents"):
            if any(impl.plugin is p for p in plugins):
                impl.function(register=self._agent_register(_source(self.pm, impl.plugin)))
        for impl in _impls(self.pm, "muxhost_register_backends"):
            if any(impl.plugin is p for p in plugins):
                impl.function(register=self._backend_register(_source(self.pm, impl.plugin)))
        names = [self.pm.get_name(p) for p in plugins]
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
