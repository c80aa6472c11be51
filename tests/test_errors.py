"""Bad input: one line on stderr, prefixed muxhost:, the right exit code, never a traceback."""
import subprocess
import sys

import pytest


def one_line(r, code):
    assert r.rc == code, (r.rc, r.err)
    assert r.err.startswith("muxhost: "), r.err
    assert r.err.count("\n") == 1, r.err
    assert "Traceback" not in r.err
    return r.err.strip()


@pytest.mark.parametrize("text, expect", [
    ("stop:\n  exit_grace: [1\n", ["line 3", "YAML syntax error"]),
    ("stop:\n  exit_grace: 1\n  exit_gracee: 2\n", ["line 3", "stop.exit_gracee", "unknown key"]),
    ("agents:\n  mine:\n    command: [a]\n    exit_text: 5\n", ["line 4", "agents.mine.exit_text", "expected a string"]),
    ("stop:\n  term_grace: soon\n", ["line 2", "stop.term_grace"]),
    ("agents:\n  mine:\n    command: just-a-string\n", ["line 3", "agents.mine.command", "list"]),
    ("agents:\n  nobody:\n    env: {A: b}\n", ["line 2", "agents.nobody", "no plugin provides"]),
])
def test_config_errors_name_file_line_and_key(mux, text, expect):
    mux.config.write_text(text)
    msg = one_line(mux.run("ls"), 2)
    assert str(mux.config) in msg
    for part in expect:
        assert part in msg


def test_explicit_config_that_does_not_exist(mux, tmp_path):
    msg = one_line(mux.run("--config", str(tmp_path / "nope.yaml"), "ls"), 2)
    assert "no such config file" in msg


def test_unknown_agent_lists_the_known_ones(mux):
    msg = one_line(mux.run("launch", "nosuch", env={"MUXHOST_LOAD_PLUGINS": ""}), 2)
    assert msg == "muxhost: unknown agent 'nosuch' (known: demo)"
    mux.config.write_text("agents:\n  mine:\n    command: [/bin/true]\n")
    msg = one_line(mux.run("launch", "nosuch", env={"MUXHOST_LOAD_PLUGINS": ""}), 2)
    assert msg == "muxhost: unknown agent 'nosuch' (known: demo, mine)"


def test_usage_errors(mux):
    one_line(mux.run("launch", "demo", "--cwd", "/no/such/dir"), 2)
    one_line(mux.run("launch", "demo", "--env", "NOEQUALS"), 2)
    one_line(mux.run("launch", "demo", "--name", "bad:name"), 2)
    one_line(mux.run("stop"), 2)
    one_line(mux.run("frobnicate"), 2)
    one_line(mux.run("purge", "--agent", "demo"), 2)


def test_ref_that_matches_nothing_or_two_records(mux):
    assert "no record matches" in one_line(mux.run("stop", "zzzz"), 3)
    first = mux.ok("launch", "demo", "--name", "twin", "--json")
    assert "already used" in one_line(mux.run("launch", "demo", "--name", "twin"), 2)
    mux.ok("stop", "twin")
    second = mux.ok("launch", "demo", "--name", "twin", "--json")  # a stopped record's name is free again
    assert mux.ok("show", "twin", "--json")["id"] == second["id"]  # the live one wins
    assert one_line(mux.run("show", "%999"), 3) == "muxhost: no muxhost record for pane %999"
    mux.ok("stop", "twin")
    msg = one_line(mux.run("show", "twin"), 2)
    assert "matches 2 records" in msg and first["id"] in msg and second["id"] in msg
    assert mux.ok("show", first["id"][:6], "--json")["id"] == first["id"]  # a unique prefix


def test_no_tmux_server_on_the_socket(mux):
    rec = mux.ok("launch", "demo", "--json")
    mux.server.kill()
    msg = one_line(mux.run("show", "%0"), 1)
    assert "no tmux server running" in msg and mux.socket in msg
    # ls still answers: the record is lost
    listed = mux.ok("ls", "--all", "--json")
    assert [(r["id"], r["state"]) for r in listed] == [(rec["id"], "lost")]


def test_tmux_not_installed(mux, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {"PATH": str(bin_dir)}  # nothing, not even tmux
    msg = one_line(mux.run("launch", "demo", env=env), 1)
    assert "tmux is not installed" in msg


def test_help_imports_no_agent_plugin_and_no_libtmux():
    # only the built-in plugins that add commands (the purge key's), for their entries in --help
    code = ("import sys\nfrom muxhost.cli import cli\n"
            "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in sys.modules if m.startswith(('libtmux', 'muxhost.plugins.', 'muxhost.host', 'psutil'))\n"
            "       and m != 'muxhost.plugins.purge_key']\n"
            "print('BAD', bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "BAD []" in out
    assert "exit codes" in out


def test_config_agents_launch_stop_and_resume(mux, tmp_path):
    log = tmp_path / "runs.log"
    script = ("import sys\n"
              f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
              "while input('cfg> ') != 'quit': pass\n")
    mux.config.write_text(
        "agents:\n  cfgagent:\n"
        f"    command: [{sys.executable}, -c, {script!r}, start, '{{conversation_id}}']\n"
        f"    resume: [{sys.executable}, -c, {script!r}, resume, '{{conversation_id}}']\n"
        "    exit_text: quit\n    env: {CFG_AGENT: '1'}\n")
    rec = mux.ok("launch", "cfgagent", "--json")
    cid = rec["conversation_id"]
    assert cid and len(cid) == 36
    mux.wait_screen(rec["pane"], "cfg>")
    assert mux.ok("stop", rec["id"], "--json")["outcome"] == "exit"
    again = mux.ok("resume", rec["id"], "--json")
    mux.wait_screen(again["pane"], "cfg>")
    assert log.read_text().splitlines() == [f"start {cid}", f"resume {cid}"]
    assert mux.ok("stop", rec["id"], "--json")["outcome"] == "exit"
    # config agents cannot purge: said in one line
    assert "cannot purge" in one_line(mux.run("purge", rec["id"], "--yes"), 2)
