"""No value of an agent's environment on any command line (issue 9, item 5).

Every local user can read every command line (``ps``). muxhost starts an agent through its launcher:
the pane's command is ``python …/launcher.py FILE``, FILE a 0600 file that the launcher deletes
before it execs the agent with exactly the file's environment. These tests log every argv muxhost
gives tmux (a ``tmux`` wrapper first on the CLI's PATH) and read every process's command line.
"""
import json
import os
import shutil
import stat
import subprocess
import sys
import time

import psutil
import pytest

from muxhost.testing import wait_for

SECRET = "s3cr3t-value-123"
API_KEY = "config-api-key-456"


@pytest.fixture
def logged(mux, tmp_path):
    """Every argv the CLI runs tmux with, one JSON list a line, in the file this returns."""
    log = tmp_path / "tmux-argv.log"
    wrap = tmp_path / "wrap-bin"
    wrap.mkdir()
    real = shutil.which("tmux")
    (wrap / "tmux").write_text(
        f"#!{sys.executable} -I\nimport json, os, sys\n"
        f"with open({str(log)!r}, 'a') as f:\n    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"os.execv({real!r}, [{real!r}, *sys.argv[1:]])\n")
    (wrap / "tmux").chmod(0o755)
    mux.env["PATH"] = f"{wrap}{os.pathsep}{mux.env['PATH']}"
    # a server that was started earlier, with a variable only it has
    mux.server.cmd("new-session", "-d", "-s", "old")
    mux.server.cmd("set-environment", "-g", "STALE_ONLY", "1")
    return log


def argvs(log):
    return [json.loads(line) for line in log.read_text().splitlines()]


def pane_pid(mux, pane):
    return int(mux.tmux("display-message", "-p", "-t", pane, "#{pane_pid}")[0])


def assert_nowhere(log, *values):
    """None of ``values`` in any argv given to tmux, nor in any process's command line now."""
    calls = argvs(log)
    assert any("new-session" in c or "respawn-pane" in c for c in calls), calls  # the wrapper was used
    for value in values:
        assert not [c for c in calls if any(value in a for a in c)], f"{value!r} on a tmux command line"
        shown = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
                 if any(value in a for a in p.info["cmdline"] or ())]
        assert not shown, f"{value!r} on a command line: {shown}"


def tmux_pane_env(mux, pane):
    """What tmux itself sets for ``pane``: the agent keeps these."""
    fmt = "#{socket_path},#{pid},#{session_id}\x1f#{version}"
    tmux_var, version = mux.tmux("display-message", "-p", "-t", pane, fmt)[0].split("\x1f")
    return {"TMUX": tmux_var.replace("$", ""), "TMUX_PANE": pane,
            "TERM": mux.tmux("show-options", "-gv", "default-terminal")[0],
            "TERM_PROGRAM": "tmux", "TERM_PROGRAM_VERSION": version,
            "SHELL": mux.tmux("show-options", "-gv", "default-shell")[0]}


def assert_exact_env(mux, rec, **extra):
    """The agent (the pane's own process) has exactly the caller's environment, ``extra``, its
    record, its folder, and what tmux sets for its pane; nothing of the tmux server's."""
    mux.wait_screen(rec["pane"], "demo>")
    pid = pane_pid(mux, rec["pane"])
    proc = psutil.Process(pid)
    assert "muxhost-demo" in " ".join(proc.cmdline())  # the agent IS the pane's process
    env = proc.environ()
    expected = {**mux.env, "HOME": str(mux.home), "MUXHOST_RECORD": rec["id"], "PWD": rec["cwd"], **extra,
                **tmux_pane_env(mux, rec["pane"])}
    assert "STALE_ONLY" not in env
    assert env == expected


def assert_no_launch_file(mux):
    folder = mux.state_dir / "launch"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert list(folder.iterdir()) == []


def test_launch_puts_no_secret_on_a_command_line(mux, logged):
    mux.config.write_text(f"agents:\n  demo:\n    env: {{API_KEY: {API_KEY}}}\n")
    rec = mux.ok("launch", "demo", "--env", f"SECRET_TOKEN={SECRET}", "--json")
    assert_exact_env(mux, rec, SECRET_TOKEN=SECRET, API_KEY=API_KEY)
    assert_nowhere(logged, SECRET, API_KEY)
    assert_no_launch_file(mux)


def test_resume_in_a_new_pane_and_in_the_dead_one(mux, logged):
    mux.config.write_text(f"agents:\n  demo:\n    env: {{API_KEY: {API_KEY}}}\n")
    rec = mux.ok("launch", "demo", "--env", f"SECRET_TOKEN={SECRET}", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.ok("stop", rec["id"])
    again = mux.ok("resume", rec["id"], "--json")  # its session went with the stop: a new pane
    assert again["pane"] != rec["pane"]
    assert_exact_env(mux, again, SECRET_TOKEN=SECRET, API_KEY=API_KEY)
    # the agent ends by itself: the resume runs it again in its dead pane (tmux respawn-pane)
    mux.type(again["pane"], "/exit")
    wait_for(lambda: mux.ok("show", rec["id"], "--json")["state"] == "exited", what="the agent to exit")
    third = mux.ok("resume", rec["id"], "--json")
    assert third["pane"] == again["pane"]
    assert any("respawn-pane" in c for c in argvs(logged))
    assert_exact_env(mux, third, SECRET_TOKEN=SECRET, API_KEY=API_KEY)
    assert_nowhere(logged, SECRET, API_KEY)
    assert_no_launch_file(mux)


def test_a_config_path_reaches_the_agent_on_no_command_line(mux, logged, tmp_path):
    private = tmp_path / "private-bin-7f3a"
    private.mkdir()
    path = f"{private}:/usr/bin:/bin"
    mux.config.write_text(f"agents:\n  demo:\n    env: {{PATH: '{path}'}}\n")
    rec = mux.ok("launch", "demo", "--json")
    assert_exact_env(mux, rec, PATH=path)  # not the caller's PATH, which tmux would give it
    assert_nowhere(logged, "private-bin-7f3a")


def test_the_agent_never_sees_its_launch_file(mux, tmp_path):
    mux.config.write_text("agents:\n  lister:\n"
                          "    command: [sh, -c, 'ls -A \"$MUXHOST_STATE_DIR/launch\"; echo end-of-list; sleep 30']\n")
    rec = mux.ok("launch", "lister", "--json")
    screen = mux.wait_screen(rec["pane"], "end-of-list")
    assert screen.strip().splitlines()[0] == "end-of-list"  # deleted before the agent started


def test_a_pane_that_cannot_be_made_leaves_no_file(mux):
    mux.server.cmd("new-session", "-d", "-s", "work")
    r = mux.run("launch", "demo", "--target", "no-such-session", "--env", f"SECRET_TOKEN={SECRET}")
    assert r.rc == 3 and r.err.startswith("muxhost: ") and len(r.err.splitlines()) == 1
    assert_no_launch_file(mux)


def test_a_file_no_launcher_took_is_deleted_by_the_next_launch(mux):
    folder = mux.state_dir / "launch"
    folder.mkdir(parents=True, mode=0o700)
    old, recent = folder / "0ld.launch", folder / "recent.launch"
    old.write_text("SECRET")
    recent.write_text("not yet")  # maybe a pane starting right now: kept
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    mux.ok("launch", "demo", "--json")
    assert sorted(p.name for p in folder.iterdir()) == ["recent.launch"]


def test_an_agent_that_cannot_be_run_says_why(mux, tmp_path):
    agent = tmp_path / "agent"
    agent.write_text("#!/nonexistent/interpreter\n")  # an executable file that execve refuses
    agent.chmod(0o755)
    mux.config.write_text(f"agents:\n  broken:\n    command: [{agent}]\n")
    rec = mux.launch_brief("broken")
    # (its exit status, 127, is checked outside tmux below: tmux 3.3a sometimes reports the status
    # of a pane whose process ends at once only when another of its children ends)
    line = f"muxhost: cannot run {agent}: No such file or directory"
    wait_for(lambda: line in mux.capture(rec["pane"], history=True), what="the launcher's error")  # tmux may scroll it up
    assert_no_launch_file(mux)


def test_the_agent_gets_default_signal_dispositions(mux):
    # the launcher is Python, which ignores SIGPIPE; an agent's pipelines must not see that
    mux.config.write_text("agents:\n  piper:\n    command: [sh, -c, 'yes | head -n 1; echo piped; sleep 30']\n")
    rec = mux.ok("launch", "piper", "--json")
    screen = mux.wait_screen(rec["pane"], "piped")
    assert "Broken pipe" not in screen and "write error" not in screen


def test_the_launcher_outside_tmux(tmp_path, monkeypatch):
    # how another backend uses it: run its argv from anywhere; the agent gets the file's folder and
    # environment, plus only the inherited variables it was told to keep
    from muxhost import launcher

    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    show = "import json, os; print(json.dumps([os.getcwd(), dict(os.environ)]))"
    spec = launcher.write([sys.executable, "-c", show], cwd=str(work), env={"A": "1", "SECRET_TOKEN": SECRET},
                          inherit=["PANE_VAR", "MISSING_VAR"])
    assert all(SECRET not in a for a in spec.argv)
    assert stat.S_IMODE(os.stat(spec.path).st_mode) == 0o600
    p = subprocess.run(spec.argv, env={"PANE_VAR": "mine", "OTHER": "stale"}, cwd=str(tmp_path),
                       capture_output=True, text=True)
    cwd, env = json.loads(p.stdout)
    assert (p.returncode, cwd) == (0, str(work))
    env.pop("LC_CTYPE", None)  # this agent is Python: it sets that when it coerces the C locale
    assert env == {"A": "1", "SECRET_TOKEN": SECRET, "PANE_VAR": "mine"}
    assert not os.path.exists(spec.path)
    again = subprocess.run(spec.argv, capture_output=True, text=True)  # the file is gone: one line, 127
    assert again.returncode == 127 and again.stderr.startswith("muxhost: cannot read the launch file")
    assert len(again.stderr.splitlines()) == 1
    gone = tmp_path / "gone-agent"
    spec = launcher.write([str(gone), "--flag"], cwd=str(work), env={"PATH": "/usr/bin:/bin"})
    p = subprocess.run(spec.argv, capture_output=True, text=True)
    assert (p.returncode, p.stderr) == (127, f"muxhost: cannot run {gone}: No such file or directory\n")
    spec = launcher.write(["no-such-agent-on-path"], cwd=str(work), env={"PATH": str(tmp_path)})
    p = subprocess.run(spec.argv, capture_output=True, text=True)
    assert (p.returncode, p.stderr) == (127, "muxhost: cannot run no-such-agent-on-path: No such file or directory\n")


def test_a_file_its_pane_never_took_is_deleted(tmp_path, monkeypatch):
    # the backend waits for the pane's launcher to take the file; a pane that ended first leaves none
    from muxhost import launcher

    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / "state"))
    spec = launcher.write(["true"], cwd=str(tmp_path), env={"SECRET_TOKEN": SECRET})
    pane = subprocess.Popen(["true"])  # a pane process that never ran the launcher
    pane.wait()
    assert spec.wait(pane.pid) is False
    assert not os.path.exists(spec.path)
