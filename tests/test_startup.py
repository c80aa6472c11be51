"""Start-up: `muxhost ls` pays for every module it imports on every run, so it imports only what
the command needs (README "Speed"). Checked the way a user would: `python -X importtime`, plugin
modules that say when they are imported, and what the CLI prints."""
import json
import os
import re
import time

import pytest

from muxhost.testing import Watching, install_plugin, wait_for

pytestmark = pytest.mark.cli_subprocess  # what each test proves is a new process's start-up


def imported(err: str) -> set[str]:
    """The modules an ``importtime`` log on stderr names."""
    return {line.rpartition("|")[2].strip() for line in err.splitlines() if line.startswith("import time:")}


def test_a_warm_ls_lists_no_package_metadata_and_parses_no_yaml(mux):
    cache = mux.home / ".cache" / "muxhost" / "plugins.json"
    # metadata installed in the last two seconds (CI installs right before the tests) is not cached yet
    wait_for(lambda: mux.ok("ls") is not None and cache.exists(), timeout=10, what="ls to write the plugin cache")
    r = mux.run("ls", "--json", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert r.rc == 0, r.err
    modules = imported(r.err)
    assert "muxhost.host" in modules  # the log is there
    assert "importlib.metadata" not in modules  # the entry points came from the cache
    assert "yaml" not in modules  # no config file: no YAML parser


def test_the_plugin_cache_is_in_xdg_cache_home(mux, tmp_path):
    xdg = tmp_path / "xdg-cache"
    env = {"XDG_CACHE_HOME": str(xdg)}
    wait_for(lambda: mux.ok("ls", env=env) is not None and (xdg / "muxhost" / "plugins.json").exists(),
             timeout=10, what="ls to write the plugin cache")
    assert not (mux.home / ".cache" / "muxhost").exists()


MARKED = '''
import os, sys
import muxhost

with open(os.path.join(os.environ["MARKERS"], __name__), "a") as f:  # this module was imported
    f.write("imported\\n")
'''
QUIET = MARKED + '''
class Quiet(muxhost.Agent):
    name = "quiet"
    exit_text = None

    def launch(self, ctx):
        return muxhost.Launch([sys.executable, "-c", "import time; time.sleep(300)"])

@muxhost.hookimpl
def muxhost_register_agents(register):
    register(Quiet())
'''
HARK = MARKED + '''
@muxhost.hookimpl
def muxhost_agent_launched(record):
    with open(os.path.join(os.environ["MARKERS"], "launched"), "a") as f:
        f.write(record["agent"] + "\\n")
'''


def test_a_plugin_package_is_imported_only_when_a_command_needs_it(mux, tmp_path):
    """`ls` over records of built-in agents imports no plugin package that only gives agents or
    backends (the registry cache knows what each gives); a launch of a plugin's agent imports that
    plugin, `plugins` imports every one. A plugin with any other hook (muxhost_agent_launched) is
    imported by every command: pluggy calls it, in entry point order."""
    quiet = install_plugin(tmp_path / "quiet", "muxhost-quiet", "muxhost_quiet", QUIET)
    hark = install_plugin(tmp_path / "hark", "muxhost-hark", "muxhost_hark", HARK)
    for site in (tmp_path / "quiet" / "site", tmp_path / "hark" / "site"):
        _age(site, 60)  # metadata and code this fresh would not be cached yet (they may still change)
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {"PYTHONPATH": os.pathsep.join([quiet["PYTHONPATH"], hark["PYTHONPATH"]]),
           "MUXHOST_LOAD_PLUGINS": "muxhost_quiet,muxhost_hark", "MARKERS": str(markers)}

    def imported_now(*args: str) -> set[str]:
        for f in markers.iterdir():
            f.unlink()
        r = mux.run(*args, env=env)
        assert r.rc == 0, r.err
        return {f.name for f in markers.iterdir()}

    assert imported_now("ls") == {"muxhost_quiet", "muxhost_hark"}  # no cache yet: all of them, as before
    assert imported_now("ls") == {"muxhost_hark"}
    assert imported_now("launch", "demo") == {"muxhost_hark", "launched"}  # its hook
    assert (markers / "launched").read_text() == "demo\n"
    for args in (("ls",), ("ls", "--json"), ("ls", "--all"), ("reconcile",)):
        assert imported_now(*args) == {"muxhost_hark"}, args
    assert imported_now("launch", "quiet") == {"muxhost_quiet", "muxhost_hark", "launched"}  # its agent
    assert imported_now("ls") == {"muxhost_quiet", "muxhost_hark"}  # a record of its agent: needed now
    assert imported_now("plugins") == {"muxhost_quiet", "muxhost_hark"}
    assert "quiet" in mux.ok("plugins", env=env)
    # the watch, which runs for days, imports every plugin when it starts: one removed or upgraded
    # meanwhile never fails a pass hours later
    for f in markers.iterdir():
        f.unlink()
    with Watching(mux, env=env):
        wait_for(lambda: {f.name for f in markers.iterdir()} == {"muxhost_quiet", "muxhost_hark"}, timeout=15,
                 what="the watch to import every plugin")
    # the cache answers only while the plugin's code is as it was: an edit is seen at once
    module = tmp_path / "hark" / "site" / "muxhost_hark.py"
    harker = QUIET.partition(MARKED)[2].replace("Quiet", "Harker").replace("quiet", "harker")
    module.write_text(module.read_text() + harker)
    _age(module, 60)
    assert mux.ok("launch", "harker", "--json", env=env)["agent"] == "harker"


ALPHA = MARKED + '''
@muxhost.hookimpl
def muxhost_purge_veto(agent, conversation_id, artifacts):
    return "alpha says no"
'''
BETA = MARKED + '''
from muxhost.artifacts import File

class Beta(muxhost.Agent):
    name = "beta"

    def in_use(self, ctx, conversation_id):
        return []

    def artifacts(self, ctx, conversation_id):
        return [File(ctx.data_home() / "beta" / conversation_id)]

@muxhost.hookimpl
def muxhost_register_agents(register):
    register(Beta())

@muxhost.hookimpl
def muxhost_purge_veto(agent, conversation_id, artifacts):
    return "beta says no"
'''


def test_plugins_imported_when_needed_are_called_in_entry_point_order(mux, tmp_path):
    """A hook's plugins are called in the order they are with every plugin imported up front
    (pluggy: the last registered first), with or without the registry cache: plugins with a hook
    other than the registration ones are imported up front, in entry point order."""
    alpha = install_plugin(tmp_path / "alpha", "muxhost-alpha", "muxhost_alpha", ALPHA)
    beta = install_plugin(tmp_path / "beta", "muxhost-beta", "muxhost_beta", BETA)
    for site in (tmp_path / "alpha" / "site", tmp_path / "beta" / "site"):
        _age(site, 60)
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {"PYTHONPATH": os.pathsep.join([alpha["PYTHONPATH"], beta["PYTHONPATH"]]),  # alpha's entry point first
           "MUXHOST_LOAD_PLUGINS": "muxhost_alpha,muxhost_beta", "MARKERS": str(markers)}
    cid = "0f6e9c39-5b4c-4d1e-9a53-2d1f3c4b5a69"
    (mux.home / ".local" / "share" / "beta").mkdir(parents=True)
    (mux.home / ".local" / "share" / "beta" / cid).write_text("a conversation\n")
    purge = ("purge", "--agent", "beta", "--conversation", cid, "--yes")
    up_front = mux.run(*purge, env={**env, "XDG_CACHE_HOME": str(tmp_path / "fresh-cache")})  # no cache yet
    assert (up_front.rc, up_front.err) == (4, "muxhost: purge vetoed: beta says no\n")
    mux.ok("ls", env=env)  # the cache is written
    for f in markers.iterdir():
        f.unlink()
    mux.ok("ls", env=env)
    assert {f.name for f in markers.iterdir()} == {"muxhost_alpha", "muxhost_beta"}  # (their veto hooks)
    when_needed = mux.run(*purge, env=env)
    assert (when_needed.rc, when_needed.err) == (up_front.rc, up_front.err)
    assert {f.name for f in markers.iterdir()} == {"muxhost_alpha", "muxhost_beta"}


def _age(root, seconds: float) -> None:
    """``root`` and everything under it ``seconds`` in the past."""
    t = time.time() - seconds
    paths = [root] + [os.path.join(d, n) for d, dirs, files in os.walk(root) for n in dirs + files]
    for p in paths:
        os.utime(p, (t, t))


def test_a_command_builds_only_its_own_parser_with_the_same_help_and_errors(mux, monkeypatch):
    """`muxhost CMD …` builds only CMD's parser (building them all is a start-up cost): what it
    prints is what the whole parser prints — `CMD --help`, usage errors, and whatever argparse reads
    before CMD (`-h ls` is the top-level help, listing every command)."""
    import argparse

    from muxhost.cli import CORE_COMMANDS, build_parser
    from muxhost.errors import UsageError

    monkeypatch.setenv("COLUMNS", "100")
    env = {"COLUMNS": "100"}
    full = build_parser()
    sub = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    for name in CORE_COMMANDS:
        r = mux.run(name, "--help", env=env)
        assert (r.rc, r.out) == (0, sub.choices[name].format_help()), name
    for args in (["--help"], ["-h", "ls"], ["--config", "x", "-h", "ls"]):
        r = mux.run(*args, env=env)
        assert (r.rc, r.out) == (0, full.format_help()), args
        commands = r.out.split("positional arguments:", 1)[1].split("\n\n", 1)[0]
        assert set(re.findall(r"^    (\S+)", commands, re.M)) == {*CORE_COMMANDS, "tmux-bindings"}, args
    for args in (["--he", "ls"], ["ls", "--al"], ["ls", "--bogus"], ["--bogus", "ls"], ["-1", "ls"], ["--", "ls"], ["lss"], ["show"],
                 ["launch", "--split", "up"], ["--socket=s", "read", "--lines", "x", "a"], ["--config"]):
        try:
            full.parse_args(args)
            expected = None
        except UsageError as e:
            expected = f"muxhost: {e}\n"
        r = mux.run(*args, env=env)
        assert (r.rc, r.err) == (2, expected), args
    # ... and a command does build only its own parser, and imports only its own module (the same
    # output either way, so say it)
    import subprocess
    import sys

    lazy = build_parser(full=False)
    args = lazy.parse_args(["--socket=s", "--config", "c", "ls", "--json"])
    assert (args.command, args.json, args.socket) == ("ls", True, "s")
    only = next(a for a in lazy._actions if isinstance(a, argparse._SubParsersAction))
    assert [n for n, p in dict.items(only.choices) if p is not None] == ["ls"]
    code = ("import sys\nfrom muxhost.cli import main\nmain(['ls', '--bogus'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('muxhost.cli.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert out == "['muxhost.cli.ls', 'muxhost.cli.output']\n", out


def test_an_agent_name_clash_with_a_cached_plugin_is_the_error_it_is_without_the_cache(mux, tmp_path):
    """The registry cache says a plugin gives agent `quiet`; a config agent of that name is the same
    one-line error as when every plugin is imported up front."""
    quiet = install_plugin(tmp_path / "quiet", "muxhost-quiet", "muxhost_quiet", QUIET)
    _age(tmp_path / "quiet" / "site", 60)
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {**quiet, "MUXHOST_LOAD_PLUGINS": "muxhost_quiet", "MARKERS": str(markers)}
    cache = mux.home / ".cache" / "muxhost" / "plugins.json"
    wait_for(lambda: mux.ok("ls", env=env) is not None and cache.exists()
             and "muxhost_quiet" in json.loads(cache.read_text())["plugins"], timeout=10,
             what="the registry cache to learn the plugin")
    for f in markers.iterdir():
        f.unlink()
    mux.ok("ls", env=env)
    assert list(markers.iterdir()) == []  # warm: the plugin is pending, not imported
    mux.config.write_text("agents:\n  quiet:\n    command: [sh]\n")
    warm = mux.run("ls", env=env)
    cache.unlink()
    cold = mux.run("ls", env=env)
    assert cold.rc != 0 and "registered twice" in cold.err and cold.err.count("\n") == 1, cold
    assert (warm.rc, warm.err) == (cold.rc, cold.err)
