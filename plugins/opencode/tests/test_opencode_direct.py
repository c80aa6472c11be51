"""OpenCodeAgent against databases the real opencode wrote (``opencode run`` with the fake model),
without tmux: ids, where the database is, discover, in_use, children, the typed artifacts, and purges
carried out by the real host in-process (its plan, its fixed order, its residual) for what the
contract suite (test_opencode_contract.py) does not reach: opencode's old JSON storage, plan files,
the prompt history, parts naming another session, its own delete missing or failing or pinned to
the database read, a purge stopped half way, an unreadable database, a log open elsewhere."""

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

import muxhost_opencode
from muxhost import procs
from muxhost.agent import AgentContext
from muxhost.artifacts import Rows
from muxhost.errors import NotFound, Refused
from muxhost.kit import holders
from muxhost.testing import wait_for
from muxhost_opencode import OpenCodeAgent, session_from_argv

AGENT = OpenCodeAgent()


def ctx_for(oc, **kw) -> AgentContext:
    kw.setdefault("cwd", oc.made_cwd)
    return AgentContext(home=str(oc.home), env=dict(oc.env, **kw.pop("env", {})), **kw)


def purge(oc, c: AgentContext, cid: str, dry_run: bool = False):
    """``muxhost purge --agent opencode --conversation CID [--dry-run]`` by the real host, in-process,
    with the context ``c`` (no record holds the conversation: no tmux needed). The PurgeReport."""
    from muxhost.host import Host
    from muxhost.plugins import get_plugin_manager
    from muxhost.store import Store

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(muxhost_opencode, name="opencode")
    (oc.root / "state").mkdir(exist_ok=True)
    host = Host(pm=pm, store=Store(oc.root / "state" / "state.db"))
    return host.purge(agent_name="opencode", conversation_id=cid, ctx=c, dry_run=dry_run)


def rows_item(items: list[str], table: str, sid: str, child: bool = False) -> bool:
    """The plan names the rows of ``table`` of session ``sid`` (as the host labels them)."""
    suffix = f" [child conversation {sid}]" if child else ""
    return any(i.startswith(f"{table}:{sid} (") and i.endswith(suffix) for i in items)


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
    # OPENCODE_DB: absolute as is, ~ the agent's HOME (not the caller's), relative to the data
    # folder, :memory: is nowhere
    c = AgentContext(home=str(home), env={"OPENCODE_DB": str(tmp_path / "x.db")})
    assert AGENT.db_path(c) == tmp_path / "x.db"
    c = AgentContext(home=str(home), env={"OPENCODE_DB": "~/dbs/oc.db"})
    assert AGENT.db_path(c) == home / "dbs/oc.db"
    assert AGENT.db_path(c) in AGENT.roots(c)  # rows of a database outside the data home may go
    c = AgentContext(home=str(home), env={"OPENCODE_DB": "other.db"})
    assert AGENT.db_path(c) == home / ".local/share/opencode/other.db"
    c = AgentContext(home=str(home), env={"OPENCODE_DB": ":memory:"})
    assert AGENT.db_path(c) is None
    assert AGENT.artifacts(c, "ses_" + "a" * 26) == []


def test_storage_entries_of_the_session_only_and_links_as_links(tmp_path):
    """Old JSON storage: the session's own entries, a message's part folder by the message's id (a
    file whose stem is ``..`` names no folder), a symlinked entry as a File (the link, not its target)."""
    home = tmp_path / "h"
    storage = home / ".local/share/opencode/storage"
    sid, other = "ses_" + "a" * 26, "ses_" + "b" * 26
    for path in (storage / "message" / sid / "msg_1.json", storage / "message" / sid / "...json",
                 storage / "message" / other / "msg_2.json", storage / "todo" / f"{other}.json"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    (storage / "part" / "msg_1").mkdir(parents=True)
    (storage / "session" / "global").mkdir(parents=True)
    (storage / "session" / "global" / sid).symlink_to(tmp_path)
    found = {(type(a).__name__, Path(a.path)) for a in AGENT.artifacts(AgentContext(home=str(home), env={}), sid)}
    assert found == {("Dir", storage / "message" / sid), ("Dir", storage / "part" / "msg_1"),
                     ("File", storage / "session" / "global" / sid)}


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


def test_exists_and_children(made, opencode_db):
    oc, other, target, _t0 = made
    c = ctx_for(oc)
    assert AGENT.exists(c, target) and AGENT.exists(c, other)
    assert not AGENT.exists(c, "ses_" + "Z" * 26)
    fam = opencode_db(oc.db).family(target)
    assert len(fam) == 3 and other not in fam
    assert AGENT.children(c, target) == [fam[1]]  # direct children only: the host walks the depth
    assert AGENT.children(c, fam[1]) == [fam[2]]
    assert AGENT.children(c, fam[2]) == []


def _purge_and_check(oc, target, other, opencode_db, delete: bool = True, **ctx_kw):
    """The whole purge of ``target`` (with its sub-agent and grandchild) next to ``other``: every
    place opencode keeps it in the plan, nothing of ``other``, and afterwards nothing left of it.
    ``delete``: the plan starts with `opencode session delete` (the binary is there)."""
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
    # the TUI's prompt history names no session: a line goes when its text is a prompt of the session
    # only ("opencode run" stores its message JSON-quoted, the TUI as typed); the file is a symlink
    # (to a file in the state home), which stays one
    history = oc.home / ".local/state/opencode/prompt-history.jsonl"
    history.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"input": text, "parts": [], "mode": "normal"})
             for text in ('"MUXHOST_SPAWN target"', '"MUXHOST_SPAWN other"', "ls -la",
                          "MUXHOST_CHILD_TASK: start another one")]
    real_history = oc.home / ".local/state/history-elsewhere.jsonl"
    real_history.write_text("".join(line + "\n" for line in lines))
    history.symlink_to(real_history)
    before_other = db.counts(ofam)
    assert b"MUXHOST_SPAWN target" in _raw(oc.db)
    assert db.counts(fam)["message"] > 0 and db.counts(fam)["event"] > 0

    c = ctx_for(oc, **ctx_kw)
    assert AGENT.in_use(c, target) == []
    items = purge(oc, c, target, dry_run=True).plan
    runs = [i for i in items if i.startswith("run: ")]  # opencode's own delete, once: it takes the children
    assert runs == ([items[0]] if delete else []) and all(r.endswith(f" session delete {target}") for r in runs)
    assert rows_item(items, "session", target) and rows_item(items, "message", target)
    for child in fam[1:]:
        assert rows_item(items, "session", child, child=True)
        assert f"{c.expand(diffs / (child + '.json'))} [child conversation {child}]" in items
    assert c.expand(plan) in items
    assert f"{c.expand(history)}: 1 line" in items
    assert f"{c.expand(storage / 'message' / fam[1])}/ [child conversation {fam[1]}]" in items
    assert f"{c.expand(legacy[fam[1]][2].parent)}/ [child conversation {fam[1]}]" in items
    assert not any(o in item for item in items for o in ofam)

    report = purge(oc, c, target)
    assert report.residual == [] and report.complete
    assert {r for r in report.removed if not r.startswith("ran: ")} == set(items) - set(runs)
    with pytest.raises(NotFound):  # purging it again: nothing of it is left
        purge(oc, c, target, dry_run=True)
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
    assert history.is_symlink() and real_history.read_text() == "".join(line + "\n" for line in lines[1:])
    # the text itself is gone from the database files (no free pages or WAL frames keep it)
    assert b"MUXHOST_SPAWN target" not in _raw(oc.db)
    assert b"MUXHOST_SPAWN other" in _raw(oc.db)
    return c, report


def _raw(db: Path) -> bytes:
    return b"".join(Path(f"{db}{suffix}").read_bytes() for suffix in ("", "-wal") if Path(f"{db}{suffix}").exists())


def test_purge_with_the_binary(made, opencode_db, tmp_path):
    oc, other, target, _t0 = made
    # an XDG_DATA_HOME that is not the agent's (its HOME is not the caller's): `opencode session
    # delete` would look there, but it runs with OPENCODE_DB pinned to the database read here
    c, report = _purge_and_check(oc, target, other, opencode_db, env={"XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert c.notes == []
    assert any(r.startswith("ran: ") and r.endswith(f" session delete {target}") for r in report.removed)


def test_purge_without_the_binary_uses_sql(made, opencode_db):
    oc, other, target, _t0 = made
    oc.remove_binary()
    c, _report = _purge_and_check(oc, target, other, opencode_db, delete=False)
    assert any("binary not found" in n for n in c.notes), c.notes


def test_purge_when_the_binary_fails(made, opencode_db, tmp_path):
    oc, other, target, _t0 = made
    fake = tmp_path / "failing-opencode"
    fake.write_text("#!/bin/sh\necho 'boom' >&2\nexit 3\n")
    fake.chmod(0o755)
    c, _report = _purge_and_check(oc, target, other, opencode_db, config={"binary": str(fake)})
    assert any("exited 3" in n and "boom" in n for n in c.notes), c.notes


def test_a_part_of_its_message_that_names_another_session_goes_too(made, opencode_db):
    """Rows are found by session id, and parts also through the session's messages (ids read when
    the plan is made, before `opencode session delete` removes the messages)."""
    oc, other, target, _t0 = made
    db = opencode_db(oc.db)
    mid = db.query("select id from message where session_id = ? order by time_created limit 1", (target,))[0][0]
    con = sqlite3.connect(oc.db)
    con.execute("insert into part (id, message_id, session_id, time_created, time_updated, data)"
                " values ('prt_stray', ?, ?, 0, 0, '{\"type\":\"text\",\"text\":\"stray\"}')", (mid, other))
    con.commit()
    con.close()
    c = ctx_for(oc)
    plan = purge(oc, c, target, dry_run=True).plan
    assert any(i.startswith(f"part:{mid} (2 rows in ") for i in plan), plan  # the stray one and its own
    report = purge(oc, c, target)
    assert report.residual == []
    assert db.query("select count(*) from part where id = 'prt_stray'") == [(0,)]
    assert db.query("select count(*) from part where session_id = ?", (other,))[0][0] > 0


def test_a_plan_in_a_git_worktree_is_removed_there(made, opencode_db, tmp_path):
    """In a git project opencode writes the plan into <worktree>/.opencode/plans: a folder of the
    agent's (roots), though outside its homes; the other session's plan stays."""
    oc, other, target, _t0 = made
    worktree = tmp_path / "project"
    con = sqlite3.connect(oc.db)
    con.execute("update project set vcs = 'git', worktree = ? where id in (select project_id from session)",
                (str(worktree),))
    con.commit()
    con.close()
    db = opencode_db(oc.db)
    plans = {}
    for sid in (target, other):
        created, slug = db.query("select time_created, slug from session where id = ?", (sid,))[0]
        plans[sid] = worktree / ".opencode" / "plans" / f"{created}-{slug}.md"
        plans[sid].parent.mkdir(parents=True, exist_ok=True)
        plans[sid].write_text(f"# plan of {sid}\n")
    c = ctx_for(oc)
    assert str(plans[target]) in purge(oc, c, target, dry_run=True).plan
    assert purge(oc, c, target).residual == []
    assert not plans[target].exists() and plans[other].read_text() == f"# plan of {other}\n"


def test_an_unreadable_database_is_a_leftover_never_empty(made, opencode_db):
    """A database that cannot be read is never taken for one without the session: the plan says so,
    the purge removes what it can find elsewhere and stays incomplete (exit 5), the file untouched."""
    oc, other, target, _t0 = made
    diff = oc.db.parent / "storage" / "session_diff" / f"{target}.json"
    diff.parent.mkdir(parents=True)
    diff.write_text("[]")
    src = sqlite3.connect(oc.db)
    src.execute("pragma wal_checkpoint(truncate)")
    src.close()
    oc.db.write_bytes(b"this is not a database, though it is where opencode's is" * 100)
    before = oc.db.read_bytes()
    c = ctx_for(oc)
    plan = purge(oc, c, target, dry_run=True).plan
    assert any(i.startswith(f"{c.expand(oc.db)} (could not be read: ") for i in plan), plan
    report = purge(oc, c, target)
    assert not report.complete and any("could not be read" in r for r in report.residual), report
    assert not diff.exists() and oc.db.read_bytes() == before


def test_a_log_open_in_a_running_process_keeps_its_lines(made, spawned):
    """opencode appends to its log without a lock: while a process has it open, its lines naming
    the session are left (a Leftover: the purge is incomplete); once it is closed they go."""
    oc, other, target, _t0 = made
    log = oc.db.parent / "log" / "opencode.log"
    assert target in log.read_text()
    tail = spawned([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); time.sleep(60)", str(log)])
    wait_for(lambda: holders.with_open(procs.ProcessTable.snapshot(), [log]).found, what="the log open")
    report = purge(oc, ctx_for(oc), target)
    where = ctx_for(oc).expand(log)
    assert any(r.startswith(where) and "running process" in r for r in report.residual), report.residual
    assert target in log.read_text() and not report.complete
    tail.kill()
    tail.wait()
    assert purge(oc, ctx_for(oc), target).residual == []
    assert target not in log.read_text() and other in log.read_text()


def test_in_use_argv_and_database_holders(made, spawned, opencode_db):
    oc, other, target, _t0 = made
    c = ctx_for(oc)
    child = opencode_db(oc.db).family(target)[1]
    # a process whose argv names a child of the conversation holds the child, so the purge of the
    # conversation is refused (the host asks in_use for every member of the family)
    p = spawned([sys.executable, "-c", "import time; time.sleep(60)", "-s", child])
    holders_ = wait_for(lambda: AGENT.in_use(c, child), what="argv holder")
    assert any(h.startswith(f"pid {p.pid} ") and child in h for h in holders_), holders_
    assert AGENT.in_use(c, target) == [] and AGENT.in_use(c, other) == []
    with pytest.raises(Refused, match=f"child conversation {child}: pid {p.pid} "):
        purge(oc, c, target)
    p.kill()
    p.wait()
    c = ctx_for(oc)  # (a context holds the process table it read)
    assert AGENT.in_use(c, child) == []
    # a process with the database open holds every conversation in it
    code = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); c.execute('select count(*) from session')"
            ".fetchall(); time.sleep(60)")
    q = spawned([sys.executable, "-c", code, str(oc.db)])
    found = wait_for(lambda: AGENT.in_use(c, other), what="database holder")
    assert len(found) == 1 and found[0].startswith(f"pid {q.pid} ") and "open" in found[0], found
    assert q.pid in holders.lock_owners([str(oc.db) + "-shm"])[str(oc.db) + "-shm"]
    assert opencode_db(oc.db).counts([target])["session"] == 1  # the refused purge changed nothing


def test_a_background_server_is_a_holder_only_while_a_client_is_connected(made, spawned):
    import psutil
    import socket

    oc, other, target, _t0 = made
    s = spawned([oc.binary, "serve", "--port", "0"], env=dict(oc.env, PWD=oc.made_cwd), cwd=oc.made_cwd)
    shm = str(oc.db) + "-shm"
    wait_for(lambda: s.pid in (holders.lock_owners([str(oc.db), shm]) or {}).get(shm, set()), timeout=30,
             what="opencode serve opening the database")
    assert AGENT.in_use(ctx_for(oc), target) == []
    port = wait_for(lambda: next((c.laddr.port for c in psutil.Process(s.pid).net_connections(kind="inet")
                                  if c.status == psutil.CONN_LISTEN), None), timeout=30, what="serve listening")
    client = socket.create_connection(("127.0.0.1", port))  # what `opencode attach` keeps open
    try:
        found = wait_for(lambda: AGENT.in_use(ctx_for(oc), target), what="serve with a client")
        assert len(found) == 1 and found[0].startswith(f"pid {s.pid} "), found
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
        assert len(AGENT.children(c, target)) == 1
        assert len(AGENT.artifacts(c, target)) > 10
        assert time.monotonic() - start < 2
    finally:
        w.execute("rollback")
        w.close()


def test_unreadable_processes_fail_closed(made, spawned, fake_opencode, monkeypatch):
    """An opencode whose open files we may not read may have the database open: a holder, with or
    without /proc/locks (macOS)."""
    import psutil

    oc, other, target, _t0 = made
    p = spawned(fake_opencode)
    wait_for(lambda: "opencode" in " ".join(psutil.Process(p.pid).cmdline()), what="fake opencode")
    real_open_paths = holders.open_paths

    def denied(pid):
        if pid == p.pid:
            raise psutil.AccessDenied(pid)
        return real_open_paths(pid)

    monkeypatch.setattr(holders, "open_paths", denied)
    monkeypatch.setattr(holders, "_uid", lambda pid: -1)  # not ours: it counts by its name only
    for proc_locks in (holders._proc_locks, lambda: None):
        monkeypatch.setattr(holders, "_proc_locks", proc_locks)
        found = AGENT.in_use(ctx_for(oc), target)
        assert any(h.startswith(f"pid {p.pid} ") and "cannot be read" in h for h in found), found


def test_a_database_whose_shm_cannot_be_made_is_read_without_changing_it(made, opencode_db):
    """No -shm (nobody has it open) and none can be made (a folder we may not write): the real
    opencode database is still read, its WAL's last commits included, and nothing is created."""
    oc, other, target, _t0 = made
    fam = opencode_db(oc.db).family(target)
    shm = Path(f"{oc.db}-shm")
    shm.unlink(missing_ok=True)
    shm.symlink_to("/nonexistent/muxhost-opencode/shm")
    assert Path(f"{oc.db}-wal").stat().st_size > 0
    listing = {p.name: p.read_bytes() for p in oc.db.parent.iterdir() if p.is_file()}
    c = ctx_for(oc)
    assert AGENT.exists(c, target) and AGENT.children(c, target) == [fam[1]]
    assert any(isinstance(a, Rows) and a.table == "session" for a in AGENT.artifacts(c, target))
    assert {p.name: p.read_bytes() for p in oc.db.parent.iterdir() if p.is_file()} == listing


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
    p = subprocess.run([oc.binary, "session", "delete", target], env=oc.env, cwd=oc.home, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    assert opencode_db(oc.db).family(target) == [target]  # no rows left to walk
    assert AGENT.children(c, target) == [fam[1]] and AGENT.children(c, fam[1]) == [fam[2]]
    items = purge(oc, c, target, dry_run=True).plan
    assert not any(i.startswith("run: ") for i in items)  # the session is not on disk any more
    for child in fam[1:]:
        assert f"{c.expand(diffs / (child + '.json'))} [child conversation {child}]" in items
    assert purge(oc, c, target).residual == []
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
