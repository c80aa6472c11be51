"""The purge key, end to end: a real tmux server, a real client attached in a pseudo-terminal,
the printed bindings loaded, prefix + P pressed and the prompt answered."""
import json
import os
import sys
from pathlib import Path

import psutil
import pytest

from muxhost.testing import TmuxClient, wait_for

PREFIX = b"\x02"  # C-b


def demo_root(mux) -> Path:
    return mux.home / ".local/share/muxhost-demo"


def conv(mux, cid) -> Path:
    return demo_root(mux) / "conversations" / f"{cid}.jsonl"


def load_bindings(mux, tmp_path) -> None:
    """The lines printed by `muxhost tmux-bindings`, loaded into the test's tmux server."""
    lines = mux.ok("tmux-bindings")
    assert "confirm-before" in lines and "run-shell" in lines and "--run" in lines
    assert "purge-key --pane '#{pane_id}'" in lines and os.path.isabs(lines.split('if-shell "')[1].split()[0])
    conf = tmp_path / "purge-key.conf"
    conf.write_text(lines)
    r = mux.server.cmd("source-file", str(conf))
    assert r.returncode == 0, r.stderr


def attach(mux, target) -> TmuxClient:
    """A real client, as `tmux attach -t TARGET` in a terminal."""
    return TmuxClient(mux.socket, target, dict(mux.env, TERM="xterm-256color"))


def session_of(mux, client) -> str | None:
    """The session the client is on, as `tmux list-clients` shows it (None: not attached)."""
    for line in mux.tmux("list-clients", "-F", "#{client_pid} #{session_name}"):
        pid, _, name = line.partition(" ")
        if int(pid) == client.pid:
            return name
    return None


def still_running(client) -> bool:
    return os.waitpid(client.pid, os.WNOHANG) == (0, 0)


@pytest.fixture
def bound(mux, tmp_path):
    """A neighbour agent in its own session (it starts the server with the test's environment)
    and the bindings loaded."""
    neighbour = mux.ok("launch", "demo", "--json")
    mux.wait_screen(neighbour["pane"], "demo>")
    mux.type(neighbour["pane"], "a neighbour's words")
    mux.wait_screen(neighbour["pane"], "turn 1")
    load_bindings(mux, tmp_path)
    return neighbour


@pytest.fixture
def keyed(mux, bound):
    """`bound`, and a client attached to a session `main` whose first pane is a plain shell."""
    mux.server.cmd("new-session", "-d", "-s", "main", "-x", "200", "-y", "40", "--", "/bin/sh")
    client = attach(mux, "main")
    client.wait_text("[main]", timeout=10)
    yield bound, client
    client.close()


def into_main(mux, record_id):
    """Move a launched agent's pane into the attached session's window, and select it."""
    rec = mux.ok("show", record_id, "--json")
    mux.server.cmd("join-pane", "-s", rec["pane"], "-t", "main:0")
    mux.server.cmd("select-pane", "-t", rec["pane"])
    return rec


def press_purge(client, expect_prompt):
    mark = client.mark()
    client.press(PREFIX + b"P")
    return client.wait_text(expect_prompt, since=mark)


def test_key_purges_a_launched_agents_conversation(mux, keyed):
    neighbour, client = keyed
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.type(rec["pane"], "/child 2")
    wait_for(lambda: mux.capture(rec["pane"]).count("child conversation") == 2, what="children")
    into_main(mux, rec["id"])
    cid = rec["conversation_id"]
    neighbour_bytes = conv(mux, neighbour["conversation_id"]).read_bytes()
    press_purge(client, f"purge the demo conversation {cid} for good? (y/n)")
    mark = client.mark()
    client.press(b"y")
    client.wait_text(f"muxhost: purged the demo conversation {cid} (3 items)", since=mark)
    assert not conv(mux, cid).exists()
    assert [p.stem for p in (demo_root(mux) / "conversations").glob("*.jsonl")] == [neighbour["conversation_id"]]
    assert conv(mux, neighbour["conversation_id"]).read_bytes() == neighbour_bytes
    shown = mux.ok("show", rec["id"], "--json")
    assert shown["state"] == "stopped" and shown["outcome"] == "exit"
    assert all(not psutil.pid_exists(p) for p in rec["pids"])
    assert mux.ok("show", neighbour["id"], "--json")["state"] == "running"
    assert still_running(client) and session_of(mux, client) == "main"  # its session stayed: so did it


def test_the_key_archives_first_when_the_config_says_so(mux, keyed):
    mux.config.write_text("purge:\n  archive: true\n")  # (purge.archive: the key follows the config)
    _neighbour, client = keyed
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.type(rec["pane"], "keep me aside")
    mux.wait_screen(rec["pane"], "turn 1")
    into_main(mux, rec["id"])
    cid = rec["conversation_id"]
    press_purge(client, f"purge the demo conversation {cid} for good? (y/n)")
    mark = client.mark()
    client.press(b"y")
    client.wait_text("; archived: muxhost unpurge ", since=mark)
    assert not conv(mux, cid).exists()
    assert [r["conversation_id"] for r in mux.ok("archives", "--json")] == [cid]


def test_key_purges_an_agent_started_by_hand_in_a_shell(mux, keyed):
    neighbour, client = keyed
    shell_pane = mux.tmux("display-message", "-p", "-t", "main:0", "#{pane_id}")[0]
    demo = Path(sys.executable).parent / "muxhost-demo"
    demo = str(demo) if demo.exists() else "muxhost-demo"
    mux.type(shell_pane, f"HOME={mux.home} {demo}")  # typed into the shell, as a user would
    mux.wait_screen(shell_pane, "demo>")
    mux.type(shell_pane, "started by hand")
    mux.wait_screen(shell_pane, "turn 1")
    cid = mux.capture(shell_pane).split("conversation ")[1].split()[0]
    assert conv(mux, cid).exists()
    shell_pid = int(mux.tmux("display-message", "-p", "-t", shell_pane, "#{pane_pid}")[0])
    press_purge(client, f"purge the demo conversation {cid} for good? (y/n)")
    mark = client.mark()
    client.press(b"y")
    client.wait_text(f"muxhost: purged the demo conversation {cid}", since=mark)
    assert not conv(mux, cid).exists()
    assert conv(mux, neighbour["conversation_id"]).exists()
    # the agent is gone, the user's shell and pane are not
    def agent_left():
        return [c.pid for c in psutil.Process(shell_pid).children(recursive=True)
                if "muxhost-demo" in " ".join(c.cmdline())]
    assert agent_left() == []
    assert psutil.Process(shell_pid).is_running()
    assert shell_pane in mux.tmux("list-panes", "-a", "-F", "#{pane_id}")
    history = (demo_root(mux) / "history.jsonl").read_text().splitlines()
    assert [json.loads(h)["conversation"] for h in history] == [neighbour["conversation_id"]]
    assert still_running(client) and session_of(mux, client) == "main"


def test_answering_no_touches_nothing(mux, keyed):
    neighbour, client = keyed
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    into_main(mux, rec["id"])
    before = conv(mux, rec["conversation_id"]).read_bytes()
    press_purge(client, f"conversation {rec['conversation_id']} for good? (y/n)")
    client.press(b"n")
    import time

    time.sleep(1.0)
    assert conv(mux, rec["conversation_id"]).read_bytes() == before
    assert mux.ok("show", rec["id"], "--json")["state"] == "running"


def test_a_pane_with_no_agent_says_so_and_touches_nothing(mux, keyed):
    neighbour, client = keyed
    # a pane id of more than one digit's worth of strftime: tmux's display-message padded "%12" as " %12"
    while int(shell_pane := mux.tmux("new-window", "-t", "main", "-P", "-F", "#{pane_id}", "cat")[0][1:]) < 3:
        pass
    shell_pane = "%" + shell_pane
    before = {p: p.read_bytes() for p in demo_root(mux).rglob("*") if p.is_file()}
    mark = client.mark()
    client.press(PREFIX + b"P")
    import re

    said = wait_for(lambda: re.search(r"muxhost: no agent in pane +%\d+", client.text_since(mark)),
                    what="the message on the client")
    assert said.group(0) == f"muxhost: no agent in pane {shell_pane}"  # (tmux's strftime padded "%0")
    assert "purge the" not in client.text_since(mark)  # never asked
    assert {p: p.read_bytes() for p in demo_root(mux).rglob("*") if p.is_file()} == before
    r = mux.run("purge", "--pane", shell_pane, "--yes")
    assert r.rc == 3 and "no agent in pane" in r.err


def purge_own_session(mux, client, rec) -> str:
    """Prefix + P and "y" in the agent's own session (the one `muxhost launch` made); the text the
    client's terminal showed from the "y" on."""
    cid = rec["conversation_id"]
    press_purge(client, f"purge the demo conversation {cid} for good? (y/n)")
    mark = client.mark()
    client.press(b"y")
    client.wait_text(f"muxhost: purged the demo conversation {cid} (2 items)", since=mark)
    assert not conv(mux, cid).exists()
    assert mux.ok("show", rec["id"], "--json")["state"] == "stopped"
    assert rec["session"] not in mux.tmux("list-sessions", "-F", "#{session_name}")  # the ladder killed it
    return client.text_since(mark)


def launched(mux) -> dict:
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.type(rec["pane"], "my words")
    mux.wait_screen(rec["pane"], "turn 1")
    return rec


def test_key_in_the_agents_own_session_takes_the_client_back_to_its_previous_session(mux, keyed):
    neighbour, client = keyed
    rec = launched(mux)
    client_name = mux.tmux("list-clients", "-F", "#{client_name}")[0]
    mux.tmux("switch-client", "-c", client_name, "-t", rec["session"])  # the user goes to the agent
    wait_for(lambda: session_of(mux, client) == rec["session"], what="the client on the agent's session")
    mux.tmux("new-session", "-d", "-s", "later", "--", "/bin/sh")  # newer, but not where the user was
    seen = purge_own_session(mux, client, rec)
    assert "[exited]" not in seen
    assert still_running(client) and session_of(mux, client) == "main"
    assert mux.ok("show", neighbour["id"], "--json")["state"] == "running"


def test_key_in_the_agents_own_session_attached_directly_moves_to_another_session(mux, bound):
    neighbour = bound
    rec = launched(mux)
    client = attach(mux, rec["session"])  # `tmux attach -t demo-…`: no previous session
    try:
        client.wait_text("turn 1", timeout=10)
        seen = purge_own_session(mux, client, rec)
        assert "[exited]" not in seen
        assert still_running(client) and session_of(mux, client) == neighbour["session"]
        assert mux.ok("show", neighbour["id"], "--json")["state"] == "running"
    finally:
        client.close()


def test_key_in_the_only_session_keeps_a_pane_that_shows_the_outcome(mux, tmp_path):
    rec = launched(mux)  # the server's one session
    load_bindings(mux, tmp_path)
    client = attach(mux, rec["session"])
    try:
        client.wait_text("turn 1", timeout=10)
        seen = purge_own_session(mux, client, rec)
        assert "[exited]" not in seen
        held = session_of(mux, client)
        assert still_running(client) and held not in (None, rec["session"])
        pane, pid, record = mux.tmux("list-panes", "-s", "-t", held, "-F",
                                     "#{pane_id} #{pane_pid} #{@muxhost_record}")[0].split(" ")
        text = f"muxhost: purged the demo conversation {rec['conversation_id']} (2 items)"
        mux.wait_screen(pane, text)
        assert "press any key to close" in mux.capture(pane)
        assert record == "" and [r["id"] for r in mux.ok("ls", "--all", "--json")] == [rec["id"]]  # no record
        client.press(b"q")  # the user has read it
        wait_for(lambda: not still_running(client), what="the client to end with the holding pane")
        wait_for(lambda: not psutil.pid_exists(int(pid)), what="the holding pane's process to end")
    finally:
        client.close()


def test_bindings_printed_by_an_earlier_muxhost_still_work(mux, bound):
    """`purge --pane %N --tmux-prepare` / `--stop --yes --tmux-message` (what earlier bindings call)."""
    neighbour = bound
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.ok("purge", "--pane", rec["pane"], "--tmux-prepare")
    assert mux.tmux("show-options", "-pqv", "-t", rec["pane"], "@muxhost_purge_conversation") == [rec["conversation_id"]]
    r = mux.run("purge", "--pane", rec["pane"], "--stop", "--yes", "--tmux-message")
    assert r.rc == 0 and r.out == "" and r.err == ""
    assert not conv(mux, rec["conversation_id"]).exists()
    assert conv(mux, neighbour["conversation_id"]).exists()


def test_key_purges_only_the_conversation_the_prompt_named(mux, keyed):
    """The prompt names X; the agent moves to Y (`/new`) before "y": nothing is purged, and tmux
    says why (the confirmed id goes with "y", and the pane is no longer in it)."""
    neighbour, client = keyed
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    into_main(mux, rec["id"])
    x = rec["conversation_id"]
    press_purge(client, f"purge the demo conversation {x} for good? (y/n)")
    mux.type(rec["pane"], "/new")  # while the prompt waits

    def now() -> str:
        return {r["id"]: r for r in mux.ok("ls", "--json")}[rec["id"]]["conversation_id"]

    wait_for(lambda: now() != x, what="the new conversation")
    y = now()
    before = {c: conv(mux, c).read_bytes() for c in (x, y)}
    mark = client.mark()
    client.press(b"y")
    client.wait_text(f"not {x} as confirmed", since=mark)
    assert {c: conv(mux, c).read_bytes() for c in (x, y)} == before
    assert mux.ok("show", rec["id"], "--json")["state"] == "running"
    assert still_running(client) and session_of(mux, client) == "main"


def test_the_lines_name_muxhosts_server_and_do_nothing_in_another(mux, tmp_path):
    """With a private socket (`--socket`, $MUXHOST_TMUX_SOCKET) the printed lines say to load them
    into that server, and a key pressed in another server (~/.tmux.conf is read by all) touches
    nothing of muxhost's: pane %0 there is not pane %0 here."""
    import shutil
    import subprocess

    lines = mux.ok("tmux-bindings")
    assert f"tmux -L {mux.socket} source-file" in lines and f"tmux -L {mux.socket} unbind-key P" in lines
    assert lines.count(f"--socket {mux.socket} purge-key") == 2 and lines.count("--server '#{socket_path}'") == 2
    agent = mux.ok("launch", "demo", "--json")  # muxhost's pane %0
    mux.wait_screen(agent["pane"], "demo>")
    mux.type(agent["pane"], "words that must stay")
    mux.wait_screen(agent["pane"], "turn 1")
    before = conv(mux, agent["conversation_id"]).read_bytes()
    other = f"{mux.socket}-other"
    tmux = [shutil.which("tmux"), "-L", other, "-f", "/dev/null"]
    conf = tmp_path / "keys.conf"
    conf.write_text(lines)
    env = dict(mux.env, TERM="xterm-256color")
    subprocess.run([*tmux, "new-session", "-d", "-s", "elsewhere", "-x", "200", "-y", "40", "/bin/sh"], env=env, check=True)
    try:
        subprocess.run([*tmux, "source-file", str(conf)], env=env, check=True)
        client = TmuxClient(other, "elsewhere", env)
        try:
            client.wait_text("[elsewhere", timeout=10)
            mark = client.mark()
            client.press(PREFIX + b"P")
            client.wait_text("this key belongs to muxhost's tmux server on socket", since=mark)
            client.press(b"y")  # (had it asked, this would purge)
            import time

            time.sleep(1.5)
            assert "purge the" not in client.text_since(mark)
        finally:
            client.close()
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, check=False)
    assert conv(mux, agent["conversation_id"]).read_bytes() == before
    assert mux.ok("show", agent["id"], "--json")["state"] == "running"


def test_every_remove_line_names_the_private_server(mux):
    """With a private socket, the line that removes each key (P, W, M) goes to that server:
    `tmux unbind-key W` would unbind a key of the user's own server instead."""
    told = [ln for ln in mux.ok("tmux-bindings").splitlines() if ln.startswith("#") and "unbind-key" in ln]
    assert len(told) == 3, told
    for line in told:
        assert f"tmux -L {mux.socket} unbind-key" in line and "tmux unbind-key" not in line, line


def test_a_pane_respawned_by_hand_is_no_longer_the_records(mux):
    """`tmux respawn-pane -k` in an agent's pane keeps the pane's record mark, but not the agent: the
    key (`purge --pane`) sees what runs there now — a plain shell is no agent (exit 3), an agent
    started by hand in it is purged by its own conversation — never the record's conversation, which
    may be running elsewhere by then (`resume` started it in a new pane)."""
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.tmux("respawn-pane", "-k", "-t", rec["pane"], "/bin/sh")
    wait_for(lambda: mux.ok("show", rec["id"], "--json")["state"] != "running", what="the agent gone")
    resumed = mux.ok("resume", rec["id"], "--json")
    assert resumed["pane"] != rec["pane"]
    r = mux.run("purge", "--pane", rec["pane"], "--dry-run", "--json")
    assert r.rc == 3 and "no agent in pane" in r.err, (r.rc, r.out, r.err)
    demo = Path(sys.executable).parent / "muxhost-demo"
    mux.type(rec["pane"], f"HOME={mux.home} {demo if demo.exists() else 'muxhost-demo'}")
    mux.wait_screen(rec["pane"], "demo>")
    by_hand = mux.capture(rec["pane"]).split("conversation ")[1].split()[0]
    assert by_hand != rec["conversation_id"]
    plan = mux.ok("purge", "--pane", rec["pane"], "--dry-run", "--json")
    assert plan["conversation_id"] == by_hand
    r = mux.run("purge", "--pane", rec["pane"], "--stop", "--yes")
    assert r.rc == 0, r.err
    assert not conv(mux, by_hand).exists() and conv(mux, rec["conversation_id"]).exists()
    assert mux.ok("show", rec["id"], "--json")["state"] == "running"
