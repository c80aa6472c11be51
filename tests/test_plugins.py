"""Plugins: the manager, the hook specs, and a third-party package installed with pip."""
import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pluggy
import pytest

from muxhost import hookspecs
from muxhost.plugins import get_plugin_manager
from muxhost.testing import plugin_package

PLUGIN = textwrap.dedent('''
    """A third-party muxhost plugin: the `echoer` agent."""
    import json, os, sys, uuid
    from pathlib import Path
    import muxhost

    PROGRAM = (
        "import json, os, sys\\n"
        "path = sys.argv[1]\\n"
        "os.makedirs(os.path.dirname(path), exist_ok=True)\\n"
        "open(path, 'a').write(json.dumps({'started': True}) + '\\\\n')\\n"
        "while True:\\n"
        "    line = input('echoer> ')\\n"
        "    if line == 'bye': break\\n"
        "    open(path, 'a').write(json.dumps({'said': line}) + '\\\\n')\\n"
        "    print('echo:', line)\\n"
    )

    class Echoer(muxhost.Agent):
        name = "echoer"
        process_names = ("python3",)
        exit_text = "bye"
        id_pattern = r"e[0-9a-f]{8}"

        def _file(self, ctx, cid):
            return ctx.data_home() / "echoer" / f"{cid}.jsonl"

        def _leftover(self, ctx, cid):
            return ctx.data_home() / "echoer" / f"{cid}.leftover"

        def launch(self, ctx):
            cid = "e" + uuid.uuid4().hex[:8]
            return muxhost.Launch([sys.executable, "-c", PROGRAM, str(self._file(ctx, cid))], conversation_id=cid)

        def resume(self, ctx, cid):
            return muxhost.Launch([sys.executable, "-c", PROGRAM, str(self._file(ctx, cid))])

        def exists(self, ctx, cid):
            return self._file(ctx, cid).exists()

        def artifacts(self, ctx, cid):
            return [ctx.expand(p) for p in (self._file(ctx, cid), self._leftover(ctx, cid)) if p.exists()]

        def purge(self, ctx, cid):
            f = self._file(ctx, cid)
            text = f.read_text()
            f.unlink()
            if "leave" in text:  # a purge that cannot finish: it leaves something behind
                self._leftover(ctx, cid).write_text("left\\n")
            return [ctx.expand(f)]

    @muxhost.hookimpl
    def muxhost_register_agents(register):
        register(Echoer())

    @muxhost.hookimpl
    def muxhost_purge_veto(agent, conversation_id, artifacts):
        if os.environ.get("ECHOER_VETO"):
            return "ECHOER_VETO is set"
        return None
''')


def make_package(root, dist, module, body, version="0.3.1"):
    return plugin_package(root, dist, module, body, version)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """muxhost-echoer (and a package that clashes with `demo`), pip-installed into a folder."""
    base = tmp_path_factory.mktemp("thirdparty")
    site = base / "site"
    pkgs = [make_package(base / "muxhost-echoer", "muxhost-echoer", "muxhost_echoer", PLUGIN),
            make_package(base / "muxhost-clash", "muxhost-clash", "muxhost_clash", textwrap.dedent('''
                import muxhost
                class Clash(muxhost.Agent):
                    name = "demo"
                @muxhost.hookimpl
                def muxhost_register_agents(register):
                    register(Clash())
            '''), version="9.9")]
    for pkg in pkgs:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--target", str(site), str(pkg)], check=True)
    return site


def with_site(mux, site, load):
    return {"PYTHONPATH": str(site), "MUXHOST_LOAD_PLUGINS": load}


def test_a_third_party_plugin_is_listed_launched_stopped_and_purged(mux, site):
    env = with_site(mux, site, "muxhost_echoer")
    info = mux.ok("plugins", "--json", env=env)
    echoer = next(a for a in info["agents"] if a["name"] == "echoer")
    assert (echoer["package"], echoer["version"]) == ("muxhost-echoer", "0.3.1")
    assert echoer["hooks"] == ["muxhost_purge_veto", "muxhost_register_agents"]
    plugin = next(p for p in info["plugins"] if p["name"] == "muxhost_echoer")
    assert plugin["hooks"] == ["muxhost_purge_veto", "muxhost_register_agents"]
    assert {b["name"] for b in info["backends"]} == {"tmux"}
    assert "echoer" in mux.run("plugins", env=env).out

    rec = mux.ok("launch", "echoer", "--json", env=env)
    mux.wait_screen(rec["pane"], "echoer>")
    mux.type(rec["pane"], "please leave something")
    mux.wait_screen(rec["pane"], "echo: please")
    assert mux.ok("stop", rec["id"], "--json", env=env)["outcome"] == "exit"

    vetoed = mux.run("purge", rec["id"], "--yes", env={**env, "ECHOER_VETO": "1"})
    assert vetoed.rc == 4 and "vetoed: ECHOER_VETO is set" in vetoed.err
    assert mux.ok("show", rec["id"], "--json", env=env)["resumable"] is True

    r = mux.run("purge", rec["id"], "--yes", "--json", env=env)
    assert r.rc == 5, r.err
    report = json.loads(r.out)
    assert report["residual"] == [f"~/.local/share/echoer/{rec['conversation_id']}.leftover"]
    assert r.err.startswith("muxhost: purge incomplete")


def test_load_plugins_empty_means_built_ins_only(mux, site):
    r = mux.run("launch", "echoer", env=with_site(mux, site, ""))
    assert r.rc == 2
    assert r.err.strip() == "muxhost: unknown agent 'echoer' (known: demo)"


def test_two_agents_with_one_name_name_both_packages(mux, site):
    r = mux.run("ls", env=with_site(mux, site, "muxhost_clash"))
    assert r.rc == 1
    assert "agent 'demo' is registered twice" in r.err
    assert "package muxhost " in r.err and "package muxhost-clash" in r.err


def test_load_plugins_naming_nothing_installed_is_an_error(mux):
    r = mux.run("ls", env={"MUXHOST_LOAD_PLUGINS": "nope"})
    assert r.rc == 2 and "nope" in r.err


def test_every_hook_is_typed_and_documented():
    specs = [f for name, f in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("muxhost_")]
    assert {f.__name__ for f in specs} == {
        "muxhost_register_agents", "muxhost_register_backends", "muxhost_register_commands",
        "muxhost_agent_launched", "muxhost_agent_stopped", "muxhost_purge_veto", "muxhost_conversation_purged",
        "muxhost_activity_changed"}
    for f in specs:
        assert f.__doc__ and ":param" in f.__doc__, f.__name__
        sig = inspect.signature(f)
        assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values()), f.__name__
    assert "Stops at first non-None result" in hookspecs.muxhost_purge_veto.__doc__


def test_a_misspelled_hook_is_caught(monkeypatch):
    import types

    bad = types.ModuleType("bad_plugin")
    import muxhost

    @muxhost.hookimpl
    def muxhost_register_agent(register):  # missing "s"
        pass

    bad.muxhost_register_agent = muxhost_register_agent
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(bad)
    with pytest.raises(pluggy.PluginValidationError):
        pm.check_pending()


def test_plugin_commands_and_events(mux, tmp_path, site):
    body = textwrap.dedent('''
        import json, os
        import muxhost
        LOG = os.environ["EVENTS_LOG"]
        def _log(**kw):
            open(LOG, "a").write(json.dumps(kw, default=str) + "\\n")
        @muxhost.hookimpl
        def muxhost_register_commands(subparsers):
            p = subparsers.add_parser("hello", help="say hello")
            p.set_defaults(func=lambda args: print("hello from a plugin") or 0)
        @muxhost.hookimpl
        def muxhost_agent_launched(record):
            _log(event="launched", id=record["id"])
        @muxhost.hookimpl
        def muxhost_agent_stopped(record, outcome):
            _log(event="stopped", id=record["id"], outcome=outcome)
        @muxhost.hookimpl
        def muxhost_conversation_purged(agent, conversation_id, report):
            _log(event="purged", agent=agent, removed=len(report["removed"]))
    ''')
    pkg = make_package(tmp_path / "muxhost-events", "muxhost-events", "muxhost_events", body)
    events_site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(events_site), str(pkg)], check=True)
    log = tmp_path / "events.jsonl"
    env = {"PYTHONPATH": str(events_site), "EVENTS_LOG": str(log)}
    assert mux.ok("hello", env=env).strip() == "hello from a plugin"
    rec = mux.ok("launch", "demo", "--json", env=env)
    mux.wait_screen(rec["pane"], "demo>")
    mux.ok("stop", rec["id"], env=env)
    mux.ok("purge", rec["id"], "--yes", env=env)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in events] == ["launched", "stopped", "purged"]
    assert events[1]["outcome"] == "exit" and events[2]["removed"] >= 1


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory):
    """muxhost-broken (raises on import) and muxhost-twice (two entry points, one module)."""
    base = tmp_path_factory.mktemp("broken")
    site = base / "site"
    broken = make_package(base / "muxhost-broken", "muxhost-broken", "muxhost_broken",
                          'raise RuntimeError("broken on purpose")\n')
    twice = make_package(base / "muxhost-twice", "muxhost-twice", "muxhost_twice", "import muxhost\n")
    with open(twice / "pyproject.toml", "a") as f:  # the entry point table is the file's last
        f.write('muxhost_twice_again = "muxhost_twice"\n')
    for pkg in (broken, twice):
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--no-compile", "--target", str(site), str(pkg)], check=True)
    return site


def test_a_plugin_that_fails_to_load_is_one_line_naming_it(mux, broken_site):
    r = mux.run("ls", env={"PYTHONPATH": str(broken_site), "MUXHOST_LOAD_PLUGINS": "muxhost_broken"})
    assert r.rc == 1
    assert r.err.splitlines() == ["muxhost: plugin 'muxhost_broken' (package muxhost-broken) failed to load: "
                                  "RuntimeError: broken on purpose"]


def test_a_plugin_registered_twice_is_one_line_naming_it(mux, broken_site):
    # selected by its distribution name: both of its entry points load
    r = mux.run("ls", env={"PYTHONPATH": str(broken_site), "MUXHOST_LOAD_PLUGINS": "muxhost-twice"})
    assert r.rc == 1
    assert len(r.err.splitlines()) == 1, r.err
    assert r.err.startswith("muxhost: plugin 'muxhost_twice") and "(package muxhost-twice) cannot be registered" in r.err


def _age(root, seconds: float) -> None:
    """Every mtime under ``root`` ``seconds`` in the past (package metadata changed in the last two
    seconds is read again on each run rather than cached: it may still be changing)."""
    t = time.time() - seconds
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (t, t))


def test_the_plugin_cache_never_answers_for_other_packages(mux, tmp_path):
    """`muxhost` keeps the installed entry points in ~/.cache/muxhost/plugins.json; installing,
    upgrading, rewriting or removing a plugin package must show at once."""
    site = tmp_path / "site"
    env = {"PYTHONPATH": str(site)}  # every installed plugin loads
    cache = mux.home / ".cache" / "muxhost" / "plugins.json"

    def install(dist: str, module: str, body: str, version: str, *pip_args: str) -> None:
        pkg = make_package(tmp_path / f"{dist}-{version}", dist, module, body, version=version)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--no-compile", *pip_args, "--target", str(site), str(pkg)], check=True)
        _age(site, 60)

    def agents() -> dict[str, tuple[str, str, str]]:
        info = mux.ok("plugins", "--json", env=env)
        return {a["name"]: (a["plugin"], a["package"], a["version"]) for a in info["agents"]}

    second = textwrap.dedent('''
        import muxhost
        class Second(muxhost.Agent):
            name = "second"
        @muxhost.hookimpl
        def muxhost_register_agents(register):
            register(Second())
    ''')
    install("muxhost-echoer", "muxhost_echoer", PLUGIN, "0.3.1")
    assert agents()["echoer"] == ("muxhost_echoer", "muxhost-echoer", "0.3.1")
    assert cache.exists()  # what follows runs against a written cache
    mux.ok("ls", env=env)

    install("muxhost-second", "muxhost_second", second, "1.0")
    assert agents()["second"] == ("muxhost_second", "muxhost-second", "1.0")
    assert "echoer" in agents()

    shutil.rmtree(site / "muxhost_echoer-0.3.1.dist-info")  # an upgrade: what `pip uninstall` removes, then 0.4.0
    install("muxhost-echoer", "muxhost_echoer", PLUGIN, "0.4.0", "--upgrade")
    assert agents()["echoer"] == ("muxhost_echoer", "muxhost-echoer", "0.4.0")

    # the entry point renamed in place: same file, same size, only its mtime differs
    eps = site / "muxhost_echoer-0.4.0.dist-info" / "entry_points.txt"
    text = eps.read_text()
    assert "muxhost_echoer = muxhost_echoer" in text
    with open(eps, "r+") as f:
        f.write(text.replace("muxhost_echoer = ", "echoer_renamed = "))
    t = time.time() - 30
    os.utime(eps, (t, t))
    assert agents()["echoer"] == ("echoer_renamed", "muxhost-echoer", "0.4.0")

    for path in site.glob("muxhost_second*"):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    assert "second" not in agents()
    r = mux.run("launch", "second", env=env)
    assert r.rc == 2 and r.err.startswith("muxhost: unknown agent 'second' (known: ")
    assert "echoer" in r.err


def test_a_damaged_plugin_cache_is_read_again(mux, site):
    env = with_site(mux, site, "muxhost_echoer")
    cache = mux.home / ".cache" / "muxhost" / "plugins.json"
    cache.parent.mkdir(parents=True)
    for junk in ("{not json", '{"fingerprint": 1, "entry_points": 2}', "[]"):
        cache.write_text(junk)
        echoer = next(a for a in mux.ok("plugins", "--json", env=env)["agents"] if a["name"] == "echoer")
        assert (echoer["package"], echoer["version"]) == ("muxhost-echoer", "0.3.1")


def test_metadata_rewritten_within_one_timestamp_tick_is_not_taken_from_the_cache(mux, tmp_path):
    """A file rewritten twice within one file-system timestamp tick keeps its mtime (and here its size
    and inode): metadata that recent is read again on each run, never cached."""
    site = tmp_path / "site"
    pkg = make_package(tmp_path / "muxhost-echoer", "muxhost-echoer", "muxhost_echoer", PLUGIN)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-compile", "--target", str(site), str(pkg)], check=True)
    eps = site / "muxhost_echoer-0.3.1.dist-info" / "entry_points.txt"
    tick = time.time_ns() + 60 * 10**9  # "just now", however slow this machine is
    os.utime(eps, ns=(tick, tick))
    env = {"PYTHONPATH": str(site), "MUXHOST_LOAD_PLUGINS": "muxhost-echoer"}
    plugin = lambda: next(a["plugin"] for a in mux.ok("plugins", "--json", env=env)["agents"] if a["name"] == "echoer")
    assert plugin() == "muxhost_echoer"
    text = eps.read_text()
    with open(eps, "r+") as f:  # in place: same inode, same size, and the same mtime
        f.write(text.replace("muxhost_echoer = ", "echoer_renamed = "))
    os.utime(eps, ns=(tick, tick))
    assert plugin() == "echoer_renamed"
