"""Promises broken from outside, by a hostile new user (the rbreak review): each test failed
before its fix."""
from __future__ import annotations


def test_launch_from_a_users_tmux_pane_tags_the_new_pane_not_the_callers(mux):
    """`muxhost launch` typed in a pane of the same tmux server (the common case, and every `n` of
    the dashboard in tmux): the new session's options (remain-on-exit, @muxhost_record) went to the
    CALLER's pane — tmux takes a `set-option -p` with no -t after `new-session -d` for the client's
    own pane (TMUX_PANE) — so the agent's record was `exited` at once with no pane, and the user's
    shell pane carried the record and remain-on-exit."""
    user = mux.shell(mux.home, mux.env)
    where = mux.tmux("display-message", "-p", "-t", user, "#{socket_path},#{pid},#{session_id}")[0]
    rec = mux.ok("launch", "demo", "--name", "inside", "--json", env={"TMUX": where, "TMUX_PANE": user})
    assert rec["pane"] and rec["pane"] != user
    mux.wait_screen(rec["pane"], "demo>")
    opts = lambda pane: mux.tmux("display-message", "-p", "-t", pane, "#{@muxhost_record}|#{remain-on-exit}")[0]
    assert opts(rec["pane"]) == f"{rec['id']}|on"
    assert opts(user) == "|off"  # the user's own pane is untouched
    assert mux.ok("show", "inside", "--json")["state"] == "running"


SLOW_SAVE = r'''
import os, signal, sys, time
for s in (signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, signal.SIG_IGN)
sys.stdout.write("slowsave> "); sys.stdout.flush()
for line in sys.stdin:
    if line.strip() == "/exit":
        sys.stdout.write("saving...\n"); sys.stdout.flush()
        time.sleep(2)  # (quiet: a flush over the network, no CPU, no output)
        open(sys.argv[1], "w").write("saved")
        sys.exit(0)
    sys.stdout.write("slowsave> "); sys.stdout.flush()
'''


def test_a_config_agent_that_saves_quietly_on_exit_can_say_so(mux, tmp_path):
    """A config agent (no code) that takes its exit text and then sits still for 2 s while it saves
    was judged "did not take it" after 0.5 s and killed mid-save, whatever exit_grace the config gave
    it: only a plugin could set `exit_still`. `agents.NAME.exit_still` (seconds, or null: never
    judged) is the config's word for it."""
    import sys

    script, saved = tmp_path / "slowsave.py", tmp_path / "saved"
    script.write_text(SLOW_SAVE)
    mux.config.write_text(f"agents:\n  slowsave:\n    command: [{sys.executable}, {script}, {saved}]\n"
                          "    exit_grace: 10\n    exit_still: null\n")
    rec = mux.ok("launch", "slowsave", "--json")
    mux.wait_screen(rec["pane"], "slowsave>")
    out = mux.ok("stop", rec["id"], "--json")
    assert out["outcome"] == "exit", out
    assert saved.read_text() == "saved"
