"""The watch's idle clock and its life (issue 18, items 1-3 and 8): a wake starts the idle clock
afresh, a turn between two passes restarts it, a watch started the README's way (`tmux run-shell -b`)
ends with its server, a lock held by a watch of a server that is gone is taken over, and the
change lines say what happened, stamped in order. The demo agent in real panes."""
import os
import shlex
import signal
import subprocess
import sys
import time

import psutil

from muxhost.testing import Watching, wait_for


def demo(mux, name):
    rec = mux.ok("launch", "demo", "--name", name, "--json")
    mux.wait_screen(rec["pane"], "demo>")
    return rec


def row(mux, rid):
    return next(r for r in mux.ok("ls", "--all", "--json") if r["id"] == rid)


def idle_for(mux, rid):
    """Seconds `ls` says the record has been idle (None: not idle)."""
    r = row(mux, rid)
    return time.time() - r["activity_since"] if r["activity"] == "idle" and r["activity_since"] else None


def test_a_wake_starts_the_idle_clock_afresh_even_when_no_pass_saw_it_asleep(mux):
    """The watch is held still (a busy machine, a long pass) while the agent is put to sleep and
    woken: its next pass finds the same pane, idle again — but a new agent in it, idle since the
    wake, not since before the sleep. And without a watch, `sleep --idle-for` after a wake counts
    from the wake too."""
    mux.config.write_text("watch:\n  interval: 0.3\n")
    rec = demo(mux, "oc")
    pane, rid = rec["pane"], rec["id"]
    mux.type(pane, "hello")
    mux.wait_screen(pane, "(turn 1)")
    with Watching(mux) as w:
        w.wait(pane, "idle")
        wait_for(lambda: (idle_for(mux, rid) or 0) > 6, timeout=20, what="idle for 6 s")
        os.kill(w.proc.pid, signal.SIGSTOP)  # (the watch this test started)
        try:
            mux.ok("sleep", rid)
            woke = time.time()  # (the wake returns once the agent drew its first screen)
            mux.ok("wake", rid)
            assert row(mux, rid)["pane"] == pane
            mux.wait_screen(pane, "resumed conversation")
        finally:
            os.kill(w.proc.pid, signal.SIGCONT)
        mark = len(w.changes)
        wait_for(lambda: float(w.option("@muxhost_activity_since", pane) or 0) >= woke - 0.5, timeout=10,
                 what=f"idle since the wake (published: {w.activity(pane)} since "
                      f"{w.option('@muxhost_activity_since', pane)}; the wake at {woke:.3f}; changes {w.changes[mark:]})")
        assert idle_for(mux, rid) < time.time() - woke + 1.5
        out = mux.run("sleep", "--idle-for", "5", rid)
        assert out.rc == 0 and "left awake" in out.out, out
    # no watch: a wake, and `sleep --idle-for` right after it leaves the agent awake
    mux.ok("sleep", rid)
    time.sleep(4)
    mux.ok("wake", rid)
    mux.wait_screen(pane, "resumed conversation")
    out = mux.run("sleep", "--idle-for", "3", rid)
    assert out.rc == 0 and "left awake" in out.out, out


def test_a_turn_between_two_passes_restarts_the_idle_clock(mux):
    """`send` a prompt the agent answers at once, between two passes of the watch: idle before,
    idle after — and idle since that answer, as `ls` says without a watch."""
    mux.config.write_text("watch:\n  interval: 2.5\n")
    rec = demo(mux, "fast")
    pane, rid = rec["pane"], rec["id"]
    with Watching(mux) as w:
        w.wait(pane, "idle")
        wait_for(lambda: (idle_for(mux, rid) or 0) > 8, timeout=25, what="idle for 8 s")
        sent = time.time()
        mux.ok("send", rid, "x")
        mux.wait_screen(pane, "(turn 1)")
        since = wait_for(lambda: (lambda v: v if v and float(v) >= sent - 1 else None)(
            w.option("@muxhost_activity_since", pane)), timeout=10, what="the idle clock restarted by the turn")
        assert w.activity(pane) == "idle"
        assert [c["new"] for c in w.changes if c["record"] == rid] == ["idle"]  # no pass saw it work
        assert idle_for(mux, rid) < time.time() - sent + 1.5, since
        out = mux.run("sleep", "--idle-for", "6s", rid)
        assert out.rc == 0 and "left awake" in out.out, out


def watch_by_run_shell(mux) -> psutil.Process:
    """`tmux run-shell -b "… watch"`, as the README and `tmux-bindings` say; the watch's process."""
    env = ["env", "-i", *(f"{k}={v}" for k, v in mux.env.items())]
    mux.tmux("run-shell", "-b", shlex.join([*env, sys.executable, "-m", "muxhost", "watch"]))
    ident = wait_for(lambda: (mux.tmux("show-options", "-gv", "@muxhost_watch") or [None])[0], timeout=20,
                     what="the watch's @muxhost_watch")
    return psutil.Process(int(ident.split()[0]))


def test_a_watch_started_by_run_shell_ends_with_its_server_and_the_next_server_gets_one(mux):
    rec = demo(mux, "first")
    watch = watch_by_run_shell(mux)
    wait_for(lambda: (mux.tmux("show-options", "-gv", "@muxhost_summary") or [None])[0] == "1 idle", timeout=20,
             what="the summary")
    try:
        mux.server.cmd("kill-server")
        watch.wait(10)  # (psutil: a process that is not ours, reaped by init; it ends)
    finally:
        if watch.is_running():
            watch.kill()
    # the next server on that socket gets a watch of its own, its status line and prefix + W
    rec = demo(mux, "second")
    watch = watch_by_run_shell(mux)
    try:
        wait_for(lambda: (mux.tmux("show-options", "-gv", "@muxhost_summary") or [None])[0] == "1 idle",
                 timeout=20, what="the second server's summary")
        assert (mux.tmux("show-options", "-pv", "-t", rec["pane"], "@muxhost_activity") or [None])[0] == "idle"
    finally:
        mux.server.cmd("kill-server")
        watch.wait(10)


def test_a_lock_held_by_a_watch_of_a_server_that_is_gone_is_taken_over(mux):
    """A watch that could not notice its server went (held still here) keeps its lock: the watch of
    the next server on the socket ends it, says so, and runs; a watch of the same server is still
    refused (exit 4)."""
    demo(mux, "first")
    old = Watching(mux)
    try:
        wait_for(lambda: (mux.tmux("show-options", "-gv", "@muxhost_watch") or [None])[0], timeout=20,
                 what="the first watch")
        os.kill(old.proc.pid, signal.SIGSTOP)
        mux.server.cmd("kill-server")
        rec = demo(mux, "second")  # a new server on the same socket
        with Watching(mux) as new:
            new.wait(rec["pane"], "idle")
            assert old.proc.wait(10) is not None  # ended by the new watch
            assert new.option("@muxhost_watch").split()[0] == str(new.proc.pid)
            again = mux.run("watch", timeout=30)
            assert again.rc == 4 and f"(pid {new.proc.pid})" in again.err, again
            assert again.err.count("\n") == 1  # (no takeover of a watch of this very server)
        assert f"taking over the lock of watch pid {old.proc.pid}" in new.stderr
        assert new.stderr.count("\n") == 1, new.stderr
    finally:
        if old.proc.poll() is None:
            os.kill(old.proc.pid, signal.SIGCONT)
        old.stop()


def test_a_watch_of_a_live_server_of_the_same_name_elsewhere_is_never_taken_over(mux, tmp_path):
    """Two live servers named alike under two TMUX_TMPDIRs share the watch lock's name: the second
    watch is refused (exit 4), the first one runs on (it was killed as "gone" before)."""
    demo(mux, "here")
    with Watching(mux) as first:
        wait_for(lambda: (mux.tmux("show-options", "-gv", "@muxhost_watch") or [None])[0], timeout=20,
                 what="the first watch")
        elsewhere = tmp_path / "tmpdir"
        elsewhere.mkdir(mode=0o700)
        env = dict(mux.env, TMUX_TMPDIR=str(elsewhere))
        subprocess.run(["tmux", "-L", mux.socket, "-f", "/dev/null", "new-session", "-d", "sleep 300"],
                       env=env, check=True)
        try:
            r = mux.run("watch", env={"TMUX_TMPDIR": str(elsewhere)}, timeout=30)
            assert r.rc == 4 and "a watch already runs" in r.err and "taking over" not in r.err, r
            time.sleep(0.5)
            assert first.proc.poll() is None
        finally:
            subprocess.run(["tmux", "-L", mux.socket, "kill-server"], env=env, capture_output=True)


def test_the_watchs_own_sleep_is_logged_asleep_and_lines_are_stamped_in_order(mux):
    """A sleep by `watch.sleep_after` says `idle -> asleep (sleep_after)`, not `-> gone`; each line is
    stamped with the time the watch saw the change (in order), since when the new state holds apart."""
    mux.config.write_text("watch:\n  interval: 0.3\n  sleep_after: 2\n")
    rec = demo(mux, "dozy")
    time.sleep(2.5)  # its last output well before the watch starts: idle since then
    proc = subprocess.Popen([sys.executable, "-m", "muxhost", "watch"], env=mux.env, cwd=str(mux.home),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: row(mux, rec["id"])["state"] == "asleep", timeout=20, what="asleep by the watch")
        time.sleep(1)
    finally:
        proc.terminate()
    out, err = proc.communicate(timeout=10)
    lines = [ln for ln in out.splitlines() if f"({rec['id']})" in ln]
    assert len(lines) >= 2, (out, err)
    assert lines[0].split()[3:6] == ["-", "->", "idle"] and "(since " in lines[0], lines
    # (the ladder's exit text typed in may show as a moment of work first)
    assert lines[-1].endswith("-> asleep (sleep_after)") and "gone" not in out, lines
    stamps = [ln.split()[0] for ln in lines]
    assert stamps == sorted(stamps)
    since = lines[0].split("(since ")[1].rstrip(")")
    assert since < stamps[0]  # idle since before the watch saw it
