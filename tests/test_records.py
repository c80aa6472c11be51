"""Records in SQLite: concurrent launches, a launch killed midway, reconcile."""
import json
import signal
import sqlite3
import subprocess
import sys
import time

from muxhost.testing import wait_for


def test_twenty_concurrent_launches_leave_twenty_records(mux, tmp_path):
    env = dict(mux.env)
    procs = [subprocess.Popen([sys.executable, "-m", "muxhost", "launch", "demo", "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
             for _ in range(20)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 20, [o[1] for o in outs]
    ids = {json.loads(o[0])["id"] for o in outs}
    assert len(ids) == 20
    listed = mux.ok("ls", "--json")
    assert {r["id"] for r in listed} == ids
    assert all(r["state"] == "running" for r in listed)
    con = sqlite3.connect(mux.state_dir / "state.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("PRAGMA user_version").fetchone()[0] >= 1


def test_a_launch_killed_midway_leaves_nothing_that_breaks_ls(mux, tmp_path):
    # SIGKILL the launcher at several points of its life; ls must keep working every time
    for delay in (0.05, 0.15, 0.3, 0.6):
        p = subprocess.Popen([sys.executable, "-m", "muxhost", "launch", "demo", "--json"], env=mux.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(tmp_path))
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        r = mux.run("ls", "--all", "--json")
        assert r.rc == 0, r.err
        for rec in json.loads(r.out):
            assert rec["state"] in ("running", "starting", "lost", "exited", "stopped")
    r = mux.run("reconcile", "--json")
    assert r.rc == 0, r.err
    # every pane that did get started belongs to a record that ls shows
    listed = {rec["pane"] for rec in mux.ok("ls", "--all", "--json") if rec["pane"]}
    panes = set(mux.tmux("list-panes", "-a", "-F", "#{pane_id}")) if mux.server.cmd("list-panes", "-a").returncode == 0 else set()
    assert panes <= listed


def test_reconcile_marks_a_record_whose_pane_was_killed_behind_its_back(mux):
    rec = mux.ok("launch", "demo", "--json")
    mux.server.cmd("kill-session", "-t", rec["name"])
    wait_for(lambda: mux.ok("ls", "--all", "--json")[0]["state"] == "lost", what="lost")
    out = mux.ok("reconcile", "--json")
    assert any(rec["id"] in c and "lost" in c for c in out["changes"])
    assert mux.ok("reconcile", "--json")["changes"] == []


def test_ls_asks_tmux_once_whatever_the_number_of_records(mux, tmp_path):
    for _ in range(4):
        mux.ok("launch", "demo")
    # a tmux shim on PATH that counts its calls
    shim_dir = tmp_path / "shim"
    shim_dir.mkdir()
    log = tmp_path / "tmux-calls"
    real = subprocess.run(["sh", "-c", "command -v tmux"], capture_output=True, text=True).stdout.strip()
    (shim_dir / "tmux").write_text(f"#!/bin/sh\necho \"$*\" >> {log}\nexec {real} \"$@\"\n")
    (shim_dir / "tmux").chmod(0o755)
    listed = mux.ok("ls", "--json", env={"PATH": f"{shim_dir}:{mux.env['PATH']}"})
    assert len(listed) == 4
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and "list-panes -a -F" in calls[0]


def test_a_version_1_state_db_is_migrated_in_place(tmp_path):
    from muxhost.store import SCHEMA_VERSION, Store

    db = tmp_path / "state.db"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE records (id TEXT PRIMARY KEY, name TEXT NOT NULL, agent TEXT NOT NULL,
            backend TEXT NOT NULL DEFAULT 'tmux', socket TEXT, state TEXT NOT NULL, conversation_id TEXT,
            cwd TEXT NOT NULL, home TEXT NOT NULL, env TEXT NOT NULL DEFAULT '{}', argv TEXT NOT NULL DEFAULT '[]',
            pane TEXT, session TEXT, created_session INTEGER NOT NULL DEFAULT 0, pids TEXT NOT NULL DEFAULT '[]',
            launched_at REAL NOT NULL, stopped_at REAL, outcome TEXT, seconds REAL, created_at REAL NOT NULL,
            updated_at REAL NOT NULL);
        INSERT INTO records (id, name, agent, state, conversation_id, cwd, home, launched_at, created_at, updated_at)
            VALUES ('ab12', 'old', 'demo', 'stopped', 'c1', '/', '/', 1, 1, 1);
        PRAGMA user_version = 1;
    """)
    con.close()
    store = Store(db)
    assert store.con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    rec = store.all()[0]
    assert (rec.name, rec.conversation_id, rec.conversations) == ("old", "c1", ["c1"])
    store.update(rec, conversation_id="c2")
    assert Store(db).all()[0].conversations == ["c1", "c2"]
