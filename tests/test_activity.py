"""Activity: working, waiting, idle and stalled, seen by `muxhost watch` (and by `ls` without one),
on the demo agent in real panes: /work N (a child process does the work), /ask, /hang, and its
resident helper (--helper), whose CPU is not work while a tool it runs is."""
import os
import time

import psutil
import pytest

from muxhost.testing import TmuxClient, Watching, wait_for

FAST = "watch:\n  interval: 0.3\n  stall_after: 2\n"


def demo(mux, *args):
    rec = mux.ok("launch", "demo", "--json", *(["--", *args] if args else []))
    mux.wait_screen(rec["pane"], "demo>")
    return rec


def press_enter_after(mux, pane, text):
    """Type ``text``, then Enter; returns the moment of the Enter."""
    mux.type(pane, text, enter=False)
    time.sleep(0.2)
    mux.server.cmd("send-keys", "-t", pane, "Enter")
    return time.monotonic()


def cpu_used(proc, seconds=0.5):
    """CPU seconds ``proc`` used over the next ``seconds``."""
    t0 = sum(proc.cpu_times()[:2])
    time.sleep(seconds)
    return sum(proc.cpu_times()[:2]) - t0


def ls_row(mux, rid):
    return next(r for r in mux.ok("ls", "--json") if r["id"] == rid)


def test_demo_transitions_and_the_change_lines(mux):
    mux.config.write_text(FAST)
    rec = demo(mux)
    pane = rec["pane"]
    with Watching(mux) as w:
        w.wait(pane, "idle", timeout=10)
        t = press_enter_after(mux, pane, "/work 3")
        w.wait(pane, "working")
        assert time.monotonic() - t < 2.0, "working was seen more than 2 s after /work"
        mux.wait_screen(pane, "done after 3 s")
        t = time.monotonic()
        w.wait(pane, "idle")
        assert time.monotonic() - t < 2.0, "idle was seen more than 2 s after the work ended"

        t = press_enter_after(mux, pane, "/ask")
        w.wait(pane, "waiting")
        assert time.monotonic() - t < 2.0
        mux.type(pane, "y")
        w.wait(pane, "idle", timeout=5)

        t = press_enter_after(mux, pane, "/hang")
        w.wait(pane, "working", timeout=5)
        w.wait(pane, "stalled", timeout=10)
        stalled_after = time.monotonic() - t
        assert 2.0 <= stalled_after < 4.5, f"stalled after {stalled_after:.1f}s with stall_after 2"
        assert w.option("@muxhost_summary") == "1 stalled"

        # ls says what the watch knows, to the same moment
        row = ls_row(mux, rec["id"])
        assert row["activity"] == "stalled"
        assert row["activity_since"] == pytest.approx(float(w.option("@muxhost_activity_since", pane)), abs=0.001)

    steps = [(c["old"], c["new"]) for c in w.changes if c["record"] == rec["id"]]
    assert steps == [(None, "idle"), ("idle", "working"), ("working", "idle"), ("idle", "waiting"),
                     ("waiting", "idle"), ("idle", "working"), ("working", "stalled")]
    for c in w.changes:
        assert set(c) == {"record", "name", "agent", "pane", "old", "new", "since", "at", "note"}
        assert c["pane"] == pane and c["agent"] == "demo" and c["name"] == rec["name"]
    sinces = [c["since"] for c in w.changes]
    assert sinces == sorted(sinces)


def test_a_resident_child_using_cpu_is_not_work_a_tool_under_it_is(mux):
    mux.config.write_text(FAST)
    rec = demo(mux, "--helper")
    pane = rec["pane"]
    helper = wait_for(lambda: [p for p in psutil.Process(ls_row(mux, rec["id"])["pids"][0]).children()
                               if p.cmdline()[:1] == ["muxhost-demo-helper"]], what="the resident helper")[0]
    with Watching(mux) as w:
        w.wait(pane, "idle", timeout=10)
        mux.type(pane, "/helper spin 5")
        mux.wait_screen(pane, "the helper spins for 5 s")
        wait_for(lambda: cpu_used(helper) > 0.1, timeout=5, what="the helper spinning")
        seen = set()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # the helper burns a core the whole time
            seen.add(w.activity(pane))
            time.sleep(0.1)
        assert seen == {"idle"}, f"a resident child spinning made the demo {seen}"
        wait_for(lambda: cpu_used(helper) < 0.02, timeout=10, what="the helper done")

        t = press_enter_after(mux, pane, "/helper tool 4")
        w.wait(pane, "working", timeout=5)
        assert time.monotonic() - t < 2.0
        w.wait(pane, "idle", timeout=10)  # the tool ended
    assert [(c["old"], c["new"]) for c in w.changes] == [(None, "idle"), ("idle", "working"), ("working", "idle")]


def test_ls_without_a_watch_looks_once(mux):
    """No watch: the plugin's answer (the demo's live registry), the pane's last output, and a short
    CPU sample where the state depends on it (the resident rule holds there too)."""
    mux.config.write_text(FAST)
    rec = demo(mux, "--helper")
    pane = rec["pane"]
    row = ls_row(mux, rec["id"])
    assert row["activity"] == "idle" and row["activity_since"] <= time.time()
    table = mux.ok("ls")
    assert "ACTIVITY" in table.splitlines()[0] and "idle " in table

    mux.type(pane, "/helper spin 30")
    mux.wait_screen(pane, "the helper spins")
    time.sleep(0.5)
    assert ls_row(mux, rec["id"])["activity"] == "idle"  # (the helper's CPU is not work)
    mux.type(pane, "/work 30")
    mux.wait_screen(pane, "demo: working for 30 s")
    assert ls_row(mux, rec["id"])["activity"] == "working"
    mux.tmux("send-keys", "-t", pane, "C-c")
    mux.wait_screen(pane, "interrupted")
    mux.type(pane, "/ask")
    mux.wait_screen(pane, "(y/n)")
    assert ls_row(mux, rec["id"])["activity"] == "waiting"
    mux.type(pane, "n")
    mux.type(pane, "/hang")
    mux.wait_screen(pane, "demo: working on it")
    assert ls_row(mux, rec["id"])["activity"] == "working"
    time.sleep(3.5)  # stall_after 2 (and the last output to the second)
    row = ls_row(mux, rec["id"])
    assert row["activity"] == "stalled" and row["activity_since"] <= time.time()
    assert mux.ok("ls", "--json", "--all")[0]["activity"] == "stalled"


def test_ls_takes_the_watchs_word_only_while_it_runs(mux):
    mux.config.write_text(FAST)
    rec = demo(mux)
    pane = rec["pane"]
    w = Watching(mux)
    try:
        w.wait(pane, "idle", timeout=10)
        # what the watch published is what ls says (here: a value ls could not find by itself)
        mux.tmux("set-option", "-p", "-t", pane, "@muxhost_activity", "waiting")
        mux.tmux("set-option", "-p", "-t", pane, "@muxhost_activity_since", "1234.5")
        row = ls_row(mux, rec["id"])
        assert (row["activity"], row["activity_since"]) == ("waiting", 1234.5)
        assert mux.ok("show", rec["id"], "--json")["activity"] == "waiting"
        # a watch killed outright leaves its options behind: ls no longer believes them
        watch = psutil.Process(w.proc.pid)
        ident = w.option("@muxhost_watch")
        assert ident.split()[0] == str(w.proc.pid)
        watch.kill()
        w.proc.wait(10)
        assert w.activity(pane) == "waiting"
        row = ls_row(mux, rec["id"])
        assert row["activity"] == "idle"
    finally:
        w.stop()


def test_a_second_watch_is_refused_and_the_first_takes_back_what_it_published(mux):
    rec = demo(mux)
    w = Watching(mux)
    try:
        w.wait(rec["pane"], "idle", timeout=10)
        assert w.option("@muxhost_summary") == "1 idle"
        r = mux.run("watch", timeout=15)
        assert r.rc == 4, (r.rc, r.out, r.err)
        assert r.err.count("\n") == 1 and r.err.startswith("muxhost: a watch already runs")
        assert f"(pid {w.proc.pid})" in r.err
        assert w.proc.poll() is None  # the first one goes on
    finally:
        assert w.stop() == 0
    assert w.stderr == ""
    assert w.activity(rec["pane"]) is None and w.option("@muxhost_summary") is None
    assert w.option("@muxhost_watch") is None
    # and once it is gone, a new one may run
    with Watching(mux) as again:
        again.wait(rec["pane"], "idle", timeout=10)


def test_the_watch_needs_a_server_and_ends_with_it(mux):
    r = mux.run("watch", timeout=15)
    assert r.rc == 1 and r.err.startswith("muxhost: no tmux server running") and r.err.count("\n") == 1
    mux.server.cmd("new-session", "-d", "-s", "keep", "--", "/bin/sh")  # the server outlives the agent
    gone, rec = demo(mux), demo(mux)
    w = Watching(mux)
    try:
        w.wait(rec["pane"], "idle", timeout=10)
        w.wait(gone["pane"], "idle", timeout=10)
        assert w.option("@muxhost_summary") == "2 idle"
        mux.ok("stop", gone["id"])
        wait_for(lambda: any(c["new"] is None for c in w.changes), timeout=10, what="the gone line")
        assert (w.changes[-1]["record"], w.changes[-1]["old"]) == (gone["id"], "idle")
        wait_for(lambda: w.option("@muxhost_summary") == "1 idle", timeout=5, what="the summary")
        mux.server.cmd("kill-server")
        w.proc.wait(10)
        assert w.stop() == 0
        assert (w.changes[-1]["record"], w.changes[-1]["new"]) == (rec["id"], None)
    finally:
        w.stop()


def test_summary_waiting_key_and_alert(mux, tmp_path):
    mux.config.write_text(FAST)
    mux.server.cmd("new-session", "-d", "-s", "main", "-x", "120", "-y", "30", "--", "/bin/sh")
    idle, asking = demo(mux), demo(mux)
    conf = tmp_path / "bindings.conf"
    conf.write_text(mux.ok("tmux-bindings"))
    assert mux.server.cmd("source-file", str(conf)).returncode == 0
    client = TmuxClient(mux.socket, "main", dict(mux.env, TERM="xterm-256color"), cols=120, rows=30)
    try:
        client.wait_text("[main]", timeout=10)
        with Watching(mux) as w:
            w.wait(idle["pane"], "idle", timeout=10)
            w.wait(asking["pane"], "idle", timeout=10)
            assert w.option("@muxhost_summary") == "2 idle" and not w.option("@muxhost_waiting")
            client.press(b"\x02W")  # nobody waits: the key says so and goes nowhere
            client.wait_text("no agent is waiting", timeout=5)
            mux.type(asking["pane"], "/ask")
            w.wait(asking["pane"], "waiting")
            assert w.option("@muxhost_summary") == "1 waiting · 1 idle"
            assert w.option("@muxhost_waiting") == asking["pane"]
            # the alert: the message on the attached client, and the bell in the agent's window
            client.wait_text(f"{asking['name']} (demo) is waiting for you", timeout=5)
            bells = dict(ln.split() for ln in mux.tmux("list-windows", "-a", "-F", "#{pane_id} #{window_bell_flag}"))
            assert bells[asking["pane"]] == "1" and bells[idle["pane"]] == "0"
            client.press(b"\x02W")  # to the agent that waits
            wait_for(lambda: any(ln.split() == [str(client.pid), asking["name"]] for ln in
                                 mux.tmux("list-clients", "-F", "#{client_pid} #{session_name}")),
                     timeout=5, what="the client on the waiting agent's session")
    finally:
        client.close()


def test_no_alert_when_the_config_says_so(mux):
    mux.config.write_text(FAST + "  alert: false\n")
    rec = demo(mux)
    with Watching(mux) as w:
        w.wait(rec["pane"], "idle", timeout=10)
        mux.type(rec["pane"], "/ask")
        w.wait(rec["pane"], "waiting")
        time.sleep(0.5)
        assert mux.tmux("list-windows", "-a", "-F", "#{window_bell_flag}") == ["0"]


def test_the_watch_keeps_conversation_ids_up_to_date_without_ls(mux):
    """The plugins' activity reads the conversation the record is in: the watch refreshes it (at
    once for a new agent, then every 10 s), as `ls` would, so a /new is seen without any `ls`."""
    import sqlite3

    mux.config.write_text(FAST)
    rec = demo(mux)

    def stored():
        con = sqlite3.connect(f"file:{mux.state_dir / 'state.db'}?mode=ro", uri=True)
        try:
            return con.execute("select conversation_id from records where id = ?", (rec["id"],)).fetchone()[0]
        finally:
            con.close()

    with Watching(mux) as w:
        w.wait(rec["pane"], "idle", timeout=10)
        mux.type(rec["pane"], "/new")
        mux.wait_screen(rec["pane"], "new conversation")
        wait_for(lambda: stored() != rec["conversation_id"], timeout=20, what="the watch's refresh of the id")
