"""The state folder is muxhost's alone (issue 17, item 9): it holds every agent's environment (API keys)
and ``restore`` runs what a record says, so a state folder, or a file or folder in it, that another user
could change is refused, as tmux and ssh refuse theirs: exit 1, one line naming the path and the fix,
and nothing read or written. "Another user" is simulated as root: a chown to uid 65534, a mode that
lets group or others write, a symbolic link where muxhost keeps a file of its own."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from muxhost.errors import MuxhostError
from muxhost.kit import flock
from muxhost.locks import record_lock_path

OTHER = 65534  # nobody
SECRET = "sk-statedir-0123456789"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def one_line(r, code=1) -> str:
    assert r.rc == code, (r.rc, r.out, r.err)
    assert r.err.startswith("muxhost: ") and r.err.count("\n") == 1, r.err
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    return r.err.strip()


def snapshot(*roots: Path) -> dict:
    """Everything under ``roots``, as another user would compare it: names, owners, modes, bytes."""
    seen = {}
    for root in roots:
        for where, dirs, files in os.walk(root):
            for name in [*dirs, *files, ""]:
                p = os.path.join(where, name) if name else where
                st = os.lstat(p)
                body = os.readlink(p) if stat.S_ISLNK(st.st_mode) else \
                    Path(p).read_bytes() if stat.S_ISREG(st.st_mode) else None
                seen[p] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns, body)
    return seen


def no_tmux_session(mux) -> bool:
    r = mux.server.cmd("list-sessions")
    return r.returncode != 0 or not r.stdout


def make_unsafe(path: Path, how: str, outside: Path) -> None:
    """Make ``path`` (created when missing) something another user could change."""
    folder = path.name in ("launch", "locks") or path.is_dir()
    if not os.path.lexists(path):
        path.mkdir(mode=0o700) if folder else path.write_bytes(b"")
        os.chmod(path, 0o700 if folder else 0o600)
    if how == "another user's":
        os.chown(path, OTHER, OTHER)
    elif how == "group-writable":
        os.chmod(path, 0o770 if folder else 0o660)
    elif how == "world-writable":
        os.chmod(path, 0o777 if folder else 0o666)
    elif how == "a symlink":
        target = outside / path.name
        if folder:
            target.mkdir()
        else:
            target.write_bytes(b"precious: not muxhost's\n")
        if folder:
            os.rmdir(path)
        else:
            os.unlink(path)
        os.symlink(target, path)
    else:
        raise AssertionError(how)


# (only giving a file to another user needs root; in CI, which runs as root, nothing is skipped)
HOWS = [pytest.param("another user's", marks=needs_root), "group-writable", "world-writable"]


@pytest.fixture
def outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    return d


# -- the state folder itself ------------------------------------------------------------------------------
@pytest.mark.parametrize("how", HOWS)
def test_a_state_folder_another_user_could_change_is_refused(mux, how, outside):
    mux.ok("ls")
    make_unsafe(mux.state_dir, how, outside)
    before = snapshot(mux.state_dir)
    for argv in (("ls", "--all"), ("launch", "demo", "--env", f"TOKEN={SECRET}"), ("restore",)):
        msg = one_line(mux.run(*argv))
        assert msg.startswith(f"muxhost: {mux.state_dir}: "), msg
        assert ("remove it" if how == "another user's" else f"chmod go-w {mux.state_dir}") in msg, msg
    assert snapshot(mux.state_dir) == before
    assert no_tmux_session(mux)


@pytest.mark.parametrize("sticky", [False, True])
def test_a_parent_others_could_replace_the_state_folder_in(mux, tmp_path, sticky):
    parent = tmp_path / "open"
    parent.mkdir()
    os.chmod(parent, 0o1777 if sticky else 0o777)
    env = {"MUXHOST_STATE_DIR": str(parent / "state")}
    if sticky:  # /tmp: nobody else can rename or remove what is ours in it
        assert mux.ok("ls", "--all", "--json", env=env) == []
        return
    msg = one_line(mux.run("ls", env=env))
    assert msg == (f"muxhost: {parent}: writable by group or others, who could replace the state folder "
                   f"{parent / 'state'} in it; chmod go-w {parent}, or set MUXHOST_STATE_DIR to a folder of your own")
    assert os.listdir(parent) == []  # nothing made in it


def test_a_state_folder_reached_through_another_users_link_is_judged_where_it_leads(mux, tmp_path):
    """MUXHOST_STATE_DIR through a symlink in a folder others can write (theirs to re-point): the path
    is resolved once, its real place is judged and used for every open after that; a link that
    leads into a folder others can write is refused."""
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    open_ = tmp_path / "open"
    open_.mkdir()
    os.chmod(open_, 0o777)
    (open_ / "to-mine").symlink_to(mine)
    assert mux.ok("ls", "--all", "--json", env={"MUXHOST_STATE_DIR": str(open_ / "to-mine")}) == []
    assert (mine / "state.db").is_file() and sorted(os.listdir(open_)) == ["to-mine"]
    (open_ / "theirs").mkdir()
    (open_ / "to-theirs").symlink_to(open_ / "theirs")
    msg = one_line(mux.run("ls", env={"MUXHOST_STATE_DIR": str(open_ / "to-theirs")}))
    assert msg.startswith(f"muxhost: {open_}: writable by group or others"), msg
    assert os.listdir(open_ / "theirs") == []


# -- state.db, its -wal and -shm --------------------------------------------------------------------------
@pytest.mark.parametrize("how", [*HOWS, "a symlink"])
@pytest.mark.parametrize("name", ["state.db", "state.db-wal", "state.db-shm"])
def test_a_store_file_another_user_could_change_is_refused(mux, name, how, outside):
    # another user pre-creates state.db-wal 0666 to read every agent's API keys from it, or edits a
    # record's env (PYTHONPATH) so that `restore` runs their code as you
    mux.ok("ls")
    path = mux.state_dir / name
    make_unsafe(path, how, outside)
    before = snapshot(mux.state_dir, outside)
    for argv in (("launch", "demo", "--env", f"TOKEN={SECRET}"), ("ls", "--all"), ("restore",)):
        msg = one_line(mux.run(*argv))
        assert msg.startswith(f"muxhost: {path}: "), msg
        assert {"another user's": "remove it", "a symlink": "a symbolic link"}.get(how, f"chmod go-w {path}") in msg
    assert snapshot(mux.state_dir, outside) == before
    assert no_tmux_session(mux)


# -- launch/ and locks/ -----------------------------------------------------------------------------------
@pytest.mark.parametrize("how", [*HOWS, "a symlink"])
@pytest.mark.parametrize("folder", ["launch", "locks"])
def test_a_folder_in_the_state_folder_another_user_could_change_is_refused(mux, folder, how, outside):
    mux.ok("ls")
    path = mux.state_dir / folder
    make_unsafe(path, how, outside)
    watched = (path, outside)  # (state.db is muxhost's to write: both open the store)
    before = snapshot(*watched)
    argv = ("launch", "demo", "--env", f"TOKEN={SECRET}") if folder == "launch" else ("restore",)
    msg = one_line(mux.run(*argv))
    assert msg.startswith(f"muxhost: {path}: "), msg
    assert snapshot(*watched) == before
    if folder == "launch":  # no pane, no record left
        assert no_tmux_session(mux)
        assert mux.ok("ls", "--all", "--json") == []


# -- the lock files ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", [*HOWS, "a symlink"])
def test_a_restore_lock_another_user_could_change_is_refused(mux, how, outside):
    # made a symlink, locks/restore.lock had `restore` overwrite its target with "restore pid N"
    mux.ok("restore")
    path = mux.state_dir / "locks" / "restore.lock"
    assert path.is_file()
    make_unsafe(path, how, outside)
    before = snapshot(mux.state_dir / "locks", outside)
    msg = one_line(mux.run("restore"))
    assert msg.startswith(f"muxhost: {path}: "), msg
    assert snapshot(mux.state_dir / "locks", outside) == before


@pytest.mark.parametrize("how", [pytest.param("another user's", marks=needs_root), "a symlink"])
def test_a_record_lock_another_user_could_change_is_refused(mux, how, outside):
    rec = mux.ok("launch", "demo", "--json")
    path = record_lock_path(mux.state_dir / "locks", rec["id"])
    (mux.state_dir / "locks").mkdir(mode=0o700, exist_ok=True)
    make_unsafe(path, how, outside)
    before = snapshot(outside)
    msg = one_line(mux.run("stop", rec["id"]))
    assert msg.startswith(f"muxhost: {path}: "), msg
    assert snapshot(outside) == before
    os.unlink(path)
    assert mux.ok("stop", rec["id"], "--json")["state"] == "stopped"


def test_own_lock_files_never_follow_a_link_nor_take_another_file(tmp_path):
    target = tmp_path / "precious"
    target.write_bytes(b"precious\n")
    link = tmp_path / "a.lock"
    link.symlink_to(target)
    with pytest.raises(MuxhostError, match="a symbolic link"):
        with flock.flock(link, 0.1, private=True, label="restore pid 1"):
            pass
    assert target.read_bytes() == b"precious\n"
    fifo = tmp_path / "b.lock"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(MuxhostError, match="not a regular file"):
        with flock.flock(fifo, 0.1, private=True):
            pass
    loose = tmp_path / "c.lock"
    loose.write_bytes(b"")
    os.chmod(loose, 0o666)
    with pytest.raises(MuxhostError, match=f"chmod go-w {loose}"):
        with flock.flock(loose, 0.1, private=True, label="x"):
            pass
    assert loose.read_bytes() == b""
    old = os.umask(0)
    try:
        with flock.flock(tmp_path / "new.lock", 0.1, private=True, label="stop pid 2"):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.lock").st_mode) == 0o600
    # a lock file that is not muxhost's own (an agent's, a plugin's: not private) is followed as before
    with flock.flock(link, 0.1, create=False) as fd:
        assert fd is not None
    with flock.flock(loose, 0.1) as fd:  # (a plugin's group-writable lock, umask 002: its own business)
        assert fd is not None


# -- the launcher -----------------------------------------------------------------------------------------
def test_the_launcher_runs_only_a_private_launch_file_of_yours(tmp_path, monkeypatch):
    from muxhost import launcher

    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / "state"))
    spec = launcher.write(["sh", "-c", "echo RAN"], cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"})
    payload = Path(spec.path).read_bytes()
    elsewhere = tmp_path / "elsewhere.launch"
    elsewhere.write_bytes(payload)
    os.chmod(elsewhere, 0o600)
    os.unlink(spec.path)
    os.symlink(elsewhere, spec.path)  # a link in launch/: not followed
    p = subprocess.run(spec.argv, capture_output=True, text=True)
    assert p.returncode == 127 and "RAN" not in p.stdout, (p.stdout, p.stderr)
    assert elsewhere.read_bytes() == payload
    os.unlink(spec.path)
    Path(spec.path).write_bytes(payload)
    os.chmod(spec.path, 0o644)  # readable by others: not one muxhost wrote
    p = subprocess.run(spec.argv, capture_output=True, text=True)
    assert p.returncode == 127 and "RAN" not in p.stdout, (p.stdout, p.stderr)
    assert p.stderr.startswith("muxhost: cannot read the launch file") and p.stderr.count("\n") == 1


# -- muxhost's own files are private whatever the umask ---------------------------------------------------
def test_everything_muxhost_makes_in_the_state_folder_is_private_under_umask_000(mux):
    def run(*argv):
        return subprocess.run(["sh", "-c", 'umask 000; exec "$@"', "sh", sys.executable, "-m", "muxhost", *argv],
                              env=mux.env, capture_output=True, text=True, timeout=60, cwd=str(mux.home))

    r = run("launch", "demo", "--env", f"TOKEN={SECRET}", "--json")
    assert r.returncode == 0, r.stderr
    rid = __import__("json").loads(r.stdout)["id"]
    for argv in (("stop", rid), ("restore",), ("ls", "--all")):
        r = run(*argv)
        assert r.returncode == 0, r.stderr
    # a muxhost that dies mid-write leaves -wal and -shm behind: SQLite made them with state.db's mode
    r = subprocess.run(["sh", "-c", 'umask 000; exec "$@"', "sh", sys.executable, "-c",
                        "import os; from muxhost.store import Store; s = Store(); "
                        "s.con.execute('BEGIN IMMEDIATE'); s.con.execute(\"UPDATE records SET name = name\"); "
                        "s.con.execute('COMMIT'); os._exit(0)"], env=mux.env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    modes = {os.path.relpath(p, mux.state_dir): (stat.S_IMODE(v[0]), stat.S_ISDIR(v[0]))
             for p, v in snapshot(mux.state_dir).items()}
    assert {"state.db", "state.db-wal", "state.db-shm", "locks", "launch"} <= set(modes), modes
    assert any(n.startswith("locks/record-") for n in modes) and "locks/restore.lock" in modes, modes
    assert {n: m for n, (m, is_dir) in modes.items() if m != (0o700 if is_dir else 0o600)} == {}
