"""Host logic that needs no real pane, run in-process against a fake backend (the ``host`` fixture of
muxhost.testing: no tmux, no CLI start-up): real processes, a real store, the real host. Fast, so the
rules can be tried many ways."""
import json
import sys
import time
from pathlib import Path

import pytest

from muxhost.agent import Agent, Launch

PROGRAM = """
import json, os, sys, time, uuid
folder = sys.argv[1]
cid = uuid.uuid4().hex
os.makedirs(folder, exist_ok=True)
open(os.path.join(folder, cid + '.json'), 'w').write(json.dumps({'pid': os.getpid(), 'cwd': os.getcwd(), 'created': time.time()}))
print('ready', flush=True)
for line in sys.stdin:
    if line.strip() == '/exit':
        break
"""


class Naive(Agent):
    """The first plugin people write: the newest conversation in my cwd since my launch, not claimed."""

    name = "naive"
    id_pattern = r"[0-9a-f]{32}"
    process_names = ("python3",)

    def __init__(self, folder: Path):
        self.folder = folder

    def launch(self, ctx):
        return Launch([sys.executable, "-c", PROGRAM, str(self.folder)])

    def discover(self, ctx):
        best = None
        for path in self.folder.glob("*.json"):
            meta = json.loads(path.read_text())
            if meta["cwd"] != ctx.cwd or meta["created"] < ctx.launched_at or path.stem in ctx.claimed:
                continue
            if best is None or meta["created"] > best[0]:
                best = (meta["created"], path.stem)
        return best[1] if best else ctx.conversation_id

    def exists(self, ctx, cid):
        return (self.folder / f"{cid}.json").exists()


@pytest.fixture
def host_agents(tmp_path):
    return [Naive(tmp_path / "convs")]


def own(host, live) -> str:
    pid = host.fake.procs[live.pane.pane_id].pid
    folder = host.registry.agents["naive"].folder
    return next(p.stem for p in folder.glob("*.json") if json.loads(p.read_text())["pid"] == pid)


def wait_files(host, n):
    folder = host.registry.agents["naive"].folder
    deadline = time.monotonic() + 10
    while len(list(folder.glob("*.json"))) < n:
        assert time.monotonic() < deadline, "the agents did not write their conversations"
        time.sleep(0.01)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_n_naive_agents_in_one_folder_each_get_their_own_conversation(host, tmp_path, n):
    lives = []
    for i in range(n):
        lives.append(host.launch("naive", cwd=str(tmp_path)))
        wait_files(host, i + 1)
        if i % 2 == 0:
            host.ls()  # some refreshes between launches, some not
        time.sleep(0.02)
    for _ in range(3):
        listed = {lv.rec.id: lv for lv in host.ls()}
    for lv in lives:
        rec = listed[lv.rec.id].rec
        assert rec.conversation_id == own(host, lv) and rec.conversations == [own(host, lv)]


def test_stop_many_is_one_ladder_for_all(host, tmp_path):
    lives = [host.launch("naive", cwd=str(tmp_path)) for _ in range(4)]
    wait_files(host, 4)
    host.fake.calls.clear()
    results = host.stop_many([lv.rec for lv in lives])
    assert [r.rec.outcome for r in results] == ["exit"] * 4
    # one exit pause for all, not one each: every pane has its exit text before any gets its Enter
    # (the order of the calls, not the clock: a loaded machine makes any time bound flaky)
    keys = [(c[0], c[1]) for c in host.fake.calls if c[0] == "type" or c[0] == "keys" and c[2] == "enter"]
    panes = sorted(lv.pane.pane_id for lv in lives)
    assert sorted(p for k, p in keys[:4] if k == "type") == panes and sorted(p for k, p in keys[4:]) == panes, keys
    typed = [c for c in host.fake.calls if c[0] == "type"]
    assert len(typed) == 4 and all(c[2] == "/exit" for c in typed)
    assert all(p.poll() is not None for p in host.fake.procs.values())


def test_one_busy_record_never_keeps_stop_many_from_stopping_the_others(host, tmp_path, monkeypatch):
    """Another muxhost holds one record's lock (its own stop, sleep or wake of it) past the wait:
    that record is refused (exit 4) and left as it is; every other record is stopped."""
    from muxhost import locks
    from muxhost.errors import Refused

    monkeypatch.setattr(locks, "RECORD_WAIT", 0.3)
    lives = [host.launch("naive", cwd=str(tmp_path)) for _ in range(3)]
    wait_files(host, 3)
    busy = lives[1].rec
    with locks.records(Path(host.store.path).parent / "locks", [busy.id], "stop") as taken:
        assert taken == {}
        results = host.stop_many([lv.rec for lv in lives])
    assert isinstance(results[1], Refused) and results[1].exit_code == 4 and "busy (stop pid" in str(results[1])
    assert [r.rec.state for i, r in enumerate(results) if i != 1] == ["stopped", "stopped"]
    procs = [host.fake.procs[lv.pane.pane_id] for lv in lives]
    assert [p.poll() is None for p in procs] == [False, True, False]
    assert host.store.get(busy.id).state == "running"
    assert host.stop(busy).rec.state == "stopped"  # once it is free
    assert procs[1].poll() is not None


def test_a_record_keeps_its_backend_and_address(host, tmp_path):
    lv = host.launch("naive", cwd=str(tmp_path))
    assert (lv.rec.backend, lv.rec.socket) == ("fake", None)
    assert host.store.get(lv.rec.id).backend == "fake"
    assert host.live(lv.rec, host.view([lv.rec])).state == "running"


def test_read_judges_the_pane_without_a_pass_over_the_whole_process_table(host, tmp_path, monkeypatch):
    """``read`` runs often (a script polls a screen): whose the pane's process is needs that process
    and its parent, not every process on the machine."""
    from muxhost import procs

    live = host.launch("naive", cwd=str(tmp_path))
    wait_files(host, 1)

    def whole(*a, **k):
        raise AssertionError("a pass over the whole process table")

    monkeypatch.setattr(procs.ProcessTable, "snapshot", whole)
    deadline = time.monotonic() + 10
    while "ready" not in host.read(live.rec):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_purge_stop_takes_one_look_for_its_refresh_its_state_and_its_ladder(host, tmp_path):
    """``purge --stop``: the look that refreshes the record's conversation also judges whether it
    runs and starts the ladder (each look is a pane query and a pass over the process table)."""
    live = host.launch("naive", cwd=str(tmp_path))
    wait_files(host, 1)
    host.ls()
    rec = host.store.get(live.rec.id)
    host.fake.calls.clear()
    looks = []
    view = host.state.view
    host.state.view = lambda *a, **k: looks.append(a) or view(*a, **k)
    with pytest.raises(Exception, match="nothing to purge"):  # (the naive agent names no artifacts)
        host.purge(rec=rec, stop=True, confirm=lambda report: True)
    assert host.store.get(rec.id).state == "stopped"
    assert len(looks) == 2, looks  # the purge's, and the in-use check's after the stop


# -- the in-process CLI run (muxhost.testing.inprocess): what a command leaves behind fails it ----
def _leaks(tmp_path, release, held):
    """Commands that each leave one thing behind that a process exit would have cleaned up."""
    import os
    import signal
    import threading

    return {
        "open fds": lambda: held.append(open(tmp_path / "held.db", "w")),  # noqa: SIM115  (the leak)
        "signal handlers of SIGTERM": lambda: signal.signal(signal.SIGTERM, lambda *a: None),
        "the umask": lambda: os.umask(0o077),
        "threads still running": lambda: threading.Thread(target=release.wait, daemon=True).start(),
        "sys.path": lambda: sys.path.append(str(tmp_path / "plugins")),
        "the cwd": lambda: os.chdir(tmp_path),
        "os.environ MUXHOST_LEAKED": lambda: os.environ.__setitem__("MUXHOST_LEAKED", "1"),
    }


@pytest.mark.parametrize("what", list(_leaks(Path("."), None, None)))
def test_an_in_process_command_that_leaves_something_behind_fails_and_it_is_put_back(tmp_path, monkeypatch, what):
    import os
    import threading

    from muxhost import cli
    from muxhost.testing import Leak, run_cli

    release, held = threading.Event(), []
    leak = _leaks(tmp_path, release, held)[what]
    (tmp_path / "home").mkdir()
    env = {"HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", os.defpath)}
    path, cwd, environ = list(sys.path), os.getcwd(), dict(os.environ)
    monkeypatch.setattr(cli, "main", lambda argv=None: 0)
    assert run_cli(["clean"], env, str(tmp_path / "home")).rc == 0  # a command that leaves nothing
    monkeypatch.setattr(cli, "main", lambda argv=None: leak() and 0)
    try:
        with pytest.raises(Leak, match=f"left behind: {what}"):
            run_cli(["leaky"], env, str(tmp_path / "home"))
        assert (sys.path, os.getcwd(), dict(os.environ)) == (path, cwd, environ)  # put back all the same
    finally:
        release.set()
        for f in held:
            f.close()


# -- muxhost.testing's helpers -----------------------------------------------------------------------
@pytest.mark.parametrize("ci", ["true", ""])
def test_something_an_install_step_gives_that_is_missing_fails_in_ci_and_is_skipped_elsewhere(monkeypatch, ci):
    from muxhost.testing import agent_binary, missing

    monkeypatch.setenv("CI", ci)
    monkeypatch.delenv("MUXHOST_AGENT_BIN_DIR", raising=False)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match="textual is not installed"):
        missing("textual is not installed")
    with pytest.raises(outcome, match="the no-such-agent CLI is not installed"):
        agent_binary("no-such-agent")
