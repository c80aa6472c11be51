"""Every hook of muxhost/hookspecs.py is called by a test named ``test_hook_<name>`` (datasette's
``test_plugin_hooks_have_tests``): a hook nothing calls is a hook that can break unseen."""
import inspect
import json
import textwrap

import pytest

from muxhost import hookspecs
from muxhost.testing import Watching, install_plugin, wait_for

SPY = textwrap.dedent('''
    """muxhost-spy: implements every hook and logs each call to $SPY_LOG."""
    import json, os
    import muxhost

    def _log(hook, **kw):
        with open(os.environ["SPY_LOG"], "a") as f:
            f.write(json.dumps({"hook": hook, **kw}, default=str) + "\\n")

    class Backend:
        pass

    @muxhost.hookimpl
    def muxhost_register_agents(register):
        _log("muxhost_register_agents")

    @muxhost.hookimpl
    def muxhost_register_backends(register):
        _log("muxhost_register_backends")
        from muxhost.backends.tmux import TmuxBackend
        register("spytmux", lambda socket=None, config=None: TmuxBackend(socket, config))

    @muxhost.hookimpl
    def muxhost_register_commands(subparsers):
        p = subparsers.add_parser("spy", help="say the spy is here")
        p.set_defaults(func=lambda args: print("spy here") or 0)

    @muxhost.hookimpl
    def muxhost_agent_launched(record):
        _log("muxhost_agent_launched", id=record["id"], state=record["state"])

    @muxhost.hookimpl
    def muxhost_agent_stopped(record, outcome):
        _log("muxhost_agent_stopped", id=record["id"], outcome=outcome, state=record["state"])

    @muxhost.hookimpl
    def muxhost_purge_veto(agent, conversation_id, artifacts):
        _log("muxhost_purge_veto", agent=agent, conversation_id=conversation_id, n=len(artifacts))
        return os.environ.get("SPY_VETO") or None

    @muxhost.hookimpl
    def muxhost_conversation_purged(agent, conversation_id, report):
        _log("muxhost_conversation_purged", conversation_id=conversation_id, removed=len(report["removed"]),
             complete=report["complete"])

    @muxhost.hookimpl
    def muxhost_activity_changed(record, old, new):
        _log("muxhost_activity_changed", id=record["id"], old=old, new=new, activity=record["activity"])
''')


@pytest.fixture(scope="module")
def spy(tmp_path_factory):
    return install_plugin(tmp_path_factory.mktemp("spy"), "muxhost-spy", "muxhost_spy", SPY)


@pytest.fixture
def env(spy, tmp_path):
    return {**spy, "SPY_LOG": str(tmp_path / "spy.jsonl")}


def calls(env, hook):
    from pathlib import Path

    path = Path(env["SPY_LOG"])
    lines = path.read_text().splitlines() if path.exists() else []
    return [c for c in map(json.loads, lines) if c["hook"] == hook]


def launched(mux, env):
    rec = mux.ok("launch", "demo", "--json", env=env)
    mux.wait_screen(rec["pane"], "demo>")
    mux.type(rec["pane"], "something to purge")
    mux.wait_screen(rec["pane"], "turn 1")
    return rec


def test_hook_muxhost_register_agents(mux, env):
    mux.ok("plugins", "--json", env=env)
    assert calls(env, "muxhost_register_agents")


def test_hook_muxhost_register_backends(mux, env):
    info = mux.ok("plugins", "--json", env=env)
    assert calls(env, "muxhost_register_backends")
    spy = next(b for b in info["backends"] if b["name"] == "spytmux")
    assert spy["package"] == "muxhost-spy"


def test_hook_muxhost_register_commands(mux, env):
    assert mux.ok("spy", env=env).strip() == "spy here"
    # the built-in purge key's commands come through the same hook
    assert "bind-key P" in mux.ok("tmux-bindings", env=env)


def test_hook_muxhost_agent_launched(mux, env):
    rec = launched(mux, env)
    assert [c["id"] for c in calls(env, "muxhost_agent_launched")] == [rec["id"]]


def test_hook_muxhost_agent_stopped(mux, env):
    rec = launched(mux, env)
    mux.ok("stop", rec["id"], env=env)
    assert calls(env, "muxhost_agent_stopped") == [
        {"hook": "muxhost_agent_stopped", "id": rec["id"], "outcome": "exit", "state": "stopped"}]


def test_hook_muxhost_purge_veto(mux, env):
    rec = launched(mux, env)
    mux.ok("stop", rec["id"], env=env)
    r = mux.run("purge", rec["id"], "--yes", env={**env, "SPY_VETO": "not today"})
    assert r.rc == 4 and "vetoed: not today" in r.err
    assert calls(env, "muxhost_purge_veto")[0]["conversation_id"] == rec["conversation_id"]
    assert calls(env, "muxhost_conversation_purged") == []


def test_hook_muxhost_conversation_purged(mux, env):
    rec = launched(mux, env)
    mux.ok("stop", rec["id"], env=env)
    mux.ok("purge", rec["id"], "--yes", env=env)
    [call] = calls(env, "muxhost_conversation_purged")
    assert call["conversation_id"] == rec["conversation_id"] and call["complete"] and call["removed"] >= 2


def test_hook_muxhost_activity_changed(mux, env):
    mux.config.write_text("watch:\n  interval: 0.3\n")
    rec = mux.ok("launch", "demo", "--json", env=env)
    mux.wait_screen(rec["pane"], "demo>")
    with Watching(mux, env=env) as w:
        w.wait(rec["pane"], "idle", timeout=10)
        mux.type(rec["pane"], "/ask")
        w.wait(rec["pane"], "waiting")
        wait_for(lambda: len(calls(env, "muxhost_activity_changed")) >= 2, timeout=5, what="two calls")
    assert calls(env, "muxhost_activity_changed") == [
        {"hook": "muxhost_activity_changed", "id": rec["id"], "old": None, "new": "idle", "activity": "idle"},
        {"hook": "muxhost_activity_changed", "id": rec["id"], "old": "idle", "new": "waiting", "activity": "waiting"}]


def test_every_hookspec_has_a_test():
    specs = {name for name, f in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("muxhost_")}
    tested = {name[len("test_hook_"):] for name in globals() if name.startswith("test_hook_")}
    assert specs - tested == set(), f"hooks without a test_hook_<name>: {sorted(specs - tested)}"
