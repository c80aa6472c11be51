"""Purge into an archive, and unpurge (issue 23, items 2 and 3), in process: the real Host on the fake
backend and a small agent whose plan has every kind of artifact (a file, a folder with a link, rows
of two tables with a blob, lines of a shared JSONL file, a member of a shared JSON document), a
child conversation and a neighbour. What a user checks: after the purge no byte of the conversation
is left, after unpurge every byte is back (files with modes and times, rows equal, lines in place),
and every guard refuses with nothing changed."""
import errno
import json
import os
import select
import signal
import sqlite3
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from muxhost import archive, plans
from muxhost.agent import Agent
from muxhost.artifacts import Command, Dir, File, JsonMember, Lines, Rows
from muxhost.errors import MuxhostError, Refused
from muxhost.testing import tree_hash

CONVS = ("c1", "c2", "n1")  # c2 is c1's child; n1 the neighbour


class Keeper(Agent):
    """Every kind of artifact, under ~/.local/share/keeper."""

    name = "keeper"
    id_pattern = r"[a-z0-9]{1,16}"
    holders: list[str] = []
    command = False

    def data(self, ctx) -> Path:
        return Path(ctx.home) / ".local/share/keeper"

    def children(self, ctx, cid):
        return ["c2"] if cid == "c1" else []

    def in_use(self, ctx, cid):
        return list(self.holders)

    def artifacts(self, ctx, cid):
        d = self.data(ctx)
        out = [File(d / "conv" / f"{cid}.jsonl"), Dir(d / "tool" / cid),
               Rows(d / "db.sqlite", "msg", "conv", cid), Rows(d / "db.sqlite", "session", "id", cid),
               Lines(d / "history.jsonl", key="conv", value=cid),
               JsonMember(d / "state.json", ("last", cid), equals=f"secret of {cid}")]
        return ([Command(["true"])] if self.command else []) + out


class Old(Agent):
    """An older plugin: its plan is strings, its own ``purge`` removes them."""

    name = "old"
    id_pattern = r"[a-z0-9]{1,16}"

    def artifacts(self, ctx, cid):
        f = Path(ctx.home) / f"old-{cid}.txt"
        return [str(f)] if f.exists() else []

    def in_use(self, ctx, cid):
        return []

    def purge(self, ctx, cid):
        os.unlink(Path(ctx.home) / f"old-{cid}.txt")
        return [f"old-{cid}.txt"]


@pytest.fixture
def host_agents():
    Keeper.holders, Keeper.command = [], False
    return [Keeper(), Old()]


def world(host) -> Path:
    d = Path(os.environ["HOME"]) / ".local/share/keeper"
    (d / "conv").mkdir(parents=True)
    con = sqlite3.connect(d / "db.sqlite")
    con.execute("create table session (id text primary key, title text)")
    con.execute("create table msg (id integer primary key, conv text, body blob, score real)")
    history, state = [], {"theme": "dark", "last": {}}
    for n, cid in enumerate(CONVS):
        f = d / "conv" / f"{cid}.jsonl"
        f.write_text(f'{{"text": "words of {cid}"}}\n')
        os.chmod(f, 0o640)
        os.utime(f, ns=(1_600_000_000_123_456_789 + n, 1_600_000_000_123_456_789 + n))
        tool = d / "tool" / cid / "deep"
        tool.mkdir(parents=True)
        (tool / "out.txt").write_bytes(f"tool output of {cid}\n".encode())
        os.symlink("deep/out.txt", d / "tool" / cid / "link")
        con.execute("insert into session values (?, ?)", (cid, f"title of {cid}"))
        con.execute("insert into msg (conv, body, score) values (?, ?, ?)", (cid, f"blob of {cid}".encode() + b"\0\xff", 0.1 + n))
        history += [json.dumps({"conv": cid, "text": f"prompt {i} of {cid}"}) for i in range(2)]
        state["last"][cid] = f"secret of {cid}"
    con.commit()
    con.close()
    history.insert(1, json.dumps({"conv": "n1", "text": "between"}))
    (d / "history.jsonl").write_text("\n".join(history) + "\n")
    (d / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    return d


def rows(d: Path) -> dict:
    con = sqlite3.connect(d / "db.sqlite")
    try:
        return {t: sorted(con.execute(f"select * from {t}"), key=repr) for t in ("session", "msg")}
    finally:
        con.close()


def files(d: Path) -> dict:
    """Every file but the database (its bytes change with a VACUUM: its rows are compared)."""
    return {p: h for p, h in tree_hash(d).items() if "db.sqlite" not in p}


def holding(d: Path, *texts: str) -> list[str]:
    return sorted(str(p) for p in d.rglob("*") if p.is_file() and any(t.encode() in p.read_bytes() for t in texts))


def stats(d: Path) -> dict:
    """Modes and times of the files and folders that go whole (shared files are rewritten in place)."""
    return {str(p): (stat.S_IMODE(p.lstat().st_mode), p.lstat().st_mtime_ns) for p in d.rglob("*")
            if p.parent != d}


MINE = ("words of c1", "words of c2", "of c1", "of c2")


def test_purge_archive_then_unpurge_puts_every_byte_back(host):
    d = world(host)
    before, before_rows, before_stats = files(d), rows(d), stats(d)
    report = host.purge(agent_name="keeper", conversation_id="c1", archive=True)
    assert report.residual == [] and report.archive
    path = Path(report.archive)
    assert path.parent.name == "archive" and path.name.endswith("-keeper-c1.muxarchive")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert holding(d, *MINE) == [], "the purge left the conversation's bytes"
    assert "words of n1" in (d / "conv/n1.jsonl").read_text() and report.to_dict()["archive"] == str(path)

    done = host.unpurge(path.name[:12])
    assert done["restored"] and not done["in_place"]
    assert files(d) == before, "a file did not come back byte for byte"
    assert rows(d) == before_rows and stats(d) == before_stats
    assert path.exists(), "the archive stays until `archives rm`"
    again = host.unpurge(str(path))  # everything in place: nothing to do
    assert again["restored"] == [] and len(again["in_place"]) == len(done["restored"])


def test_a_crash_after_the_archive_leaves_both_and_a_second_purge_completes(host, monkeypatch):
    d = world(host)
    before = files(d)

    def crash(*a, **k):
        raise KeyboardInterrupt("killed right after the archive")

    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(plans, "carry_out", crash)
        host.purge(agent_name="keeper", conversation_id="c1", archive=True)
    [first] = host.unpurging.archives()
    assert files(d) == before, "nothing goes before the archive is written"
    assert host.unpurge(first["name"])["restored"] == []  # unpurge: everything is still there
    report = host.purge(agent_name="keeper", conversation_id="c1", archive=True)
    assert report.residual == [] and report.archive == first["path"]
    assert any("earlier archive" in n for n in report.notes) and len(host.unpurging.archives()) == 1


def test_unpurge_after_a_partial_purge_restores_what_is_missing(host, monkeypatch):
    d = world(host)
    before, before_rows = files(d), rows(d)
    real = plans.carry_out

    def half(items, ctx, notes):  # the rows and the shared files go, then the process dies
        real([i for i in items if isinstance(i.artifact, (Rows, Lines, JsonMember))], ctx, notes)
        raise KeyboardInterrupt

    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(plans, "carry_out", half)
        host.purge(agent_name="keeper", conversation_id="c1", archive=True)
    done = host.unpurge(host.unpurging.archives()[0]["name"])
    assert any("rows" in x or "msg" in x for x in done["restored"]) and any("conv/c1.jsonl" in x for x in done["in_place"])
    assert files(d) == before and rows(d) == before_rows


def test_a_full_disk_while_archiving_removes_nothing(host, monkeypatch):
    d = world(host)
    before, before_rows = files(d), rows(d)
    real = archive.Writer._member

    def full(self, *a, **k):
        if len(self.tar.getmembers()) >= 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *a, **k)

    monkeypatch.setattr(archive.Writer, "_member", full)
    with pytest.raises(MuxhostError) as e:
        host.purge(agent_name="keeper", conversation_id="c1", archive=True)
    assert e.value.exit_code == 1 and "No space left" in str(e.value) and "\n" not in str(e.value)
    assert files(d) == before and rows(d) == before_rows, "a failed archive removed something"
    assert os.listdir(archive.folder(host.store.path)) == [], "the temp file was left"


def test_an_archive_edited_by_hand_is_refused(host):
    d = world(host)
    path = Path(host.purge(agent_name="keeper", conversation_id="c1", archive=True).archive)
    data = path.read_bytes()
    assert data.count(b"words of c1") == 1
    path.write_bytes(data.replace(b"words of c1", b"words of cX"))
    purged = files(d)
    with pytest.raises(Refused, match="does not match its sha256"):
        host.unpurge(str(path))
    assert files(d) == purged and not (d / "conv/c1.jsonl").exists(), "an edited archive restored something"


def test_unpurge_refuses_what_stands_in_the_way_and_restores_nothing(host):
    d = world(host)
    path = host.purge(agent_name="keeper", conversation_id="c1", archive=True).archive
    (d / "conv/c2.jsonl").write_text("someone else's\n")
    purged = files(d)
    with pytest.raises(Refused, match="something else stands at .*c2.jsonl"):
        host.unpurge(path)
    assert files(d) == purged
    os.unlink(d / "conv/c2.jsonl")
    con = sqlite3.connect(d / "db.sqlite")
    con.execute("insert into session values ('c1', 'a new c1')")
    con.commit()
    with pytest.raises(Refused, match="same key holds other values"):
        host.unpurge(path, dry_run=True)
    con.execute("delete from session where id = 'c1'")
    con.execute("alter table msg add column extra text")
    con.commit()
    con.close()
    with pytest.raises(Refused, match="columns of table msg changed"):
        host.unpurge(path)
    assert files(d) == {p: h for p, h in purged.items() if not p.endswith("c2.jsonl")}


def test_lines_whose_neighbours_changed_are_refused_as_ambiguous(host):
    d = world(host)
    path = host.purge(agent_name="keeper", conversation_id="c1", archive=True).archive
    between, n1, _ = (d / "history.jsonl").read_bytes().splitlines(keepends=True)  # the neighbour's 3 lines
    (d / "history.jsonl").write_bytes(b"".join([between, b"{}\n", between, n1, between, n1]))
    with pytest.raises(Refused, match="2 places fit"):  # between, then n1: twice, and not where they were
        host.unpurge(path)
    (d / "history.jsonl").write_bytes(b"{}\n")
    with pytest.raises(Refused, match="no places fit"):
        host.unpurge(path)
    assert not (d / "conv/c1.jsonl").exists()


def test_lines_come_back_in_place_when_the_file_grew_since(host):
    d = world(host)
    before = (d / "history.jsonl").read_bytes()
    path = host.purge(agent_name="keeper", conversation_id="c1", archive=True).archive
    with open(d / "history.jsonl", "ab") as f:
        f.write(b'{"conv": "n1", "text": "later"}\n')
    host.unpurge(path)
    assert (d / "history.jsonl").read_bytes() == before + b'{"conv": "n1", "text": "later"}\n'


def test_unpurge_is_refused_while_the_conversation_is_in_use(host):
    world(host)
    path = host.purge(agent_name="keeper", conversation_id="c1", archive=True).archive
    Keeper.holders = ["pid 4242 keeper --resume c1"]
    with pytest.raises(Refused, match="in use"):
        host.unpurge(path)


def test_a_command_whose_effect_the_plan_does_not_name_is_refused(host):
    d = world(host)
    Keeper.command = True
    for f in ("conv", "tool"):
        os.rename(d / f, d / f"{f}-away")
    con = sqlite3.connect(d / "db.sqlite")
    con.execute("delete from msg where conv in ('c1', 'c2')")
    con.execute("delete from session where id in ('c1', 'c2')")
    con.commit()
    con.close()
    before = files(d)
    dry = host.purge(agent_name="keeper", conversation_id="c1", archive=True, dry_run=True)
    assert "names none of the files or rows" in dry.refused
    with pytest.raises(Refused, match="names none of the files or rows"):
        host.purge(agent_name="keeper", conversation_id="c1", archive=True)
    assert files(d) == before and os.listdir(archive.folder(host.store.path)) == []


def test_an_older_plugins_own_purge_is_refused_with_an_archive(host):
    f = Path(os.environ["HOME"]) / "old-c1.txt"
    f.write_text("old words\n")
    with pytest.raises(Refused, match="its own code"):
        host.purge(agent_name="old", conversation_id="c1", archive=True)
    assert f.read_text() == "old words\n" and host.unpurging.archives() == []
    assert host.purge(agent_name="old", conversation_id="c1").residual == [] and not f.exists()


def test_archives_ls_show_rm_prune(host):
    world(host)
    path = Path(host.purge(agent_name="keeper", conversation_id="c1", archive=True).archive)
    [row] = host.unpurging.archives()
    assert row["agent"] == "keeper" and row["conversation_id"] == "c1" and row["members"] == ["c1", "c2"]
    shown = host.unpurging.show(row["name"][:10])
    assert {i["kind"] for i in shown["items"]} == {"file", "dir", "rows", "lines", "json"}
    with tarfile.open(path) as tar:
        assert tar.getnames()[-2:] == ["manifest.json", "manifest.sha256"]
    assert host.unpurging.prune(3600) == []
    assert host.unpurging.prune(0, dry_run=True) == [str(path)] and path.exists()
    other = Path(os.environ["HOME"]) / "notes.txt"
    other.write_text("mine\n")
    with pytest.raises(Refused, match="no muxhost archive"):
        host.unpurging.rm(str(other))
    assert other.exists()
    assert host.unpurging.rm(row["name"]) == str(path) and not path.exists()


# -- the CLI, with the demo agent in real panes ----------------------------------------------------
def demo_conversation(mux, work: Path, text: str, child: str | None = None) -> dict:
    rec = mux.ok("launch", "demo", "--cwd", str(work), "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.type(rec["pane"], text)
    mux.wait_screen(rec["pane"], text[::-1])
    if child:
        mux.type(rec["pane"], f"/child {child}")
        mux.wait_screen(rec["pane"], "child conversation")
    return mux.ok("stop", rec["id"], "--json")


def one_line(r, code: int, needle: str) -> None:
    assert r.rc == code, (r.rc, r.out, r.err)
    assert r.err.startswith("muxhost: ") and r.err.count("\n") == 1 and needle in r.err, r.err


def test_the_cli_archives_unpurges_and_the_conversation_resumes(mux, tmp_path):
    work = tmp_path / "proj"
    work.mkdir()
    rec = demo_conversation(mux, work, "remember the tulips", child="kid words")
    root = mux.home / ".local/share/muxhost-demo"
    before = tree_hash(root)
    assert "what goes is archived first" in mux.ok("purge", rec["id"], "--dry-run", "--archive")
    r = mux.run("purge", rec["id"], "--archive", "--yes")
    assert r.rc == 0 and "archived to " in r.out and "muxhost unpurge " in r.out, r.out
    assert not holding(root, "remember the tulips", "kid words")
    [row] = mux.ok("archives", "--json")
    name = row["name"]
    assert row["agent"] == "demo" and row["conversation_id"] == rec["conversation_id"] and len(row["members"]) == 2
    assert name in mux.ok("archives") and "every sum matches" in mux.ok("archives", "show", name[:15])

    dry = mux.ok("unpurge", name, "--dry-run", "--json")
    assert dry["dry_run"] is True and len(dry["restored"]) == 3 and not holding(root, "remember the tulips")
    out = mux.ok("unpurge", name)
    assert out.startswith(f"restored demo conversation {rec['conversation_id']}") and out.count("\n  + ") == 3
    assert tree_hash(root) == before, "unpurge did not bring every byte back"
    assert mux.ok("ls", "--all", "--json")[0]["resumable"] is True

    resumed = mux.ok("resume", rec["id"], "--json")
    assert resumed["conversation_id"] == rec["conversation_id"]
    mux.wait_screen(resumed["pane"], f"resumed conversation {rec['conversation_id']}")
    mux.type(resumed["pane"], "and the roses")
    mux.wait_screen(resumed["pane"], "sesor eht dna")
    conv = (root / "conversations" / f"{rec['conversation_id']}.jsonl").read_text()
    assert "remember the tulips" in conv and "and the roses" in conv
    mux.ok("stop", rec["id"])

    one_line(mux.run("unpurge", "nosuch"), 3, "no archive 'nosuch'")
    one_line(mux.run("archives", "show"), 2, "needs an archive")
    one_line(mux.run("archives", "prune"), 2, "--older-than")
    one_line(mux.run("archives", "prune", "--older-than", "soon"), 2, "--older-than 'soon'")
    path = Path(row["path"])
    path.write_bytes(path.read_bytes().replace(b"remember the tulips", b"remember the weeds!"))
    one_line(mux.run("unpurge", name), 4, "does not match its sha256")
    assert mux.ok("archives", "rm", name) == f"removed {path}\n" and mux.ok("archives", "--json") == []


def test_config_purge_archive_is_the_default_and_no_archive_overrides_it(mux, tmp_path):
    work = tmp_path / "proj"
    work.mkdir()
    mux.config.write_text("purge:\n  archive: true\n")
    a = demo_conversation(mux, work, "first one")
    b = demo_conversation(mux, work, "second one")
    assert mux.ok("purge", a["id"], "--yes", "--json")["archive"]
    assert mux.ok("purge", b["id"], "--yes", "--no-archive", "--json")["archive"] is None
    assert [r["conversation_id"] for r in mux.ok("archives", "--json")] == [a["conversation_id"]]
    one_line(mux.run("purge", b["id"], "--archive", "--no-archive", "--yes"), 2, "not allowed with")


@pytest.mark.parametrize("step", ["writing", "written"])
def test_a_kill_9_while_archiving_or_right_after_leaves_everything_and_a_second_purge_completes(mux, tmp_path, step):
    work = tmp_path / "proj"
    work.mkdir()
    rec = demo_conversation(mux, work, "kill me softly", child="and my child")
    root = mux.home / ".local/share/muxhost-demo"
    before = tree_hash(root)
    env = {**mux.env, "MUXHOST_TEST_ARCHIVE_PAUSE": step}
    p = subprocess.Popen([sys.executable, "-m", "muxhost", "purge", rec["id"], "--archive", "--yes"],
                         stdout=subprocess.PIPE, env=env, cwd=str(mux.home))
    try:
        ready, _, _ = select.select([p.stdout], [], [], 30)
        assert (p.stdout.readline().decode() if ready else "") == f"paused {step}\n"
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        p.stdout.close()
    assert tree_hash(root) == before, "the purge removed something before it was killed"
    folder = mux.state_dir / "archive"
    kept = mux.ok("archives", "--json")
    if step == "written":  # the archive is whole: unpurge finds everything still in place
        assert len(kept) == 1 and mux.ok("unpurge", kept[0]["name"], "--json")["restored"] == []
    else:
        assert kept == [] and len(os.listdir(folder)) == 1  # its temp file, swept by the next purge
    report = mux.ok("purge", rec["id"], "--archive", "--yes", "--json")
    assert report["residual"] == [] and not holding(root, "kill me softly", "and my child")
    assert sorted(os.listdir(folder)) == [Path(report["archive"]).name]
    if step == "written":
        assert report["archive"] == kept[0]["path"] and any("earlier archive" in n for n in report["notes"])
    mux.ok("unpurge", Path(report["archive"]).name)
    assert tree_hash(root) == before


def test_an_empty_archive_folder_lists_nothing_and_names_what_to_do(host):
    assert host.unpurging.archives() == []
    with pytest.raises(MuxhostError, match="no archive 'x'.*muxhost archives"):
        host.unpurge("x")


def test_a_json_member_comes_back_as_text_where_it_was_else_in_a_document_written_again():
    from muxhost.unpurging import put_member

    doc = b'{\n  "a": 1,\n  "last": {\n    "p1": "c1",\n    "p2": "n1"\n  }\n}\n'
    after = plans.drop_member(doc, ("last", "p1"), "c1")
    p = next(i for i in range(len(doc)) if doc[i] != after[i])
    cut = doc[p:p + len(doc) - len(after)]
    saved = {"value": "c1", "offset": p, "fragment": archive.b64(cut), "textual": True,
             "before": archive.b64(doc[max(0, p - 80):p]), "after": archive.b64(after[p:p + 80])}
    assert put_member(after, ["last", "p1"], saved) == doc  # byte for byte
    assert put_member(doc, ["last", "p1"], saved) == doc  # there already: unchanged
    moved = b'{"last": {"p2": "n1"}, "a": 1}'  # rewritten since: its text has no place any more
    assert json.loads(put_member(moved, ["last", "p1"], saved)) == {"last": {"p2": "n1", "p1": "c1"}, "a": 1}
    with pytest.raises(ValueError, match="another value"):
        put_member(b'{"last": {"p1": "c9"}}', ["last", "p1"], saved)


def test_an_archive_folder_others_can_write_is_refused_before_anything_goes(host):
    d = world(host)
    before = files(d)
    folder = Path(host.store.path).parent / "archive"
    folder.mkdir(mode=0o700)
    os.chmod(folder, 0o777)
    with pytest.raises(MuxhostError, match="writable by group or others") as e:
        host.purge(agent_name="keeper", conversation_id="c1", archive=True)
    assert e.value.exit_code == 1 and files(d) == before and os.listdir(folder) == []
