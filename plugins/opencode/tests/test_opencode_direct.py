"""OpenCodeAgent's methods against databases the real opencode wrote (``opencode run`` with the fake
model), without tmux: id format, database location, discover, in_use, artifacts and purge."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from muxhost.agent import AgentContext
from muxhost.testing import wait_for
from muxhost_opencode import OpenCodeAgent, _lock_holders, session_from_argv

AGENT = OpenCodeAgent()


def ctx_for(oc, **kw) -> AgentContext:
    kw.setdefault("cwd", oc.made_cwd)
    return AgentContext(home=str(oc.home), env=dict(oc.env), **kw)


@pytest.fixture
def fake_opencode(tmp_path) -> list[str]:
    """argv[0..] of a process that looks like opencode (a sleeping Python script named opencode)."""
    script = tmp_path / "fake-bin" / "opencode"
    script.parent.mkdir()
    script.write_text("import time\ntime.sleep(60)\n")
    return [sys.executable, str(script)]


@pytest.fixture
def spawned():
    """Start helper processes; every one is killed (by pid) at teardown."""
    started: list[subprocess.Popen] = []

    def start(argv, **kw) -> subprocess.Popen:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)


def test_plugin_is_installed_as_an_entry_point():
    eps = [ep for ep in entry_points(group="muxhost") if ep.name == "opencode"]
    assert eps and eps[0].value == "muxhost_opencode"
    registered = []
    eps[0].load().muxhost_register_agents(registered.append)
    assert [a.name for a in registered] == ["opencode"]


def test_id_pattern_matches_real_ids(made, opencode_db):
    oc, other, target, _t0 = made
    ids = [r[0] for r in opencode_db(oc.db).query("select id from session")]
    assert len(ids) == 6
    assert all(AGENT.valid_id(i) for i in ids)
    for bad in ("ses_../../etc", "ses_x", "msg_22bb155a80010Ths10RJzwRIPZ", other + "\n", "' or 1=1 --"):
        assert not AGENT.valid_id(bad)


def test_database_location(tmp_path):
    home = tmp_path / "h"
    me = os.environ.get("HOME") or os.path.expanduser("~")
    c = AgentContext(home=str(home), env={})
    assert AGENT.db_path(c) == home / ".local/share/opencode/opencode.db"
    # XDG_DATA_HOME counts only for the caller's own HOME
    c = AgentContext(home=str(home), env={"XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert AGENT.db_path(c) == home / ".local/share/opencode/opencode.db"
    c = AgentContext(home=me, env={"XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert AGENT.db_path(c) == tmp_path / "xdg/opencode/opencode.db"
    # OPENCODE_DB: absolute as is, relative to the data folder, :memory: is nowhere
    c = AgentContext(home=str(home), env={"OPENCODE_DB": str(tmp_path / "x.db")})
    assert AGENT.db_path(c) == tmp_path / "x.db"
    c = AgentContext(home=str(home), env={"OPENCODE_DB": "other.db"})
    assert AGENT.db_path(c) == home / ".local/share/opencode/other.db"
    c = AgentContext(home=str(home), env={"OPENCODE_DB": ":memory:"})
    assert AGENT.db_path(c) is None
    assert AGENT.artifacts(c, "ses_" + "a" * 26) == []


def test_session_from_argv():
    sid = "ses_dd44eaab7ffe3ykayWgFcQn1Sq"
    assert session_from_argv(["opencode", "-s", sid]) == sid
    assert session_from_argv(["/x/opencode", "--session", sid, "--model", "m"]) == sid
    assert session_from_argv(["opencode", f"--session={sid}"]) == sid
    assert session_from_argv(["opencode", "-s", "ses_bad"]) is None
    assert session_from_argv(["opencode", "run", "hello"]) is None


def test_discover_pins_the_parent_not_the_newer_child(made, opencode_db):
    oc, other, target, t0 = made
    db = opencode_db(oc.db)
    children = db.family(target)[1:]
    assert len(children) == 2  # a sub-agent and its own child, both newer than the parent
    newest = db.query("select id from session order by time_created desc limit 1")[0][0]
    assert newest in children
    assert AGENT.discover(ctx_for(oc, launched_at=t0)) == target
    # before both conversations: still a parent, the newest one
    assert AGENT.discover(ctx_for(oc, launched_at=t0 - 3600)) == target
    # claimed by another record: the other parent, never a child
    assert AGENT.discover(ctx_for(oc, launched_at=t0 - 3600, claimed=frozenset({target}))) == other
    assert AGENT.discover(ctx_for(oc, launched_at=t0, claimed=frozenset({target}))) is None
    # another directory: nothing
    assert AGENT.discover(ctx_for(oc, launched_at=0, cwd=str(oc.root))) is None
    # launched after every row: what the record knew
    assert AGENT.discover(ctx_for(oc, launched_at=time.time() + 5, conversation_id=other)) == other


def test_discover_reads_the_session_from_argv(made, spawned, fake_opencode):
    oc, other, target, _t0 = made
    # a tool in the pane's tree whose argv has -s <id> is not the agent
    tool = spawned([sys.executable, "-c", "import time; time.sleep(60)", "-s", target])
    assert AGENT.discover(ctx_for(oc, launched_at=time.time() + 5, pids=[tool.pid])) is None
    p = spawned([*fake_opencode, "-s", other])
    wait_for(lambda: session_from_argv(__import__("psutil").Process(p.pid).cmdline()), what="argv")
    c = ctx_for(oc, launched_at=time.time() + 5, pids=[p.pid])
    assert AGENT.discover(c) == other
    assert AGENT.discover(ctx_for(oc, launched_at=time.time() + 5, pids=[p.pid], claimed=frozenset({other}))) is None


def test_discover_with_continue_takes_the_last_updated_parent(made, spawned, fake_opencode):
    oc, other, target, _t0 = made
    p = spawned([*fake_opencode, "--continue"])
    wait_for(lambda: "--continue" in __import__("psutil").Process(p.pid).cmdline(), what="argv")
    later = time.time() + 5
    assert AGENT.discover(ctx_for(oc, launched_at=later, pids=[p.pid])) == target
    assert AGENT.discover(ctx_for(oc, launched_at=later, pids=[p.pid], claimed=frozenset({target}))) == other
    assert AGENT.discover(ctx_for(oc, launched_at=later)) is None  # no -c: nothing older counts


def test_exists_and_family(made):
    oc, other, target, _t0 = made
    c = ctx_for(oc)
    assert AGENT.exists(c, target) and AGENT.exists(c, other)
    assert not AGENT.exists(c, "ses_" + "Z" * 26)
    fam = AGENT.family(c, target)
    assert fam[0] == target and len(fam) == 3 and other not in fam


def _purge_and_check(oc, target, other, opencode_db, **ctx_kw):
    db = opencode_db(oc.db)
    fam, ofam = db.family(target), db.family(other)
    assert len(fam) == 3 and len(ofam) == 3
    data = oc.db.parent
    # files opencode leaves behind: a session diff per session and a plan for the parent
    diffs = data / "storage" / "session_diff"
    diffs.mkdir(parents=True, exist_ok=True)
    for sid in fam + ofam:
        (diffs / f"{sid}.json").write_text("[]")
    # the JSON storage of older opencode versions: session, messages and their parts, todos
    storage = data / "storage"
    legacy = {}
    for sid in (fam[1], ofam[0]):
        mid = "msg_legacy" + sid[-8:]
        legacy[sid] = [storage / "session" / "global" / f"{sid}.json", storage / "message" / sid / f"{mid}.json",
                       storage / "part" / mid / "prt_legacy1.json", storage / "todo" / f"{sid}.json"]
        for path in legacy[sid]:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}")
    created, slug = db.query("select time_created, slug from session where id = ?", (target,))[0]
    plan = data / "plans" / f"{created}-{slug}.md"
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_text("# plan\n")
    # the TUI's prompt history names no session: a line goes when its text is a prompt of the family
    # only ("opencode run" stores its message JSON-quoted, the TUI as typed)
    history = oc.home / ".local/state/opencode/prompt-history.jsonl"
    history.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"input": text, "parts": [], "mode": "normal"})
             for text in ('"MUXHOST_SPAWN target"', '"MUXHOST_SPAWN other"', "ls -la",
                          "MUXHOST_CHILD_TASK: start another one")]
    history.write_text("".join(line + "\n" for line in lines))
    before_other = db.counts(ofam)
    assert b"MUXHOST_SPAWN target" in _raw(oc.db)
    assert db.counts(fam)["message"] > 0 and db.counts(fam)["event"] > 0

    c = ctx_for(oc, **ctx_kw)
    assert AGENT.in_use(c, target) == []
    plan_items = AGENT.artifacts(c, target)
    assert f"session:{target}" in plan_items
    for child in fam[1:]:
        assert f"session:{child} [child session {child}]" in plan_items
        assert f"{c.expand(diffs / (child + '.json'))} [child session {child}]" in plan_items
    assert c.expand(plan) in plan_items
    assert f"{c.expand(history)}: 1 line" in plan_items
    assert f"{c.expand(storage / 'message' / fam[1])} [child session {fam[1]}]" in plan_items
    assert f"{c.expand(legacy[fam[1]][2].parent)} [child session {fam[1]}]" in plan_items
    assert not any(o in item for item in plan_items for o in ofam)

    removed = AGENT.purge(c, target)
    assert AGENT.artifacts(c, target) == []
    assert set(removed) == set(plan_items)
    assert db.counts(fam) == {t: 0 for t in before_other}
    assert db.mentions(fam) == {}
    assert db.counts(ofam) == before_other
    for sid in fam:
        assert not (diffs / f"{sid}.json").exists()
    for sid in ofam:
        assert (diffs / f"{sid}.json").exists()
    assert not plan.exists()
    assert not any(p.exists() for p in legacy[fam[1]])
    assert all(p.exists() for p in legacy[ofam[0]])
    assert history.read_text() == "".join(line + "\n" for line in lines[1:])
    # the text itself is gone from the database files (no free pages or WAL frames keep it)
    assert b"MUXHOST_SPAWN target" not in _raw(oc.db)
    assert b"MUXHOST_SPAWN other" in _raw(oc.db)
    return c


def _raw(db: Path) -> bytes:
    return b"".join(Path(f"{db}{suffix}").read_bytes() for suffix in ("", "-wal") if Path(f"{db}{suffix}").exists())


def test_purge_with_the_binary(made, opencode_db):
    oc, other, target, _t0 = made
    c = _purge_and_check(oc, target, other, opencode_db)
    assert c.notes == []


def test_purge_without_the_binary_uses_sql(made, opencode_db):
    oc, other, target, _t0 = made
    oc.remove_binary()
    c = _purge_and_check(oc, target, other, opencode_db)
    assert any("binary not found" in n for n in c.notes), c.notes


def test_purge_when_the_binary_fails(made, opencode_db, tmp_path):
    oc, other, target, _t0 = made
    fake = tmp_path / "failing-opencode"
    fake.write_text("#!/bin/sh\necho 'boom' >&2\nexit 3\n")
    fake.chmod(0o755)
    c = _purge_and_check(oc, target, other, opencode_db, config={"binary": str(fake)})
    assert any("exited 3" in n and "boom" in n for n in c.notes), c.notes


def test_in_use_argv_and_database_holders(made, spawned, opencode_db):
    oc, other, target, _t0 = made
    c = ctx_for(oc)
    child = opencode_db(oc.db).family(target)[1]
    # a process whose argv names a child of the conversation holds it
    p = spawned([sys.executable, "-c", "import time; time.sleep(60)", "-s", child])
    holders = wait_for(lambda: AGENT.in_use(c, target), what="argv holder")
    assert any(h.startswith(f"pid {p.pid} ") and child in h for h in holders), holders
    assert AGENT.in_use(c, other) == []
    p.kill()
    p.wait()
    assert AGENT.in_use(c, target) == []
    # a process with the database open holds every conversation in it
    code = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); c.execute('select count(*) from session')"
            ".fetchall(); time.sleep(60)")
    q = spawned([sys.executable, "-c", code, str(oc.db)])
    holders = wait_for(lambda: AGENT.in_use(c, other), what="database holder")
    assert len(holders) == 1 and holders[0].startswith(f"pid {q.pid} ") and "open" in holders[0], holders
    assert q.pid in _lock_holders([str(oc.db) + "-shm"])


def test_a_background_server_is_a_holder_only_while_a_client_is_connected(made, spawned):
    import psutil
    import socket

    oc, other, target, _t0 = made
    s = spawned([oc.binary, "serve", "--port", "0"], env=dict(oc.env, PWD=oc.made_cwd), cwd=oc.made_cwd)
    wait_for(lambda: s.pid in (_lock_holders([str(oc.db), str(oc.db) + "-shm"]) or set()), timeout=30,
             what="opencode serve opening the database")
    assert AGENT.in_use(ctx_for(oc), target) == []
    port = wait_for(lambda: next((c.laddr.port for c in psutil.Process(s.pid).net_connections(kind="inet")
                                  if c.status == psutil.CONN_LISTEN), None), timeout=30, what="serve listening")
    client = socket.create_connection(("127.0.0.1", port))  # what `opencode attach` keeps open
    try:
        holders = wait_for(lambda: AGENT.in_use(ctx_for(oc), target), what="serve with a client")
        assert len(holders) == 1 and holders[0].startswith(f"pid {s.pid} ") and "connected client" in holders[0]
    finally:
        client.close()
    wait_for(lambda: AGENT.in_use(ctx_for(oc), target) == [], what="client gone")


def test_reads_never_wait_for_a_writer(made):
    oc, other, target, t0 = made
    w = sqlite3.connect(str(oc.db), timeout=1, isolation_level=None)
    try:
        w.execute("begin immediate")
        w.execute("update session set title = 'x' where id = ?", (other,))
        c = ctx_for(oc, launched_at=t0)
        start = time.monotonic()
        assert AGENT.discover(c) == target
        assert AGENT.exists(c, other)
        assert len(AGENT.artifacts(c, target)) > 10
        assert time.monotonic() - start < 2
    finally:
        w.execute("rollback")
        w.close()


def test_unreadable_processes_fail_closed_without_proc_locks(made, spawned, fake_opencode, monkeypatch):
    import psutil
    import muxhost_opencode

    oc, other, target, _t0 = made
    p = spawned(fake_opencode)
    wait_for(lambda: "opencode" in " ".join(psutil.Process(p.pid).cmdline()), what="fake opencode")
    real_open_files = psutil.Process.open_files

    def denied(self):
        if self.pid == p.pid:
            raise psutil.AccessDenied(self.pid)
        return real_open_files(self)

    monkeypatch.setattr(psutil.Process, "open_files", denied)
    # Linux: /proc/locks tells who has the database open, so a process we may not read is no holder
    # unless it holds a lock on it
    assert AGENT.in_use(ctx_for(oc), target) == []
    # without /proc/locks (macOS) an opencode whose open files we may not read may hold it
    monkeypatch.setattr(muxhost_opencode, "_lock_holders", lambda paths: None)
    holders = AGENT.in_use(ctx_for(oc), target)
    assert any(h.startswith(f"pid {p.pid} ") and "cannot be read" in h for h in holders), holders


_AS_NOBODY = """
import shutil, sqlite3, sys, tempfile, urllib.parse
from pathlib import Path
class MuxhostError(Exception): pass
READ_TIMEOUT = 1.0
{source}
con = connect_ro(Path(sys.argv[1]))
print(con.execute("select count(*) from session").fetchone()[0])
con.close()
"""


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/setpriv").exists() or not Path("/usr/bin/python3").exists(),
                    reason="needs root, setpriv and /usr/bin/python3 to read as another user")
@pytest.mark.parametrize("with_wal", [True, False])
def test_read_only_without_a_shm_in_a_folder_we_may_not_write(made, with_wal):
    """Another user's database with no -shm (nobody has it open) in a folder we may not write:
    plain mode=ro cannot create the -shm; connect_ro still reads every session (the WAL included)."""
    import shutil
    import tempfile

    oc, _other, _target, _t0 = made
    want = len(AGENT.family(ctx_for(oc), _other)) + len(AGENT.family(ctx_for(oc), _target))
    tmp_path = Path(tempfile.mkdtemp(prefix="muxhost-oc-ro-"))  # pytest's own tmp dirs are private (0700)
    try:
        _read_as_nobody(oc, tmp_path, with_wal, want)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _read_as_nobody(oc, tmp_path: Path, with_wal: bool, want: int) -> None:
    import inspect
    import shutil

    import muxhost_opencode

    folder = tmp_path / "ro"
    folder.mkdir()
    src = sqlite3.connect(str(oc.db))
    if not with_wal:
        src.execute("pragma wal_checkpoint(truncate)")
    src.close()
    shutil.copyfile(oc.db, folder / "opencode.db")
    if with_wal:
        shutil.copyfile(f"{oc.db}-wal", folder / "opencode.db-wal")
        assert (folder / "opencode.db-wal").stat().st_size > 0
    script = tmp_path / "read.py"
    script.write_text(_AS_NOBODY.format(source=inspect.getsource(muxhost_opencode._Snapshot) + "\n"
                                        + inspect.getsource(muxhost_opencode.connect_ro)))
    for p in (tmp_path, folder, script, *folder.iterdir()):
        p.chmod(0o755 if p.is_dir() else 0o644)
    folder.chmod(0o555)
    for parent in tmp_path.parents:
        if parent.stat().st_mode & 0o005 != 0o005:
            pytest.skip(f"{parent} is not readable by other users")
    plain = subprocess.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
                            "-c", "import sqlite3,sys; sqlite3.connect(f'file:{sys.argv[1]}?mode=ro', uri=True)"
                            ".execute('select 1 from session')", str(folder / "opencode.db")], capture_output=True, text=True)
    assert plain.returncode != 0  # what connect_ro works around
    p = subprocess.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
                        str(script), str(folder / "opencode.db")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) == want
    assert sorted(os.listdir(folder)) == ["opencode.db"] + (["opencode.db-wal"] if with_wal else [])


def test_a_purge_stopped_half_way_still_finds_the_children(made, opencode_db):
    """`opencode session delete` removed every row (children included); what the children left on
    disk is still found, through opencode's log (``created id=… parentID=…``), and purged."""
    oc, other, target, _t0 = made
    c = ctx_for(oc)
    fam = opencode_db(oc.db).family(target)
    log = oc.db.parent / "log" / "opencode.log"
    # opencode writes its log lazily and `opencode run` may exit before the last lines are out: make
    # sure the created lines are there, in opencode's own format
    text = log.read_text()
    with open(log, "a") as f:
        for parent, child in zip(fam, fam[1:]):
            if f"created id={child}" not in text:
                f.write(f"timestamp=2026-11-30T09:02:54.452Z level=INFO run=abcd1234 message=created id={child}"
                        f" slug=x version=1.18.33 projectID=global directory={oc.made_cwd} parentID={parent}"
                        ' title="sub task (@general subagent)"\n')
    diffs = oc.db.parent / "storage" / "session_diff"
    diffs.mkdir(parents=True)
    for sid in fam:
        (diffs / f"{sid}.json").write_text("[]")
    AGENT._delete_with_binary(c, target)
    assert c.notes == []
    assert opencode_db(oc.db).family(target) == [target]  # no rows left to walk
    assert AGENT.family(c, target) == fam
    items = AGENT.artifacts(c, target)
    for child in fam[1:]:
        assert f"{c.expand(diffs / (child + '.json'))} [child session {child}]" in items
    AGENT.purge(c, target)
    assert AGENT.artifacts(c, target) == []
    assert not any((diffs / f"{sid}.json").exists() for sid in fam)
    assert not any(sid in log.read_text() for sid in fam)


def test_only_the_log_tail_since_launch_is_read():
    import datetime
    import io

    from muxhost_opencode import _offset_since

    t0 = datetime.datetime(2026, 11, 30, 9, 0, 0, tzinfo=datetime.timezone.utc)
    data = b"".join(f"timestamp={(t0 + datetime.timedelta(seconds=i)):%Y-%m-%dT%H:%M:%S}.000Z level=INFO"
                    f" run=abc message=x k={i}\n".encode() for i in range(20000))
    since = (t0 + datetime.timedelta(seconds=15000)).timestamp()
    f = io.BytesIO(data)
    f.seek(_offset_since(f, since, block=4096))
    k = int(f.readline().split(b" k=")[1])
    assert 15000 - 100 < k <= 15000
    assert _offset_since(io.BytesIO(data), t0.timestamp() - 5, block=4096) == 0
    assert _offset_since(io.BytesIO(b"not a log line\n" * 100), since, block=64) == 0
