"""resume and purge in the host's order, shown with the demo agent."""
import json
from pathlib import Path

import pytest

from muxhost.testing import tree_hash, wait_for


def demo_root(mux) -> Path:
    return mux.home / ".local/share/muxhost-demo"


def start_demo(mux, cwd, prompts=("hello",), child=None):
    rec = mux.ok("launch", "demo", "--cwd", str(cwd), "--json")
    mux.wait_screen(rec["pane"], "demo>")
    for text in prompts:
        mux.type(rec["pane"], text)
        mux.wait_screen(rec["pane"], text[::-1])
    if child:
        mux.type(rec["pane"], f"/child {child}")
        wait_for(lambda: mux.capture(rec["pane"]).count("child conversation") >= child, what="children")
    return rec


@pytest.mark.every_backend
def test_purge_the_demo_conversation_and_its_children_only(mux, tmp_path):
    work = tmp_path / "proj"
    work.mkdir()
    keep = start_demo(mux, work, prompts=("neighbour says hi",))
    rec = start_demo(mux, work, prompts=("first", "second"), child=2)
    mux.ok("stop", keep["id"])
    root = demo_root(mux)
    neighbour_file = root / "conversations" / f"{keep['conversation_id']}.jsonl"
    neighbour_bytes = neighbour_file.read_bytes()
    history_before = (root / "history.jsonl").read_bytes()

    # in use: exit 4, and nothing touched
    before = tree_hash(root)
    r = mux.run("purge", rec["id"], "--yes")
    assert r.rc == 4, r.err
    assert "in use" in r.err and str(rec["pane"]) in r.err
    assert r.err.count("\n") == 1
    assert tree_hash(root) == before
    # a dry run while it runs: the plan, and why a purge would be refused now (exit 0, nothing touched)
    early = mux.ok("purge", rec["id"], "--dry-run", "--json")
    assert early["dry_run"] is True and "is in use" in early["refused"] and rec["pane"] in early["refused"]
    assert f"~/.local/share/muxhost-demo/conversations/{rec['conversation_id']}.jsonl" in early["plan"]
    human = mux.run("purge", rec["id"], "--dry-run", "--stop")  # --stop would take its own agent out first
    assert human.rc == 0 and "refused now" not in human.out, human.out
    assert f"with --stop, record {rec['id']} ({rec['name']}) is stopped first" in human.out
    assert mux.ok("purge", rec["id"], "--dry-run", "--stop", "--json")["refused"] is None
    assert tree_hash(root) == before and mux.ok("show", rec["id"], "--json")["state"] == "running"

    mux.ok("stop", rec["id"])
    before = tree_hash(root)
    plan = mux.ok("purge", rec["id"], "--dry-run", "--json")
    assert plan["dry_run"] is True and plan["refused"] is None
    assert tree_hash(root) == before  # a dry run changes nothing
    children = [p for p in plan["plan"] if "[child conversation" in p]
    assert len(children) == 2
    assert f"~/.local/share/muxhost-demo/conversations/{rec['conversation_id']}.jsonl" in plan["plan"]
    assert "~/.local/share/muxhost-demo/history.jsonl: 2 lines" in plan["plan"]
    human = mux.run("purge", rec["id"], "--dry-run")
    assert human.rc == 0 and "would purge" in human.out

    report = mux.ok("purge", rec["id"], "--yes", "--json")
    assert report["residual"] == [] and report["complete"] is True
    assert sorted(report["removed"]) == sorted(plan["plan"])
    # gone: the conversation, its children, its history lines
    assert not (root / "conversations" / f"{rec['conversation_id']}.jsonl").exists()
    assert len(list((root / "conversations").glob("*.jsonl"))) == 1
    # the neighbour: byte for byte
    assert neighbour_file.read_bytes() == neighbour_bytes
    history = (root / "history.jsonl").read_bytes()
    assert history == b"".join(line for line in history_before.splitlines(keepends=True)
                               if json.loads(line)["conversation"] == keep["conversation_id"])
    assert not mux.ok("ls", "--all", "--json")[1]["resumable"]

    # purging it again: nothing there → exit 3
    r = mux.run("purge", rec["id"], "--yes")
    assert r.rc == 3 and "nothing to purge" in r.err


def test_purge_with_stop_runs_the_ladder_first(mux, tmp_path):
    rec = start_demo(mux, tmp_path)
    report = mux.ok("purge", rec["id"], "--stop", "--yes", "--json")
    assert report["residual"] == [] and report["stopped"]["outcome"] == "exit"
    shown = mux.ok("show", rec["id"], "--json")
    assert shown["state"] == "stopped" and shown["outcome"] == "exit"


def test_purge_with_stop_says_how_the_stop_went(mux, tmp_path):
    rec = start_demo(mux, tmp_path)
    out = mux.run("purge", rec["id"], "--stop", "--yes")
    assert out.rc == 0, out.err
    assert out.out.startswith(f"stopped record {rec['id']} first: exit after "), out.out


def test_purge_by_agent_and_conversation_without_a_record(mux, tmp_path):
    rec = start_demo(mux, tmp_path)
    mux.ok("stop", rec["id"])
    report = mux.ok("purge", "--agent", "demo", "--conversation", rec["conversation_id"], "--yes", "--json")
    assert report["removed"] and report["residual"] == []


def test_a_hostile_conversation_id_runs_nothing(mux, tmp_path):
    pwned = tmp_path / "pwned"
    for args in (["purge", "--agent", "demo", "--conversation", f"x; touch {pwned}", "--yes"],
                 ["purge", "--agent", "demo", "--conversation", f"$(touch {pwned})", "--dry-run"],
                 ["purge", "--agent", "demo", "--conversation", "../../etc/passwd", "--yes"]):
        r = mux.run(*args)
        assert r.rc == 2, r.err
        assert r.err.startswith("muxhost: ") and "not a valid demo conversation id" in r.err
    assert not pwned.exists()


def test_purge_without_yes_off_a_terminal_refuses(mux, tmp_path):
    rec = start_demo(mux, tmp_path)
    mux.ok("stop", rec["id"])
    r = mux.run("purge", rec["id"])
    assert r.rc == 2 and "--yes" in r.err
    assert mux.ok("show", rec["id"], "--json")["resumable"] is True


@pytest.mark.every_backend
def test_resume_continues_the_same_conversation_under_the_same_record(mux, tmp_path):
    rec = start_demo(mux, tmp_path, prompts=("before the stop",))
    mux.ok("stop", rec["id"])
    again = mux.ok("resume", rec["id"], "--json")
    assert again["id"] == rec["id"] and again["conversation_id"] == rec["conversation_id"]
    mux.wait_screen(again["pane"], "resumed conversation")
    mux.type(again["pane"], "after the resume")
    mux.wait_screen(again["pane"], "turn 2")
    listed = mux.ok("ls", "--json")
    assert [(r["id"], r["state"], r["conversation_id"]) for r in listed] == [(rec["id"], "running", rec["conversation_id"])]
    conv = demo_root(mux) / "conversations" / f"{rec['conversation_id']}.jsonl"
    assert "after the resume" in conv.read_text()
    # resume of a running record is refused
    r = mux.run("resume", rec["id"])
    assert r.rc == 4


def test_resume_respawns_the_dead_pane_of_an_agent_that_exited(mux, tmp_path):
    rec = start_demo(mux, tmp_path)
    mux.type(rec["pane"], "/exit")
    wait_for(lambda: mux.ok("show", rec["id"], "--json")["state"] == "exited", what="exit")
    again = mux.ok("resume", rec["id"], "--json")
    assert again["pane"] == rec["pane"]
    mux.wait_screen(rec["pane"], "resumed conversation")


def test_resume_when_the_cwd_is_gone_exits_3(mux, tmp_path):
    work = tmp_path / "gone"
    work.mkdir()
    rec = start_demo(mux, work)
    mux.ok("stop", rec["id"])
    work.rmdir()
    r = mux.run("resume", rec["id"])
    assert r.rc == 3 and "no longer exists" in r.err


def test_discover_follows_the_conversation_the_agent_moved_to(mux, tmp_path):
    rec = start_demo(mux, tmp_path)
    mux.type(rec["pane"], "/new")
    mux.wait_screen(rec["pane"], "new conversation")
    new_id = mux.capture(rec["pane"]).split("new conversation ")[1].split()[0]
    listed = mux.ok("ls", "--json")
    assert listed[0]["conversation_id"] == new_id != rec["conversation_id"]
    assert listed[0]["conversations"] == [rec["conversation_id"], new_id]  # the record remembers both


def test_a_refused_purge_check_forgives_only_appends_by_the_live_agent(tmp_path):
    """The contract suite's "a refused purge changed no files" lets a running agent append to its
    own log meanwhile; a file that lost a byte, was rewritten or truncated is still a change."""
    from muxhost.testing import appended_only

    log, other = tmp_path / "agent.log", tmp_path / "conversation.jsonl"
    log.write_bytes(b"one\ntwo\n")
    other.write_bytes(b"mine\ntheirs\n")
    sizes: dict[str, int] = {}
    before = tree_hash(tmp_path, sizes=sizes)
    with log.open("ab") as f:
        f.write(b"three\n")
    assert appended_only(before, sizes, tree_hash(tmp_path)) == before
    for changed in (b"mine\n", b"mine\ntheirs\nmore\n"[::-1], b"mine\ntheirs\n"[:-1]):
        other.write_bytes(changed)
        assert appended_only(before, sizes, tree_hash(tmp_path)) != before, changed
    other.write_bytes(b"mine\ntheirs\n")
    log.write_bytes(b"one\n")  # a line taken out of the log
    assert appended_only(before, sizes, tree_hash(tmp_path)) != before
