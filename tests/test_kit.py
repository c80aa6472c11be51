"""The plugin kit (muxhost.kit) on its own: real processes, real files, real SQLite.

Every process a test starts is a child of this test, ended by pid (its create time checked) in
teardown; nothing else is ever signalled.
"""
import hashlib
import math
import os
import select
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from muxhost import fsutil, locks, procs
from muxhost.agent import AgentContext
from muxhost.errors import MuxhostError, Refused
from muxhost.kit import command, family, flock, holders, jsonl, net, sqlite

CHILD = r'''
import fcntl, os, socket, sqlite3, sys, threading
mode, path = sys.argv[1], sys.argv[2]
keep = []
extra = ""
if mode == "open":
    keep.append(open(path, "rb"))
elif mode == "flock":
    f = open(path, "a"); fcntl.flock(f, fcntl.LOCK_EX); keep.append(f)
elif mode == "posix":
    f = open(path, "a"); fcntl.lockf(f, fcntl.LOCK_EX); keep.append(f)
elif mode == "sqlite":
    c = sqlite3.connect(path); c.execute("select count(*) from sqlite_master").fetchone(); keep.append(c)
elif mode == "exclusive-wal":  # a WAL writer in exclusive locking mode keeps no -shm
    c = sqlite3.connect(path, isolation_level=None); c.execute("pragma locking_mode=exclusive")
    c.execute("insert into t values ('neighbour', 'exclusive')"); keep.append(c)
elif mode in ("write", "exclusive"):
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("begin immediate" if mode == "write" else "begin exclusive")
    c.execute("insert into t values ('neighbour', 'uncommitted')"); keep.append(c)
elif mode == "serve":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); keep.append(s)
    extra = str(s.getsockname()[1])
    threading.Thread(target=lambda: keep.extend(s.accept() for _ in iter(int, 1)), daemon=True).start()
print("ready", extra, flush=True)
if mode == "waitflock":  # blocks until the lock is free
    f = open(path, "a"); fcntl.flock(f, fcntl.LOCK_EX); keep.append(f)
for line in sys.stdin:
    if line.strip() == "commit":
        keep[0].execute("commit"); print("committed", flush=True)
'''


def _readline(p: subprocess.Popen, timeout: float = 10.0) -> str:
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    assert ready, "the child did not answer"
    return p.stdout.readline().strip()


@pytest.fixture(scope="session")
def child_script(tmp_path_factory) -> Path:
    script = tmp_path_factory.mktemp("kit") / "child.py"
    script.write_text(CHILD)
    return script


@pytest.fixture
def spawn(child_script):
    """``spawn(mode, path, *argv_words, env=…, argv0=…)`` starts CHILD and waits until it is ready."""
    started: list[tuple[subprocess.Popen, float]] = []

    def start(mode: str, path: object = "-", *words: str, env: dict | None = None, argv0: str | None = None):
        argv = [argv0 or sys.executable, str(child_script), mode, str(path), *words]
        p = subprocess.Popen(argv, executable=sys.executable, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, **(env or {})})
        started.append((p, psutil.Process(p.pid).create_time()))
        line = _readline(p)
        assert line.startswith("ready"), line
        p.extra = line[len("ready"):].strip()
        return p

    yield start
    for p, created in started:
        try:
            p.stdin.close()
            p.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            procs.signal_if_same(p.pid, created, procs.SIGKILL)
            p.wait(5)


def _ctx(tmp_path: Path, **kw) -> AgentContext:
    """A context with a fresh process table (taken on first use)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return AgentContext(home=str(home), env=dict(os.environ), cwd=str(tmp_path), **kw)


def _pid_lines(lines: list[str], pid: int) -> list[str]:
    return [line for line in lines if line.startswith(f"pid {pid} ")]


def _file_hash(*paths: Path) -> list[str | None]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None for p in paths]


# --------------------------------------------------------------------------------------------------
# holders


def test_a_process_naming_the_id_in_its_argv_or_environment_holds_it(spawn, tmp_path):
    cid, other = str(uuid.uuid4()), str(uuid.uuid4())
    by_argv = spawn("none", "-", f"--session={cid}")
    by_env = spawn("none", env={"KIT_THREAD_ID": cid})
    bystander = spawn("none", "-", other, env={"KIT_THREAD_ID": other})

    lines = holders.holders(_ctx(tmp_path), cid, env_vars="KIT_THREAD_ID")  # a name, or several
    assert _pid_lines(lines, by_argv.pid) and f"--session={cid}" in _pid_lines(lines, by_argv.pid)[0]
    env_lines = _pid_lines(lines, by_env.pid)
    assert len(env_lines) == 1 and env_lines[0].endswith(f"(KIT_THREAD_ID={cid} in its environment)")
    assert not _pid_lines(lines, bystander.pid)
    # any variable, a family of ids; another variable's name does not match; argv can be left out
    assert _pid_lines(holders.holders(_ctx(tmp_path), [other, cid], argv=False, env_vars=True), by_env.pid)
    assert _pid_lines(holders.holders(_ctx(tmp_path), [other, cid], argv=False, env_vars=True), bystander.pid)
    assert holders.holders(_ctx(tmp_path), cid, argv=False, env_vars=("OTHER_ID",)) == []
    # the old name keeps working
    assert _pid_lines(procs.argv_holders(cid), by_argv.pid)
    assert procs.argv_holders(cid) == holders.argv_holders(cid)


def test_muxhost_s_own_processes_and_this_process_never_hold_anything(spawn, tmp_path):
    cid = str(uuid.uuid4())
    shared = tmp_path / "shared.db"
    shared.write_bytes(b"")
    cli = spawn("open", shared, "purge", "--conversation", cid, env={"KIT_THREAD_ID": cid}, argv0="muxhost")
    assert psutil.Process(cli.pid).cmdline()[0] == "muxhost"
    with open(shared, "rb"), flock.flock(shared, 1):  # this process has it open and locked
        assert holders.holders(_ctx(tmp_path), cid, env_vars=True, files=[shared], locks=[shared]) == []


def test_a_process_with_the_file_open_or_locked_holds_it(spawn, tmp_path):
    opened, flocked, posixed = (tmp_path / n for n in ("open.jsonl", "flock.lock", "posix.lock"))
    for f in (opened, flocked, posixed):
        f.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(opened)
    a = spawn("open", opened)
    b = spawn("flock", flocked)
    c = spawn("posix", posixed)
    ctx = _ctx(tmp_path)
    lines = holders.holders(ctx, "no-such-id", files=[link], locks=[flocked, posixed])
    assert _pid_lines(lines, a.pid)[0].endswith(f"(has {ctx.expand(link)} open)")
    assert _pid_lines(lines, b.pid)[0].endswith(f"(holds a lock on {ctx.expand(flocked)})")
    assert _pid_lines(lines, c.pid)[0].endswith(f"(holds a lock on {ctx.expand(posixed)})")
    assert len(lines) == 3
    # a file nobody has open: free
    (tmp_path / "free").write_text("")
    assert holders.holders(_ctx(tmp_path), "no-such-id", files=[tmp_path / "free"], locks=[tmp_path / "free"]) == []


def test_a_wal_database_open_in_another_process_is_held_and_a_service_can_be_excluded(spawn, tmp_path):
    cid = str(uuid.uuid4())
    db = tmp_path / "agent.db"
    con = sqlite3.connect(db)
    con.execute("pragma journal_mode=wal")
    con.execute("create table t (id text, v text)")
    con.commit()
    con.close()
    files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
    tui = spawn("sqlite", db)
    service = spawn("sqlite", db, "serve", "--service")
    lines = holders.holders(_ctx(tmp_path), cid, files=files, locks=files)
    assert _pid_lines(lines, tui.pid) and _pid_lines(lines, service.pid)
    assert "holds a lock on" in _pid_lines(lines, tui.pid)[0]  # a WAL connection locks its files

    # the service is left out by an argv pattern or a predicate; files and locks only
    for exclude in (r"\bserve --service\b", lambda p: "--service" in p.cmdline):
        lines = holders.holders(_ctx(tmp_path), cid, files=files, locks=files, exclude=exclude)
        assert _pid_lines(lines, tui.pid) and not _pid_lines(lines, service.pid)
    named = spawn("sqlite", db, "serve", "--service", "--session", cid)
    lines = holders.holders(_ctx(tmp_path), cid, files=files, locks=files, exclude=r"\bserve --service\b")
    assert _pid_lines(lines, named.pid) and not _pid_lines(lines, service.pid)
    assert len(lines) == 2  # one line per process, first reason first


def test_a_lock_owner_the_snapshot_missed_still_holds_the_file(spawn, tmp_path):
    lock = tmp_path / "thread.lock"
    lock.write_text("")
    ctx = _ctx(tmp_path)
    ctx.process_table()  # taken before the holder started
    late = spawn("flock", lock)
    assert _pid_lines(holders.holders(ctx, "no-such-id", locks=[lock]), late.pid)


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="Linux: /proc/locks")
def test_a_process_waiting_for_the_lock_holds_it_too(spawn, tmp_path):
    lock = tmp_path / "thread.lock"
    lock.write_text("")
    holder = spawn("flock", lock)
    waiter = spawn("waitflock", lock)
    deadline = time.monotonic() + 5
    while waiter.pid not in holders.lock_owners([lock]).get(str(lock), set()):
        assert time.monotonic() < deadline, "the waiter never showed up in /proc/locks"
        time.sleep(0.02)
    assert holders.lock_owners([lock]) == {str(lock): {holder.pid, waiter.pid}}


def test_without_proc_locks_open_files_and_an_flock_probe_stand_in(spawn, tmp_path, monkeypatch):
    lock = tmp_path / "thread.lock"
    lock.write_text("")
    holder = spawn("flock", lock)
    assert holders.locked(lock) is True and holders.locked(tmp_path / "nothing") is False
    monkeypatch.setattr(holders, "_proc_locks", lambda: None)  # as on macOS
    assert holders.lock_owners([lock]) is None
    assert holders.locked(lock) is True  # the probe
    ctx = _ctx(tmp_path)
    assert _pid_lines(holders.holders(ctx, "no-such-id", locks=[lock]), holder.pid)[0].endswith(
        f"(has {ctx.expand(lock)} open)")
    # a holder muxhost cannot see (not in the table it was given): the probe still says locked
    table = procs.ProcessTable.snapshot()
    ctx.processes = procs.ProcessTable({pid: p for pid, p in table.procs.items() if pid != holder.pid})
    assert holders.holders(ctx, "no-such-id", locks=[lock]) == [
        f"{ctx.expand(lock)} is locked by a process muxhost cannot see"]
    (tmp_path / "free.lock").write_text("")
    assert holders.locked(tmp_path / "free.lock") is False


def test_a_process_whose_open_files_cannot_be_read_holds_them_when_ours_or_named(spawn, tmp_path, monkeypatch):
    f = tmp_path / "db"
    f.write_text("")
    hidden = spawn("none")
    real = holders.open_paths

    def denied(pid):
        if pid == hidden.pid:
            raise psutil.AccessDenied(pid)
        return real(pid)

    monkeypatch.setattr(holders, "open_paths", denied)
    cid = str(uuid.uuid4())
    line = _pid_lines(holders.holders(_ctx(tmp_path), cid, files=[f]), hidden.pid)
    assert line and "its open files cannot be read" in line[0]
    monkeypatch.setattr(holders, "_uid", lambda pid: -1)  # another user's
    assert holders.holders(_ctx(tmp_path), cid, files=[f]) == []
    name = psutil.Process(hidden.pid).name()
    assert _pid_lines(holders.holders(_ctx(tmp_path), cid, files=[f], names=[name]), hidden.pid)


def test_a_server_holds_a_conversation_only_while_a_client_is_connected(spawn):
    server = spawn("serve")
    assert holders.server_clients(server.pid) is None
    with socket.create_connection(("127.0.0.1", int(server.extra))):
        deadline = time.monotonic() + 5
        while holders.server_clients(server.pid) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "a server with 1 connected client" in holders.server_clients(server.pid)


# --------------------------------------------------------------------------------------------------
# sqlite


def _sql(db: Path, script: str) -> None:
    con = sqlite3.connect(db)
    try:
        con.executescript(script)
    finally:
        con.close()


def _wal_db(path: Path, rows=(("c1", "hello"), ("c2", "neighbour"))) -> Path:
    con = sqlite3.connect(path)
    con.execute("pragma journal_mode=wal")
    con.execute("create table t (id text, v text)")
    con.executemany("insert into t values (?, ?)", rows)
    con.commit()
    con.close()
    return path


def _crashed_writer(path: Path) -> None:
    """A WAL database whose last commits are only in its -wal (the writer died before a checkpoint)."""
    _wal_db(path)
    code = ("import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('pragma wal_autocheckpoint=0');"
            "c.execute(\"insert into t values ('c1', 'in the wal')\"); c.commit(); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    assert Path(f"{path}-wal").stat().st_size > 0


def test_reads_never_wait_for_a_writer_and_see_what_is_committed(spawn, tmp_path):
    db = _wal_db(tmp_path / "a.db")
    spawn("write", db)  # holds a write transaction with an uncommitted row
    t = time.monotonic()
    assert sqlite.count(db, "t", "id", "neighbour") == 0
    assert [tuple(r) for r in sqlite.rows(db, "select id, v from t order by id")] == [("c1", "hello"), ("c2", "neighbour")]
    assert sqlite.rows(db, "select v from t where id = ?", ("c1",))[0]["v"] == "hello"
    assert sqlite.counts(db, "t", "id", {"c1", "c2", "c3"}) == {"c1": 1, "c2": 1}
    assert sqlite.keys(db, "t", "id", ["c1"]) == [("c1", "c1")]  # labelled by the id column
    assert time.monotonic() - t < 1.0
    with pytest.raises(sqlite.DatabaseError):
        sqlite.rows(db, "delete from t")  # read-only


def test_a_wal_without_its_shm_is_read_with_its_last_commits(tmp_path):
    db = tmp_path / "a.db"
    _crashed_writer(db)
    shm = Path(f"{db}-shm")
    shm.unlink()
    listing = sorted(os.listdir(tmp_path))
    assert sqlite.count(db, "t", "id", "c1") == 2  # the WAL's row too
    assert sorted(os.listdir(tmp_path)) == listing  # and no -shm was made for it

    shm.unlink(missing_ok=True)
    shm.symlink_to("/nonexistent/muxhost-kit/shm")  # a -shm that cannot be made
    before = _file_hash(db, Path(f"{db}-wal"))
    with pytest.raises(sqlite3.Error):  # the case: mode=ro alone cannot read it
        sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute("select 1 from t").fetchall()
    main_only = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    assert main_only.execute("select count(*) from t where id = 'c1'").fetchone()[0] == 1  # misses the WAL's
    main_only.close()
    copies = set(Path(tempfile.gettempdir()).glob("muxhost-sqlite-*"))
    con = sqlite.connect_ro(db)
    assert con.execute("select v from t where id = 'c1' order by rowid").fetchall()[-1]["v"] == "in the wal"
    con.close()
    assert set(Path(tempfile.gettempdir()).glob("muxhost-sqlite-*")) == copies  # the private copy is gone
    assert _file_hash(db, Path(f"{db}-wal")) == before  # nothing of the agent's was touched

    checkpointed = _wal_db(tmp_path / "b.db")  # no WAL content: the main file is the whole database
    Path(f"{checkpointed}-shm").symlink_to("/nonexistent/muxhost-kit/shm")
    assert sqlite.count(checkpointed, "t", "id", ["c1", "c2"]) == 2


def test_reading_a_wal_database_at_rest_changes_nothing_on_disk(tmp_path):
    db = _wal_db(tmp_path / "a.db")
    assert sorted(os.listdir(tmp_path)) == ["a.db"]
    before = _file_hash(db)
    assert sqlite.count(db, "t", "id", "c1") == 1 and sqlite.columns(db) == {"t": ["id", "v"]}
    con = sqlite.connect_ro(db)
    assert con.execute("select count(*) from t").fetchone()[0] == 2
    con.close()
    assert sorted(os.listdir(tmp_path)) == ["a.db"] and _file_hash(db) == before  # SQLite would leave -shm, -wal


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="Linux: /proc/locks")
def test_an_exclusive_mode_writer_without_a_shm_is_not_read_around(spawn, tmp_path):
    db = _wal_db(tmp_path / "a.db")
    spawn("exclusive-wal", db)
    assert not Path(f"{db}-shm").exists()
    with pytest.raises(sqlite.DatabaseError, match="locked"):
        sqlite.count(db, "t", "id", "neighbour", timeout=0.2)


def test_a_database_in_use_or_busy_is_never_read_around_its_locks(spawn, tmp_path):
    db = _wal_db(tmp_path / "a.db")
    spawn("sqlite", db)  # a live connection
    shm = Path(f"{db}-shm")
    shm.unlink()
    shm.symlink_to("/nonexistent/muxhost-kit/shm")
    with pytest.raises(sqlite.DatabaseError, match="pid .* holds a lock on it"):
        sqlite.connect_ro(db)

    journal = tmp_path / "rollback.db"
    _sql(journal, "create table t (id text, v text);")
    spawn("exclusive", journal)
    with pytest.raises(sqlite.DatabaseError, match="a writer holds it"):
        sqlite.count(journal, "t", "id", "neighbour", timeout=0.2)


def test_identifiers_are_checked_and_values_are_only_parameters(tmp_path):
    db = _wal_db(tmp_path / "a.db")
    for bad in ('t"; drop table t; --', "t t", "", "1t"):
        with pytest.raises(ValueError):
            sqlite.count(db, bad, "id", "c1")
        with pytest.raises(ValueError):
            sqlite.delete_rows(db, [("t", "id", "c1"), (bad, "id", "c1")])
    assert sqlite.count(db, "t", "id", "c1' or '1'='1") == 0
    assert sqlite.delete_rows(db, [("t", "id", "c1' or '1'='1")]) == {}
    assert sqlite.count(db, "t", "id", ["c1", "c2"]) == 2  # nothing went, not even c1 of the refused plan


def test_missing_databases_tables_and_columns_have_no_rows_and_are_not_created(tmp_path):
    missing = tmp_path / "none.db"
    assert sqlite.rows(missing, "select 1") == [] and sqlite.count(missing, "t", "id", "x") == 0
    assert sqlite.columns(missing) == {} and sqlite.keys(missing, "t", "id", "x") == []
    assert sqlite.delete_rows(missing, [("t", "id", "x")]) == {} and sqlite.compact(missing) is None
    assert not missing.exists()
    with pytest.raises(FileNotFoundError):
        sqlite.connect_ro(missing)
    db = _wal_db(tmp_path / "a.db")
    assert sqlite.count(db, "gone", "id", "c1") == 0 and sqlite.count(db, "t", "gone", "c1") == 0
    assert sqlite.columns(db) == {"t": ["id", "v"]}
    _sql(db, "create table kv (k text, v text, primary key (k, v)); insert into kv values ('c1', 'x');"
             "create table loose (s text); insert into loose values ('c1');")
    assert sqlite.keys(db, "kv", "k", "c1") == [("c1/x", "c1")] and sqlite.keys(db, "loose", "s", "c1") == [("1", "c1")]


def test_delete_rows_is_one_transaction_per_database(tmp_path):
    db = _wal_db(tmp_path / "a.db")
    _sql(db, "create table msg (session_id text, text text);"
             "insert into msg values ('c1', 'one'), ('c1', 'two'), ('c2', 'neighbour');"
             "create trigger keep before delete on msg begin select raise(abort, 'not now'); end;")
    with pytest.raises(sqlite.DatabaseError, match="not now; nothing was deleted"):
        sqlite.delete_rows(db, [("t", "id", "c1"), ("msg", "session_id", "c1")])
    assert sqlite.count(db, "t", "id", "c1") == 1  # the first target was rolled back with the second
    _sql(db, "drop trigger keep")
    assert sqlite.delete_rows(db, [("msg", "session_id", ["c1"]), ("t", "id", "c1"), ("nope", "id", "c1")]) == {
        "msg": 2, "t": 1}
    assert sqlite.count(db, "msg", "session_id", "c2") == 1 and sqlite.count(db, "t", "id", "c2") == 1


def test_delete_rows_waits_for_the_agents_writer_then_gives_up(spawn, tmp_path):
    db = _wal_db(tmp_path / "a.db")
    writer = spawn("write", db)
    with pytest.raises(sqlite.DatabaseError, match="locked"):
        sqlite.delete_rows(db, [("t", "id", "c1")], timeout=0.3)
    assert sqlite.count(db, "t", "id", "c1") == 1

    def commit_soon():
        time.sleep(0.3)
        writer.stdin.write("commit\n")
        writer.stdin.flush()

    threading.Thread(target=commit_soon).start()
    assert sqlite.delete_rows(db, [("t", "id", "c1")], timeout=10) == {"t": 1}
    assert _readline(writer) == "committed"
    assert sqlite.count(db, "t", "id", "neighbour") == 1  # the writer's row is kept


def test_late_targets_are_read_under_the_write_lock_and_cannot_write(tmp_path):
    db = _wal_db(tmp_path / "a.db", rows=(("root", "p"), ("child", "root"), ("grandchild", "child"), ("other", "x")))

    def family_rows(reader: sqlite.Reader):
        edges = family.edges((r["v"], r["id"]) for r in reader.rows("select id, v from t"))
        assert "t" in reader.columns()
        return [("t", "id", family.walk("root", edges))]

    assert sqlite.delete_rows(db, family_rows) == {"t": 3}
    assert [r[0] for r in sqlite.rows(db, "select id from t")] == ["other"]
    with pytest.raises(sqlite.DatabaseError):
        sqlite.delete_rows(db, lambda reader: reader.rows("delete from t") or [])
    assert sqlite.count(db, "t", "id", "other") == 1


def test_compaction_removes_the_deleted_text_from_the_files(tmp_path):
    db = tmp_path / "a.db"
    secret = "muxhost-kit-secret-" + uuid.uuid4().hex
    _wal_db(db, rows=(("c1", secret), ("c2", "neighbour")))
    keep = sqlite3.connect(db)  # an open connection keeps the WAL (as a running agent does)
    keep.execute("select count(*) from t").fetchall()
    assert sqlite.delete_rows(db, [("t", "id", "c1")]) == {"t": 1}

    def on_disk() -> bytes:
        return b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal")) if p.exists())

    assert secret.encode() in on_disk()  # deleting alone leaves it in the WAL
    assert sqlite.compact(db) is None
    assert secret.encode() not in on_disk()
    assert fsutil.compact_sqlite(db) is None  # the old name
    assert [tuple(r) for r in keep.execute("select * from t")] == [("c2", "neighbour")]
    keep.close()


# --------------------------------------------------------------------------------------------------
# jsonl

LINES = [
    b'{"sessionId": "c1", "text": "one"}',                 # 0 matches
    b'{"sessionId": "c2", "text": "c1 mentioned"}',        # 1 another key names it
    b"not json at all c1",                                  # 2 not JSON
    b'["sessionId", "c1"]',                                 # 3 JSON, not an object
    b'{"sessionId": "\\u0063\\u0031", "text": "escaped"}',  # 4 matches (escaped)
    b'{"payload": {"id": "c1"}}',                          # 5 nested
    b'{"sessionId": "c1", "text": "crlf"}\r',               # 6 matches, CRLF kept for the others
    b'{"sessionId": true}',                                 # 7
    b"",                                                    # 8 blank
    b'{"sessionId": "c3", "text": "last, no newline"}',     # 9
]


def test_lines_are_matched_by_key_key_path_set_or_callable_and_others_never(tmp_path):
    f = tmp_path / "history.jsonl"
    f.write_bytes(b"\n".join(LINES))
    assert jsonl.count_lines(f, ("sessionId", "c1")) == 3
    assert jsonl.matching_lines(f, ("sessionId", "c1")) == [LINES[0], LINES[4], LINES[6].rstrip(b"\r")]
    assert jsonl.count_lines(f, (("payload", "id"), "c1")) == 1
    assert jsonl.count_lines(f, ("sessionId", {"c2", "c3"})) == 2
    assert jsonl.count_lines(f, ("sessionId", 1)) == 0 and jsonl.count_lines(f, ("sessionId", True)) == 1
    assert jsonl.count_lines(f, lambda d: "c1" in d.get("text", "")) == 1  # only objects reach it
    assert jsonl.count_lines(f, jsonl.contains("c1")) == 6  # raw: the text is in the line
    assert jsonl.count_lines(tmp_path / "none.jsonl", ("sessionId", "c1")) == 0


def test_drop_lines_keeps_every_other_byte_in_place(tmp_path):
    target = tmp_path / "history.jsonl"
    original = b"\n".join(LINES)
    target.write_bytes(original)
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    inode = target.stat().st_ino
    assert jsonl.drop_lines(link, ("sessionId", "c1")) == 3
    kept = [line for i, line in enumerate(original.splitlines(keepends=True)) if i not in (0, 4, 6)]
    assert target.read_bytes() == b"".join(kept)
    assert link.is_symlink() and target.stat().st_ino == inode
    assert jsonl.drop_lines(link, ("sessionId", "c1")) == 0
    assert jsonl.drop_lines(tmp_path / "none.jsonl", ("sessionId", "c1")) == 0
    assert not (tmp_path / "none.jsonl").exists()


# --------------------------------------------------------------------------------------------------
# flock


def test_flock_has_a_deadline_says_who_holds_it_and_is_importable_from_locks(tmp_path):
    path = tmp_path / "x.lock"
    assert locks.flock is flock.flock and locks.LockTimeout is flock.LockTimeout
    with flock.flock(path, 1, label="purge pid 812"):
        t = time.monotonic()
        with pytest.raises(flock.LockTimeout) as e:
            with flock.flock(path, 0.2):
                pass
        assert 0.2 <= time.monotonic() - t < 1.0
        assert e.value.holder == "purge pid 812" and isinstance(e.value, OSError)
    with flock.flock(path, 0.2, shared=True), flock.flock(path, 0.2, shared=True):
        pass
    with flock.flock(tmp_path / "agent.lock", 0.2, create=False) as fd:
        assert fd is None
    assert not (tmp_path / "agent.lock").exists()


def test_the_conversation_lock_refuses_only_for_its_own_lock(tmp_path):
    with locks.conversation(tmp_path, "demo", "c1", "purge"):
        with pytest.raises(Refused, match="a purge of conversation c1 is in progress"):
            with locks.conversation(tmp_path, "demo", "c1", "resume", timeout=0.1):
                pass
    other = tmp_path / "agent.lock"
    with flock.flock(other, 1), pytest.raises(flock.LockTimeout):
        with locks.conversation(tmp_path, "demo", "c2", "purge"):
            with flock.flock(other, 0.1):  # a plugin's lock inside the purge: its own error
                pass


def test_dirlock_is_proper_lockfile_s_lock(tmp_path):
    target = tmp_path / "history.jsonl"
    with flock.dirlock(target) as lock:
        assert lock == tmp_path / "history.jsonl.lock" and lock.is_dir()
        with pytest.raises(flock.LockTimeout):
            with flock.dirlock(target, timeout=0.2):
                pass
    assert not lock.exists()
    lock.mkdir()  # left by a holder that died 20 s ago
    os.utime(lock, (time.time() - 20, time.time() - 20))
    with flock.dirlock(target, timeout=0.5):
        pass
    assert not lock.exists()


# --------------------------------------------------------------------------------------------------
# families


def test_walk_is_breadth_first_cycle_safe_and_filtered():
    edges = family.edges([("a", "c"), ("a", "b"), ("b", "d"), ("c", "d"), ("d", "a"), ("b", "BAD"),
                          ("BAD", "e"), ("a", "a"), (None, "x"), ("e", "")])
    assert family.walk("a", edges, valid=str.islower) == ["a", "b", "c", "d"]
    assert family.walk("a", edges) == ["a", "b", "c", "BAD", "d", "e"]
    assert family.walk("a", lambda cid: {"a": ["b"], "b": ["c"]}.get(cid, [])) == ["a", "b", "c"]
    assert family.walk("x", {}) == ["x"]
    assert len(family.walk("n0", lambda c: [f"n{int(c[1:]) + 1}"], limit=50)) == 50


# --------------------------------------------------------------------------------------------------
# AgentContext.resolve / find_binary, and running the agent's command


def test_resolve_expands_against_the_agents_home_and_cwd(tmp_path):
    ctx = AgentContext(home=str(tmp_path / "agent-home"), cwd=str(tmp_path / "work"), env={"HOME": "/elsewhere"})
    assert os.path.expanduser("~") != ctx.home
    assert ctx.resolve("~/.local/share/db") == tmp_path / "agent-home" / ".local/share/db"
    assert ctx.resolve("~") == tmp_path / "agent-home"
    assert ctx.resolve("data/../x.db") == tmp_path / "work" / "x.db"
    assert ctx.resolve("x.db", base=tmp_path / "data") == tmp_path / "data" / "x.db"
    assert ctx.resolve("/abs/x") == Path("/abs/x")
    assert AgentContext(home=str(tmp_path)).resolve("rel") == tmp_path / "rel"


def test_find_binary_uses_the_config_then_the_agents_path(tmp_path):
    bindir, home = tmp_path / "agent-bin", tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    bindir.mkdir()
    for exe in (bindir / "kitagent", home / "bin" / "mine"):
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    (bindir / "plain").write_text("")
    ctx = AgentContext(home=str(home), cwd=str(tmp_path), env={"PATH": str(bindir)})
    assert ctx.find_binary("kitagent") == str(bindir / "kitagent")  # not on the caller's PATH
    ctx.config = {"binary": "~/bin/mine"}
    assert ctx.find_binary("kitagent") == str(home / "bin" / "mine")
    ctx.config = {"binary": "agent-bin/kitagent"}
    assert ctx.find_binary("kitagent") == str(bindir / "kitagent")
    for config, expected in (({"binary": str(bindir / "plain")}, "is not an executable file"),
                             ({"binary": "nope"}, "is not on the agent's PATH"),
                             ({}, "kitagent2 is not installed")):
        ctx.config = config
        with pytest.raises(MuxhostError) as e:
            ctx.find_binary("kitagent2", "npm install -g kitagent")
        assert expected in str(e.value) and "(npm install -g kitagent)" in str(e.value)
        assert "\n" not in str(e.value) and e.value.exit_code == 1


def test_the_agents_command_runs_with_its_environment_and_a_deadline(tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    cwd.mkdir()
    env = {**os.environ, "MUXHOST_RECORD": "r1", "PWD": "/elsewhere", "AGENT_VAR": "1"}
    ctx = AgentContext(home=str(home), cwd=str(cwd), env=env)
    r = command.run(ctx, ["sh", "-c", 'echo "$HOME|$AGENT_VAR|${MUXHOST_RECORD-unset}|$(pwd)"'])
    assert r.ok and r.stdout.strip() == f"{home}|1|unset|{cwd}"
    r = command.run(ctx, ["sh", "-c", "echo working; echo 'Error: no such session' >&2; exit 3"])
    assert not r.ok and r.why == "exited 3 (Error: no such session)"
    assert command.run(ctx, [str(tmp_path / "missing")]).why.startswith("could not run (")

    pidfile = tmp_path / "grandchild.pid"
    t = time.monotonic()
    r = command.run(ctx, ["sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"], timeout=0.5)
    assert r.why == "could not run (timed out after 0.5s)" and time.monotonic() - t < 5
    grandchild = psutil.Process(int(pidfile.read_text()))
    created, deadline = grandchild.create_time(), time.monotonic() + 5
    try:
        while procs.same_process(grandchild.pid, created):  # it went with the command (gone or a zombie)
            assert time.monotonic() < deadline, "the command's own child outlived the deadline"
            time.sleep(0.02)
    finally:
        procs.signal_if_same(grandchild.pid, created, procs.SIGKILL)


# -- the complete lines at a growing file's end (claude's transcript, codex's rollout) ----------------
def test_tail_gives_complete_lines_only_a_torn_last_line_waits(tmp_path):
    log = tmp_path / "t.jsonl"
    log.write_bytes(b'{"n": 1}\n{"n": 2}\n{"n": 3, "half')
    lines, mark = jsonl.tail(log, 1 << 16)
    assert lines == [b'{"n": 1}', b'{"n": 2}']  # the line still being written is not seen cut
    assert (mark.size, mark.end) == (log.stat().st_size, len(b'{"n": 1}\n{"n": 2}\n'))
    # a window that starts inside a line leaves that line out
    assert jsonl.tail(log, len(b'1}\n{"n": 2}\n{"n": 3, "half'))[0] == [b'{"n": 2}']
    with open(log, "ab") as f:
        f.write(b'": 1}\n')
    new, mark2, fresh = jsonl.since(log, mark, 1 << 16)
    assert (new, fresh) == ([b'{"n": 3, "half": 1}'], False)  # its end came: now it is whole
    assert jsonl.since(log, mark2, 1 << 16)[0] is None  # nothing appended: nothing read


def test_a_huge_line_is_never_seen_cut_and_until_reads_back_further(tmp_path):
    log = tmp_path / "t.jsonl"
    huge = b'{"big": "' + b"x" * 300_000 + b'"}'
    log.write_bytes(b'{"turn": "open"}\n' + huge + b"\n")
    assert jsonl.tail(log, 1 << 16)[0] == []  # the window is inside the huge line: no line at all
    found = jsonl.tail(log, 1 << 16, most=1 << 20, until=lambda ls: any(b"turn" in ln for ln in ls))[0]
    assert found == [b'{"turn": "open"}', huge]  # read back (x4 each time) to the file's start
    capped = jsonl.tail(log, 1 << 16, most=1 << 17, until=lambda ls: False)[0]
    assert capped == []  # at most `most` bytes: still inside the huge line, still nothing cut


def test_since_reads_a_file_that_shrank_or_was_replaced_from_its_end_again(tmp_path):
    log = tmp_path / "t.jsonl"
    log.write_bytes(b"a\nb\nc\n")
    lines, mark, fresh = jsonl.since(log, None, 1 << 16)
    assert (lines, fresh) == ([b"a", b"b", b"c"], True)
    log.write_bytes(b"d\n")  # rewritten shorter, same inode
    lines, mark, fresh = jsonl.since(log, mark, 1 << 16)
    assert (lines, fresh) == ([b"d"], True)
    other = tmp_path / "other"
    other.write_bytes(b"d\ne\n")
    os.replace(other, log)  # another file at the path, longer than the mark
    lines, mark, fresh = jsonl.since(log, mark, 1 << 16)
    assert (lines, fresh) == ([b"d", b"e"], True)
    with open(log, "ab") as f:
        f.write(b"f\n")
    assert jsonl.since(log, mark, 1 << 16)[:3:2] == ([b"f"], False)
    log.unlink()
    with pytest.raises(OSError):
        jsonl.since(log, mark, 1 << 16)


# --------------------------------------------------------------------------------------------------
# kit.net: when an agent last heard from the network, and the stall it shows

def test_quiet_for_is_the_time_since_a_byte_last_came_in_answer():
    """``kit.net.quiet_for``: nothing back since the connection was made (a request that got not
    one byte): no progress at all (inf); a byte in: the seconds since; a byte sent after it (a
    ping answered, a new request): no progress again; a connection between two of the agent's own
    sockets never counts. ``stalled`` says so once the source is still for ``stall_after`` too."""
    from muxhost.testing import quiet_connection

    with quiet_connection(1.2) as me:
        assert net.quiet_for(me) == math.inf
        ctx = AgentContext(home="/nonexistent", pids=me, stall_after=1.0)
        stale = time.time() - 5
        answer = net.stalled(ctx, stale, "rollout")
        assert answer == "stalled", repr(answer)
        assert answer.reason == "rollout: no change for 5 s while a reply is awaited; network: nothing came back since its last request"
        assert net.stalled(ctx, time.time() - 0.5, "rollout") is None  # the file changed lately
        assert net.stalled(ctx, None, "rollout") is None                # nothing to tell by
        me.poke()  # a byte of a reply comes
        assert net.quiet_for(me) < 0.5
        assert net.stalled(ctx, stale, "rollout") is None  # a reply streams
        srv = socket.create_server(("127.0.0.1", 0))  # a TUI talking to its own in-process server
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
        time.sleep(1.1)
        a.sendall(b"chatter")
        b.recv(7)
        assert 1.0 <= net.quiet_for(me) < 2.0  # its chatter does not count: both ends are the agent's
        assert "network: no byte came in for 1 s" in net.stalled(ctx, stale, "rollout").reason
        for x in (a, b, srv):
            x.close()
        me.answer()  # this end sends after the last byte came: a request (or a ping's answer)
        assert net.quiet_for(me) == math.inf
    assert net.quiet_for([2 ** 22 + 7]) is None  # no such process: no evidence
    assert net.stalled(AgentContext(home="/nonexistent", pids=[], stall_after=1.0), stale, "x") is None
