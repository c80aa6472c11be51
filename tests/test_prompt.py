"""purge without --yes on a terminal asks first (here: a real terminal, a tmux pane)."""
import shlex
import sys




def test_purge_on_a_terminal_asks_and_no_keeps_everything(mux, tmp_path):
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.ok("stop", rec["id"])
    conv = mux.home / ".local/share/muxhost-demo/conversations" / f"{rec['conversation_id']}.jsonl"
    before = conv.read_bytes()
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in mux.env.items() if k.startswith(("MUXHOST_", "HOME")))
    cmd = f"env {env} {shlex.quote(sys.executable)} -m muxhost purge {rec['id']}; echo rc=$?"
    mux.server.cmd("new-session", "-d", "-s", "term", "-x", "150", "-y", "40", "--", "/bin/sh")
    pane = mux.tmux("display-message", "-p", "-t", "term", "#{pane_id}")[0]
    mux.type(pane, cmd)
    mux.wait_screen(pane, "[y/N]")
    assert conv.name in mux.capture(pane)  # the plan is shown before the question
    mux.type(pane, "n")
    mux.wait_screen(pane, "rc=4")
    assert conv.read_bytes() == before
    mux.type(pane, "clear; " + cmd)
    mux.wait_screen(pane, "[y/N]")
    mux.type(pane, "y")
    mux.wait_screen(pane, "rc=0")
    assert not conv.exists()
