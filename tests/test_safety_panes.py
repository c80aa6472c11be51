"""What the host believes about a pane (issue 17, items 5, 10, 12), on a real tmux server:

- a pane the user reused (``/exit``, then ``tmux respawn-pane -k`` a shell) is no longer the
  agent's: the record is exited, and nothing is typed into, read from or signalled in that pane;
- no byte the pane's process chooses (its name, its folder's name) hides the pane from muxhost,
  and a stop never says done while a process muxhost started for the record still runs;
- text muxhost types is literal: a leading ``-`` is no option, a trailing ``;`` no command end.
"""
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
import time

import psutil
import pytest

from muxhost.testing import alive, load_module, wait_for


_fleet = load_module(Path(__file__).with_name("test_fleet.py"))
demo, row = _fleet.demo, _fleet.row
host_agents = load_module(Path(__file__).with_name("test_inprocess.py")).host_agents  # for the `host` fixture


def key(pid):
    return pid, psutil.Process(pid).create_time()


def end(*keys):
    """End the processes this test started outside muxhost (by pid, after checking create time)."""
    for pid, ct in keys:
        if alive(pid, ct):
            os.kill(pid, signal.SIGKILL)


def recorded(mux, rid):
    """The (pid, create time) pairs the record keeps for the processes muxhost started in its pane."""
    con = sqlite3.connect(f"file:{mux.state_dir / 'state.db'}?mode=ro", uri=True)
    try:
        pids = json.loads(con.execute("select pids from records where id = ?", (rid,)).fetchone()[0])
    finally:
        con.close()
    return [(int(pid), pytest.approx(ct, abs=0.01)) for pid, ct in pids]


def user_shell(mux, pane, tmp_path):
    """What a user does by habit in a pane whose agent has exited: ``tmux respawn-pane -k`` a shell,
    and start a background job in it. Returns the shell's and the job's (pid, create time)."""
    mux.tmux("respawn-pane", "-k", "-t", pane, "-c", str(tmp_path), "/bin/sh")
    shell = key(wait_for(lambda: mux.pane_pid(pane), what="the shell"))
    job_file = tmp_path / "job.pid"
    mux.type(pane, f"sleep 300 & echo $! > {job_file}")
    job = key(int(wait_for(lambda: job_file.exists() and job_file.read_text().strip(), what="the job")))
    return shell, job


def test_a_shell_respawned_in_the_exited_agents_pane_is_not_the_agent(mux, tmp_path):
    rec = demo(mux, "reused")
    pane = rec["pane"]
    mux.type(pane, "/exit")
    wait_for(lambda: row(mux, rec["id"])["state"] == "exited", what="the agent to exit")
    shell, job = user_shell(mux, pane, tmp_path)
    typed = tmp_path / "typed"
    try:
        lv = row(mux, rec["id"])
        assert lv["state"] == "exited" and lv["pane"] is None and lv["pids"] == []
        # send, read and wait refuse, and say why; nothing reached the shell
        for args in (("send", "reused", f"touch {typed}"), ("read", "reused"),
                     ("wait", "reused", "--until", "idle", "--timeout", "5")):
            r = mux.run(*args)
            assert r.rc == 4, (args, r)
            assert r.err.startswith("muxhost: ") and f"its pane {pane} runs another program now" in r.err, r.err
            assert "Traceback" not in r.err
        assert mux.run("wait", "reused", "--until", "exited", "--timeout", "5").rc == 0
        # stop: the agent had already exited; the shell and its job live on, and nothing was typed
        r = mux.run("stop", "reused")
        assert r.rc == 0, r
        assert "stopped reused" in r.out and " exit after " in r.out
        assert "the agent had already exited" in r.err and f"its pane {pane}" in r.err
        time.sleep(0.5)
        assert alive(*shell) and alive(*job)
        assert mux.pane_pid(pane) == shell[0]
        screen = mux.capture(pane, history=True)
        assert "/exit" not in screen.split("sleep 300")[-1] and "touch" not in screen
        assert not typed.exists()
        assert row(mux, rec["id"])["state"] == "stopped"
        mux.type(pane, f"echo still here > {typed}")  # the shell still reads its user's keys
        wait_for(typed.exists, what="the shell to run a command")
    finally:
        end(job, shell)


def test_the_records_own_dead_pane_comes_before_a_pane_another_program_took(mux, tmp_path):
    """The user's shell took the agent's first pane; `resume` ran it in a new one, and it exited
    there: `ls` shows that dead pane (with its status), and the next `resume` starts in it again
    (a dead pane left behind on every cycle otherwise)."""
    rec = demo(mux, "cycled")
    first = rec["pane"]
    mux.type(first, "/exit")
    wait_for(lambda: row(mux, rec["id"])["state"] == "exited", what="the agent to exit")
    shell, job = user_shell(mux, first, tmp_path)
    try:
        second = mux.ok("resume", rec["id"], "--json")["pane"]
        assert second != first
        mux.wait_screen(second, "demo>")
        mux.type(second, "/exit")
        shown = wait_for(lambda: (lambda r: r if r["exit_status"] is not None else None)(row(mux, rec["id"])),
                         what="the exit in the second pane")
        assert shown["state"] == "exited" and shown["pane"] == second
        assert mux.ok("resume", rec["id"], "--json")["pane"] == second
        assert alive(*shell) and alive(*job)
    finally:
        end(job, shell)


def test_a_shell_respawned_in_the_stubs_pane_is_left_alone(mux, tmp_path):
    """The asleep stub is muxhost's process too (a sleep records it): once the user replaced it,
    the pane is theirs. `stop` ends nothing of it; a wake opens a pane of its own."""
    rec = demo(mux, "dozing")
    pane, cid = rec["pane"], rec["conversation_id"]
    mux.type(pane, "hello")
    mux.wait_screen(pane, "(turn 1)")
    mux.ok("sleep", "dozing")
    mux.wait_screen(pane, "Enter wakes it")
    stub = key(mux.pane_pid(pane))
    assert row(mux, rec["id"])["state"] == "asleep" and row(mux, rec["id"])["pane"] == pane
    assert recorded(mux, rec["id"]) == [stub]  # the sleep wrote down the process it started
    shell, job = user_shell(mux, pane, tmp_path)
    try:
        assert not alive(*stub)
        assert row(mux, rec["id"])["state"] == "exited"
        woke = mux.ok("wake", "dozing", "--json")
        assert woke["pane"] != pane and woke["conversation_id"] == cid
        mux.wait_screen(woke["pane"], f"resumed conversation {cid}")
        assert recorded(mux, rec["id"]) == [key(mux.pane_pid(woke["pane"]))]  # and so did the wake
        assert row(mux, rec["id"])["state"] == "running"  # (its new pane: the shell's carries the old mark)
        out = mux.ok("stop", "dozing", "--json")
        assert out["state"] == "stopped" and out["outcome"] == "exit"
        time.sleep(0.5)
        assert alive(*shell) and alive(*job) and mux.pane_pid(pane) == shell[0]
    finally:
        end(job, shell)


HIDDEN = "x\x1fy\nz"  # a process name with the snapshot's field separator and a newline


@pytest.mark.parametrize("name", ["plain", "odd\nfolder\x1fname;"])
def test_a_process_name_and_folder_name_with_separators_hide_no_pane(mux, tmp_path, name):
    """The pane's process names itself with \\x1f and a newline (in a folder whose name may have
    both, and a ";"): the launch works, the record is running in its pane, and `stop` ends it."""
    folder = tmp_path / name
    folder.mkdir()
    code = f"import os; os.execv('/bin/sleep', [{HIDDEN!r}, '300'])"
    mux.config.write_text(f"agents:\n  hider:\n    command: [{sys.executable}, -c, {code!r}]\n    exit_text: null\n")
    rec = mux.ok("launch", "hider", "--cwd", str(folder), "--json")
    pid = rec["pids"][0]
    agent = key(pid)
    wait_for(lambda: psutil.Process(pid).cmdline()[:1] == [HIDDEN], what="the agent to rename itself")
    for _ in range(3):
        lv = row(mux, rec["id"])
        assert lv["state"] == "running" and lv["pane"] == rec["pane"] and lv["cwd"] == str(folder)
    shown = mux.ok("show", rec["id"], "--json")
    assert os.path.realpath(shown["pane_info"]["cwd"]) == os.path.realpath(folder)
    out = mux.ok("stop", rec["id"], "--json")
    assert out["state"] == "stopped" and out["outcome"] in ("hup", "term", "kill")
    assert not alive(*agent)


def test_a_launch_with_a_newline_in_its_folder_works(mux, tmp_path):
    """(Before the per-query token the launch failed and left a pane running.)"""
    folder = tmp_path / "two\nlines"
    folder.mkdir()
    r = mux.run("launch", "demo", "--name", "nl", "--cwd", str(folder), "--json")
    panes = [ln for ln in mux.tmux("list-panes", "-a", "-F", "#{pane_id}") if ln]
    assert r.rc == 0, r
    rec = r.json
    assert rec["cwd"] == str(folder)
    mux.wait_screen(rec["pane"], "demo>")
    assert panes == [rec["pane"]] and row(mux, rec["id"])["state"] == "running"
    assert mux.ok("stop", "nl", "--json")["outcome"] == "exit"


def test_stop_ends_the_recorded_agent_even_when_no_pane_shows_it(mux):
    """A record whose pane muxhost cannot see (its mark gone): the ladder's targets are still the
    process muxhost started; it never says the agent exited while that runs."""
    rec = demo(mux, "unseen")
    agent = key(rec["pids"][0])
    mux.tmux("set-option", "-p", "-u", "-t", rec["pane"], "@muxhost_record")
    assert row(mux, rec["id"])["state"] == "lost"
    out = mux.ok("stop", "unseen", "--json")
    assert out["state"] == "stopped" and out["outcome"] in ("term", "kill")
    assert not alive(*agent)


def test_sent_text_is_typed_literally(mux):
    """`send` text that starts with "-" (tmux would read "-t%0" as its target) or ends with ";"
    (tmux's command separator) arrives as typed; so does an exit text like that (below)."""
    rec = demo(mux, "literal")
    for text in ("-t%0 x;", "-l", "a\\;", ";"):  # (each of its own length: the demo says how long)
        mux.ok("send", "literal", "--", text)
        screen = mux.wait_screen(rec["pane"], f"heard {len(text)} characters")
        assert f"heard {len(text)} characters (turn " in screen and f"): {text[::-1]}\n" in screen, screen


def test_the_exit_text_is_typed_literally(mux, tmp_path):
    got = tmp_path / "got"
    reader = ("import sys\nfor line in sys.stdin:\n    open(sys.argv[1], 'a').write(line)\n"
              "    if line.strip() == '-t%0 quit;':\n        break\n")
    mux.config.write_text(f"agents:\n  reader:\n    command: [{sys.executable}, -c, {reader!r}, {str(got)!r}]\n"
                          f"    exit_text: '-t%0 quit;'\n")
    r = mux.ok("launch", "reader", "--json")
    wait_for(lambda: psutil.Process(r["pids"][0]).cmdline()[1:2] == ["-c"], what="the reader")
    time.sleep(0.3)
    out = mux.ok("stop", r["id"], "--json")
    assert got.read_text() == "-t%0 quit;\n"
    assert out["outcome"] == "exit"


def test_the_rule_is_the_hosts_on_any_backend(host):
    """In-process, on a fake backend: the pane's process replaced by another program (not muxhost's)
    makes the record exited; stop and send touch nothing of that pane."""
    import subprocess

    from muxhost.errors import Refused

    fake = host.fake
    live = host.launch("naive", cwd=os.path.dirname(host.store.path))
    load_module(Path(__file__).with_name("test_inprocess.py")).wait_files(host, 1)
    pane = live.pane.pane_id
    agent = fake.procs[pane]
    agent.stdin.write("/exit\n")
    agent.stdin.flush()
    agent.wait(10)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE, text=True,
                             start_new_session=True)
    fake.procs[pane] = other  # the user's program in the agent's pane
    try:
        [lv] = host.ls()
        assert lv.state == "exited" and lv.pane is None
        with pytest.raises(Refused, match="runs another program now"):
            host.send(lv.rec, "hello")
        fake.calls.clear()
        stopped = host.stop(lv.rec)
        assert stopped.rec.state == "stopped" and stopped.rec.outcome == "exit"
        assert [c for c in fake.calls if c[0] != "snapshot"] == []
        time.sleep(0.3)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_shell_respawned_in_the_pane_while_the_ladder_waits_is_left_alone(mux, tmp_path):
    """The user takes the pane back (``respawn-pane -k`` a shell) while the stop waits out the exit
    grace: step 3 judges the pane as it is then, and the shell is not the agent's to close."""
    import threading

    script = "while True:\n    input('deaf> ')\n"
    mux.config.write_text(f"agents:\n  deaf:\n    command: [{sys.executable}, -c, {script!r}]\n")
    rec = mux.ok("launch", "deaf", "--json")
    pane = rec["pane"]
    mux.wait_screen(pane, "deaf>")
    out = {}
    stopping = threading.Thread(target=lambda: out.update(r=mux.run("stop", rec["id"], "--grace", "4")))
    stopping.start()
    try:
        wait_for(lambda: "/exit" in mux.capture(pane), what="the exit text")
        shell, job = user_shell(mux, pane, tmp_path)
        stopping.join(30)
        assert out["r"].rc == 0, out["r"]
        time.sleep(0.5)
        assert alive(*shell) and alive(*job)
        assert mux.pane_pid(pane) == shell[0]
    finally:
        stopping.join(30)
        end(job, shell)
