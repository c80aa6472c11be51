"""Safety of who owns what (issue 17 items 1, 7, 8, 17; issue 18 items 5, 6): a conversation stays
with every record that has been in it, whatever that record's state; the purge key purges what was
confirmed; an explicit --home wins; a REF never picks one of several records without a word."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from muxhost.errors import NotFound, UsageError
from muxhost.store import Record, Store
from muxhost.testing import load_module, wait_for


# the in-process host (tests/test_inprocess.py): a fake backend, real processes, the real host
_inprocess = load_module(Path(__file__).with_name("test_inprocess.py"))
host_agents = _inprocess.host_agents  # the `host` fixture (muxhost.testing) gets the naive agent
# muxhost-testkit (tests/test_hardening.py), an installed plugin package: its `naive` agent's
# discover is "the newest conversation in my cwd since my launch that is not claimed"
_hardening = load_module(Path(__file__).with_name("test_hardening.py"))
kit = _hardening.kit


# -- 17.1: a stopped, asleep or lost agent keeps its conversation ------------------------------------
@pytest.mark.parametrize("how", ["stop", "sleep", "lose"])
def test_a_stopped_asleep_or_lost_agents_conversation_is_never_handed_to_its_neighbour(mux, kit, tmp_path, how):
    """Two naive agents in one folder; the second is stopped, put to sleep, or lost (its tmux server
    killed): however many `ls` follow, the first keeps its own conversation, and its purge leaves the
    second's byte for byte."""
    work = tmp_path / "work"
    work.mkdir()
    other = f"{mux.socket}-lost"
    a = mux.ok("launch", "naive", "--cwd", str(work), "--json", env=kit)
    mux.wait_screen(a["pane"], "ready>")
    mux.ok("ls", "--json", env=kit)
    time.sleep(0.05)
    b = mux.ok(*(["--socket", other] if how == "lose" else []), "launch", "naive", "--cwd", str(work), "--json",
               env=kit)
    try:
        wait_for(lambda: len(list((mux.home / ".local/share/testkit").glob("*.json"))) == 2, what="both conversations")
        listed = {r["id"]: r for r in mux.ok("ls", "--json", env=kit)}
        a_own, b_own = (_hardening.own_conversation(mux, listed[r["id"]]) for r in (a, b))
        assert (listed[a["id"]]["conversation_id"], listed[b["id"]]["conversation_id"]) == (a_own, b_own)
        if how == "lose":
            subprocess.run(["tmux", "-L", other, "kill-server"], capture_output=True)
        else:
            mux.ok(how, b["id"], env=kit)
        for _ in range(5):
            listed = {r["id"]: r for r in mux.ok("ls", "--all", "--json", env=kit)}
            assert listed[b["id"]]["state"] == {"stop": "stopped", "sleep": "asleep", "lose": "lost"}[how]
            assert listed[a["id"]]["conversation_id"] == a_own and listed[a["id"]]["conversations"] == [a_own]
            assert listed[b["id"]]["conversation_id"] == b_own and listed[b["id"]]["conversations"] == [b_own]
        b_bytes = _hardening.kit_file(mux, b_own).read_bytes()
        mux.ok("stop", a["id"], env=kit)
        mux.ok("purge", a["id"], "--yes", env=kit)
        assert not _hardening.kit_file(mux, a_own).exists()
        assert _hardening.kit_file(mux, b_own).read_bytes() == b_bytes
    finally:
        subprocess.run(["tmux", "-L", other, "kill-server"], capture_output=True)


def _naive_live(host, tmp_path, files: int):
    """A naive agent launched in-process; ``files``: the conversation files there are then."""
    lv = host.launch("naive", cwd=str(tmp_path))
    _inprocess.wait_files(host, files)
    host.ls()
    return lv


def test_every_record_owns_its_conversations_in_process(host, tmp_path):
    """The same rule in-process, for every state a record can be left in: a stopped, a lost (its
    pane gone, the record still `running`) and an asleep record's conversation is claimed when
    the running neighbour's discover is asked, and the neighbour never moves onto it."""
    a = _naive_live(host, tmp_path, 1)
    others = []
    for state in ("stopped", "lost", "asleep"):
        time.sleep(0.02)
        lv = _naive_live(host, tmp_path, len(others) + 2)
        others.append((lv.rec.id, _inprocess.own(host, lv)))
        host.fake.kill_pane(lv.pane.pane_id)
        host.fake.procs[lv.pane.pane_id].wait()
        del host.fake.procs[lv.pane.pane_id]  # its pane gone: `lost`, unless the store says otherwise
        if state != "lost":
            host.store.update(lv.rec, state=state)
    a_own = _inprocess.own(host, a)
    for _ in range(3):
        listed = {lv.rec.id: lv for lv in host.ls()}
        assert [listed[rid].state for rid, _ in others] == ["stopped", "lost", "asleep"]
        assert listed[a.rec.id].rec.conversation_id == a_own and listed[a.rec.id].rec.conversations == [a_own]
        assert [listed[rid].rec.conversation_id for rid, _ in others] == [cid for _, cid in others]


def test_a_stopped_records_conversation_moves_only_with_proof(host, tmp_path, monkeypatch):
    """A plugin whose discover ignores `claimed` and names a stopped record's conversation: the host
    moves nobody onto it on that word alone; once in_use names the running agent's own process as
    its holder (an in-session `/resume ID`), the running record follows it."""
    agent = host.registry.agents["naive"]
    a = _naive_live(host, tmp_path, 1)
    time.sleep(0.02)
    b = _naive_live(host, tmp_path, 2)
    b_own = _inprocess.own(host, b)
    host.stop(b.rec)
    a_own = _inprocess.own(host, a)
    monkeypatch.setattr(agent, "discover", lambda ctx: b_own, raising=False)  # a greedy guess
    holders: list[str] = []
    monkeypatch.setattr(agent, "in_use", lambda ctx, cid: list(holders) if cid == b_own else [], raising=False)
    for _ in range(2):
        assert {lv.rec.id: lv for lv in host.ls()}[a.rec.id].rec.conversation_id == a_own
    holders.append(f"pid {a.pane.pid} python (its own process)")
    assert {lv.rec.id: lv for lv in host.ls()}[a.rec.id].rec.conversation_id == b_own


def test_only_the_agent_itself_holding_it_is_proof_not_a_tool_naming_the_id(host):
    """`cat …/ID.jsonl` under the agent names the id too (argv holders): that is no proof that the
    agent is in that conversation."""
    import types

    from muxhost import procs
    from muxhost.state import Live

    agent = types.SimpleNamespace(process_names=("myagent",), in_use=lambda ctx, cid: held)
    tree = [procs.Proc(100, 1, 1.0, "myagent", ()), procs.Proc(101, 100, 2.0, "cat", ())]
    lv = Live(types.SimpleNamespace(id="r1"), "running", None, tree)
    held = ["pid 101 cat /data/c2.jsonl"]
    assert not host.state.holds(agent, None, "c2", lv)
    held = ["pid 100 myagent --resume c2"]
    assert host.state.holds(agent, None, "c2", lv)


def test_a_hand_started_agent_is_never_given_a_stopped_records_conversation(host, tmp_path):
    """locate() of an agent the user started by hand: the conversation of a record started after it
    (the newest in the folder) is claimed though that record is stopped."""
    agent = host.registry.agents["naive"]
    agent.process_names = (Path(sys.executable).name, Path(sys.executable).resolve().name)
    pane, _ = host.fake.create([sys.executable, "-c", _inprocess.PROGRAM, str(agent.folder)], cwd=str(tmp_path),
                               env=dict(os.environ), name="by-hand")
    _inprocess.wait_files(host, 1)
    time.sleep(0.05)
    rec = _naive_live(host, tmp_path, 2)
    theirs = _inprocess.own(host, rec)
    host.stop(rec.rec)
    assert host.store.get(rec.rec.id).state == "stopped"
    located = host.locate(pane.pane_id)
    assert located.rec is None and located.conversation_id != theirs
    assert theirs in located.ctx.claimed


def test_a_launch_is_told_every_conversation_a_record_holds(host, tmp_path):
    """launch's context claims them too (a plugin's launch that picks a conversation never takes one)."""
    first = _naive_live(host, tmp_path, 1)
    host.stop(first.rec)
    agent, seen = host.registry.agents["naive"], []
    launch = agent.launch
    agent.launch = lambda ctx: (seen.append(ctx.claimed), launch(ctx))[1]
    host.launch("naive", cwd=str(tmp_path))
    assert seen == [frozenset({_inprocess.own(host, first)})]


# -- 17.17 / 18.6: a REF never picks one of several records without a word ----------------------------
def put(store: Store, rid: str, name: str, state: str = "stopped") -> Record:
    rec = Record(id=rid, name=name, agent="naive", cwd="/", home="/", launched_at=time.time(), state=state)
    store.insert(rec)
    return rec


def refused(host, ref: str) -> str:
    with pytest.raises(UsageError) as e:
        host.resolve(ref)
    assert e.value.exit_code == 2
    return str(e.value)


def test_any_unique_prefix_resolves_and_an_ambiguous_one_lists_the_candidates(host):
    put(host.store, "ab12cd34", "alpha")
    put(host.store, "ab99ee00", "beta")
    put(host.store, "c0ffee11", "gamma")
    assert host.resolve("c").id == "c0ffee11"  # one character, unique
    assert host.resolve("ab1").id == "ab12cd34"
    msg = refused(host, "a")
    assert msg.startswith("ambiguous: 'a' matches 2 records:") and "ab12cd34 (name alpha" in msg and "ab99ee00" in msg
    assert "c0ffee11" not in refused(host, "ab")
    with pytest.raises(NotFound):
        host.resolve("d")
    refused(host, "")


def test_a_ref_that_is_a_name_and_an_id_or_a_prefix_is_ambiguous(host):
    """Records made before names were checked: a name that is another record's id, or a prefix of it."""
    put(host.store, "1198de83", "first")
    put(host.store, "77aa00bb", "1198de83", state="running")  # named after the first's id
    put(host.store, "5e5e0000", "77a", state="running")       # named after a prefix of the second's id
    msg = refused(host, "1198de83")
    assert msg.startswith("ambiguous:") and "1198de83 (name first" in msg and "77aa00bb (name 1198de83" in msg
    msg = refused(host, "77a")
    assert "77aa00bb" in msg and "5e5e0000 (name 77a" in msg
    assert host.resolve("first").id == "1198de83" and host.resolve("5e5").id == "5e5e0000"


def test_a_name_used_again_after_a_stop_means_the_current_record(host):
    put(host.store, "aaaa0001", "worker")
    put(host.store, "bbbb0002", "worker", state="running")
    assert host.resolve("worker").id == "bbbb0002"
    put(host.store, "cccc0003", "done")
    put(host.store, "dddd0004", "done")
    assert refused(host, "done").startswith("ambiguous: 'done' matches 2 records")


@pytest.mark.parametrize("name", ["1198de83", "a", "cafe", "0", "deadbeef"])
def test_a_name_that_looks_like_a_record_id_or_a_prefix_is_refused(host, tmp_path, name):
    with pytest.raises(UsageError) as e:
        host.launch("naive", cwd=str(tmp_path), name=name)
    assert e.value.exit_code == 2 and "looks like a record id" in str(e.value)
    assert host.store.all() == [] and host.fake.procs == {}


@pytest.mark.parametrize("name", ["cafe-1", "deadbeef0", "Cafe", "g1"])
def test_names_that_no_id_can_be_are_fine(host, tmp_path, name):
    assert host.launch("naive", cwd=str(tmp_path), name=name).rec.name == name


def test_the_cli_says_ambiguous_and_exits_2(mux):
    mux.ok("ls")  # (the state dir, as muxhost makes it)
    store = Store(mux.state_dir / "state.db")
    put(store, "ab12cd34", "alpha")
    put(store, "ab99ee00", "beta")
    r = mux.run("show", "ab")
    assert r.rc == 2 and r.err.startswith("muxhost: ambiguous: 'ab' matches 2 records: ab12cd34") and \
        r.err.count("\n") == 1, r
    assert mux.ok("show", "ab9", "--json")["id"] == "ab99ee00"
    r = mux.run("launch", "demo", "--name", "ab12cd34")
    assert r.rc == 2 and "looks like a record id" in r.err and r.err.count("\n") == 1, r


# -- 18.5: show and ls judge resumable alike -------------------------------------------------------
def test_show_and_ls_say_the_same_resumable_for_a_running_record(mux):
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    listed = {r["id"]: r for r in mux.ok("ls", "--json")}[rec["id"]]
    shown = mux.ok("show", rec["id"], "--json")
    assert listed["state"] == shown["state"] == "running"
    assert listed["resumable"] is True and shown["resumable"] is True
    assert "resumable:       True" in mux.ok("show", rec["id"])


# -- 17.7: the purge key purges what was confirmed ---------------------------------------------------
def demo_conv(mux, cid) -> Path:
    return mux.home / ".local/share/muxhost-demo/conversations" / f"{cid}.jsonl"


def moved_on(mux, rec) -> str:
    """`/new` in the agent's pane; the id of the conversation it is in then."""
    before = rec["conversation_id"]
    mux.type(rec["pane"], "/new")

    def now() -> str:
        return {r["id"]: r for r in mux.ok("ls", "--json")}[rec["id"]]["conversation_id"]

    wait_for(lambda: now() != before, what="the new conversation")
    return now()


def test_the_purge_key_purges_only_the_confirmed_conversation(mux):
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    x = rec["conversation_id"]
    mux.ok("purge-key", "--pane", rec["pane"], "--prepare")  # the prompt names x
    y = moved_on(mux, rec)  # ... and the agent moves to y before "y" is pressed
    before = {c: demo_conv(mux, c).read_bytes() for c in (x, y)}
    r = mux.run("purge-key", "--pane", rec["pane"], "--conversation", x, "--run")
    assert r.rc == 4 and r.out == "" and r.err == "", r
    # earlier bindings pass no id: the one the prompt showed (the pane option) is what was confirmed
    r = mux.run("purge", "--pane", rec["pane"], "--stop", "--yes", "--tmux-message")
    assert r.rc == 4, r
    assert {c: demo_conv(mux, c).read_bytes() for c in (x, y)} == before
    assert mux.ok("show", rec["id"], "--json")["state"] == "running"
    # the id the pane is in now, confirmed: that one goes, and only that one
    mux.ok("purge-key", "--pane", rec["pane"], "--prepare")
    r = mux.run("purge-key", "--pane", rec["pane"], "--conversation", y, "--run")
    assert r.rc == 0, r
    assert not demo_conv(mux, y).exists() and demo_conv(mux, x).read_bytes() == before[x]
    assert mux.ok("show", rec["id"], "--json")["state"] == "stopped"


def test_the_printed_bindings_pass_the_confirmed_conversation_to_the_purge(mux):
    lines = mux.ok("tmux-bindings")
    run = next(line for line in lines.splitlines() if "run-shell" in line and "--run" in line)
    assert "--conversation '#{@muxhost_purge_conversation}'" in run.replace('\\"', '"')


# -- 17.8: an explicit --home wins ------------------------------------------------------------------
def test_purge_with_an_explicit_home_purges_that_homes_copy(mux, tmp_path):
    import shutil

    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.type(rec["pane"], "words of the record's own copy")
    mux.wait_screen(rec["pane"], "turn 1")
    mux.ok("stop", rec["id"])
    cid = rec["conversation_id"]
    other = tmp_path / "other-home"
    shutil.copytree(mux.home / ".local/share/muxhost-demo", other / ".local/share/muxhost-demo")
    mine = demo_conv(mux, cid).read_bytes()
    out = mux.ok("purge", "--agent", "demo", "--conversation", cid, "--home", str(other), "--yes")
    assert f"purged demo conversation {cid} in HOME {other}:" in out
    assert not (other / ".local/share/muxhost-demo/conversations" / f"{cid}.jsonl").exists()
    assert demo_conv(mux, cid).read_bytes() == mine  # the record's copy, in the caller's HOME, is untouched
    assert mux.ok("show", rec["id"], "--json")["resumable"] is True
    # the caller's own HOME, given explicitly: the record's copy (and no HOME named)
    done = mux.ok("purge", "--agent", "demo", "--conversation", cid, "--home", str(mux.home), "--yes", "--json")
    assert done["record"] == rec["id"] and done["home"] is None and not demo_conv(mux, cid).exists()
