"""Every conversation on disk and prune (issue 23, items 1 and 4): `conversations` lists what the
agents keep (children under their parent, the record that has it, in use); `prune` purges exactly the
old ones through the one purge and says why it skipped each of the others."""
import hashlib
import json
import os
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path

import pytest

import muxhost
from muxhost.testing import wait_for

DAY = 86400


def _folder() -> Path:
    return Path(os.environ["HOME"]) / ".local/share/muxhost-demo/conversations"


def _write(cid: str, days: float, text: str, parent: str | None = None, cwd: str = "/work/p") -> Path:
    """A demo conversation file as the demo writes one, last written ``days`` ago."""
    path = _folder() / f"{cid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    when = time.time() - days * DAY
    lines = [{"type": "meta", "id": cid, "parent": parent, "cwd": cwd, "created": when - 60},
             {"type": "user", "text": text, "time": when}, {"type": "agent", "text": text[::-1], "time": when}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    _age(cid, days)
    return path


def _age(cid: str, days: float) -> None:
    when = time.time() - days * DAY
    os.utime(_folder() / f"{cid}.jsonl", (when, when))


def _tree_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(_folder().iterdir()):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def _holder(cid: str) -> subprocess.Popen:
    """A process whose argv names the conversation (what the demo plugin's in_use sees)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", cid])


@pytest.fixture
def veto(host):
    kept = set()
    plugin = types.SimpleNamespace(muxhost_purge_veto=muxhost.hookimpl(
        lambda agent, conversation_id, artifacts: "kept by the test's plugin" if conversation_id in kept else None))
    host.pm.register(plugin, name="test-veto")
    return kept


def test_prune_over_200_demo_conversations_takes_exactly_the_old_free_ones(host, tmp_path, veto):
    ids = [uuid.uuid4().hex for _ in range(200)]
    old = set()
    for i, cid in enumerate(ids):
        young = i % 4 == 0
        _write(cid, 5 if young else 40 + i % 7, f"prompt number {i}")
        if not young:
            old.add(cid)
    # children: two old ones with an old child (and a grandchild), one old one with a young child
    kids = {ids[1]: uuid.uuid4().hex, ids[2]: uuid.uuid4().hex, ids[3]: uuid.uuid4().hex}
    grandkid = uuid.uuid4().hex
    _write(kids[ids[1]], 41, "child task", parent=ids[1])
    _write(grandkid, 41, "grandchild task", parent=kids[ids[1]])
    _write(kids[ids[2]], 41, "child task", parent=ids[2])
    _write(kids[ids[3]], 2, "a child still at work", parent=ids[3])
    # held: a running record, an asleep record, a process naming one, a process naming a child, a veto
    running, asleep = (host.launch("demo", cwd=str(tmp_path), name=n) for n in ("runner", "sleeper"))
    for lv in (running, asleep):
        wait_for(lambda lv=lv: (_folder() / f"{lv.rec.conversation_id}.jsonl").exists(), what="its conversation")
    # (the fake backend has no stub pane: an asleep record as one whose stub's server went is)
    host.stop(host.store.get(asleep.rec.id))
    host.store.update(host.store.get(asleep.rec.id), state="asleep", slept_at=time.time())
    for lv in (running, asleep):
        _age(lv.rec.conversation_id, 50)
    held, held_kid = ids[5], ids[6]
    kid6 = uuid.uuid4().hex
    _write(kid6, 45, "a held child", parent=held_kid)
    veto.add(ids[7])
    procs = [_holder(held), _holder(kid6)]
    try:
        wait_for(lambda: all(p.pid for p in procs), what="the holders")
        skipped = {running.rec.conversation_id: f"in use: record {running.rec.id} (runner) is running",
                   asleep.rec.conversation_id: f"in use: record {asleep.rec.id} (sleeper) is asleep",
                   held: f"in use: pid {procs[0].pid}", held_kid: f"in use: child conversation {kid6}: pid {procs[1].pid}",
                   ids[3]: f"child conversation {kids[ids[3]]} was updated since the cutoff",
                   ids[7]: "purge vetoed: kept by the test's plugin"}
        gone = old - set(skipped)
        sizes = {p.name.split(".")[0]: p.stat().st_size for p in _folder().iterdir()}
        freed = sum(sizes[c] for c in gone) + sizes[kids[ids[1]]] + sizes[grandkid] + sizes[kids[ids[2]]]

        before = _tree_hash()
        dry = host.prune(30 * DAY, dry_run=True)
        assert _tree_hash() == before  # a dry run changes nothing
        _check(dry, gone, skipped, freed, kids, grandkid)

        report = host.prune(30 * DAY)
        _check(report, gone, skipped, freed, kids, grandkid)
        left = {p.name.split(".")[0] for p in _folder().iterdir()}
        purged = gone | {kids[ids[1]], grandkid, kids[ids[2]]}
        assert not (left & purged)  # every old free one went, with its children
        assert left == set(sizes) - purged  # and nothing else did: the young, the held, the vetoed
        assert host.store.get(asleep.rec.id).state == "asleep"
        assert host.prune(30 * DAY)["purged"] == []  # a second prune finds nothing more to take
    finally:
        for p in procs:
            p.kill()
            p.wait()
        host.stop(host.store.get(running.rec.id))


def _check(report, gone, skipped, freed, kids, grandkid) -> None:
    assert {p["id"] for p in report["purged"]} == gone
    why = {s["id"]: s["reason"] for s in report["skipped"]}
    assert set(why) == set(skipped)
    for cid, reason in skipped.items():
        assert why[cid].startswith(reason), (cid, why[cid])
    by_id = {p["id"]: p for p in report["purged"]}
    some = next(iter(kids))
    assert set(by_id[some]["children"]) == {kids[some], grandkid}
    assert report["bytes_freed"] == freed and report["errors"] == []


def test_conversations_lists_every_one_on_disk_with_children_under_the_parent_and_filters(host, tmp_path):
    a, b, child, stray = (uuid.uuid4().hex for _ in range(4))
    _write(a, 40, "refactor the parser\n  and its   tests", cwd=str(tmp_path / "p"))
    _write(child, 39, "sub task", parent=a, cwd=str(tmp_path / "p"))
    _write(b, 1, "x" * 300, cwd=str(tmp_path / "q"))
    (_folder() / "not-an-id.jsonl").write_text(json.dumps({"type": "meta"}) + "\n")  # the id check drops it
    lv = host.launch("demo", cwd=str(tmp_path), name="rec")
    try:
        wait_for(lambda: (_folder() / f"{lv.rec.conversation_id}.jsonl").exists(), what="its conversation")
        rows = host.conversations()
        assert [r.conv.id for r in rows] == [lv.rec.conversation_id, b, a]  # newest first, children not rows
        top = rows[2]
        assert [c.conv.id for c in top.children] == [child] and top.conv.title == "refactor the parser and its tests"
        assert top.total_size == (_folder() / f"{a}.jsonl").stat().st_size + (_folder() / f"{child}.jsonl").stat().st_size
        assert len(rows[1].conv.title) <= 80 and rows[1].conv.title.endswith("…")
        mine = rows[0].to_dict()
        assert mine["record"]["name"] == "rec" and mine["in_use"] and mine["cwd"] == str(tmp_path)
        assert [r.conv.id for r in host.conversations(older_than=30 * DAY)] == [a]
        assert [r.conv.id for r in host.conversations(cwd=str(tmp_path / "q"))] == [b]
        assert [r.conv.id for r in host.conversations(grep="SUB TASK")] == [a]  # a child's match shows its parent
        assert host.conversations(agent="demo", grep="nothing like it") == []
    finally:
        host.stop(host.store.get(lv.rec.id))


def test_the_cli_table_json_summary_and_usage_errors(mux, tmp_path):
    data = tmp_path / "demo-data"
    mux.env["MUXHOST_DEMO_HOME"] = str(data)
    old, young = uuid.uuid4().hex, uuid.uuid4().hex
    for cid, days in ((old, 40), (young, 1)):
        path = data / "conversations" / f"{cid}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"type": "meta", "id": cid, "parent": None, "cwd": str(tmp_path), "created": 1})
                        + "\n" + json.dumps({"type": "user", "text": f"hello {cid[:4]}"}) + "\n")
        when = time.time() - days * DAY
        os.utime(path, (when, when))
    table = mux.ok("conversations")
    lines = table.splitlines()
    assert lines[0].split() == ["AGENT", "CONVERSATION", "UPDATED", "SIZE", "RECORD", "USE", "CWD", "TITLE"]
    assert all(len(ln) <= 100 for ln in lines) and f"hello {old[:4]}" in table and "40d" in table
    assert [r["id"] for r in mux.ok("conversations", "--older-than", "30d", "--json")] == [old]
    for bad, why in ((["prune", "--older-than", "30d"], "--dry-run"), (["prune", "--dry-run"], "--older-than"),
                     (["prune", "--older-than", "soon", "--yes"], "--older-than"),
                     (["conversations", "--older-than", "-1d"], "--older-than")):
        r = mux.run(*bad)
        assert r.rc == 2 and why in r.err and len(r.err.strip().splitlines()) == 1, r.err
    dry = mux.ok("prune", "--older-than", "30d", "--dry-run")
    assert dry.splitlines()[-1].startswith("would purge 1 conversation(s)") and (data / "conversations" / f"{old}.jsonl").exists()
    size = (data / "conversations" / f"{old}.jsonl").stat().st_size
    out = mux.ok("prune", "--older-than", "30d", "--yes")
    assert out.splitlines()[-1] == f"purged 1 conversation(s), {size} freed, 0 skipped"
    assert not (data / "conversations" / f"{old}.jsonl").exists() and (data / "conversations" / f"{young}.jsonl").exists()
    assert mux.ok("prune", "--older-than", "30d", "--yes", "--json")["purged"] == []


def test_prune_archive_archives_each_purge_and_names_the_archives(host):
    """`prune --archive` hands `archive=True` to each purge (Host.purge's keyword, from the archive
    branch: this test needs both merged) and sums up where the archives are."""
    old, young = uuid.uuid4().hex, uuid.uuid4().hex
    _write(old, 40, "archive me")
    _write(young, 1, "keep me")
    report = host.prune(30 * DAY, archive=True)
    assert [p["id"] for p in report["purged"]] == [old] and report["errors"] == []
    archive = report["purged"][0]["archive"]
    assert archive and Path(archive).exists() and report["archives"] == [archive]
    assert not (_folder() / f"{old}.jsonl").exists() and (_folder() / f"{young}.jsonl").exists()


@pytest.mark.parametrize("argv, sent", [
    (["conversations", "--host", "box", "--json"], ["conversations", "--json"]),
    (["prune", "--older-than", "30d", "--host=box", "--yes"], ["prune", "--older-than", "30d", "--yes"])])
def test_conversations_and_prune_with_host_run_on_that_host(argv, sent, tmp_path, monkeypatch):
    from muxhost.remote import dispatch, transport

    cfg = tmp_path / "c.yaml"
    cfg.write_text("hosts:\n  box: {ssh: 'ssh://me@box'}\n")
    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / "state"))
    calls = []
    monkeypatch.setattr(transport, "forward", lambda host, args, timeout: calls.append((host.name, args)) or 0)
    assert dispatch(["--config", str(cfg), *argv]) == 0
    assert calls == [("box", sent)]
    assert dispatch(["--config", str(cfg), *[a for a in argv if "box" not in a and a != "--host"], "--host", "local"]) is None


def test_a_holder_that_came_while_the_purge_asked_is_seen(host):
    """The in-use check after the question reads the process table again: a process started while
    the user answered (here: one naming the conversation) refuses the purge. (The plugins' reads of
    one process table are shared since `conversations` asks for every conversation.)"""
    from muxhost.errors import Refused

    cid = uuid.uuid4().hex
    _write(cid, 1, "keep me while held")
    late = []

    def answer(report):
        late.append(_holder(cid))
        wait_for(lambda: any(cid in " ".join(p.cmdline()) for p in __import__("psutil").process_iter(["cmdline"])
                             if p.pid == late[0].pid), what="the late holder")
        return True

    try:
        with pytest.raises(Refused, match="is in use: pid"):
            host.purge(agent_name="demo", conversation_id=cid, confirm=answer)
        assert (_folder() / f"{cid}.jsonl").exists()
    finally:
        for p in late:
            p.kill()
            p.wait()


def test_the_kit_reads_first_lines_only_titles_one_line_and_sizes_from_stat(tmp_path):
    from muxhost.kit import conversations as kc

    big = tmp_path / "t.jsonl"
    first = {"type": "user", "message": {"content": [{"type": "text", "text": "line one\nline two"}]}}
    big.write_text(json.dumps(first) + "\n" + ("x" * 100 + "\n") * 2000 + json.dumps({"late": 1}) + "\n")
    entries = kc.head(big, limit=4096)  # not a byte past the limit, a cut last line left out
    assert entries == [first]
    assert kc.title(first["message"]["content"]) == "line one line two"
    assert kc.title("word " * 40, width=20) == "word word word word…" and kc.title(None) == ""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "sub.json").write_text("12345")
    assert kc.size(big, tmp_path / "t", tmp_path / "missing") == big.stat().st_size + 5
    cid = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    day = tmp_path / "sessions" / "2026" / "12" / "01"
    day.mkdir(parents=True)
    (day / f"rollout-2026-12-01T10-00-00-{cid}.jsonl").write_text(json.dumps({"cwd": "/w"}) + "\n")
    (day / "rollout-2026-12-01T10-00-00-not-an-id.jsonl").write_text("{}\n")
    found = list(kc.rollouts(tmp_path / "sessions", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                             lambda path, entries: {"cwd": entries[0]["cwd"]}))
    assert [(c.id, c.cwd, c.size) for c in found] == [(cid, "/w", len(json.dumps({"cwd": "/w"})) + 1)]
    assert list(kc.folder(tmp_path / "nowhere")) == [] and kc.table(tmp_path / "none.db", "select 1") == []
    assert not (tmp_path / "none.db").exists()  # a read creates no database


def test_prune_shows_a_progress_bar_on_a_terminal_only_and_one_summary_line(host, capsys, monkeypatch):
    import argparse

    from muxhost.cli import prune

    for _ in range(3):
        _write(uuid.uuid4().hex, 40, "old")
    args = argparse.Namespace(older_than="30d", agent=None, cwd=None, dry_run=True, yes=False, archive=False,
                              json=False)
    assert prune.run(host, args) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.splitlines()[-1].startswith("would purge 3 conversation(s)")  # not a terminal: no bar
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert prune.run(host, args) == 0
    out, err = capsys.readouterr()
    assert "prune [" in err and "3/3" in err and err.endswith("\r\033[K")  # drawn, then wiped
    assert "prune [" not in out and out.splitlines()[-1].startswith("would purge 3 conversation(s)")


def test_a_plugin_whose_conversations_fails_is_a_warning_and_its_ids_are_checked(host, monkeypatch):
    demo = host.registry.agents["demo"]
    good = uuid.uuid4().hex

    def listing(ctx):
        from muxhost.api import Conversation

        return [Conversation(good, updated=1.0, children=["../etc", good]), Conversation("../../x"), "junk"]

    monkeypatch.setattr(demo, "conversations", listing)
    rows = host.conversations()
    assert [r.conv.id for r in rows] == [good] and rows[0].conv.children == []  # bad ids dropped, no cycle
    monkeypatch.setattr(demo, "conversations", lambda ctx: 1 / 0)
    assert host.conversations() == []
    assert {"agent": "demo", "hook": "conversations", "error": "ZeroDivisionError: division by zero"} in host.warnings
