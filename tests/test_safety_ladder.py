"""The stop ladder under attack and under faults (issue 17, items 11, 13, 14, 15): no way out of
it by a name or by setsid, a stop cut short is finished (never undone by `restore`), a muxhost run
inside the agent's own pane finishes the stop it runs, and one damaged record or a full disk stops
nothing else."""
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from muxhost import procs
from muxhost.errors import MuxhostError
from muxhost.store import Store
from muxhost.testing import alive, load_module, wait_for



_inprocess = load_module(Path(__file__).with_name("test_inprocess.py"))
host_agents = _inprocess.host_agents  # the `host` fixture (muxhost.testing: the real host on a fake backend) gets the naive agent


def _kill(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _pid(path, what: str) -> int:
    wait_for(lambda: path.exists() and path.read_text().strip(), what=what)
    return int(path.read_text())


def _row(mux, rid: str) -> dict:
    return next(r for r in mux.ok("ls", "--all", "--json") if r["id"] == rid)


# -- 11. ways out of the ladder ----------------------------------------------------------------------
def test_a_process_that_only_names_itself_tmux_is_stopped(mux, tmp_path):
    """A copy of `sleep` named `tmuxsleep`, detached with setsid and orphaned: it keeps the record's
    variable, but its name starting with `tmux` once made the ladder take it for a tmux server."""
    fake = tmp_path / "tmuxsleep"
    shutil.copy(shutil.which("sleep"), fake)
    pidfile = tmp_path / "fake.pid"
    mux.config.write_text(
        "agents:\n  namer:\n"
        f"    command: [sh, -c, '( setsid {fake} 300 & echo $! > {pidfile} ); echo ready; exec sleep 1000']\n"
        "    exit_text: null\n"
    )
    rec = mux.ok("launch", "namer", "--json")
    fake_pid = _pid(pidfile, "the fake tmux's pid")
    try:
        assert alive(fake_pid) and psutil.Process(fake_pid).name().startswith("tmux")
        mux.ok("stop", rec["id"], "--json")
        assert not alive(fake_pid)
    finally:
        _kill(fake_pid)


def test_a_process_that_only_names_itself_tmux_is_not_taken_for_muxhost(tmp_path):
    """What the purge's in-use check skips as tmux (a server whose argv names an id) is only the
    real tmux program, never a process that took its name."""
    fake = tmp_path / "tmuxsh"
    shutil.copy(shutil.which("sh"), fake)
    token = "a1b2c3d4e5f6a7b8c9d0a1b2c3d4e5f6"
    p = subprocess.Popen([str(fake), "-c", f"sleep 300; : {token}"])
    try:
        wait_for(lambda: psutil.Process(p.pid).name().startswith("tmux"), what="the fake tmux")
        table = procs.ProcessTable.snapshot()
        assert not procs.is_muxhost(table.get(p.pid))
        assert any(h.startswith(f"pid {p.pid} ") for h in procs.argv_holders(token, table))
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_a_setsid_grandchild_that_cleared_its_environment_is_stopped(mux, tmp_path):
    """`( setsid env -i sh -c 'sleep 300' & )`: a double fork, a new session, no MUXHOST_RECORD.
    The agent is its orphans' parent (the launcher made it a subreaper), so the ladder sees it."""
    pidfile = tmp_path / "escapee.pid"
    mux.config.write_text(
        "stop:\n  exit_grace: 1\n  term_grace: 1\n  hup_grace: 0.5\n"
        "agents:\n  escaper:\n"
        f"    command: [sh, -c, '( setsid env -i sh -c \"echo \\$\\$ > {pidfile}; exec sleep 300\" & ); "
        "echo ready; exec sleep 1000']\n"
        "    exit_text: null\n"
    )
    rec = mux.ok("launch", "escaper", "--json")
    escapee = _pid(pidfile, "the escapee's pid")
    try:
        ps = psutil.Process(escapee)
        assert procs.RECORD_ENV not in ps.environ() and os.getsid(escapee) != os.getsid(rec["pids"][0])
        assert ps.ppid() == rec["pids"][0]  # re-parented to the agent, not to init
        mux.ok("stop", rec["id"], "--json")
        assert not alive(escapee) and not alive(rec["pids"][0])
    finally:
        _kill(escapee)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_an_agent_that_exits_leaving_a_cleared_setsid_grandchild_leaves_nothing(mux, tmp_path):
    """The agent exits on its exit text; its detached, unmarked grandchild (started while it ran,
    re-parented to it, then to init when it exited) is still ended."""
    pidfile = tmp_path / "escapee.pid"
    script = tmp_path / "leaver.py"
    script.write_text(
        "import subprocess, sys\n"
        f"subprocess.run(['sh', '-c', '( setsid env -i sh -c \"echo \\\\$\\\\$ > {pidfile}; exec sleep 300\" & )'])\n"
        "input('hook> ')\n"
    )
    mux.config.write_text(
        "stop:\n  exit_grace: 2\n  term_grace: 1\n  hup_grace: 0.5\n"
        f"agents:\n  leaver:\n    command: [{sys.executable}, {script}]\n    exit_text: bye\n"
    )
    rec = mux.ok("launch", "leaver", "--json")
    mux.wait_screen(rec["pane"], "hook>")
    escapee = _pid(pidfile, "the escapee's pid")
    try:
        assert procs.RECORD_ENV not in psutil.Process(escapee).environ()
        out = mux.ok("stop", rec["id"], "--json")
        assert out["outcome"] in ("hup", "term")  # something was left and ended
        assert not alive(escapee)
    finally:
        _kill(escapee)


# -- 13. an interrupted stop is finished, never undone -------------------------------------------------
def _demo_with_conversation(mux) -> dict:
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.type(rec["pane"], "hello there")
    mux.wait_screen(rec["pane"], "hello there"[::-1])
    wait_for(lambda: _row(mux, rec["id"])["conversation_id"], what="the conversation id")
    return rec


def test_a_stop_killed_before_its_record_is_written_is_finished_not_restored(mux):
    rec = _demo_with_conversation(mux)
    agent = rec["pids"][0]
    env = {**mux.env, "MUXHOST_TEST_HOLD": "stop-record"}
    stopper = subprocess.Popen([sys.executable, "-m", "muxhost", "stop", rec["id"]], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert "test hold" in stopper.stderr.readline()  # the ladder ended; the record is not written
        assert not alive(agent)
        stopper.send_signal(signal.SIGKILL)
        stopper.wait()
        restored = mux.ok("restore", "--json")
        assert [e for e in restored if e["id"] == rec["id"] and e["action"] == "restored"] == []
        assert not [p for p in mux.ok("ls", "--json") if p["id"] == rec["id"]]  # not running, not live
        row = _row(mux, rec["id"])  # nothing of it left: stopped, its outcome unknown (lost with the stop)
        assert row["state"] == "stopped" and row.get("outcome") is None and row["resumable"]
        assert mux.ok("restore", "--json") == []
    finally:
        if stopper.poll() is None:
            stopper.kill()


def _launch(host, tmp_path, n: int) -> list:
    lives = [host.launch("naive", cwd=str(tmp_path)) for _ in range(n)]
    folder = host.registry.agents["naive"].folder
    wait_for(lambda: len(list(folder.glob("*.json"))) >= n, what="the conversations")
    host.ls()
    return lives


def test_a_stop_interrupted_by_ctrl_c_is_finished_by_ls_and_skipped_by_restore(host, tmp_path, monkeypatch):
    lv = _launch(host, tmp_path, 1)[0]
    lv.rec = host.store.get(lv.rec.id)
    assert lv.rec.conversation_id and host.restore(dry_run=True) == []
    real = Store.update

    def interrupted(self, rec, **changes):
        if changes.get("state") == "stopped":
            raise KeyboardInterrupt  # Ctrl-C after the ladder, before the record
        return real(self, rec, **changes)

    monkeypatch.setattr(Store, "update", interrupted)
    with pytest.raises(KeyboardInterrupt):
        host.stop(lv.rec)
    monkeypatch.setattr(Store, "update", real)
    assert host.fake.procs[lv.pane.pane_id].poll() is not None
    assert host.store.get(lv.rec.id).state == "stopping"
    report = host.restore()
    assert [e for e in report if e["action"] == "restored"] == []
    assert len(host.fake.procs) == 1  # nothing started
    host.ls()  # (the fake backend keeps the dead pane, as tmux's remain-on-exit would)
    rec = host.store.get(lv.rec.id)
    assert rec.state == "stopped" and rec.outcome is None


def test_ls_never_runs_a_ladder_it_says_what_stop_finishes(host, tmp_path, monkeypatch):
    """A stop cut short with something of the record still running: `ls` answers at once (no ladder,
    no grace waited), leaves it `stopping` and says that `stop` finishes it; `stop` does."""
    lv = _launch(host, tmp_path, 1)[0]
    host.store.update(lv.rec, state="stopping")  # as a stop killed before its ladder left it
    ran = []
    real = type(host.ladder)._ladder
    monkeypatch.setattr(type(host.ladder), "_ladder", lambda self, *a, **k: ran.append(1) or real(self, *a, **k))
    listed = {x.rec.id: x for x in host.ls()}
    assert ran == [] and listed[lv.rec.id].rec.state == "stopping"
    assert any(f"`muxhost stop {lv.rec.id}` finishes it" in n for n in host.notes)
    assert host.fake.procs[lv.pane.pane_id].poll() is None  # untouched
    host.stop(host.store.get(lv.rec.id))
    assert ran and host.fake.procs[lv.pane.pane_id].poll() is not None
    assert host.store.get(lv.rec.id).state == "stopped"


# -- 15. a damaged record, a full disk -----------------------------------------------------------------
def test_a_full_disk_still_runs_the_ladder_and_says_the_record_was_not_written(host, tmp_path, monkeypatch):
    lives = _launch(host, tmp_path, 2)

    def full(self, rec, **changes):
        raise MuxhostError(f"{self.path}: no space left on device; free some space, then try again")

    monkeypatch.setattr(Store, "update", full)
    results = host.stop_many([lv.rec for lv in lives])
    assert all(isinstance(r, MuxhostError) and r.exit_code == 1 for r in results)
    assert all("could not be written" in str(r) and "no space left" in str(r) for r in results)
    assert all(p.poll() is not None for p in host.fake.procs.values())  # nothing left running


def test_one_damaged_record_is_a_warning_and_stop_stops_every_other(mux):
    good = [mux.ok("launch", "demo", "--json") for _ in range(2)]
    bad = mux.ok("launch", "demo", "--json")
    for rec in (*good, bad):
        mux.wait_screen(rec["pane"], "demo>")
    con = sqlite3.connect(mux.state_dir / "state.db")
    con.execute("UPDATE records SET env = '{not json' WHERE id = ?", (bad["id"],))
    con.commit()
    con.close()
    try:
        ls = mux.run("ls", "--json")
        assert ls.rc == 0, ls.err
        assert sorted(r["id"] for r in ls.json) == sorted(r["id"] for r in good)
        assert f"muxhost: warning: record {bad['id']}" in ls.err and "damaged" in ls.err
        one = mux.run("stop", good[0]["id"], "--json")
        assert one.rc == 0 and one.json["state"] == "stopped", one.err
        every = mux.run("stop", "--all", "--json")
        assert every.rc == 0 and [r["id"] for r in every.json] == [good[1]["id"]], every.err
        assert f"record {bad['id']}" in every.err
        assert not alive(good[0]["pids"][0]) and not alive(good[1]["pids"][0])
    finally:
        _kill(*bad["pids"][:1])


# -- 14. muxhost inside the agent's own pane ----------------------------------------------------------
def test_a_stop_run_inside_the_agents_own_pane_finishes_and_reports(mux, tmp_path):
    go, out, err = tmp_path / "go", tmp_path / "out.json", tmp_path / "err"
    mux.config.write_text(
        "stop:\n  exit_grace: 1\n  term_grace: 1\n  hup_grace: 0.5\n"
        "agents:\n  selfstop:\n"
        f"    command: [sh, -c, 'echo ready; while [ ! -e {go} ]; do sleep 0.1; done; "
        f"{sys.executable} -m muxhost stop \"$MUXHOST_RECORD\" --json > {out} 2> {err}; echo \"rc=$?\" >> {err}; "
        "sleep 1000']\n"
        "    exit_text: null\n"
    )
    rec = mux.ok("launch", "selfstop", "--json")
    mux.wait_screen(rec["pane"], "ready")
    go.touch()
    wait_for(lambda: _row(mux, rec["id"])["state"] == "stopped", timeout=30, what="the record stopped")
    wait_for(lambda: out.exists() and out.read_text().strip().endswith("}"), what="the stop's report")
    import json

    report = json.loads(out.read_text())
    assert report["state"] == "stopped" and report["outcome"] in ("exit", "hup", "term", "kill"), err.read_text()
    assert not alive(rec["pids"][0])
    assert not mux.has_session(rec["name"])
    assert not procs.marked(rec["id"], procs.ProcessTable.snapshot())


def test_a_stop_inside_the_pane_never_signals_its_own_ancestors(mux, tmp_path):
    """An agent that outlives the pane's hang-up and ends its whole process group when it gets a
    SIGTERM (as agents end their tools): signalled, it would take the muxhost that stops it along.
    That muxhost never signals it; it finishes, and says what it left (exit 1)."""
    go, err = tmp_path / "go", tmp_path / "err"
    mux.config.write_text(
        "stop:\n  exit_grace: 0.5\n  term_grace: 0.5\n  hup_grace: 0.5\n"
        "agents:\n  groupkiller:\n"
        f"    command: [sh, -c, 'trap \"\" HUP; trap \"kill -KILL 0\" TERM; echo ready; "
        f"while [ ! -e {go} ]; do sleep 0.1; done; "
        f"{sys.executable} -m muxhost stop \"$MUXHOST_RECORD\" 2> {err}; echo \"rc=$?\" >> {err}; sleep 1000']\n"
        "    exit_text: null\n"
    )
    rec = mux.ok("launch", "groupkiller", "--json")
    mux.wait_screen(rec["pane"], "ready")
    go.touch()
    try:
        wait_for(lambda: err.exists() and "rc=" in err.read_text(), timeout=30, what="the stop to finish")
        text = err.read_text()
        assert "rc=1" in text and "ancestors" in text and str(rec["pids"][0]) in text, text
        assert alive(rec["pids"][0])  # left, and said: never signalled by the muxhost it runs
    finally:
        _kill(rec["pids"][0])
