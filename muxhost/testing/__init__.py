"""pytest helpers for muxhost and its plugin packages (loaded with ``-p muxhost.testing``).

Fixtures:

- ``mux``: a :class:`Mux` bound to libtmux's ``server`` fixture (a private tmux socket), a temp HOME,
  a temp state dir and a temp config path. ``mux.run("launch", "demo", "--json")`` runs the real
  ``muxhost`` CLI with that environment — in this process by default (``muxhost.cli.main``, its
  environment, cwd and fds swapped in; :mod:`muxhost.testing.inprocess`), in a subprocess with
  ``subprocess=True`` (start-up, signals, the launcher, ``ps``). At teardown every process of every
  record of this test is ended (by pid, after checking its create time): nothing a test started survives.
- ``host``: an in-process :class:`~muxhost.host.Host` on the fake backend
  (:class:`~muxhost.testing.fake.FakeBackend`, at ``host.fake``: panes are child processes with
  pipes) with a private state dir, HOME and config; the agents of the ``host_agents`` fixture
  (override it) besides the built-in ones. No tmux, no CLI start-up.

Markers (set by the fixtures a test uses): ``tmux`` (it needs a pane server: ``mux``, ``server``)
and ``agents`` (a real agent CLI: a contract suite of a plugin, a fixture under
:func:`needs_agent_cli`); ``-m "not agents"`` is the quick loop. A test marks itself
``cli_subprocess`` when what it proves is the process (start-up, imports): then every ``mux.run``
of it is a subprocess (``--cli-subprocess``: every run of every test, as before this tier).

Modules: :mod:`~muxhost.testing.mux` (the Mux driver, :class:`Watching`),
:mod:`~muxhost.testing.inprocess` (the CLI run in-process), :mod:`~muxhost.testing.fake`,
:mod:`~muxhost.testing.contract` (:class:`AgentContract`, the suite every agent plugin subclasses),
:mod:`~muxhost.testing.forensics` (:func:`tree_hash`, :func:`unique_text`, :func:`files_holding`,
:func:`plan_names`), :mod:`~muxhost.testing.tmuxclient` (:class:`TmuxClient`, a real attached
client in a pty), :mod:`~muxhost.testing.helpers` (:func:`wait_for`, :func:`alive`, :func:`load_module`,
:func:`one_line_error`, :func:`agent_binary`, :func:`missing`, :func:`install_plugin`,
:func:`quiet_connection`).
"""

from __future__ import annotations

import pytest

from muxhost.testing.contract import AgentContract, ContractWorld
from muxhost.testing.fake import FakeBackend, fake_host
from muxhost.testing.forensics import (DB_SIDECARS, SQLITE_MAGIC, appended_only, file_head, files_holding,
                                       files_under, plan_names, sqlite_text, tree_hash, unique_text)
from muxhost.testing.helpers import (Result, agent_binary, alive, in_ci, install_plugin, load_module, missing,
                                     one_line_error, pip_install, plugin_package, quiet_connection, wait_for)
from muxhost.testing.inprocess import Leak, run_cli
from muxhost.testing.mux import SHELL_ENV, Mux, Watching, carrying, clean_env
from muxhost.testing.tmuxclient import TmuxClient

__all__ = ["AgentContract", "ContractWorld", "FakeBackend", "Leak", "Mux", "Result", "SHELL_ENV", "TmuxClient",
           "Watching", "agent_binary", "alive", "appended_only", "clean_env", "fake_host", "files_holding", "in_ci", "install_plugin",
           "load_module", "missing", "needs_agent_cli", "one_line_error", "pip_install", "plan_names", "plugin_package", "quiet_connection", "run_cli", "tree_hash",
           "unique_text", "wait_for", "DB_SIDECARS", "SQLITE_MAGIC", "carrying", "files_under", "file_head", "sqlite_text"]

# fixtures that mean a test needs a pane server / a real agent CLI (the markers `tmux` / `agents`)
TMUX_FIXTURES = frozenset({"mux", "server", "session"})
AGENT_FIXTURES: set[str] = set()


def needs_agent_cli(fixture_function):
    """Mark a fixture function (under ``@pytest.fixture``) as one that runs a real agent CLI
    (:func:`agent_binary`): every test using it gets the ``agents`` marker."""
    AGENT_FIXTURES.add(fixture_function.__name__)
    return fixture_function


@pytest.fixture
def mux(request, server, tmp_path):
    """A :class:`Mux` on tmux; parametrized (``indirect=True``) with a pane backend ``"NAME"`` (or
    ``"NAME-VARIANT"``), on that backend's server from the fixture ``NAME_server``
    (``NAME_VARIANT_server``), which gives ``.address`` and ``.env``."""
    kind = getattr(request, "param", "tmux")
    pane_server = None if kind == "tmux" else request.getfixturevalue(kind.replace("-", "_") + "_server")
    m = Mux(server, tmp_path, backend=kind.split("-")[0], pane_server=pane_server)
    m.subprocess = bool(request.config.getoption("cli_subprocess", False)
                        or request.node.get_closest_marker("cli_subprocess"))
    yield m
    m.reap()


@pytest.fixture
def host_agents():
    """The agents (Agent instances) the ``host`` fixture registers besides the built-in ones: override it."""
    return []


@pytest.fixture
def host(tmp_path, monkeypatch, host_agents):
    """An in-process Host on the fake backend (``host.fake``), its own state dir, HOME and config."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    for var in ("TMUX", "TMUX_PANE", "MUXHOST_RECORD", "MUXHOST_BACKEND", "MUXHOST_TMUX_SOCKET",
                "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MUXHOST_CONFIG", str(tmp_path / "config.yaml"))
    h = fake_host(tmp_path / "state", host_agents)
    yield h
    h.fake.close()


def pytest_addoption(parser):
    parser.addoption("--cli-subprocess", action="store_true", dest="cli_subprocess",
                     help="muxhost.testing: run every Mux.run in a subprocess (as before the in-process tier)")


def pytest_configure(config):
    config.addinivalue_line("markers", "tmux: needs a pane server (a private tmux server; set by the mux fixture)")
    config.addinivalue_line("markers", "cli_subprocess: every mux.run of the test in a subprocess of its own "
                                       "(what it proves is the process: start-up, imports, signals)")
    config.addinivalue_line("markers", "agents: needs a real agent CLI (claude, opencode, codex); "
                                       "`-m 'not agents'` is the quick loop")


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        cls = getattr(item, "cls", None)
        contract = cls is not None and issubclass(cls, AgentContract) and cls.agent_cli
        if contract or used & AGENT_FIXTURES:
            item.add_marker(pytest.mark.agents)
        if used & TMUX_FIXTURES:
            item.add_marker(pytest.mark.tmux)
