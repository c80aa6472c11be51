"""The fleet, with the demo agent in real panes: sleep and wake (the stub, Enter, `wake`, `--idle-for`,
`watch.sleep_after`), restore after the tmux server died, and scripted control (send, wait, read)."""
import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from muxhost.testing import TmuxClient, Watching, alive, wait_for


def demo(mux, name, *args):
    rec = mux.ok("launch", "demo", "--name", name, "--json", *args)
    mux.wait_screen(rec["pane"], "demo>")
    return rec


def row(mux, rid):
    return next(r for r in mux.ok("ls", "--all", "--json") if r["id"] == rid)


def carrying(rid):
    """Processes (not zombies) whose environment says MUXHOST_RECORD=rid."""
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("MUXHOST_RECORD") == rid:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def pane_process(mux, pane):
    pid = mux.pane_pid(pane)
    return pid, psutil.Process(pid).create_time()


def test_sleep_keeps_the_pane_and_enter_there_wakes_the_same_conversation(mux):
    rec = demo(mux, "sleeper")
    pane, cid = rec["pane"], rec["conversation_id"]
    mux.type(pane, "remember this")
    mux.wait_screen(pane, "(turn 1)")
    agent = pane_process(mux, pane)
    client = TmuxClient(mux.socket, "sleeper", mux.env)  # a user attached to the agent's session

    mark = client.mark()
    out = mux.ok("sleep", "sleeper")
    assert out.startswith("asleep sleeper ") and " exit after " in out
    now = row(mux, rec["id"])
    assert now["state"] == "asleep" and now["pane"] == pane and now["conversation_id"] == cid
    assert now["resumable"] is True and now["slept_at"]
    screen = mux.wait_screen(pane, "Enter wakes it")
    assert f"the demo conversation {cid[:8]}… is asleep since {time.strftime('%H:')}" in screen
    # nothing of the agent is left: its process, and everything that carries its record
    assert not alive(*agent)
    assert carrying(rec["id"]) == []
    stub = psutil.Process(mux.pane_pid(pane))
    assert stub.memory_info().rss < 40 * 2**20, "the stub is small"
    assert [r["state"] for r in mux.ok("ls", "--json") if r["id"] == rec["id"]] == ["asleep"]

    try:  # the user's client stayed where it was, and sees the stub
        client.wait_text("Enter wakes it", since=mark)
        assert "[exited]" not in client.text_since(mark) and "[detached" not in client.text_since(mark)
        client.press(b"\r")
        screen = mux.wait_screen(pane, f"resumed conversation {cid}")
    finally:
        client.close()
    woke = wait_for(lambda: (lambda r: r if r["state"] == "running" else None)(row(mux, rec["id"])),
                    what="the record running again")
    assert woke["pane"] == pane and woke["conversation_id"] == cid and woke["conversations"] == [cid]
    mux.type(pane, "and again")
    mux.wait_screen(pane, "(turn 2)")  # the same conversation goes on
    # the wake left nothing behind: the stub, and the muxhost that woke it, are gone
    assert not alive(stub.pid, stub.create_time())
    wait_for(lambda: not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"]
                          and "wake" in p.info["cmdline"] and rec["id"] in p.info["cmdline"]],
             timeout=10, what="the wake process gone")


def test_wake_and_stop_of_an_asleep_agent(mux):
    rec = demo(mux, "nap")
    pane = rec["pane"]
    mux.ok("sleep", rec["id"])
    mux.wait_screen(pane, "Enter wakes it")
    again = mux.run("sleep", rec["id"])
    assert again.rc == 0 and "was asleep already" in again.out

    t0 = time.monotonic()
    woke = mux.ok("wake", rec["id"], "--json")
    assert time.monotonic() - t0 < 10
    assert woke["state"] == "running" and woke["pane"] == pane
    mux.wait_screen(pane, f"resumed conversation {rec['conversation_id']}")
    agent = pane_process(mux, pane)
    awake = mux.run("wake", rec["id"])  # awake already: said so, nothing done
    assert awake.rc == 0 and awake.out.strip() == f"nap ({rec['id']}) is awake already, in pane {pane}", awake
    assert pane_process(mux, pane) == agent

    mux.ok("sleep", rec["id"])
    stub = pane_process(mux, mux.wait_screen(pane, "Enter wakes it") and pane)
    stopped = mux.ok("stop", rec["id"], "--json")
    assert stopped["state"] == "stopped"
    assert not alive(*stub), "stop ends the stub"
    assert not mux.has_session("nap")
    asleep = mux.run("sleep", rec["id"])  # a stopped record: one line that names it once
    assert asleep.rc == 4 and asleep.err.count(rec["id"]) == 1 and asleep.err.count("\n") == 1, asleep.err
    # and `resume` wakes too (the same as wake)
    mux.ok("resume", rec["id"])
    mux.ok("sleep", rec["id"])
    mux.ok("resume", rec["id"])
    assert row(mux, rec["id"])["state"] == "running"


def stubs_of(rid):
    """muxhost stubs running for record ``rid`` (its id is on their command line: the wake)."""
    return [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"]
            and any(a.endswith(os.path.join("muxhost", "stub.py")) for a in p.info["cmdline"]) and rid in p.info["cmdline"]]


def test_a_stop_during_a_sleep_waits_for_it_and_leaves_nothing(mux):
    """A `stop` that comes while another muxhost puts the record to sleep waits for that sleep (the
    record's lock), then ends the stub it left. Without the wait the quick stop was done first, the
    sleep went on to show its stub in a new session, and the record said `asleep` after the stop
    said `stopped`, its stub running."""
    mux.config.write_text("stop:\n  exit_grace: 3\n")
    rec = demo(mux, "both")
    pane, rid = rec["pane"], rec["id"]
    mux.type(pane, "hello")
    mux.wait_screen(pane, "(turn 1)")  # a conversation on disk to wake in
    mux.type(pane, "/hang")  # the exit text is not read: the sleep's ladder waits its 3 s
    mux.wait_screen(pane, "on it ...")
    sleeping = subprocess.Popen([sys.executable, "-m", "muxhost", "sleep", rid], env=mux.env, cwd=str(mux.home),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: "/exit" in [ln.strip() for ln in mux.capture(pane).splitlines()],
                 what="the sleep's ladder typing its exit text")
        stopped = mux.run("stop", "--grace", "0", rid, "--json")
        out, err = sleeping.communicate(timeout=60)
    finally:
        sleeping.kill()
        sleeping.wait()
    assert sleeping.returncode == 0, (out, err)
    assert stopped.rc == 0 and json.loads(stopped.out)["state"] == "stopped", stopped
    assert row(mux, rid)["state"] == "stopped"
    assert not mux.has_session("both")
    assert stubs_of(rid) == [] and carrying(rid) == []


def test_a_wake_during_a_stop_waits_for_it_and_starts_nothing(mux):
    """The stub's Enter (a `wake`) while another muxhost stops the record: the wake waits for the
    stop (the record's lock), finds the record stopped, and starts nothing (exit 4)."""
    rec = demo(mux, "late")
    pane, rid = rec["pane"], rec["id"]
    mux.type(pane, "hello")
    mux.wait_screen(pane, "(turn 1)")
    mux.ok("sleep", rid)
    mux.wait_screen(pane, "Enter wakes it")
    stub = pane_process(mux, pane)
    with mux.stop_under_way(rid, seconds=2):
        t0 = time.monotonic()
        woke = mux.run("wake", rid)
    assert time.monotonic() - t0 >= 1.5, "the wake waited for the stop"
    assert woke.rc == 4 and "changed meanwhile (it is stopped)" in woke.err, woke
    assert carrying(rid) == [], "no agent was started"
    assert pane_process(mux, pane) == stub  # (the stand-in stop ended nothing: its stub is still there)


def test_a_wake_that_fails_says_why_on_the_stub_and_nothing_runs(mux):
    rec = demo(mux, "gone")
    pane = rec["pane"]
    mux.ok("sleep", "gone")
    mux.wait_screen(pane, "Enter wakes it")
    conv = next((mux.home / ".local" / "share" / "muxhost-demo").rglob(f"{rec['conversation_id']}*"))
    conv.unlink()  # the conversation went from disk while it slept
    mux.type(pane, "", enter=True)
    screen = mux.wait_screen(pane, "Enter tries again")
    assert "no longer exists" in screen
    assert row(mux, rec["id"])["state"] == "asleep"


def test_ctrl_c_ctrl_backslash_and_ctrl_z_in_the_stub_leave_it_waiting_for_enter(mux):
    """Keys a user presses by habit never end the stub (which would leave a dead pane Enter cannot
    wake); Enter still wakes the conversation there."""
    rec = demo(mux, "keys")
    pane = rec["pane"]
    mux.type(pane, "hello")
    mux.wait_screen(pane, "(turn 1)")
    mux.ok("sleep", "keys")
    mux.wait_screen(pane, "Enter wakes it")
    stub = pane_process(mux, pane)
    for key in ("C-c", "C-\\", "C-z"):
        mux.tmux("send-keys", "-t", pane, key)
    time.sleep(0.5)
    assert alive(*stub) and psutil.Process(stub[0]).status() != psutil.STATUS_STOPPED
    assert row(mux, rec["id"])["state"] == "asleep"
    mux.type(pane, "", enter=True)
    mux.wait_screen(pane, "demo>")
    assert row(mux, rec["id"])["state"] == "running" and not alive(*stub)


def test_sleep_is_refused_for_an_agent_with_no_conversation_to_wake(mux, stubborn_config):
    rec = mux.ok("launch", "stubborn", "--json")
    mux.wait_screen(rec["pane"], "stubborn")
    agent = pane_process(mux, rec["pane"])
    r = mux.run("sleep", rec["id"])
    assert r.rc == 4 and "no conversation on disk" in r.err and r.err.count("\n") == 1
    assert alive(*agent) and row(mux, rec["id"])["state"] == "running"


def test_purging_an_asleep_conversation_takes_its_stub_too(mux):
    rec = demo(mux, "purged")
    mux.ok("sleep", "purged")
    stub = pane_process(mux, mux.wait_screen(rec["pane"], "Enter wakes it") and rec["pane"])
    mux.ok("purge", "purged", "--yes")
    assert row(mux, rec["id"])["state"] == "stopped"
    assert not alive(*stub)


def test_sleep_idle_for_sleeps_only_the_idle_ones(mux):
    idle = demo(mux, "idle")
    busy = demo(mux, "busy")
    mux.type(busy["pane"], "/work 8")
    mux.wait_screen(busy["pane"], "working for 8 s")
    time.sleep(2.5)
    out = mux.ok("sleep", "--idle-for", "2s", "--json")
    assert [r["id"] for r in out] == [idle["id"]]
    assert row(mux, idle["id"])["state"] == "asleep" and row(mux, busy["id"])["state"] == "running"
    assert mux.run("sleep", "--idle-for", "soon").rc == 2
    assert mux.run("sleep").rc == 2


@pytest.mark.every_backend
def test_the_watch_puts_idle_agents_to_sleep(mux):
    mux.config.write_text("watch:\n  interval: 0.3\n  sleep_after: 1\n")
    rec = demo(mux, "dozy")
    with Watching(mux) as w:
        try:
            # asleep, with the stub's pane (herdr: the record says asleep a moment before the new pane is written)
            wait_for(lambda: (r := row(mux, rec["id"]))["state"] == "asleep" and r["pane"], timeout=15,
                     what="asleep by the watch, in the stub's pane")
        except AssertionError as e:
            w.stop()  # (what its `muxhost sleep` said is on the watch's stderr)
            raise AssertionError(f"{e}; the record: {row(mux, rec['id'])}; the watch's changes: {w.changes}; "
                                 f"its stderr: {w.stderr!r}") from None
        mux.wait_screen(row(mux, rec["id"])["pane"], "Enter wakes it")  # (herdr: in a new pane)
        # (the ladder's exit text may show as `idle -> working` just before the agent leaves)
        wait_for(lambda: [c for c in w.changes if c["record"] == rec["id"] and c["new"] is None
                          and c.get("note") == "asleep (sleep_after)"], timeout=10,
                 what="the watch's change line for the agent it put to sleep")


def test_an_idle_agent_someone_types_to_is_not_put_to_sleep(mux):
    """Idle for `sleep_after` (and `--idle-for`) counts from the last key a user typed into the
    agent's pane: while someone types the next prompt, the watch does not sleep the agent (the
    ladder's Ctrl-U would wipe the line), nor just after they moved to another window; once
    `sleep_after` has passed since their last key, it does."""
    import threading

    mux.config.write_text("watch:\n  interval: 0.3\n  sleep_after: 5\n")
    rec = demo(mux, "typed")
    pane, rid = rec["pane"], rec["id"]
    mux.type(pane, "hello")
    mux.wait_screen(pane, "(turn 1)")
    client = TmuxClient(mux.socket, "typed", mux.env)
    typing = threading.Event()

    def type_slowly():  # a key every 0.3 s, whatever the checks below take
        while typing.is_set():
            client.press(b"x")
            time.sleep(0.3)

    typist = threading.Thread(target=type_slowly, daemon=True)
    typing.set()
    typist.start()  # (before the watch: it starts counting at once)
    try:
        with Watching(mux) as w:
            w.wait(pane, "idle")
            end = time.monotonic() + 10  # idle for twice sleep_after, the user at the keyboard
            while time.monotonic() < end:
                assert row(mux, rid)["state"] == "running", "put to sleep while someone typed to it"
                time.sleep(0.3)
            out = mux.run("sleep", "--idle-for", "4")
            assert out.rc == 0 and "no agent has been idle that long" in out.out, out
            typing.clear()
            typist.join()
            # they stop, and go to another window (tmux no longer says what this pane was typed):
            # the watch remembers the last key, the half-typed line stays until sleep_after after it
            mux.tmux("new-window", "-t", "typed:", "cat")
            time.sleep(1.5)
            assert row(mux, rid)["state"] == "running"
            assert "xxxxxxxx" in mux.capture(pane)  # the line being typed is still there
            wait_for(lambda: row(mux, rid)["state"] == "asleep", timeout=15, what="asleep by the watch")
    finally:
        typing.clear()
        client.close()


def test_sleep_idle_for_refs_judges_each_again_and_keys_into_another_pane_do_not_count(mux):
    """`sleep --idle-for D REF`: the REF is slept only if it is idle and untouched that long, judged
    under its lock. A key into the agent's pane counts; one into another window of its session
    (a shell, where the user types this very command) does not."""
    rec = demo(mux, "judged")
    pane, rid = rec["pane"], rec["id"]
    mux.type(pane, "hello")
    mux.wait_screen(pane, "(turn 1)")
    other = mux.tmux("new-window", "-d", "-t", "judged:", "-P", "-F", "#{pane_id}", "cat")[0]
    client = TmuxClient(mux.socket, "judged", mux.env)
    try:
        time.sleep(2.5)  # idle (and untouched) for longer than 2 s
        client.press(b"qqq")  # keys into the agent's pane
        mux.wait_screen(pane, "qqq")
        out = mux.run("sleep", "--idle-for", "2", rid)
        assert out.rc == 0 and f"judged ({rid}) was not idle that long (idle): left awake" in out.out, out
        assert row(mux, rid)["state"] == "running"
        mux.tmux("select-window", "-t", other)
        time.sleep(2.5)  # the agent's pane untouched for 2 s again
        client.press(b"zzz")  # keys into the other window
        mux.wait_screen(other, "zzz")  # (tmux has them: keys it counted)
        out = mux.run("sleep", "--idle-for", "2", rid)
        assert out.rc == 0 and out.out.startswith(f"asleep judged ({rid})"), out
        assert row(mux, rid)["state"] == "asleep"
    finally:
        client.close()


def test_restore_after_the_server_died(mux):
    a = demo(mux, "alpha")
    b = demo(mux, "beta")
    c = demo(mux, "gamma")
    mux.ok("launch", "demo", "--name", "delta", "--target", "alpha")  # a window of alpha's session
    mux.ok("sleep", "beta")
    conv = next((mux.home / ".local" / "share" / "muxhost-demo").rglob(f"{c['conversation_id']}*"))
    conv.unlink()
    mux.tmux("kill-server")
    hint = mux.run("ls")
    assert hint.rc == 0 and "3 record(s) that were running lost their pane; `muxhost restore`" in hint.err

    dry = mux.ok("restore", "--dry-run", "--json")
    by_name = {e["name"]: e for e in dry}
    assert by_name["alpha"]["action"] == by_name["beta"]["action"] == by_name["delta"]["action"] == "would restore"
    assert by_name["gamma"]["action"] == "skipped" and "no longer exists" in by_name["gamma"]["reason"]
    assert not mux.has_session("alpha"), "--dry-run starts nothing"

    assert by_name["beta"]["asleep"] is True and not by_name["alpha"]["asleep"]

    out = mux.run("restore")
    assert out.rc == 0, out.err
    assert "not restored: gamma" in out.out
    assert f"restored beta ({b['id']}, demo {b['conversation_id']}) asleep in session beta" in out.out
    for name in ("alpha", "beta"):
        assert mux.has_session(name)
    records = {r["name"]: r for r in mux.ok("ls", "--all", "--json")}
    assert records["alpha"]["state"] == "running" and records["alpha"]["conversation_id"] == a["conversation_id"]
    mux.wait_screen(records["alpha"]["pane"], f"resumed conversation {a['conversation_id']}")
    # asleep it was, asleep it stays: its stub again, none of the agent's memory
    assert records["beta"]["state"] == "asleep" and records["beta"]["conversation_id"] == b["conversation_id"]
    mux.wait_screen(records["beta"]["pane"], "Enter wakes it")
    assert carrying(b["id"]) == []
    assert records["delta"]["session"] == "alpha", "delta goes back into alpha's session"
    assert records["gamma"]["state"] == "lost"

    again = mux.ok("restore", "--json")
    assert [e["action"] for e in again] == ["skipped"]  # gamma, still; nothing started twice
    panes = mux.tmux("list-panes", "-a", "-F", "#{@muxhost_record}")
    assert sorted(panes) == sorted(r["id"] for r in records.values() if r["name"] != "gamma")


def test_restore_wake_wakes_the_asleep_ones_too(mux):
    b = demo(mux, "beta")
    mux.ok("sleep", "beta")
    mux.tmux("kill-server")
    out = mux.ok("restore", "--wake", "--json")
    assert [(e["name"], e["action"], e["asleep"]) for e in out] == [("beta", "restored", False)]
    now = row(mux, b["id"])
    assert now["state"] == "running" and now["conversation_id"] == b["conversation_id"]
    mux.wait_screen(now["pane"], f"resumed conversation {b['conversation_id']}")


@pytest.mark.every_backend
def test_send_wait_read(mux):
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    ref = rec["id"]
    t0 = time.monotonic()
    mux.ok("send", ref, "/work 2")
    mux.ok("wait", ref, "--until", "idle", "--timeout", "30")
    assert time.monotonic() - t0 >= 2.0, "wait returned before the work was done"
    assert "done after 2 s" in mux.ok("read", ref)
    assert mux.ok("read", ref, "--lines", "1").strip() == "demo>"

    mux.ok("send", ref, "/ask")
    mux.ok("wait", ref, "--until", "waiting", "--timeout", "10")
    r = mux.run("wait", ref, "--until", "idle", "--timeout", "1")
    assert r.rc == 1 and "not idle after 1s (it is waiting)" in r.err
    mux.ok("send", ref, "y")
    mux.ok("wait", ref, "--until", "idle", "--timeout", "10")

    assert mux.run("send", ref, "two\nlines").rc == 2
    mux.ok("send", ref, "/exit")
    assert mux.ok("wait", ref, "--until", "exited", "--timeout", "10", "--json")["state"] in ("exited", "lost")
    r = mux.run("send", ref, "hello?")
    assert r.rc == 4 and "no agent to type into" in r.err
    r = mux.run("wait", ref, "--until", "idle", "--timeout", "5")
    assert r.rc == 4


def test_send_reads_text_from_stdin(mux):
    rec = demo(mux, "stdin")
    mux.ok("send", "stdin", "-", input="from a pipe\n")
    mux.wait_screen(rec["pane"], "heard 11 characters")


def test_sleep_leaves_no_process_of_a_stubborn_agent_and_the_pane_stays(mux, tmp_path):
    """The ladder's guarantee holds for sleep: an agent that ignores /exit, SIGHUP and SIGTERM, with a
    grandchild that left its session, is gone entirely; only muxhost's stub runs in its pane."""
    import sys
    from pathlib import Path

    pidfile = tmp_path / "stubborn.pids"
    script = Path(__file__).parent / "agents" / "stubborn.py"
    mux.config.write_text(
        "stop:\n  exit_grace: 0.5\n  term_grace: 0.5\n  hup_grace: 0.5\n"
        "agents:\n  stubborn:\n"
        f"    command: [{sys.executable}, {script}, {pidfile}, '{{conversation_id}}']\n"
        f"    resume: [{sys.executable}, {script}, {pidfile}, '{{conversation_id}}']\n"
        "    process_names: [stubborn.py]\n")
    rec = mux.ok("launch", "stubborn", "--json")
    wait_for(pidfile.exists, what="the stubborn agent's pid file")
    pids = [int(x) for x in pidfile.read_text().split()]
    assert os.getsid(pids[2]) != os.getsid(pids[0])
    out = mux.ok("sleep", rec["id"], "--json")
    assert out["state"] == "asleep" and out["outcome"] == "kill"
    assert [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE] == []
    mux.wait_screen(rec["pane"], "Enter wakes it")
    assert row(mux, rec["id"])["pane"] == rec["pane"]


@pytest.mark.every_backend
def test_sleep_and_wake_on_every_backend(mux):
    # another agent on the server: a sleep that killed the pane must not end the server (a new
    # server numbers its panes from the start again: the stub's new pane had the same id)
    mux.ok("launch", "demo", "--name", "bystander")
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    agent = pane_process(mux, rec["pane"])
    asleep = mux.ok("sleep", rec["id"], "--json")
    assert asleep["state"] == "asleep" and not alive(*agent)
    stub_pane = row(mux, rec["id"])["pane"]
    # the same pane, where the backend keeps dead panes (herdr does not: the stub gets a new one)
    keeps = mux.pane_backend().keeps_dead_panes
    if keeps:
        assert stub_pane == rec["pane"], "sleep kept the agent's pane"
    mux.wait_screen(stub_pane, "Enter wakes it")
    mux.type(stub_pane, "", enter=True)  # Enter, in the stub's pane
    woke = wait_for(lambda: (lambda r: r if r["state"] == "running" else None)(row(mux, rec["id"])),
                    timeout=20, what="awake")
    mux.wait_screen(woke["pane"], f"resumed conversation {rec['conversation_id']}")
    if keeps:
        assert woke["pane"] == rec["pane"], "the wake came back in the agent's pane"
    assert woke["conversation_id"] == rec["conversation_id"]
    mux.ok("sleep", rec["id"])
    mux.ok("wake", rec["id"])
    live = [r for r in mux.ok("ls", "--json") if r["id"] == rec["id"]]
    assert [r["state"] for r in live] == ["running"]
    mux.ok("stop", rec["id"])


def test_a_wake_cut_short_after_the_agent_started_is_seen_running(mux):
    """A wake killed between starting the agent in the pane and writing the record down: the record
    says asleep, but its pane runs the agent again. `ls` says running (and writes it down), and
    `stop` stops it as an agent (its exit text), not as a stub."""
    import shutil

    rec = demo(mux, "halfway")
    pane, cid = rec["pane"], rec["conversation_id"]
    mux.ok("sleep", "halfway")
    mux.wait_screen(pane, "Enter wakes it")
    demo_bin = shutil.which("muxhost-demo", path=os.path.dirname(__import__("sys").executable))
    # before the wake began, a pane that does not run the stub is still asleep: tmux's child for
    # the stub, before its exec, is caught by a look (ls wrote `running` down, and the stub ran on
    # under a record that said so). (Stand-ins carry the record's MUXHOST_RECORD, as muxhost's own
    # processes there do: a pane process that is none of muxhost's is no agent at all, see
    # test_safety_panes.)
    mark = f"MUXHOST_RECORD={rec['id']}"
    mux.tmux("respawn-pane", "-k", "-t", pane, "-e", mark, "sleep", "30")
    assert row(mux, rec["id"])["state"] == "asleep"
    with mux.resume_under_way(rec["id"], seconds=0):  # a wake: under the locks, it moves launched_at
        pass
    mux.tmux("respawn-pane", "-k", "-t", pane, "-e", mark, demo_bin, "--resume", cid)  # the agent, not the record
    mux.wait_screen(pane, f"resumed conversation {cid}")
    assert row(mux, rec["id"])["state"] == "running"
    out = mux.ok("stop", "halfway", "--json")
    assert out["outcome"] == "exit"
