"""Pane backends are plugins: a record keeps its backend and address, and every command uses the
record's, whatever backend is chosen now (issue 11, item 1)."""
import json
import textwrap

import pytest

from muxhost.testing import install_plugin

LOGGED = textwrap.dedent('''
    """muxhost-logged: a third-party pane backend `logged` (tmux underneath) that logs every call to
    $LOGGED_LOG, so a test sees which backend each command used."""
    import json, os
    import muxhost
    from muxhost.backends.tmux import TmuxBackend

    class Logged(TmuxBackend):
        name = "logged"

        def _log(self, call, *args):
            with open(os.environ["LOGGED_LOG"], "a") as f:
                f.write(json.dumps({"call": call, "address": self.address, "args": [str(a) for a in args]}) + "\\n")

        def snapshot(self):
            self._log("snapshot")
            return super().snapshot()

        def create(self, argv, **kw):
            self._log("create", kw.get("name"))
            return super().create(argv, **kw)

        def respawn(self, pane_id, argv, **kw):
            self._log("respawn", pane_id)
            return super().respawn(pane_id, argv, **kw)

        def send_keys(self, pane_id, *keys):
            self._log("send_keys", pane_id, *keys)
            return super().send_keys(pane_id, *keys)

        def kill_session(self, session_id):
            self._log("kill_session", session_id)
            return super().kill_session(session_id)

    def factory(address=None, config=None):
        return Logged(address, config)

    factory.resolve_address = lambda given, config=None: given or os.environ.get("LOGGED_SOCKET")

    @muxhost.hookimpl
    def muxhost_register_backends(register):
        register("logged", factory)
''')


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    return install_plugin(tmp_path_factory.mktemp("logged"), "muxhost-logged", "muxhost_logged", LOGGED)


def calls(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def last_act(log) -> str:
    """The last call that did something (a launch looks at the pane until the agent is up)."""
    return [c["call"] for c in calls(log) if c["call"] not in ("snapshot", "capture")][-1]


def test_a_third_party_backend_serves_launch_ls_stop_resume_and_purge(mux, logged, tmp_path):
    log = tmp_path / "logged.jsonl"
    # the logged backend gets its own tmux socket (the test's server is the default backend's)
    env = {**logged, "LOGGED_LOG": str(log), "LOGGED_SOCKET": mux.socket + "-logged"}
    info = mux.ok("plugins", "--json", env=env)
    assert {b["name"]: b["package"] for b in info["backends"]}["logged"] == "muxhost-logged"
    rec = mux.ok("--backend", "logged", "launch", "demo", "--json", env=env)
    assert (rec["backend"], rec["socket"]) == ("logged", mux.socket + "-logged")
    assert last_act(log) == "create"
    try:
        # later commands choose nothing: the record's backend and address are used
        listed = mux.ok("ls", "--json", env=env)
        assert [(r["id"], r["state"], r["backend"]) for r in listed] == [(rec["id"], "running", "logged")]
        assert any(c["call"] == "snapshot" and c["address"] == mux.socket + "-logged" for c in calls(log))
        other = mux.ok("launch", "demo", "--json", env=env)  # the default backend, the test's tmux server
        assert other["backend"] == "tmux" and other["socket"] == mux.socket
        before = len(calls(log))
        stopped = mux.ok("stop", rec["id"], "--json", env=env)
        assert stopped["outcome"] == "exit"
        assert {"call": "send_keys", "address": mux.socket + "-logged", "args": [rec["pane"], "ctrl+u"]} in calls(log)[before:]
        assert any(c["call"] == "kill_session" for c in calls(log)[before:])
        resumed = mux.ok("resume", rec["id"], "--json", env=env)
        assert resumed["backend"] == "logged" and last_act(log) in ("create", "respawn")
        r = mux.run("purge", rec["id"], "--stop", "--yes", "--json", env=env)
        assert r.rc == 0, r.err
        assert json.loads(r.out)["residual"] == []
        # the default backend's agent never went near the logged server
        assert mux.ok("show", other["id"], "--json", env=env)["state"] == "running"
    finally:
        import subprocess

        subprocess.run(["tmux", "-L", mux.socket + "-logged", "kill-server"], capture_output=True)


def test_an_unknown_backend_is_a_usage_error(mux):
    r = mux.run("--backend", "nosuch", "ls", env={"MUXHOST_LOAD_PLUGINS": ""})  # the built-ins only
    assert r.rc == 2 and r.err.strip() == "muxhost: no backend 'nosuch' is installed (known: tmux)"
    r = mux.run("ls", env={"MUXHOST_BACKEND": "nosuch"})
    assert r.rc == 2 and "no backend 'nosuch'" in r.err
    mux.config.write_text("backend: nosuch\n")
    assert mux.run("ls").rc == 2


def test_no_backends_client_variables_reach_an_agent(mux):
    """Launched from inside some multiplexer's pane (here: a herdr pane's variables), the agent on
    tmux gets none of them: they describe the caller's pane, not the agent's."""
    import psutil

    herdr = {"HERDR_PANE_ID": "w9:p9", "HERDR_SOCKET_PATH": "/nonexistent/herdr.sock", "HERDR_ENV": "1"}
    rec = mux.ok("launch", "demo", "--json", env=herdr)
    mux.wait_screen(rec["pane"], "demo>")
    env = psutil.Process(rec["pids"][0]).environ()
    assert not set(herdr) & set(env)
    assert env["TMUX_PANE"] == rec["pane"]  # its own pane's
