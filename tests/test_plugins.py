"""Plugins: the manager, the hook specs, and a third-party package installed with pip."""
import inspect
import json
import subprocess
import sys
import textwrap

import pluggy
import pytest

from muxhost import hookspecs
from muxhost.plugins import get_plugin_manager

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
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(textwrap.dedent(f'''
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{dist}"
        version = "{version}"
        dependencies = ["muxhost"]

        [project.entry-points.muxhost]
        {module} = "{module}"
    '''))
    (root / f"{module}.py").write_text(body)
    return root


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
        "muxhost_agent_launched", "muxhost_agent_stopped", "muxhost_purge_veto", "muxhost_conversation_purged"}
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
