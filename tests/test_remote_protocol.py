"""The remote-host pieces without an sshd: the request and header, the serve verb's refusals, which
arguments are REFs for a host, quoting for the remote shell, the ssh command line, hosts in config."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from muxhost import __version__, config
from muxhost.errors import ConfigError
from muxhost.remote import protocol, split, transport, _ref_positions
from muxhost.remote.hosts import RemoteHost, from_config

NASTY = "odd name $(touch pwned); 'q' \"dq\" `x` \\ * ~ \n next"


def serve(request: bytes, tmp_path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MUXHOST_STATE_DIR": str(tmp_path / "state"),
           "MUXHOST_CONFIG": str(tmp_path / "none.yaml")}
    return subprocess.run([sys.executable, "-m", "muxhost", "remote-serve"], input=request, env=env,
                          capture_output=True, timeout=60)


def test_serve_prints_its_header_and_refuses_another_schema_in_one_line(tmp_path):
    r = serve(json.dumps({"muxhost": "9.0", "schema": 99, "argv": ["ls"], "new": True}).encode() + b"\n", tmp_path)
    head = protocol.parse_header(r.stdout.split(b"\n")[0])
    assert head == {"protocol": "muxhost-remote", "muxhost": __version__, "schema": protocol.SCHEMA}
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1 and "speaks schema 99" in err and "install muxhost 9.0 here" in err


def test_serve_runs_the_verb_ignoring_unknown_fields(tmp_path):
    r = serve(protocol.request(["ls", "--all", "--json"])[:-2] + b', "later": {"x": 1}}\n', tmp_path)
    lines = r.stdout.decode().split("\n", 1)
    assert r.returncode == 0, r.stderr
    assert protocol.parse_header(lines[0]) is not None and json.loads(lines[1]) == []


@pytest.mark.parametrize("req", [b"not json\n", json.dumps({"schema": 1, "argv": ["show", "x"], "env": {"K": "v"}}).encode(),
                                 json.dumps({"schema": 1, "argv": ["remote-serve"]}).encode(),
                                 json.dumps({"schema": 1, "argv": "ls"}).encode()])
def test_serve_refuses_a_malformed_request(req, tmp_path):
    r = serve(req + b"\n", tmp_path)
    assert r.returncode == 2 and r.stderr.decode().count("\n") == 1 and r.stderr.startswith(b"muxhost: ")


@pytest.mark.parametrize("argv", [["--config", "{evil}", "hosts", "ls", "--json"], ["--config={evil}", "ls"],
                                  ["--socket", "{evil}", "ls"], ["hosts", "add", "hop", "elsewhere"],
                                  ["hosts", "ls"], ["attach", "r"], ["ui"], ["reconcile"]])
def test_serve_runs_only_a_forwarded_verb_with_the_servers_own_config(argv, tmp_path):
    """A request runs what a muxhost forwards: no global option naming a config, state or tmux server
    the serving user did not choose, no `hosts` (which would ssh on, or write the server's hosts)."""
    evil = tmp_path / "evil.yaml"  # (what someone else could leave in /tmp there)
    evil.write_text("hosts:\n  hop: {ssh: elsewhere}\n")
    r = serve(protocol.request([a.format(evil=evil) for a in argv]), tmp_path)
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1 and "is not served" in err, err
    assert r.stdout.count(b"\n") == 1, "nothing ran after the header"
    assert not (tmp_path / "state" / "hosts.json").exists()


def test_an_incompatible_header_says_which_version_is_needed():
    why = protocol.incompatible({"protocol": "muxhost-remote", "muxhost": "2.0", "schema": 2})
    assert why == f"runs muxhost 2.0 (remote schema 2); this muxhost {__version__} speaks schema 1: " \
                  f"install muxhost {__version__} there"
    assert protocol.incompatible({"protocol": "muxhost-remote", "schema": 1, "extra": [1]}) is None
    assert protocol.parse_header('{"protocol": "other"}') is None and protocol.parse_header("garbage") is None


def test_which_arguments_are_refs():
    assert split(["--config", "f", "stop", "a@box", "--grace", "1", "b@box"]) == (["--config", "f"], "stop",
                                                                                  ["a@box", "--grace", "1", "b@box"])
    assert _ref_positions("stop", ["a@box", "--grace", "1", "b@box"]) == [0, 3]
    assert _ref_positions("wait", ["--until", "idle", "r@box", "--timeout", "5"]) == [2]
    assert _ref_positions("send", ["r@box", "hi@there"]) == [0]
    assert _ref_positions("purge", ["--agent", "a@b", "--conversation", "c"]) == []


def test_the_remote_command_is_quoted_for_the_remote_shell(tmp_path):
    folder = tmp_path / "a dir 'q' $(x)"
    folder.mkdir()
    echo = folder / "args"
    echo.write_text("#!/bin/sh\nfor a; do printf '%s\\0' \"$a\"; done\n")
    echo.chmod(0o755)
    words = [NASTY, "-", "--flag", "$HOME", "a;b", "", "%C"]
    cmd = transport.remote_command(RemoteHost("h", "h", str(echo)), words)
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, check=True, cwd=tmp_path).stdout
    assert out.split(b"\0")[:-1] == [w.encode() for w in words]
    assert not (tmp_path / "pwned").exists()
    assert transport.remote_word("~/.local/bin/my muxhost") == "~/'.local/bin/my muxhost'"


def test_the_ssh_command_never_prompts_shares_one_connection_and_carries_no_request(tmp_path, monkeypatch):
    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / "s"))
    argv = transport.ssh_argv(RemoteHost("box", "ssh://me@box:2222", "~/bin/muxhost"), "~/bin/muxhost remote-serve", 4.2)
    opts = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert {"BatchMode=yes", "ConnectTimeout=5", "ControlMaster=auto", "ControlPersist=60"} <= opts
    path = next(o for o in opts if o.startswith("ControlPath="))[len("ControlPath="):]
    assert path.endswith("/%C") and len(path) - 2 + 58 <= 104
    assert argv[-3:] == ["--", "ssh://me@box:2222", "~/bin/muxhost remote-serve"]
    import os
    import stat

    st = os.stat(os.path.dirname(path))
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()


def test_hosts_in_config_are_checked_naming_the_key(tmp_path):
    cfg = config.parse("hosts:\n  timeout: 2\n  box: {ssh: 'ssh://me@box:2222', muxhost: '~/bin/muxhost'}\n"
                       "  alias: devbox\n", str(tmp_path / "c.yaml"))
    table = from_config(cfg)
    assert table.timeout == 2 and table.hosts["box"].muxhost == "~/bin/muxhost" and table.hosts["alias"].ssh == "devbox"
    for text, key in [("hosts:\n  box: {ssh: x, port: 2}\n", "hosts.box.port"),
                      ("hosts:\n  timeout: 0\n", "hosts.timeout"),
                      ("hosts:\n  local: {ssh: x}\n", "hosts.local"),
                      ("hosts:\n  box: {ssh: '-oProxyCommand=x'}\n", "hosts.box.ssh"),
                      ("hosts:\n  box: {muxhost: m}\n", "hosts.box")]:
        with pytest.raises(ConfigError, match=f"c.yaml: .*{key}"):
            from_config(config.parse(text, str(tmp_path / "c.yaml")))


def test_a_failed_session_is_one_reason():
    h = RemoteHost("box", "me@box", "~/bin/muxhost")
    assert transport.failure(h, 255, "me@box: Permission denied (publickey,password).\n").startswith("authentication refused")
    assert transport.failure(h, 255, "ssh: connect to host box port 22: Connection refused\n").startswith("unreachable")
    assert "pip install" in transport.failure(h, 127, "sh: 1: /home/me/bin/muxhost: not found\n")
    assert "too old" in transport.failure(h, 2, "muxhost: argument COMMAND: invalid choice: 'remote-serve' (…)\n")


def test_serve_in_process_leaves_nothing_behind(monkeypatch, tmp_path, capsys):
    """The CLI runs many times in one process: a served request changes neither stdin nor what the
    next call does (it may forward again)."""
    import io

    from muxhost import cli

    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MUXHOST_CONFIG", str(tmp_path / "none.yaml"))
    stdin = io.TextIOWrapper(io.BytesIO(protocol.request(["ls", "--all", "--json"])))
    monkeypatch.setattr(sys, "stdin", stdin)
    entry = getattr(cli, "cli", None) or cli.main
    assert entry(["remote-serve"]) == 0
    out = capsys.readouterr().out.split("\n", 1)
    assert protocol.parse_header(out[0]) is not None and json.loads(out[1]) == []
    assert sys.stdin is stdin and not protocol.serving()


def test_what_the_remote_tests_need_fails_them_in_ci_and_skips_them_elsewhere(monkeypatch):
    """remote_testing's guards (root, sshd, useradd, a checkout others may read): a skip would hide a
    missing install in CI, where all nine tests of test_remote.py would pass by running none."""
    from pathlib import Path

    from muxhost.testing import load_module

    rt = load_module(Path(__file__).with_name("remote_testing.py"))

    def outcome(ci: str | None) -> BaseException:
        monkeypatch.delenv("CI", raising=False)
        if ci is not None:
            monkeypatch.setenv("CI", ci)
        try:
            rt.missing("no useradd on this machine")
        except BaseException as e:  # (a skip or a failure: caught here, whichever it is)
            return e
        raise AssertionError("missing() went on")

    assert isinstance(outcome("true"), pytest.fail.Exception) and "no useradd" in str(outcome("true"))
    assert isinstance(outcome(None), pytest.skip.Exception) and "no useradd" in str(outcome(None))


def test_the_socket_folder_outside_the_state_folder_is_refused_when_another_user_could_swap_it(tmp_path, monkeypatch):
    """A state folder too long for a socket path puts the sockets in $XDG_RUNTIME_DIR (else /tmp)/muxhost-ssh-UID:
    a link there, or a parent another user may write without the sticky bit (who could rename the folder
    and leave a master socket of theirs at its name) is refused; /tmp's sticky 1777 is fine."""
    import os

    from muxhost.errors import MuxhostError

    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / ("s" * 80)))
    base = tmp_path / "run"
    base.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    folder = base / f"muxhost-ssh-{os.geteuid()}"
    os.chmod(base, 0o1777)
    assert transport.control_dir() == folder and folder.is_dir()
    os.rmdir(folder)
    os.chmod(base, 0o777)
    with pytest.raises(MuxhostError, match="writable by group or others"):
        transport.control_dir()
    assert not folder.exists(), "nothing made in a folder someone else may change"
    os.chmod(base, 0o1777)
    folder.symlink_to(tmp_path)
    with pytest.raises(MuxhostError, match="symbolic link"):
        transport.control_dir()


@pytest.mark.parametrize("argv", [["ls"], ["launch", "demo", "--name", "a"], ["show", "r"],
                                  ["send", "r", "mail me@example.org"], ["wait", "--until", "idle", "r"],
                                  ["read", "r", "--lines", "5"], ["--config", "{cfg}", "stop", "a", "b"]])
def test_dispatch_of_a_local_command_line_reads_no_config(argv, tmp_path, monkeypatch):
    """dispatch runs before every command: with no REF@HOST or --host it opens no file (a broken
    config would raise if it did)."""
    from muxhost.remote import dispatch

    broken = tmp_path / "broken.yaml"
    broken.write_text("hosts: [unclosed\n")
    monkeypatch.setenv("MUXHOST_CONFIG", str(broken))
    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / "state"))
    assert dispatch([a.format(cfg=broken) for a in argv], lambda argv: 99) is None
    assert not (tmp_path / "state").exists()


def test_serve_gives_a_requests_env_to_launch_as_its_env_arguments(monkeypatch, capsys):
    """A caller may send launch's --env values in ``env`` (schema 1) or in argv: the launch gets both."""
    import io

    ran = []
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        protocol.request(["launch", "demo", "--env", "A=1", "--", "x"], {"TOKEN": "s p=ace"}))))
    assert protocol.serve(lambda argv: ran.append(argv) or 0) == 0
    assert ran == [["launch", "--env=TOKEN=s p=ace", "demo", "--env", "A=1", "--", "x"]]


def test_the_options_that_take_a_value_are_the_parsers_own():
    """REF@HOST is found by skipping each option's value (``_VALUED``): an option of a REF verb that
    takes a value and is missing there would make its value look like the REF."""
    from muxhost import remote
    from muxhost.cli import build_parser

    commands = build_parser().commands.choices
    valued = {flag for verb in remote.REF_VERBS for a in commands[verb]._actions
              if a.option_strings and a.nargs != 0 and not isinstance(a, argparse._HelpAction)
              for flag in a.option_strings}
    assert valued == remote._VALUED
    globals_ = {f for a in build_parser()._actions if a.option_strings and a.nargs != 0
                and not isinstance(a, (argparse._HelpAction, argparse._VersionAction)) for f in a.option_strings}
    assert globals_ == set(remote.GLOBAL_WITH_VALUE)


def test_a_connection_lost_midway_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    """The session dies after the remote's header (the network went, the master connection was
    killed): one `muxhost: box: …` line and exit 1, never ssh's own 255 in silence (`wait X@box`
    returned 255 and said nothing)."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    header = protocol.header().replace('"', '\\"')
    (bin_dir / "ssh").write_text(f'#!/bin/sh\ncat >/dev/null\necho "{header}"\n'
                                 'echo "Connection to 127.0.0.1 closed by remote host." >&2\nexit 255\n')
    os.chmod(bin_dir / "ssh", 0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / "s"))
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    rc = transport.forward(RemoteHost("box", "box", "muxhost"), ["wait", "r", "--until", "exited"])
    err = capsys.readouterr().err
    assert rc == 1, (rc, err)
    lines = err.strip().splitlines()
    assert lines[-1].startswith("muxhost: box: ") and "closed by remote host" in lines[-1], err


def test_ls_across_hosts_fits_100_columns_offline_rows_too(monkeypatch):
    """`ls` with hosts (not on a terminal: 100 columns) keeps every line within 100 columns: an
    offline host's row says what kind of failure (`unreachable`), the whole reason is a note line
    (as with --json); `--wide` shows it in the row."""
    from muxhost.remote import listing

    monkeypatch.setenv("HOME", "/home/me")
    docs = [{"host": "local", "id": "1a2b3c4d", "name": "fix-tests", "agent": "claude", "state": "running",
             "activity": "idle", "pane": "%12", "conversation_id": "c" * 36, "resumable": True,
             "cwd": "/home/me/src/some/deep/project/folder"}]
    why = "unreachable (ssh: connect to host 10.0.0.12 port 22: Connection timed out after a long while)"
    lines = listing.table(docs, [("buildbox", why)]).splitlines()
    assert all(len(line) <= 100 for line in lines), "\n".join(f"{len(ln)}: {ln}" for ln in lines)
    assert lines[-1].split() == ["buildbox", "-", "-", "-", "offline", "-", "-", "-", "-", "unreachable"]
    assert why in listing.table(docs, [("buildbox", why)], wide=True)


def test_hosts_add_of_a_name_in_use_says_what_it_replaced(mux):
    """`hosts add box …` again (a typo, another target): it says the host changed and what it was,
    --muxhost path included, instead of 'added host box' over the old one in silence."""
    mux.ok("hosts", "add", "box", "me@box", "--muxhost", "~/.local/bin/muxhost")
    out = mux.ok("hosts", "add", "box", "me@other")
    assert "changed host box" in out and "me@box" in out and "~/.local/bin/muxhost" in out, out
    assert "added host other" in mux.ok("hosts", "add", "other", "me@other")
