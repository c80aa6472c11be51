"""Guarantees the host makes that nothing else in the suite would notice losing (issue 9, item 11).

Each test goes red when its guarantee is removed: an ``in_use`` that raises counts as in use; a
conversation bound to another live record is never handed to this one; the in-use check is repeated
after an interactive "y"; a reused pid's tree is never walked; a tmux server an agent started is not
the agent's; shared files are rewritten under ``flock``.
"""
import fcntl
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from muxhost import procs
from muxhost.store import Record, Store
from muxhost.testing import Watching, alive, install_plugin, tree_hash, wait_for

GUARDS = textwrap.dedent('''
    """muxhost-guards: two small agents for tests/test_guarantees.py.

    ``holdout`` cannot tell who holds a conversation (its in_use raises, unless HOLDOUT_FREE is set).
    ``claimer`` logs what each discover is told to ~/discover.jsonl and takes the newest conversation
    file on disk that is not claimed, as agents that find their conversation by the newest file do.
    """
    import json, os, sys, uuid
    from pathlib import Path
    import muxhost

    PROGRAM = (
        "import os, sys, time\\n"
        "os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)\\n"
        "open(sys.argv[1], 'a').close()\\n"
        "time.sleep(600)\\n"
    )

    class Holdout(muxhost.Agent):
        name = "holdout"
        id_pattern = r"h[0-9a-f]{8}"

        def _file(self, ctx, cid):
            return ctx.data_home() / "holdout" / f"{cid}.txt"

        def exists(self, ctx, cid):
            return self._file(ctx, cid).exists()

        def in_use(self, ctx, cid):
            if os.environ.get("HOLDOUT_FREE"):
                return []
            raise RuntimeError("the lock table is unreadable")

        def artifacts(self, ctx, cid):
            return [ctx.expand(self._file(ctx, cid))] if self._file(ctx, cid).exists() else []

        def purge(self, ctx, cid):
            self._file(ctx, cid).unlink()
            return [ctx.expand(self._file(ctx, cid))]

    class Claimer(muxhost.Agent):
        name = "claimer"
        exit_text = None
        id_pattern = r"c[0-9a-f]{8}"

        def _dir(self, ctx):
            return ctx.data_home() / "claimer"

        def launch(self, ctx):
            cid = "c" + uuid.uuid4().hex[:8]
            return muxhost.Launch([sys.executable, "-c", PROGRAM, str(self._dir(ctx) / f"{cid}.conv")],
                                  conversation_id=cid)

        def discover(self, ctx):
            with open(Path(ctx.home) / "discover.jsonl", "a") as f:
                f.write(json.dumps({"record": ctx.record_id, "conversation": ctx.conversation_id,
                                    "claimed": sorted(ctx.claimed)}) + "\\n")
            newest = sorted(self._dir(ctx).glob("*.conv"), key=lambda p: p.stat().st_mtime, reverse=True)
            return next((p.stem for p in newest if p.stem not in ctx.claimed), ctx.conversation_id)

    @muxhost.hookimpl
    def muxhost_register_agents(register):
        register(Holdout())
        register(Claimer())
''')


@pytest.fixture(scope="module")
def guards_site(tmp_path_factory):
    """muxhost-guards, pip-installed into a folder; the env that makes the CLI load it."""
    return install_plugin(tmp_path_factory.mktemp("guards"), "muxhost-guards", "muxhost_guards", GUARDS, "0.1")


def guards_env(mux, site) -> dict[str, str]:
    return site


def demo_root(mux) -> Path:
    return mux.home / ".local/share/muxhost-demo"


def start_demo(mux, prompt: str) -> dict:
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.type(rec["pane"], prompt)
    mux.wait_screen(rec["pane"], prompt[::-1])
    return rec


# -- 1. in_use raising is in use -------------------------------------------------------------------
def test_an_in_use_that_raises_refuses_the_purge_and_touches_nothing(mux, guards_site):
    env = guards_env(mux, guards_site)
    cid = "h0123abcd"
    conv = mux.home / ".local/share/holdout" / f"{cid}.txt"
    conv.parent.mkdir(parents=True)
    conv.write_text("a conversation\n")
    own = (os.path.join("home", ".cache"),)  # muxhost's plugin cache (written once the install is 2 s old)
    before = tree_hash(mux.home, skip=own)

    r = mux.run("purge", "--agent", "holdout", "--conversation", cid, "--yes", env=env)
    assert r.rc == 4, r.err
    assert r.err.startswith("muxhost: ") and r.err.count("\n") == 1
    assert "in use" in r.err and "the lock table is unreadable" in r.err
    assert tree_hash(mux.home, skip=own) == before

    # the same purge when the plugin can tell it is free: it goes through (the refusal above was the raise)
    done = mux.ok("purge", "--agent", "holdout", "--conversation", cid, "--yes", "--json",
                  env={**env, "HOLDOUT_FREE": "1"})
    assert done["removed"] == [f"~/.local/share/holdout/{cid}.txt"] and not conv.exists()


# -- 2. another live record's conversation is claimed -------------------------------------------------
def test_a_conversation_of_another_live_record_is_never_handed_to_this_one(mux, guards_site):
    env = guards_env(mux, guards_site)
    log = mux.home / "discover.jsonl"
    a = mux.ok("launch", "claimer", "--json", env=env)
    b = mux.ok("launch", "claimer", "--json", env=env)
    folder = mux.home / ".local/share/claimer"
    conv = {rec["id"]: folder / f"{rec['conversation_id']}.conv" for rec in (a, b)}
    wait_for(lambda: all(p.exists() for p in conv.values()), what="both conversation files")

    def newest(rec) -> None:  # the other record's file is the newest on disk: a greedy discover wants it
        now = time.time()
        for rid, path in conv.items():
            os.utime(path, (now, now + (100 if rid == rec["id"] else 0)))

    def told() -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for line in log.read_text().splitlines() if log.exists() else ():
            entry = json.loads(line)
            out.setdefault(entry["record"], set()).update(entry["claimed"])
        log.unlink(missing_ok=True)
        return out

    # one `ls` sees both: each one's discover is told the other's conversation
    newest(a)
    listed = {r["id"]: r["conversation_id"] for r in mux.ok("ls", "--json", env=env)}
    assert listed == {a["id"]: a["conversation_id"], b["id"]: b["conversation_id"]}
    claimed = told()
    assert a["conversation_id"] in claimed[b["id"]] and b["conversation_id"] in claimed[a["id"]]
    assert a["conversation_id"] not in claimed[a["id"]]

    # `stop A` looks at A alone: B, live and outside that look, still holds its conversation
    newest(b)
    stopped = mux.ok("stop", a["id"], "--json", env=env)
    assert stopped["conversation_id"] == a["conversation_id"]
    assert b["conversation_id"] in told()[a["id"]]
    assert mux.ok("show", b["id"], "--json", env=env)["conversation_id"] == b["conversation_id"]


def _claimers(mux, env, second_socket=None):
    """Two claimer records, a (on the Mux's server) and b (on ``second_socket`` when given), b's
    conversation file the newest on disk: what a greedy discover takes unless it is claimed."""
    a = mux.ok("launch", "claimer", "--json", env=env)
    b = mux.ok(*(["--socket", second_socket] if second_socket else []), "launch", "claimer", "--json", env=env)
    folder = mux.home / ".local/share/claimer"
    files = [folder / f"{rec['conversation_id']}.conv" for rec in (a, b)]
    wait_for(lambda: all(p.exists() for p in files), what="both conversation files")
    now = time.time()
    os.utime(files[0], (now, now))
    os.utime(files[1], (now, now + 100))
    return a, b


def _told(mux, rid) -> set[str]:
    log = mux.home / "discover.jsonl"
    return {c for line in log.read_text().splitlines() if (e := json.loads(line))["record"] == rid
            for c in e["claimed"]} if log.exists() else set()


def test_wait_weighs_every_record_when_it_asks_discover(mux, guards_site):
    """`wait` judges one record, but its refresh of that record's conversation still claims what
    every other live record holds: a greedy discover never moves it onto another's conversation."""
    a, b = _claimers(mux, guards_site)
    r = mux.run("wait", a["id"], "--until", "idle", "--timeout", "2", env=guards_site)
    assert r.rc in (0, 1), r
    assert b["conversation_id"] in _told(mux, a["id"])
    assert mux.ok("show", a["id"], "--json", env=guards_site)["conversation_id"] == a["conversation_id"]


def test_the_watch_weighs_records_on_other_servers_when_it_asks_discover(mux, guards_site):
    """The watch of one server refreshes its agents' conversations with the records of every server
    claimed: b runs on another tmux server, and a is never handed b's conversation."""
    other = f"{mux.socket}-other"
    try:
        a, b = _claimers(mux, guards_site, other)
        with Watching(mux, "--interval", "0.5", env=guards_site):
            wait_for(lambda: b["conversation_id"] in _told(mux, a["id"]), timeout=20,
                     what="the watch's refresh of a, told b's conversation")
        assert mux.ok("show", a["id"], "--json", env=guards_site)["conversation_id"] == a["conversation_id"]
        assert mux.ok("show", b["id"], "--json", env=guards_site)["conversation_id"] == b["conversation_id"]
    finally:
        subprocess.run(["tmux", "-L", other, "kill-server"], capture_output=True)


# -- 3. the in-use check is repeated after an interactive "y" -----------------------------------------
class PtyRun:
    """A real process with stdin, stdout and stderr on a pseudo-terminal."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path):
        self.fd, slave = pty.openpty()
        self.p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=str(cwd))
        os.close(slave)
        self.out = b""

    def _pump(self, timeout: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            try:
                self.out += os.read(self.fd, 65536)
            except OSError:  # the other side closed
                pass

    def wait_text(self, text: str, timeout: float = 20.0) -> None:
        wait_for(lambda: self._pump(0.05) or text in self.text, timeout=timeout, interval=0, what=repr(text))

    @property
    def text(self) -> str:
        return self.out.decode("utf-8", "replace")

    def finish(self, timeout: float = 30.0) -> int:
        rc = self.p.wait(timeout=timeout)
        for _ in range(20):
            self._pump(0.05)
        return rc

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        os.close(self.fd)


def test_a_yes_given_after_the_conversation_came_into_use_is_refused(mux):
    rec = start_demo(mux, "keep me")
    mux.ok("stop", rec["id"])
    cid = rec["conversation_id"]
    root = demo_root(mux)
    before = tree_hash(root, skip=("/live",))
    purge = PtyRun([sys.executable, "-m", "muxhost", "purge", rec["id"]], mux.env, mux.home)
    by_hand = None
    try:
        purge.wait_text("purge these for good? [y/N]")
        # while the question waits, the user resumes the conversation by hand in another terminal
        by_hand = PtyRun([sys.executable, "-m", "muxhost.demo_agent", "--resume", cid], mux.env, mux.home)
        by_hand.wait_text("demo> ")
        os.write(purge.fd, b"y\n")
        rc = purge.finish()
    finally:
        purge.close()
        if by_hand is not None:
            by_hand.close()
    assert rc == 4, purge.text
    assert f"conversation {cid} is in use" in purge.text and f"pid {by_hand.p.pid}" in purge.text
    assert tree_hash(root, skip=("/live",)) == before


# -- 4. a reused pid's tree is never walked --------------------------------------------------------
@pytest.fixture
def parent_and_child():
    """A real process with a real child: ((pid, create time) of each)."""
    p = subprocess.Popen([sys.executable, "-c",
                          "import subprocess, sys, time\n"
                          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                          "time.sleep(60)\n"])
    try:
        child = wait_for(lambda: psutil.Process(p.pid).children(), what="the child")[0]
        yield (p.pid, psutil.Process(p.pid).create_time()), (child.pid, child.create_time())
    finally:
        for c in psutil.Process(p.pid).children() if alive(p.pid) else []:
            procs.signal_if_same(c.pid, c.create_time(), signal.SIGKILL)
        p.kill()
        p.wait()


def test_the_tree_of_a_pid_with_another_create_time_is_empty_and_nothing_is_signalled(parent_and_child):
    parent, child = parent_and_child
    table = procs.ProcessTable.snapshot()
    assert {p.key for p in table.tree_of(parent)} == {parent, child}
    reused = (parent[0], parent[1] - 5.0)  # what a record stored for this pid before it was reused
    assert table.tree_of(reused) == []
    for p in table.tree_of(reused):  # what the ladder's SIGKILL step and the test teardown do
        procs.signal_if_same(*p.key, signal.SIGKILL)
    time.sleep(0.2)
    assert alive(parent[0]) and alive(child[0])


def test_teardown_never_kills_the_tree_of_a_stored_pid_that_now_names_another_process(mux, parent_and_child):
    """A record stored its pane's (pid, create time); the pid now names a process the record never had."""
    parent, child = parent_and_child
    mux.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(mux.state_dir / "state.db")
    rec = Record(id="0badf00d", name="gone", agent="demo", cwd=str(mux.home), home=str(mux.home),
                 launched_at=time.time() - 60, state="stopped", pids=[[parent[0], parent[1] - 5.0]])
    store.insert(rec)
    mux.reap()
    time.sleep(0.2)
    assert alive(parent[0]) and alive(child[0])
    # the same record with the pid's real create time: its tree is walked and ended
    store.update(rec, pids=[list(parent)])
    store.close()
    mux.reap()
    wait_for(lambda: not alive(parent[0]) and not alive(child[0]), timeout=5, what="the tree to end")


# -- 5. a tmux server the agent started is not the agent's ------------------------------------------
def test_stop_leaves_a_tmux_server_the_agent_started_and_its_panes(mux):
    sockdir = tempfile.mkdtemp(prefix="mxg")  # short: a socket path has a length limit
    sock = os.path.join(sockdir, "s")
    tmux = shutil.which("tmux") or "tmux"
    mux.config.write_text(
        "agents:\n  nester:\n"
        f"    command: [sh, -c, 'env -u TMUX {tmux} -S {sock} -f /dev/null new-session -d sleep 1000"
        " && echo nested-ready; exec sleep 1000']\n"
        "    exit_text: null\n"
    )
    try:
        rec = mux.ok("launch", "nester", "--json")
        mux.wait_screen(rec["pane"], "nested-ready")
        inner = subprocess.run([tmux, "-S", sock, "list-panes", "-a", "-F", "#{pid} #{pane_pid}"],
                               capture_output=True, text=True, check=True).stdout.split()
        server, pane_pid = int(inner[0]), int(inner[1])
        keys = [(pid, psutil.Process(pid).create_time()) for pid in (server, pane_pid)]
        # both carry the record's variable: only their place under a tmux server tells them apart
        assert psutil.Process(pane_pid).environ().get(procs.RECORD_ENV) == rec["id"]
        assert psutil.Process(server).environ().get(procs.RECORD_ENV) == rec["id"]

        mux.ok("stop", rec["id"], "--json")
        assert procs.alive(keys) == keys
        assert subprocess.run([tmux, "-S", sock, "has-session"], capture_output=True).returncode == 0
    finally:
        subprocess.run([tmux, "-S", sock, "kill-server"], capture_output=True)
        shutil.rmtree(sockdir, ignore_errors=True)


# -- 6. shared files are rewritten under flock --------------------------------------------------------
def test_a_shared_file_is_rewritten_only_under_its_lock_and_keeps_lines_written_meanwhile(mux):
    gone = start_demo(mux, "purge this")
    mux.ok("stop", gone["id"])
    stays = start_demo(mux, "keep this")
    root = demo_root(mux)
    history = root / "history.jsonl"
    assert gone["conversation_id"] in history.read_text()
    appended = json.dumps({"conversation": "f" * 32, "text": "written while the purge waited"}) + "\n"

    with open(history, "ab") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # as an agent writing its history holds it
        purge = subprocess.Popen([sys.executable, "-m", "muxhost", "purge", gone["id"], "--yes", "--json"],
                                 env=mux.env, cwd=str(mux.home), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # the purge holds its conversation's lock, then (the host's fixed order: shared files
            # before files) waits for ours on the history
            wait_for(lambda: any("purge pid" in p.read_text() for p in (mux.state_dir / "locks").glob("*.lock")),
                     what="the purge to begin")
            time.sleep(1.0)
            f.write(appended.encode())
            f.flush()
            mux.type(stays["pane"], "typed meanwhile")  # its history line waits for the lock too
            time.sleep(0.6)
            assert purge.poll() is None, "the purge did not wait for the lock"
            assert gone["conversation_id"] in history.read_text(), "rewritten while another process held the lock"
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    try:
        out, err = purge.communicate(timeout=20)
    finally:
        if purge.poll() is None:
            purge.kill()
    assert purge.returncode == 0, err
    assert "~/.local/share/muxhost-demo/history.jsonl: 1 line" in json.loads(out)["removed"]
    mux.wait_screen(stays["pane"], "elihwnaem depyt")
    lines = history.read_text().splitlines(keepends=True)
    assert not [line for line in lines if gone["conversation_id"] in line]
    texts = [json.loads(line)["text"] for line in lines]
    assert sorted(texts) == sorted(["keep this", "written while the purge waited", "typed meanwhile"])
    assert appended in lines


# -- resume and rm never start or forget a conversation that still runs -----------------------------
def test_resume_and_rm_refuse_while_the_conversation_runs_where_muxhost_does_not_see_it(mux):
    """A pane gone from muxhost's view is no proof that its agent ended (another TMUX_TMPDIR, a server
    it cannot reach): resume and rm ask the plugin's in_use first, as a purge does. Here the
    conversation runs in a user's own shell."""
    import shlex

    rec = start_demo(mux, "hello there")
    mux.ok("stop", rec["id"])
    argv, env, cwd = mux.resume_command(rec["id"])
    pane = mux.shell(cwd, env)
    mux.type(pane, shlex.join(argv))
    mux.wait_screen(pane, "demo>")
    for args in (("resume", rec["id"]), ("rm", rec["id"])):
        r = mux.run(*args)
        assert r.rc == 4 and "in use" in r.err and r.err.count("\n") == 1, (args, r)
    assert mux.ok("show", rec["id"], "--json")["state"] == "stopped"
    assert [p for p in mux.tmux("list-panes", "-a", "-F", "#{pane_id}") if p != pane] == []  # nothing started
    mux.end_shell(pane)
    assert mux.ok("resume", rec["id"], "--json")["state"] == "running"


def test_resume_refuses_while_an_earlier_run_left_a_process_and_stop_ends_it(mux):
    """A detached process of the record's last run (its MUXHOST_RECORD, out of any pane) would be
    left behind by the next stop once the resume moved launched_at past it: refused until stopped."""
    rec = start_demo(mux, "hello there")
    mux.ok("stop", rec["id"])
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                            env={**mux.env, "MUXHOST_RECORD": rec["id"]})
    try:
        r = mux.run("resume", rec["id"])
        assert r.rc == 4 and f"pid {left.pid}" in r.err and "stop" in r.err, r
        mux.ok("stop", rec["id"])
        left.wait(timeout=10)
        assert mux.ok("resume", rec["id"], "--json")["state"] == "running"
    finally:
        if left.poll() is None:
            left.kill()


def test_two_resumes_of_one_record_never_both_start_it(mux):
    """The second resume waits for the first one's lock, sees launched_at moved, and starts nothing."""
    rec = start_demo(mux, "hello there")
    mux.ok("stop", rec["id"])
    with mux.resume_under_way(rec["id"]):
        r = mux.run("resume", rec["id"])
    assert r.rc == 4 and "changed meanwhile" in r.err, r
    assert len(mux.tmux("list-panes", "-a", "-F", "#{pane_id}")) == 0
