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
