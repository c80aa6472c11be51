"""`muxhost attach REF`: from outside tmux this terminal becomes a client of the agent's server on
its pane; from inside that server the client switches there. Every "attach:" hint names it."""
import os
import pty
import shlex
import signal
import sys

from muxhost.testing import TmuxClient, wait_for


def clients(mux):
    return [line.split() for line in mux.tmux("list-clients", "-F", "#{client_pid} #{session_name} #{pane_id}")]


def test_attach_from_outside_tmux_is_a_client_on_the_agents_pane(mux):
    rec = mux.ok("launch", "demo", "--json")
    out = mux.ok("launch", "demo", "--target", rec["session"], "--split", "right")
    assert "attach: muxhost attach demo-" in out  # the hint names the command, with the record's name
    other = mux.ok("ls", "--json")[-1]
    env = {k: v for k, v in mux.env.items() if k not in ("TMUX", "TMUX_PANE")}
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execve(sys.executable, [sys.executable, "-m", "muxhost", "attach", rec["name"]], env)
        finally:
            os._exit(127)
    try:
        found = wait_for(lambda: [c for c in clients(mux) if c[1] == rec["session"]], what="a client on the session")
        assert found[0][2] == rec["pane"]  # the agent's own pane, not the split beside it
        assert int(found[0][0]) == pid  # muxhost became the tmux client (exec): nothing left behind
        assert other["pane"] != rec["pane"]
    finally:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        os.close(fd)


def test_attach_inside_the_server_switches_the_client(mux):
    rec = mux.ok("launch", "demo", "--json")
    env = ["-e", f"HOME={mux.home}"] + [x for k in ("MUXHOST_STATE_DIR", "MUXHOST_TMUX_SOCKET", "MUXHOST_CONFIG")
                                        for x in ("-e", f"{k}={mux.env[k]}")]
    mux.server.cmd("new-session", "-d", "-s", "main", "-x", "120", "-y", "30", *env, "/bin/sh")
    client = TmuxClient(mux.socket, "main", dict(mux.env, TERM="xterm-256color"))
    try:
        wait_for(lambda: [c for c in clients(mux) if c[1] == "main"], what="the client on main")
        main = mux.tmux("display-message", "-p", "-t", "main", "#{pane_id}")[0]
        cmd = shlex.join([sys.executable, "-m", "muxhost", "attach", rec["id"][:3]])
        mux.tmux("send-keys", "-t", main, "-l", cmd)
        mux.tmux("send-keys", "-t", main, "Enter")
        wait_for(lambda: [c for c in clients(mux) if c[1] == rec["session"] and c[2] == rec["pane"]],
                 what="the client switched to the agent's pane")
        assert len(clients(mux)) == 1  # the same client, no nested one
    finally:
        client.close()


def test_attach_a_record_without_a_pane_says_so(mux):
    rec = mux.ok("launch", "demo", "--json")
    mux.ok("stop", rec["id"])
    r = mux.run("attach", rec["id"])
    assert r.rc == 3 and "has no pane (stopped)" in r.err and f"muxhost resume {rec['name']}" in r.err


def test_attach_inside_another_tmux_server_opens_a_window_there(mux, tmp_path):
    import shutil
    import subprocess

    rec = mux.ok("launch", "demo", "--json")
    other = [shutil.which("tmux"), "-L", f"{mux.socket}-outer", "-f", "/dev/null"]
    env = dict(mux.env, TERM="xterm-256color")
    subprocess.run([*other, "new-session", "-d", "-s", "outer", "-x", "120", "-y", "30", "/bin/sh"], env=env, check=True)
    try:
        path = subprocess.run([*other, "display-message", "-p", "#{socket_path}"], env=env, capture_output=True,
                              text=True, check=True).stdout.strip()
        r = mux.run("attach", rec["name"], env={"TMUX": f"{path},1,0"})
        assert r.rc == 0, r
        windows = subprocess.run([*other, "list-windows", "-t", "outer", "-F", "#{window_name}"], env=env,
                                 capture_output=True, text=True).stdout.split()
        assert rec["name"] in windows
        wait_for(lambda: [c for c in clients(mux) if c[1] == rec["session"]], what="the nested client")
    finally:
        subprocess.run([*other, "kill-server"], env=env, capture_output=True)
