"""The record store's files: a damaged, locked, read-only or full store is one line that names the file
and says what to do (exit 1), never an internal error, and no failed write is lost silently; the
state folder is 0700 and state.db, -wal and -shm are 0600 whatever the umask."""
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from muxhost.store import Record, Store


def one_line(r, code=1):
    assert r.rc == code, (r.rc, r.out, r.err)
    assert r.err.startswith("muxhost: ") and r.err.count("\n") == 1, r.err
    assert "internal error" not in r.err and "Traceback" not in r.err, r.err
    return r.err.strip()


def no_tmux_session(mux) -> bool:
    r = mux.server.cmd("list-sessions")
    return r.returncode != 0 or not r.stdout


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def umask_022(mux, *argv: str, env: dict | None = None, python: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m muxhost ARGV`` (or ``python -c PYTHON``) with the permissive umask 022."""
    cmd = ["-c", python] if python else ["-m", "muxhost", *argv]
    return subprocess.run(["sh", "-c", 'umask 022; exec "$@"', "sh", sys.executable, *cmd],
                          env={**mux.env, **(env or {})}, capture_output=True, text=True, timeout=60)


@contextmanager
def read_only(path):
    """``path`` made unwritable for this process: ``chattr +i`` as root (root ignores file modes),
    ``chmod a-w`` otherwise; restored afterwards."""
    if os.geteuid() == 0:
        if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("root ignores file modes and `chattr +i` is not available on this file system")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        before = mode(path)
        os.chmod(path, before & ~0o222)
        try:
            yield
        finally:
            os.chmod(path, before)


# -- damaged, a folder, a file ------------------------------------------------------------------------
COMMANDS = [("ls",), ("ls", "--all", "--json"), ("show", "abcd"), ("stop", "abcd"), ("resume", "abcd"),
            ("purge", "abcd", "--yes"), ("purge", "--agent", "demo", "--conversation", "0" * 32, "--dry-run"),
            ("launch", "demo"), ("reconcile", "--json")]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_a_state_db_that_is_not_a_database_is_named_with_what_to_do(mux, argv):
    mux.state_dir.mkdir()
    db = mux.state_dir / "state.db"
    db.write_bytes(b"my notes, not a database\n" * 100)
    msg = one_line(mux.run(*argv))
    assert msg == (f"muxhost: {db}: not a SQLite database (damaged?); move it aside to start afresh "
                   f"(muxhost keeps its records there)")
    assert db.read_bytes() == b"my notes, not a database\n" * 100
    assert no_tmux_session(mux)


def test_a_state_db_with_damaged_pages(mux):
    mux.state_dir.mkdir()
    db = mux.state_dir / "state.db"
    store = Store(db)
    for i in range(40):
        store.insert(Record(id=f"r{i:03}", name=f"n{i}", agent="demo", cwd="/", home="/", launched_at=1,
                            env={"PAD": "x" * 2000}))
    store.close()
    data = bytearray(db.read_bytes())
    data[4096:4096 * 8] = b"\xff" * (4096 * 7)  # the records table's pages
    db.write_bytes(bytes(data))
    msg = one_line(mux.run("ls", "--all"))
    assert msg.startswith(f"muxhost: {db}: the database is damaged (") and "move it aside" in msg


def test_a_hand_edited_record_that_cannot_be_read(mux):
    mux.state_dir.mkdir()
    db = mux.state_dir / "state.db"
    Store(db).insert(Record(id="ab12", name="n", agent="demo", cwd="/", home="/", launched_at=1))
    con = sqlite3.connect(db)
    con.execute("UPDATE records SET env = '{oops' WHERE id = 'ab12'")
    con.commit()
    con.close()
    msg = one_line(mux.run("ls", "--all"), 0)  # skipped, and said: the other records still work
    assert msg.startswith(f"muxhost: warning: record ab12 in {db} is damaged (JSONDecodeError: ") and "skipped" in msg


def test_a_state_db_that_is_a_folder(mux):
    (mux.state_dir / "state.db").mkdir(parents=True)
    for argv in (("ls",), ("launch", "demo")):
        msg = one_line(mux.run(*argv))
        assert msg == f"muxhost: {mux.state_dir / 'state.db'}: is a folder, not a database file; move it aside " \
                      f"(muxhost then starts a new state.db)"
    assert no_tmux_session(mux)


def test_a_state_dir_that_is_a_file(mux, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    msg = one_line(mux.run("ls", env={"MUXHOST_STATE_DIR": str(afile)}))
    assert msg.startswith(f"muxhost: {afile}: is a file, not a folder; move it aside")
    msg = one_line(mux.run("launch", "demo", env={"MUXHOST_STATE_DIR": str(afile / "state")}))
    assert msg.startswith(f"muxhost: {afile}: a file stands where a folder belongs; move it aside")
    assert afile.read_text() == "mine\n" and no_tmux_session(mux)


# -- locked ---------------------------------------------------------------------------------------------
def test_a_locked_store_says_who_holds_it_and_no_write_is_lost(mux):
    rec = mux.ok("launch", "demo", "--json")
    db = mux.state_dir / "state.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another muxhost in the middle of a write
    try:
        fast = {"MUXHOST_LOCK_TIMEOUT": "0.5"}
        locked = (f"muxhost: {db}: locked by another muxhost for over 0.5s; try again when it has finished "
                  f"(MUXHOST_LOCK_TIMEOUT sets the wait)")
        t0 = time.monotonic()
        assert one_line(mux.run("launch", "demo", "--name", "second", env=fast)) == locked
        assert time.monotonic() - t0 < 15
        assert [r["id"] for r in mux.ok("ls", "--json", env=fast)] == [rec["id"]]  # readers are not blocked
        # the stop ladder ran, but its record could not be written: the command fails, it does not pretend
        msg = one_line(mux.run("stop", rec["id"], env=fast))
        assert "stopped (exit after" in msg and msg.endswith("but the record could not be written: " + locked[len("muxhost: "):])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [r["name"] for r in mux.ok("ls", "--all", "--json")] == [rec["name"]]  # no half launch of `second`
    mux.ok("launch", "demo", "--name", "second")


def test_a_bad_lock_timeout_is_a_usage_error(mux):
    assert one_line(mux.run("ls", env={"MUXHOST_LOCK_TIMEOUT": "soon"}), 2) == \
        "muxhost: MUXHOST_LOCK_TIMEOUT='soon': expected a number of seconds from 0 to 31536000"


# -- read-only ------------------------------------------------------------------------------------------
def test_a_read_only_state_db_can_be_read_but_not_written(mux):
    mux.ok("ls")
    db = mux.state_dir / "state.db"
    with read_only(db):
        assert mux.ok("ls", "--all", "--json") == []
        msg = one_line(mux.run("launch", "demo"))
        assert msg.startswith(f"muxhost: {db}: not writable; make it readable and writable by you")
        assert no_tmux_session(mux)


def test_a_read_only_state_dir(mux, tmp_path):
    mux.ok("ls")
    with read_only(mux.state_dir):
        for argv in (("ls",), ("launch", "demo")):
            msg = one_line(mux.run(*argv))
            assert msg.startswith(f"muxhost: {mux.state_dir}: the state folder is not writable")
    parent = tmp_path / "locked-parent"
    parent.mkdir()
    with read_only(parent):
        msg = one_line(mux.run("ls", env={"MUXHOST_STATE_DIR": str(parent / "state")}))
        assert msg.startswith(f"muxhost: {parent / 'state'}: cannot create the state folder (")
        assert f"make {parent} writable by you" in msg
    assert no_tmux_session(mux)


# -- full disk ------------------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (needs root; skipped otherwise: test_full_disk_mapping covers the mapping)."""
    where = tmp_path / "small"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a small tmpfs: {r.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(where, leave: int = 0) -> None:
    fd = os.open(where / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    os.truncate(where / "filler", max(0, os.path.getsize(where / "filler") - leave))


def test_a_full_disk_fails_the_write_and_says_so(mux, small_disk):
    state = small_disk / "state"
    env = {"MUXHOST_STATE_DIR": str(state)}
    mux.ok("ls", env=env)
    db = state / "state.db"
    full = f"muxhost: {db}: no space left on device; free some space, then try again"
    fill(small_disk, leave=96 * 1024)  # room to open the store, not to write a 120 KB record
    assert one_line(mux.run("launch", "demo", "--env", "BIG=" + "x" * 120_000, env=env)) == full
    assert no_tmux_session(mux)
    fill(small_disk)
    assert one_line(mux.run("ls", env=env)) == full
    os.unlink(small_disk / "filler")
    assert mux.ok("ls", "--all", "--json", env=env) == []  # the failed launch left no record


def test_full_disk_mapping(tmp_path):
    """SQLITE_FULL from a statement inside a transaction (a real full disk fails at COMMIT, above; and
    where no tmpfs can be mounted this still runs): rolled back, the same one line, nothing written."""
    store = Store(tmp_path / "state.db")

    class FullDisk:
        def __init__(self, con):
            self.con = con

        def execute(self, sql, *args):
            if sql.startswith("INSERT"):
                err = sqlite3.OperationalError("database or disk is full")
                err.sqlite_errorcode = 13
                raise err
            return self.con.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self.con, name)

    real = store.con
    store.con = FullDisk(real)
    with pytest.raises(Exception) as info:
        store.insert(Record(id="ab", name="n", agent="demo", cwd="/", home="/", launched_at=1))
    assert type(info.value).__name__ == "MuxhostError" and info.value.exit_code == 1
    assert str(info.value) == f"{tmp_path / 'state.db'}: no space left on device; free some space, then try again"
    assert not real.in_transaction and Store(tmp_path / "state.db").all() == []


# -- permissions ----------------------------------------------------------------------------------------
def test_state_is_private_under_a_permissive_umask(mux):
    r = umask_022(mux, "ls")
    assert r.returncode == 0, r.stderr
    assert mode(mux.state_dir) == 0o700
    assert mode(mux.state_dir / "state.db") == 0o600
    # a muxhost that dies mid-write leaves its -wal and -shm behind: they are private too
    r = umask_022(mux, python="import os; from muxhost.store import Record, Store; "
                              "Store().insert(Record(id='ab12', name='n', agent='demo', cwd='/', home='/', "
                              "launched_at=1, env={'TOKEN': 'secret'})); os._exit(0)")
    assert r.returncode == 0, r.stderr
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        assert mode(mux.state_dir / name) == 0o600, name


def test_loose_state_files_are_tightened(mux):
    mux.state_dir.mkdir(mode=0o755)
    os.chmod(mux.state_dir, 0o755)
    # an older muxhost under umask 022 left state.db, -wal and -shm 0644 (it died before closing)
    r = umask_022(mux, python=f"import os, sqlite3; c = sqlite3.connect({str(mux.state_dir / 'state.db')!r}, "
                              "isolation_level=None); c.execute('PRAGMA journal_mode = WAL'); "
                              "c.execute('CREATE TABLE t (x)'); os._exit(0)")
    assert r.returncode == 0, r.stderr
    loose = ("state.db", "state.db-wal", "state.db-shm")
    assert [mode(mux.state_dir / n) for n in loose] == [0o644] * 3
    r = umask_022(mux, python="import os; from muxhost.store import Store; Store(); os._exit(0)")
    assert r.returncode == 0, r.stderr
    assert [mode(mux.state_dir / n) for n in loose] == [0o600] * 3
    # an existing $MUXHOST_STATE_DIR keeps the user's mode (0755: nobody else can write in it)
    assert mode(mux.state_dir) == 0o755


def test_the_default_state_dir_is_tightened(mux, tmp_path):
    xdg = tmp_path / "xdg-state"
    (xdg / "muxhost").mkdir(parents=True)
    os.chmod(xdg / "muxhost", 0o755)
    r = umask_022(mux, "ls", env={"MUXHOST_STATE_DIR": "", "XDG_STATE_HOME": str(xdg)})
    assert r.returncode == 0, r.stderr
    assert mode(xdg / "muxhost") == 0o700 and mode(xdg / "muxhost" / "state.db") == 0o600
    assert mode(xdg) == 0o755  # its parent is the user's
