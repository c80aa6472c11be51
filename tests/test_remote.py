"""Remote hosts over a real OpenSSH: an sshd on 127.0.0.1, a second local user as the other machine.

The local muxhost (the ``mux`` fixture) reaches the remote user's muxhost through the system ssh
(a wrapper first on PATH adds ``-F`` with the test's client config and logs every argv). Marked
``remote``: ``-m "not remote"`` skips them in the quick loop.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from muxhost.testing import load_module, wait_for

rt = load_module(Path(__file__).with_name("remote_testing.py"))
pytestmark = pytest.mark.remote

NASTY = "odd name $(touch pwned); 'q' \"dq\""  # (record names are plain: this goes into folders and text)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(remote user, sshd, client folder): one per module, ended by pid and userdel at the end."""
    rt.need_root()
    root = tmp_path_factory.mktemp("remote")
    user = rt.RemoteUser(f"mxr{secrets.token_hex(4)}", Path("/home"))
    sshd = None
    try:
        rt.install_muxhost(user)
        key = rt.authorized_key(user, root)
        sshd = rt.Sshd(root, user.name, key).start()
        yield {"user": user, "sshd": sshd, "root": root, "key": key}
    finally:
        if sshd is not None:
            sshd.stop()
        user.remove()


@pytest.fixture
def box(world, mux, tmp_path, monkeypatch):
    """The local muxhost with host ``box`` (the remote user over the sshd), its ssh wrapper logging argv.
    Its shared connections are in a folder of its own: the test's state folder is too long a path
    for a socket, and the fallback, /tmp/muxhost-ssh-UID, holds every other muxhost's of this user."""
    runtime = Path(tempfile.mkdtemp(prefix="mxr", dir="/tmp"))
    mux.env["XDG_RUNTIME_DIR"] = str(runtime)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))  # (for _control_dir, here)
    sshd, user = world["sshd"], world["user"]
    client = tmp_path / "ssh_config"
    client.write_text(
        f"Host box boxpw\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {user.name}\n"
        f"  IdentityFile {world['key']}\n  IdentitiesOnly yes\n  UserKnownHostsFile {tmp_path}/known_hosts\n"
        "  StrictHostKeyChecking accept-new\n"
        f"Host *\n  IdentityFile {world['key']}\n  IdentitiesOnly yes\n  UserKnownHostsFile {tmp_path}/known_hosts\n"
        "  StrictHostKeyChecking accept-new\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "ssh-argv.log"
    (bin_dir / "ssh").write_text(
        f"#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> {log}; done\necho --- >> {log}\n"
        f"exec /usr/bin/ssh -F {client} \"$@\"\n")
    os.chmod(bin_dir / "ssh", 0o755)
    mux.env["PATH"] = f"{bin_dir}:{mux.env.get('PATH', '/usr/bin:/bin')}"
    mux.config.write_text(f"hosts:\n  timeout: 5\n  box: {{ssh: box, muxhost: '~/bin/muxhost'}}\n")
    mux.ssh_log = log
    mux.remote = user
    yield mux
    for ctl in _control_dir(mux).glob("*"):  # the shared connections this test opened
        if ctl.is_socket():
            subprocess.run(["/usr/bin/ssh", "-F", str(client), "-o", f"ControlPath={ctl}", "-O", "exit", "box"],
                           capture_output=True, timeout=10)
    r = user.muxhost("ls", "--all", "--json")
    for rec in json.loads(r.stdout or "[]"):
        user.muxhost("stop", rec["id"])
    user.run("tmux", "kill-server")
    shutil.rmtree(runtime, ignore_errors=True)


def remote_ls(user, *args):
    r = user.muxhost("ls", "--all", "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_launch_ls_send_wait_read_stop_on_a_remote_host(box):
    folder = box.remote.home / NASTY
    box.remote.run("mkdir", str(folder))
    rec = box.ok("launch", "demo", "--host", "box", "--name", "odd-1", "--cwd", str(folder), "--json")
    assert rec["cwd"] == str(folder) and rec["state"] == "running"
    there = {r["id"]: r for r in remote_ls(box.remote)}
    assert there[rec["id"]]["cwd"] == str(folder), "the record is on the remote, in its folder"
    assert not (box.remote.home / "pwned").exists() and not Path(box.home, "pwned").exists()

    rows = box.ok("ls", "--json")
    mine = [r for r in rows if r["id"] == rec["id"]]
    assert len(mine) == 1 and mine[0]["host"] == "box" and mine[0]["name"] == "odd-1"
    table = box.ok("ls")
    assert table.splitlines()[0].split()[:2] == ["HOST", "ID"] and any(
        line.startswith("box ") and rec["id"] in line for line in table.splitlines())
    only = box.ok("ls", "--host", "box", "--json")
    assert [r["id"] for r in only] == [rec["id"]]
    assert box.ok("ls", "--host", "local", "--json") == []

    ref = "odd-1@box"
    wait_for(lambda: "demo>" in box.ok("read", ref), what="the demo prompt over ssh")
    box.ok("send", ref, NASTY)
    box.ok("wait", ref, "--until", "idle", "--timeout", "30")
    assert f"heard {len(NASTY)} characters" in box.ok("read", ref) and NASTY[::-1] in box.ok("read", ref)
    assert not (box.remote.home / "pwned").exists() and not (folder / "pwned").exists()
    shown = box.ok("show", ref, "--json")
    pids = [p["pid"] for p in shown["processes"]]
    assert pids
    why = box.ok("explain", ref, "--json")  # (judged there: its panes, its processes, its plugin)
    assert why["id"] == rec["id"] and why["activity"] == "idle" and why["look"]["plugin"]["reason"]

    out = box.ok("stop", ref, "--json")
    assert out["outcome"] in ("exit", "hup", "term", "kill")
    survivors = box.remote.run("ps", "-o", "pid=", "-p", ",".join(map(str, pids))).stdout.split()
    assert survivors == [], f"processes left on the remote after stop: {survivors}"
    assert {r["id"]: r for r in remote_ls(box.remote)}[rec["id"]]["state"] == "stopped"


def test_sleep_wake_and_purge_on_a_remote_host_keep_the_neighbour(box):
    a = box.ok("launch", "demo", "--host", "box", "--name", "one", "--json")
    b = box.ok("launch", "demo", "--host", "box", "--name", "two", "--json")
    for ref in ("one@box", "two@box"):
        wait_for(lambda: "demo>" in box.ok("read", ref), what="the demo prompt")
        box.ok("send", ref, "make a conversation")
        box.ok("wait", ref, "--until", "idle", "--timeout", "30")
    convs = box.remote.home / ".local" / "share" / "muxhost-demo" / "conversations"
    a_file, b_file = convs / f"{a['conversation_id']}.jsonl", convs / f"{b['conversation_id']}.jsonl"
    wait_for(lambda: a_file.exists() and b_file.exists(), what="both conversations on the remote's disk")

    assert box.ok("sleep", "one@box", "--json")["state"] == "asleep"
    assert box.ok("wake", "one@box", "--json")["state"] == "running"

    plan = box.ok("purge", "one@box", "--dry-run", "--json")
    assert any(a["conversation_id"] in item for item in plan["plan"])
    assert a_file.exists()
    b_before = b_file.read_bytes()
    done = box.ok("purge", "one@box", "--stop", "--yes", "--archive", "--json")  # (--archive rides the argv)
    assert done["residual"] == [] and Path(done["archive"]).is_file(), done
    assert Path(done["archive"]).is_relative_to(box.remote.home), "archived in the remote user's state dir"
    assert not a_file.exists(), "the remote conversation is gone"
    assert b_file.read_bytes() == b_before, "the neighbour is byte for byte the same"
    box.ok("stop", "two@box")
    rm = box.ok("rm", "one@box", "--json")
    assert rm["done"]
    assert a["id"] not in {r["id"] for r in remote_ls(box.remote)}


def test_no_secret_on_any_command_line(box):
    secret = "s3cret-" + secrets.token_hex(8)
    rec = box.ok("launch", "demo", "--host", "box", "--name", "env", "--env", f"TOKEN={secret}", "--json")
    logged = box.ssh_log.read_text()
    assert secret not in logged, "the secret went into ssh's argv"
    assert "remote-serve" in logged and "TOKEN" not in logged
    # the remote side: no process of that user carries it in its command line
    for line in box.remote.run("ps", "-u", box.remote.name, "-o", "args=").stdout.splitlines():
        assert secret not in line, line
    # ... but the agent has it in its environment
    env_of = box.remote.run("sh", "-c", f"cat /proc/{rec['pids'][0]}/environ | tr '\\0' '\\n'").stdout
    assert f"TOKEN={secret}" in env_of
    box.ok("stop", "env@box")


def test_ls_with_the_sshd_stopped_shows_an_offline_row_within_the_timeout(box, world, tmp_path):
    box.ok("launch", "demo", "--name", "here", "--json")
    gone = rt.Sshd(tmp_path, world["user"].name, world["key"]).start()
    target = f"ssh://{world['user'].name}@127.0.0.1:{gone.port}"
    box.config.write_text(f"hosts:\n  timeout: 5\n  box: {{ssh: box, muxhost: '~/bin/muxhost'}}\n"
                          f"  gone: {{ssh: '{target}', muxhost: '~/bin/muxhost'}}\n")
    assert {d["name"]: d for d in box.ok("hosts", "ls", "--json")}["gone"]["reachable"]
    subprocess.run(["/usr/bin/ssh", "-F", str(tmp_path / "ssh_config"), "-o",  # (its shared connection)
                    f"ControlPath={_control_dir(box)}/%C", "-O", "exit", target], capture_output=True, timeout=10)
    gone.stop()
    t0 = time.monotonic()
    out = box.ok("ls")
    took = time.monotonic() - t0
    offline = [line for line in out.splitlines() if line.startswith("gone ")]
    assert len(offline) == 1 and "offline" in offline[0] and "unreachable" in offline[0], out
    assert any(line.startswith("local ") and "here" in line for line in out.splitlines())
    assert took < 5 + 10, took
    # a dead host is not asked again for 30 s: the cached row says the same without ssh
    asked = box.ssh_log.read_text().splitlines().count(target)
    r = box.run("ls", "--json")
    assert r.rc == 0 and "host gone is offline: unreachable" in r.err
    assert "gone" not in {d["host"] for d in json.loads(r.out)} and "local" in {d["host"] for d in json.loads(r.out)}
    assert box.ssh_log.read_text().splitlines().count(target) == asked, "gone was asked again within 30 s"


def _control_dir(box) -> Path:
    """Where this test's muxhost keeps its shared connections."""
    from muxhost.remote.transport import socket_folder

    folder = socket_folder(Path(os.path.realpath(box.state_dir)))
    assert folder.parent == Path(box.env["XDG_RUNTIME_DIR"]) or folder.parent == box.state_dir, folder
    return folder


def test_an_ssh_that_would_ask_for_a_password_fails_in_one_line(box, world, tmp_path):
    pw = rt.Sshd(tmp_path, world["user"].name, world["key"], password_only=True).start()
    try:
        box.config.write_text(f"hosts:\n  pw: {{ssh: 'ssh://{world['user'].name}@127.0.0.1:{pw.port}'}}\n")
        t0 = time.monotonic()
        r = box.run("show", "x@pw", timeout=30)
        assert time.monotonic() - t0 < 20
        assert r.rc == 1 and r.err.count("\n") == 1 and "pw: authentication refused" in r.err, r.err
        hosts = box.ok("hosts", "ls", "--json")
        assert hosts[0]["reachable"] is False and "authentication refused" in hosts[0]["reason"]
    finally:
        pw.stop()


def test_a_remote_of_another_schema_or_without_muxhost_is_one_line(box):
    fake = box.remote.home / "bin" / "muxhost-future"
    fake.write_text("#!/bin/sh\nread line\n"
                    "echo '{\"protocol\": \"muxhost-remote\", \"muxhost\": \"9.0\", \"schema\": 99, \"new\": 1}'\n")
    os.chmod(fake, 0o755)
    box.config.write_text("hosts:\n  future: {ssh: box, muxhost: '~/bin/muxhost-future'}\n"
                          "  bare: {ssh: box, muxhost: '~/bin/no-such-muxhost'}\n")
    r = box.run("show", "x@future")
    assert r.rc == 1 and r.err.count("\n") == 1, r.err
    assert "runs muxhost 9.0 (remote schema 99)" in r.err and "install muxhost 0.1.0 there" in r.err
    r = box.run("read", "x@bare")
    assert r.rc == 1 and r.err.count("\n") == 1 and "no muxhost there" in r.err and "pip install" in r.err, r.err
    rows = {d["name"]: d for d in box.ok("hosts", "ls", "--json")}
    assert rows["future"]["version"] == "9.0" and not rows["future"]["reachable"]
    assert "no muxhost there" in rows["bare"]["reason"]


def test_hosts_add_ls_rm(box):
    box.config.write_text("")
    assert "added host box2" in box.ok("hosts", "add", "box2", "box", "--muxhost", "~/bin/muxhost")
    rows = box.ok("hosts", "ls", "--json")
    assert rows[0]["name"] == "box2" and rows[0]["reachable"] and rows[0]["version"] == "0.1.0"
    assert isinstance(rows[0]["records"], int) and rows[0]["rtt"] > 0
    text = box.ok("hosts", "ls")
    assert text.splitlines()[0].split() == ["HOST", "SSH", "STATE", "MUXHOST", "RECORDS", "RTT"]
    assert box.run("hosts", "add", "local", "box").rc == 2
    assert box.run("hosts", "add", "x", "-oProxyCommand=evil").rc == 2
    assert "removed host box2" in box.ok("hosts", "rm", "box2")
    assert box.run("hosts", "rm", "box2").rc == 3


def test_rm_of_a_worktree_on_a_remote_host(box):
    repo = box.remote.home / "proj"
    for argv in (["git", "init", "-q", "-b", "main", str(repo)],
                 ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                  "--allow-empty", "-m", "first"]):
        assert box.remote.run(*argv).returncode == 0
    rec = box.ok("launch", "demo", "--host", "box", "--cwd", str(repo), "--worktree", "feat", "--name", "wt", "--json")
    folder = Path(rec["worktree"]["path"])
    assert folder.is_dir() and folder.parent == repo.parent
    box.ok("stop", "wt@box")
    out = box.ok("rm", "wt@box")
    assert str(folder) in out
    assert not folder.exists()
    assert "feat" not in box.remote.run("git", "-C", str(repo), "branch", "--list", "feat").stdout


def test_attach_inside_tmux_opens_a_window_running_ssh_to_the_remote_pane(box):
    box.ok("launch", "demo", "--host", "box", "--name", "seen", "--json")
    box.tmux("new-session", "-d", "-s", "outer", "-x", "120", "-y", "30", "/bin/sh")
    path = box.tmux("display-message", "-p", "-t", "outer", "#{socket_path}")[0]
    r = box.run("attach", "seen@box", env={"TMUX": f"{path},1,0"})
    assert r.rc == 0, r.err
    windows = box.tmux("list-windows", "-t", "outer", "-F", "#{window_name} #{pane_id}")
    pane = next(w.split()[1] for w in windows if w.startswith("seen@box "))
    box.wait_screen(pane, "demo>", timeout=30)


def test_attach_inside_tmux_runs_no_format_of_the_ref_here(box, tmp_path):
    """tmux expands formats in a new window's name: REF@HOST's ``#(…)`` would run a command here."""
    box.tmux("new-session", "-d", "-s", "outer", "-x", "120", "-y", "30", "/bin/sh")
    path = box.tmux("display-message", "-p", "-t", "outer", "#{socket_path}")[0]
    pwned = tmp_path / "pwned"
    r = box.run("attach", f"x#(touch {pwned})@box", env={"TMUX": f"{path},1,0"})
    assert r.rc == 0, r.err
    time.sleep(2)  # (tmux runs a #() job in the background)
    assert not pwned.exists(), "the REF's #(…) ran as a tmux job here"


def test_purge_at_a_host_purges_the_conversation_it_showed_or_nothing(box):
    """``purge REF@HOST`` without --yes shows the remote plan and asks here; the agent moves to a new
    conversation before the answer: a yes purges the one shown or nothing — never the new one."""
    box.ok("launch", "demo", "--host", "box", "--name", "ask", "--json")
    wait_for(lambda: "demo>" in box.ok("read", "ask@box"), what="the demo prompt")
    box.ok("send", "ask@box", "make a conversation")
    box.ok("wait", "ask@box", "--until", "idle", "--timeout", "30")
    first = box.ok("show", "ask@box", "--json")["conversation_id"]
    pane = box.shell(box.home, box.env)
    box.type(pane, f"{sys.executable} -m muxhost purge ask@box --stop; echo rc=$((100 + $?))")  # (rc=1xx: not the typed line)
    screen = box.wait_screen(pane, "for good? [y/N]", timeout=30)
    assert first in screen  # (the plan shown is the remote's, of the conversation it is in now)
    box.ok("send", "ask@box", "/new")
    box.ok("send", "ask@box", "a new one")
    box.ok("wait", "ask@box", "--until", "idle", "--timeout", "30")
    now = wait_for(lambda: (lambda c: c if c != first else None)(box.ok("show", "ask@box", "--json")["conversation_id"]),
                   what="the agent in a new conversation")
    convs = box.remote.home / ".local" / "share" / "muxhost-demo" / "conversations"
    before = (convs / f"{now}.jsonl").read_bytes()
    box.type(pane, "y")
    box.wait_screen(pane, "rc=1", timeout=60)
    assert (convs / f"{now}.jsonl").read_bytes() == before, "the conversation nobody was shown is untouched"
    assert box.ok("show", "ask@box", "--json")["state"] == "running"  # (not stopped for another conversation)
    box.end_shell(pane)


def _remote_watches(user) -> list[int]:
    """The pids of the remote user's `muxhost watch` processes (its remote-serve of a watch)."""
    import psutil

    found = []
    for p in psutil.process_iter(["uids", "cmdline"]):
        try:
            if p.info["uids"] and p.info["uids"].real == user.uid and "remote-serve" in " ".join(p.info["cmdline"] or []):
                found.append(p.pid)
        except psutil.Error:
            pass
    return found


def _cut_connections(user) -> None:
    """The sshd processes serving ``user`` (the shared connection's), ended by pid: the network went."""
    import psutil

    for p in psutil.process_iter(["uids", "name"]):
        try:
            if p.info["name"] == "sshd" and p.info["uids"] and p.info["uids"].real == user.uid:
                p.kill()
        except psutil.Error:
            pass


def test_the_watch_follows_a_remote_host_goes_offline_and_back_and_leaves_nothing(box, world):
    from muxhost.testing import Watching
    import psutil

    from muxhost.testing.tmuxclient import TmuxClient

    box.server.cmd("new-session", "-d", "-s", "main", "-x", "120", "-y", "30", "--", "/bin/sh")
    rec = box.ok("launch", "demo", "--host", "box", "--name", "asker", "--json")
    wait_for(lambda: "demo>" in box.ok("read", "asker@box"), what="the demo prompt over ssh")
    client = TmuxClient(box.socket, "main", dict(box.env, TERM="xterm-256color"), cols=120, rows=30)
    with contextlib.closing(client), Watching(box) as w:
        def lines(pred):
            return [c for c in list(w.changes) if pred(c)]

        wait_for(lambda: lines(lambda c: c.get("record") == rec["id"] and c.get("new") == "idle"), timeout=60,
                 what="the remote agent's idle line")
        assert all(c["host"] == "box" for c in lines(lambda c: c.get("record") == rec["id"]))
        box.ok("send", "asker@box", "/ask")
        wait_for(lambda: lines(lambda c: c.get("record") == rec["id"] and c.get("new") == "waiting"), timeout=30,
                 what="the remote agent's waiting line")
        wait_for(lambda: w.option("@muxhost_summary") == "1 waiting", timeout=10, what="the summary")
        assert w.option("@muxhost_waiting") == "asker@box"
        client.wait_text("asker@box (demo) is waiting for you", timeout=5)  # the alert, naming the host
        conf = box.home / "bindings.conf"
        conf.write_text(box.ok("tmux-bindings"))
        assert box.server.cmd("source-file", str(conf)).returncode == 0
        for k in ("HOME", "PATH", "MUXHOST_CONFIG", "MUXHOST_STATE_DIR", "XDG_RUNTIME_DIR"):  # (a user's server has them)
            box.server.cmd("set-environment", "-g", k, box.env[k])
        client.press(b"\x02W")  # the wait key: to the remote agent, as `attach asker@box` opens it
        wait_for(lambda: "asker@box" in box.tmux("list-windows", "-a", "-F", "#{window_name}"), timeout=15,
                 what="a window running ssh -t to the remote agent")
        wait_for(lambda: "demo>" in "\n".join(box.tmux("capture-pane", "-p", "-t", "asker@box")), timeout=20,
                 what="the remote agent's screen in that window")
        ssh_kids = [p.pid for p in psutil.Process(w.proc.pid).children(recursive=True) if p.name() == "ssh"]
        assert ssh_kids and _remote_watches(box.remote), "an ssh child here runs the remote watch"

        world["sshd"].stop()
        _cut_connections(box.remote)
        t0 = time.monotonic()
        wait_for(lambda: lines(lambda c: c.get("host") == "box" and c.get("online") is False), timeout=15,
                 what="the host marked offline")
        assert time.monotonic() - t0 < 10
        wait_for(lambda: w.option("@muxhost_summary") == "box offline", timeout=10, what="the summary naming it")
        assert w.proc.poll() is None, "the watch goes on"
        world["sshd"].start()
        mark = len(w.changes)
        wait_for(lambda: any(c.get("record") == rec["id"] and c.get("new") == "waiting"
                             for c in list(w.changes)[mark:]), timeout=90, what="the host followed again")
        wait_for(lambda: w.option("@muxhost_summary") == "1 waiting", timeout=10, what="the summary again")
        ssh_kids = [p.pid for p in psutil.Process(w.proc.pid).children(recursive=True) if p.name() == "ssh"]
        remote = _remote_watches(box.remote)
        assert ssh_kids and remote
    assert w.proc.returncode == 0
    assert not [pid for pid in ssh_kids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"], \
        "an ssh child of the watch survived it"
    wait_for(lambda: not [p for p in remote if psutil.pid_exists(p)], timeout=10, what="the remote watch ended")
    assert not box.tmux("show-options", "-gv", "@muxhost_summary")
    box.ok("stop", "asker@box")


def test_a_remote_host_already_watched_there_is_followed_by_ls(box):
    """Its own watch holds the server's lock (a second watch is refused there): ours polls `ls --json`,
    which reads what that watch publishes, and leaves that watch running."""
    from muxhost.testing import Watching

    box.server.cmd("new-session", "-d", "-s", "main", "-x", "120", "-y", "30", "--", "/bin/sh")
    rec = box.ok("launch", "demo", "--host", "box", "--name", "watched", "--json")
    wait_for(lambda: "demo>" in box.ok("read", "watched@box"), what="the demo prompt over ssh")
    user = box.remote
    theirs = subprocess.Popen(["setpriv", f"--reuid={user.uid}", "--regid=nogroup", "--init-groups", "--",
                               str(user.home / "bin" / "muxhost"), "watch"],
                              env={"HOME": str(user.home), "USER": user.name, "PATH": "/usr/local/bin:/usr/bin:/bin",
                                   "LANG": "C.UTF-8"}, cwd=str(user.home), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: "1 idle" in (user.run("tmux", "show-options", "-gv", "@muxhost_summary").stdout),
                 timeout=30, what="the remote's own watch publishing")
        with Watching(box) as w:
            wait_for(lambda: any(c.get("record") == rec["id"] and c.get("new") == "idle" for c in list(w.changes)),
                     timeout=60, what="the remote agent's idle line")
            box.ok("send", "watched@box", "/ask")
            wait_for(lambda: w.option("@muxhost_summary") == "1 waiting", timeout=30, what="the summary")
            assert any(c.get("record") == rec["id"] and c.get("new") == "waiting" and c["host"] == "box"
                       for c in list(w.changes))
            assert theirs.poll() is None, "the remote's own watch goes on"
        assert theirs.poll() is None, "ending ours leaves theirs"
    finally:
        theirs.terminate()
        theirs.wait(10)
    box.ok("stop", "watched@box")


def test_the_attach_hint_of_a_remote_launch_resume_and_wake_names_the_host(box):
    """`launch --host box`, `resume X@box`, `wake X@box` print `attach: muxhost attach X@box`, and that
    line works here (a bare `muxhost attach X` is no record of this machine: exit 3)."""
    out = box.ok("launch", "demo", "--host", "box", "--name", "hinted")
    assert "  attach: muxhost attach hinted@box" in out.splitlines(), out
    box.tmux("new-session", "-d", "-s", "outer", "-x", "120", "-y", "30", "/bin/sh")
    path = box.tmux("display-message", "-p", "-t", "outer", "#{socket_path}")[0]
    r = box.run("attach", "hinted@box", env={"TMUX": f"{path},1,0"})  # (the hint's line, run here)
    assert r.rc == 0, r.err
    box.ok("sleep", "hinted@box")
    assert "  attach: muxhost attach hinted@box" in box.ok("wake", "hinted@box").splitlines()
    box.ok("stop", "hinted@box")
    assert "  attach: muxhost attach hinted@box" in box.ok("resume", "hinted@box").splitlines()
    box.ok("stop", "hinted@box")
    assert "  attach: muxhost attach here-only" in box.ok("launch", "demo", "--name", "here-only").splitlines()


def test_purge_at_a_host_refused_now_says_so_without_asking(box):
    """``purge REF@HOST`` (no --yes, no --stop) of a running agent: the refusal and exit 4, as a local
    purge does; never a 'for good? [y/N]' whose yes can only be refused."""
    rec = box.ok("launch", "demo", "--host", "box", "--name", "busy", "--json")
    wait_for(lambda: "demo>" in box.ok("read", "busy@box"), what="the demo prompt")
    pane = box.shell(box.home, box.env)
    box.type(pane, f"{sys.executable} -m muxhost purge busy@box; echo rc=$((100 + $?))")
    screen = box.wait_screen(pane, "rc=1", timeout=60)
    assert "rc=104" in screen and "is in use" in screen and "[y/N]" not in screen, screen
    conv = box.remote.home / ".local" / "share" / "muxhost-demo" / "conversations" / f"{rec['conversation_id']}.jsonl"
    assert conv.exists()
    box.end_shell(pane)
    box.ok("stop", "busy@box")
