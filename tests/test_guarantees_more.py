"""More guarantees the host makes that nothing else in the suite would notice losing (issue 17,
"Guarantees no test guards yet"). Each test goes red when its guarantee is removed: a launch into a
conversation by the agent's own resume flag takes the conversation's lock; `rm` holds the record's
lock; `restore` skips a conversation another record runs by itself; `wait --until idle` after `send`
waits for the agent to start; one deadline for all record locks of a stop; one exit wait for all
agents of a stop; an `activity` hook that raises is a warning and the watch goes on.
"""
import json
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from muxhost import locks
from muxhost.testing import Watching, install_plugin, one_line_error, load_module, wait_for

KIT = textwrap.dedent('''
    """muxhost-morekit: agents for tests/test_guarantees_more.py.

    ``resumer`` runs one program (its conversation file ``<data>/morekit/<id>.json``, prompt ``ready>``,
    leaves on ``/exit``); ``launch -- --resume ID`` goes into conversation ID, as claude's own
    ``--resume`` does. Its activity comes from the screen: ``ready>`` is idle, ``working`` is working.
    On ``/think`` it prints nothing and uses no CPU for 1.5 s (a model thinking before it answers),
    then works for 2 s, printing, then says ``done thinking``. ``moody``: the same, but its
    ``activity`` raises.
    """
    import os, sys, uuid
    import muxhost

    PROGRAM = (
        "import json, os, sys, time\\n"
        "folder, cid = sys.argv[1], sys.argv[2]\\n"
        "os.makedirs(folder, exist_ok=True)\\n"
        "path = os.path.join(folder, cid + '.json')\\n"
        "if not os.path.exists(path):\\n"
        "    open(path, 'w').write(json.dumps({'pid': os.getpid()}))\\n"
        "print('conversation', cid)\\n"
        "while True:\\n"
        "    line = input('ready> ')\\n"
        "    if line == '/exit': break\\n"
        "    if line == '/think':\\n"
        "        time.sleep(1.5)\\n"
        "        end = time.monotonic() + 2\\n"
        "        while time.monotonic() < end:\\n"
        "            print('working', flush=True)\\n"
        "            t = time.monotonic()\\n"
        "            while time.monotonic() - t < 0.2: pass\\n"
        "        print('done thinking')\\n"
        "        continue\\n"
        "    print('heard', line)\\n"
    )

    class Resumer(muxhost.Agent):
        name = "resumer"
        id_pattern = r"[0-9a-f]{32}"

        def folder(self, ctx):
            return ctx.data_home() / "morekit"

        def launch(self, ctx):
            args = list(ctx.args)
            cid = args[args.index("--resume") + 1] if "--resume" in args[:-1] else uuid.uuid4().hex
            return muxhost.Launch([sys.executable, "-c", PROGRAM, str(self.folder(ctx)), cid], conversation_id=cid)

        def resume(self, ctx, cid):
            return muxhost.Launch([sys.executable, "-c", PROGRAM, str(self.folder(ctx)), cid], conversation_id=cid)

        def exists(self, ctx, cid):
            return (self.folder(ctx) / f"{cid}.json").exists()

        def in_use(self, ctx, cid):
            return []

        def activity(self, ctx, screen):
            if screen is None:
                return None
            last = next((ln.rstrip() for ln in reversed(screen.splitlines()) if ln.strip()), "")
            if last.startswith("working"):
                return "working"
            return "idle" if last.startswith("ready>") else None

    class Moody(Resumer):
        name = "moody"

        def activity(self, ctx, screen):
            raise RuntimeError("the screen is unreadable")

    @muxhost.hookimpl
    def muxhost_register_agents(register):
        register(Resumer())
        register(Moody())
''')


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """muxhost-morekit, pip-installed into a folder; the env that makes the CLI load it."""
    return install_plugin(tmp_path_factory.mktemp("morekit"), "muxhost-morekit", "muxhost_morekit", KIT)


def launch(mux, kit, agent, *args):
    rec = mux.ok("launch", agent, "--json", *args, env=kit)
    mux.wait_screen(rec["pane"], "ready>")
    return rec


def records(mux, kit):
    return {r["id"]: r for r in mux.ok("ls", "--all", "--json", env=kit)}




# -- a launch by the agent's own resume flag takes the conversation's lock --------------------------
def test_a_launch_by_the_agents_own_resume_flag_into_a_conversation_under_purge_is_refused(mux, kit):
    rec = launch(mux, kit, "resumer")
    cid = rec["conversation_id"]
    mux.ok("stop", rec["id"], env=kit)
    # a purge of it under way holds its lock (from the in-use check until the residual is read)
    with locks.conversation(mux.state_dir / "locks", "resumer", cid, "purge"):
        r = mux.run("launch", "resumer", "--json", "--", "--resume", cid, env=kit)
    one_line_error(r, 4, f"a purge of conversation {cid} is in progress")
    assert list(records(mux, kit)) == [rec["id"]]  # no record
    assert mux.tmux("list-panes", "-a", "-F", "#{pane_id}") == []  # no pane
    again = launch(mux, kit, "resumer", "--", "--resume", cid)  # once the purge is over: it goes ahead
    assert again["conversation_id"] == cid


# -- rm holds the record's lock ------------------------------------------------------------------
def test_rm_waits_for_a_stop_under_way_of_a_record_without_a_conversation(mux):
    """No conversation, so no conversation lock: only the record's lock keeps `rm` from forgetting
    a record another muxhost is stopping. rm waits, sees it changed, and keeps it."""
    mux.config.write_text(f"agents:\n  plain:\n    command: [{sys.executable}, -c, 'import time; time.sleep(600)']\n"
                          "    process_names: [python]\n")
    rec = mux.ok("launch", "plain", "--json")
    assert rec["conversation_id"] is None
    mux.tmux("kill-session", "-t", rec["name"])  # its pane went (the agent with it): a stop may finish it
    wait_for(lambda: not [p for p in mux.tmux("list-panes", "-a", "-F", "#{pane_id}") if p == rec["pane"]],
             what="the pane gone")
    with mux.stop_under_way(rec["id"]):
        r = mux.run("rm", rec["id"])
    one_line_error(r, 4, "changed meanwhile", "kept")
    [kept] = mux.ok("ls", "--all", "--json")
    assert kept["id"] == rec["id"] and kept["state"] == "stopped"


# -- restore skips a conversation another record runs ------------------------------------------------
@pytest.mark.parametrize("other", ["running", "asleep"])
def test_restore_skips_a_record_whose_conversation_another_record_runs(mux, kit, other):
    """Record alpha lost its pane; beta went into alpha's conversation since (`launch -- --resume`)
    and runs it, or sleeps in it. `restore` skips alpha (exit 0, "skipped") by its own rule: an
    asleep beta is no holder to resume's in-use check, and without the rule alpha was started into
    beta's conversation."""
    alpha = launch(mux, kit, "resumer", "--name", "alpha")
    cid = alpha["conversation_id"]
    mux.tmux("kill-session", "-t", "alpha")  # alpha is lost (its record still says running)
    beta = launch(mux, kit, "resumer", "--name", "beta", "--", "--resume", cid)
    assert beta["conversation_id"] == cid
    if other == "asleep":
        mux.ok("sleep", "beta", env=kit)
        mux.wait_screen(beta["pane"], "Enter wakes it")
    panes = sorted(mux.tmux("list-panes", "-a", "-F", "#{pane_id}"))
    r = mux.run("restore", "--json", env=kit)
    assert r.rc == 0, r.err
    [entry] = [e for e in json.loads(r.out) if e["id"] == alpha["id"]]
    assert entry["action"] == "skipped", entry
    assert entry["reason"] == f"its conversation runs in record {beta['id']} (beta)"
    assert sorted(mux.tmux("list-panes", "-a", "-F", "#{pane_id}")) == panes  # nothing started
    now = records(mux, kit)
    assert now[alpha["id"]]["state"] == "lost" and now[beta["id"]]["state"] == other


# -- wait --until idle after send ------------------------------------------------------------------
def test_wait_until_idle_right_after_send_waits_for_an_agent_that_thinks_before_it_works(mux, kit):
    """The agent says nothing for 1.5 s after the text (its screen still shows the prompt: idle),
    then works: `wait --until idle` returns only once that work is done."""
    rec = launch(mux, kit, "resumer")
    mux.ok("send", rec["id"], "/think", env=kit)
    mux.ok("wait", rec["id"], "--until", "idle", "--timeout", "30", env=kit)
    assert "done thinking" in mux.ok("read", rec["id"], env=kit), "wait returned before the agent began"


# -- one deadline for all record locks of a stop ---------------------------------------------------
_inprocess = load_module(Path(__file__).with_name("test_inprocess.py"))
host_agents = _inprocess.host_agents  # the `host` fixture (muxhost.testing) gets the naive agent


def test_one_deadline_for_every_record_lock_of_a_stop_of_many(host, tmp_path, monkeypatch):
    """Two records whose locks another muxhost holds are refused after one wait, not one each (a
    `stop --all` with many busy records would otherwise wait RECORD_WAIT times their number)."""
    wait = 2.0
    monkeypatch.setattr(locks, "RECORD_WAIT", wait)
    lives = [host.launch("naive", cwd=str(tmp_path)) for _ in range(2)]
    _inprocess.wait_files(host, 2)
    folder = Path(host.store.path).parent / "locks"
    taken = threading.Event()
    release = threading.Event()

    def other_muxhost():  # (flock: a lock of another open file, in another thread, is another holder)
        with locks.records(folder, [lv.rec.id for lv in lives], "stop"):
            taken.set()
            release.wait(30)

    holder = threading.Thread(target=other_muxhost)
    holder.start()
    try:
        assert taken.wait(10)
        t0 = time.monotonic()
        results = host.stop_many([lv.rec for lv in lives])
        took = time.monotonic() - t0
    finally:
        release.set()
        holder.join(10)
    assert [type(r).__name__ for r in results] == ["Refused", "Refused"]
    assert all("busy (stop pid" in str(r) for r in results)
    assert took < 1.5 * wait, f"{took:.1f}s: one wait for both busy records is {wait:g}s, one each {2 * wait:g}s"
    assert [r.rec.state for r in host.stop_many([lv.rec for lv in lives])] == ["stopped", "stopped"]


# -- one exit wait for all agents of a stop ---------------------------------------------------------
def test_one_exit_wait_for_every_agent_of_a_stop_of_many(mux, tmp_path):
    """Three agents that ignore their exit text: the ladder waits exit_grace once for all of them,
    then goes on (SIGHUP, SIGTERM, SIGKILL) for all — the last is done within one exit_grace and the
    later graces, far below three exit_graces."""
    script = Path(__file__).parent / "agents" / "stubborn.py"
    exit_grace = 3.0
    mux.config.write_text(
        f"stop:\n  exit_grace: {exit_grace}\n  term_grace: 0.5\n  hup_grace: 0.5\n"
        "agents:\n  stubborn:\n"
        f"    command: [{sys.executable}, {script}, '{tmp_path}/{{conversation_id}}.pids']\n"
        "    exit_text: /exit\n    process_names: [stubborn.py]\n")
    recs = [mux.ok("launch", "stubborn", "--json") for _ in range(3)]
    for rec in recs:
        wait_for((tmp_path / f"{rec['conversation_id']}.pids").exists, what="the stubborn agent's pid file")
    out = mux.ok("stop", *[r["id"] for r in recs], "--json")
    assert [r["outcome"] for r in out] == ["kill"] * 3
    slowest = max(r["seconds"] for r in out)
    assert slowest < 2 * exit_grace, f"the last agent stopped after {slowest}s: one exit wait each, not one for all"


# -- an activity hook that raises ------------------------------------------------------------------
def test_an_activity_hook_that_raises_is_a_warning_and_the_watch_goes_on(mux, kit):
    moody = launch(mux, kit, "moody")
    calm = launch(mux, kit, "resumer")
    [listed] = [r for r in mux.ok("ls", "--json", env=kit) if r["id"] == moody["id"]]
    want = {"agent": "moody", "hook": "activity", "error": "RuntimeError: the screen is unreadable",
            "record": moody["id"]}
    assert want in listed["warnings"]
    r = mux.run("ls", env=kit)
    assert r.rc == 0 and moody["id"] in r.out and "Traceback" not in r.err
    assert (f"muxhost: warning: moody: activity failed for record {moody['id']}: "
            "RuntimeError: the screen is unreadable") in r.err
    with Watching(mux, env=kit) as w:
        w.wait(calm["pane"], "idle")
        mux.type(calm["pane"], "/think")  # the watch goes on judging the others
        w.wait(calm["pane"], "working", timeout=30)
        w.wait(calm["pane"], "idle", timeout=30)
        assert w.proc.poll() is None, "the watch ended"
    assert (f"muxhost: warning: moody: activity failed for record {moody['id']}: "
            "RuntimeError: the screen is unreadable") in w.stderr
    assert "Traceback" not in w.stderr
