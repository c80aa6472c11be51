"""Purge plans against an attacker and a crash (issue 17, items 2-4): every path judged as the kernel
resolves it and the place checked is the place touched; hard links the plan does not name; muxhost's
own backups of an interrupted shared-file rewrite, and a kill -9 at any step of one.

Built on the tiny agent and the typed plugin of tests/test_plans.py."""
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from muxhost import plans
from muxhost.artifacts import Dir, File, FlockFile, JsonMember, Lines, MkdirLock, Rows
from muxhost.testing import load_module, tree_hash


_tp = load_module(Path(__file__).with_name("test_plans.py"))
Toy, plan, purge, make_db, count, make_family = _tp.Toy, _tp.plan, _tp.purge, _tp.make_db, _tp.count, _tp.make_family
ctx, data, outside, typedkit, kit = _tp.ctx, _tp.data, _tp.outside, _tp.typedkit, _tp.kit
HISTORY, KEPT = _tp.HISTORY, _tp.KEPT


# -- item 2: `..` after a symlink, and no second resolution ------------------------------------------
def _dotdot(kind: str, data: Path, outside: Path):
    """An artifact whose path is ``<data>/link/../x`` with ``link`` -> ``<outside>/deep``: the kernel
    goes to ``<outside>/x``; collapsed as text it would be ``<data>/x``."""
    (outside / "deep").mkdir()
    (data / "link").symlink_to(outside / "deep", target_is_directory=True)
    up = data / "link" / ".."
    (data / "h.jsonl").write_text('{"c": "c1"}\n{"c": "n1"}\n')
    if kind == "File":
        return File(up / "precious.txt")
    if kind == "Dir":
        (outside / "tree").mkdir()
        (outside / "tree" / "x.txt").write_text("x")
        return Dir(up / "tree")
    if kind == "Lines":
        (outside / "o.jsonl").write_text('{"c": "c1"}\n{"c": "n1"}\n')
        return Lines(up / "o.jsonl", key="c", value="c1")
    if kind == "JsonMember":
        (outside / "s.json").write_text('{"last": "c1", "other": 1}')
        return JsonMember(up / "s.json", ("last",))
    if kind == "Rows":
        make_db(outside / "store.db", messages=[("c1", "x")])
        return Rows(up / "store.db", "messages", "cid", "c1")
    if kind == "FlockFile":
        (outside / "h.lock").write_text("")
        return Lines(data / "h.jsonl", key="c", value="c1", lock=FlockFile(up / "h.lock"))
    if kind == "MkdirLock":
        return Lines(data / "h.jsonl", key="c", value="c1", lock=MkdirLock(up / "h.jsonl.lock"))
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["File", "Dir", "Lines", "JsonMember", "Rows", "FlockFile", "MkdirLock"])
def test_dotdot_after_a_symlink_is_judged_where_the_kernel_goes(ctx, data, outside, tmp_path, kind):
    art = _dotdot(kind, data, outside)
    before = tree_hash(tmp_path)
    with pytest.raises(plans.PlanError, match="^refused: .*outside the agent's folders") as e:
        items = plan(Toy({"c1": [art]}), ctx)
        plans.carry_out(items, ctx, [])  # (what today's main did with it)
    assert str(outside) in str(e.value)  # the message names the place the kernel would have touched
    assert tree_hash(tmp_path) == before


@pytest.mark.parametrize("kind", ["File", "Lines"])
def test_the_dry_run_names_the_file_that_is_really_touched(ctx, data, kind):
    (data / "a" / "b").mkdir(parents=True)
    (data / "link").symlink_to(data / "a" / "b", target_is_directory=True)
    name = "c1.json" if kind == "File" else "h.jsonl"
    for p in (data / "a" / name, data / name):  # the real one, and the one `..` as text would name
        p.write_text('{"c": "c1"}\n{"c": "n1"}\n')
    art = File(data / "link" / ".." / name) if kind == "File" else Lines(data / "link" / ".." / name, key="c", value="c1")
    agent = Toy({"c1": [art]})
    assert plans.labels(plan(agent, ctx)) == [f"~/.local/share/toy/a/{name}" + ("" if kind == "File" else ": 1 line")]
    _, residual, notes = purge(agent, ctx)
    assert residual == [] and notes == []
    assert (data / name).read_text() == '{"c": "c1"}\n{"c": "n1"}\n'
    assert not (data / "a" / name).exists() if kind == "File" else (data / "a" / name).read_text() == '{"c": "n1"}\n'


@pytest.mark.parametrize("kind", ["File", "Dir", "Lines", "JsonMember", "Rows"])
def test_what_is_removed_is_the_place_checked_never_a_path_resolved_again(ctx, data, outside, kind):
    """Between the check and the removal the folder is swapped for a symlink to outside: the
    removal touches nothing outside (it is a note, and the residual says what is left)."""
    def fill(folder: Path) -> None:
        folder.mkdir(exist_ok=True)
        (folder / "c1.json").write_text("c1")
        (folder / "c1").mkdir()
        (folder / "c1" / "x.txt").write_text("x")
        (folder / "h.jsonl").write_text('{"c": "c1"}\n{"c": "n1"}\n')
        (folder / "s.json").write_text('{"last": "c1", "other": 1}')
        make_db(folder / "store.db", messages=[("c1", "x"), ("n1", "y")])

    sub = data / "sub"
    fill(sub)
    fill(outside)
    art = {"File": File(sub / "c1.json"), "Dir": Dir(sub / "c1"), "Lines": Lines(sub / "h.jsonl", key="c", value="c1"),
           "JsonMember": JsonMember(sub / "s.json", ("last",)),
           "Rows": Rows(sub / "store.db", "messages", "cid", "c1")}[kind]
    items = plan(Toy({"c1": [art]}), ctx)
    assert len(items) == 1
    sub.rename(data / "moved")
    sub.symlink_to(outside, target_is_directory=True)
    before = tree_hash(outside)
    notes = []
    plans.carry_out(items, ctx, notes)
    assert tree_hash(outside) == before
    assert len(notes) == 1 and "no longer the folder that was checked" in notes[0], notes


# -- item 3: hard links ---------------------------------------------------------------------------------
def test_a_file_with_a_hard_link_outside_the_plan_is_a_leftover_and_kept(ctx, data, outside):
    (data / "c1.json").write_text("the conversation")
    os.link(data / "c1.json", outside / "copy.json")
    agent = Toy({"c1": [File(data / "c1.json")]})
    assert plans.labels(plan(agent, ctx)) == ["~/.local/share/toy/c1.json (1 other hard link)"]
    _, residual, notes = purge(agent, ctx)
    assert residual == ["~/.local/share/toy/c1.json (1 other hard link)"] and notes == []
    assert (outside / "copy.json").read_text() == "the conversation"
    assert (data / "c1.json").exists()  # one name of several frees nothing: kept, so the next purge finds it


def test_hard_links_the_plan_names_all_go(ctx, data):
    (data / "c1.json").write_text("the conversation")
    os.link(data / "c1.json", data / "c1.bak")
    (data / "c1").mkdir()
    os.link(data / "c1.json", data / "c1" / "again.json")
    agent = Toy({"c1": [File(data / "c1.json"), File(data / "c1.bak"), Dir(data / "c1")]})
    assert plans.labels(plan(agent, ctx)) == ["~/.local/share/toy/c1.json", "~/.local/share/toy/c1.bak",
                                              "~/.local/share/toy/c1/"]
    _, residual, notes = purge(agent, ctx)
    assert residual == [] and notes == [] and sorted(p.name for p in data.iterdir()) == []


def test_a_dir_with_a_file_linked_outside_the_plan_is_a_leftover(ctx, data, outside):
    (data / "c1").mkdir()
    (data / "c1" / "image.png").write_bytes(b"c1's picture")
    os.link(data / "c1" / "image.png", outside / "image.png")
    agent = Toy({"c1": [Dir(data / "c1")]})
    _, residual, _ = purge(agent, ctx)
    assert residual == ["~/.local/share/toy/c1/ (1 other hard link of files in it)"]
    assert (outside / "image.png").read_bytes() == b"c1's picture"


@pytest.mark.parametrize("kind", ["Lines", "JsonMember", "Rows"])
def test_a_shared_file_with_other_hard_links_is_refused_before_anything_runs(ctx, data, outside, tmp_path, kind):
    (data / "h.jsonl").write_text('{"c": "c1"}\n{"c": "n1"}\n')
    (data / "s.json").write_text('{"last": "c1", "other": 1}')
    make_db(data / "store.db", messages=[("c1", "x"), ("n1", "y")])
    name, art = {"Lines": ("h.jsonl", Lines(data / "h.jsonl", key="c", value="c1")),
                 "JsonMember": ("s.json", JsonMember(data / "s.json", ("last",))),
                 "Rows": ("store.db", Rows(data / "store.db", "messages", "cid", "c1"))}[kind]
    os.link(data / name, outside / name)
    (data / "c1.json").write_text("mine")
    before = tree_hash(tmp_path)
    with pytest.raises(plans.PlanError, match=f"^refused: ~/.local/share/toy/{name} has 1 other hard link: "):
        plan(Toy({"c1": [File(data / "c1.json"), art]}), ctx)
    assert tree_hash(tmp_path) == before


def test_the_cli_says_what_hard_links_leave_and_refuse(kit):
    make_family(kit)
    os.link(kit.data / "history.jsonl", kit.outside / "history.jsonl")
    before = kit.snapshot()
    r = kit.purge("c1", "--yes")
    assert r.rc == 4 and r.err.startswith("muxhost: refused: ~/.local/share/typed/history.jsonl has 1 other hard link")
    assert r.err.count("\n") == 1 and kit.snapshot() == before and not kit.ran.exists()

    (kit.outside / "history.jsonl").unlink()
    os.link(kit.data / "conv" / "c1.json", kit.outside / "c1.json")
    r = kit.purge("c1", "--yes", "--json")
    assert r.rc == 5, r.err
    assert "~/.local/share/typed/conv/c1.json (1 other hard link)" in r.json["residual"]
    assert "1 other hard link" in r.err and r.err.count("\n") == 1
    assert (kit.outside / "c1.json").read_text() == '{"id": "c1"}'


# -- item 4: muxhost's own backups, and a kill -9 at any step of a rewrite ------------------------------
JSON_OLD = b'{\n  "projects": {\n    "/src/app": {\n      "last": "c1"\n    },\n    "/src/b": {"last": "n1"}\n  }\n}\n'
CASES = {"Lines": ("history.jsonl", HISTORY, KEPT),
         "JsonMember": ("state.json", JSON_OLD, plans.drop_member(JSON_OLD, ("projects", "/src/app", "last"), "c1"))}


def _art(kind: str, path):
    if kind == "Lines":
        return Lines(path, key="conversation", value="c1")
    return JsonMember(path, ("projects", "/src/app", "last"), equals="c1")


def test_a_backup_an_interrupted_rewrite_left_is_in_the_plan_and_goes(ctx, data):
    """What today's main leaves when it is killed after the rewrite: the file purged, and beside it
    the whole original, the purged text included."""
    (data / "history.jsonl").write_bytes(KEPT)
    (data / ".history.jsonl.k3j4h5g6.muxhost-backup").write_bytes(HISTORY)
    agent = Toy({"c1": [_art("Lines", data / "history.jsonl")]})
    label = "~/.local/share/toy/.history.jsonl.k3j4h5g6.muxhost-backup (muxhost's backup from an interrupted rewrite)"
    assert plans.labels(plan(agent, ctx)) == [label]
    _, residual, notes = purge(agent, ctx)
    assert residual == [] and notes == []
    assert sorted(p.name for p in data.iterdir()) == ["history.jsonl"]
    assert (data / "history.jsonl").read_bytes() == KEPT


REWRITER = textwrap.dedent('''
    import sys
    from muxhost import plans
    from muxhost.agent import Agent, AgentContext
    from muxhost.artifacts import JsonMember, Lines

    class Toy(Agent):
        name = "toy"
        id_pattern = r"[a-z0-9]{1,16}"

    home, kind, path = sys.argv[1:4]
    ctx = AgentContext(home=home, env={"HOME": home}, cwd=home)
    art = (Lines(path, key="conversation", value="c1") if kind == "Lines"
           else JsonMember(path, ("projects", "/src/app", "last"), equals="c1"))
    notes = []
    plans.carry_out(plans.build(Toy(), ctx, ["c1"], {"c1": [art]}), ctx, notes)
    print("done", notes, flush=True)
''')
STEPS = ["backup-created", "backup-written", "written", "truncated"]


def kill_at(step: str, kind: str, home: str, path: Path) -> None:
    """Run a purge's rewrite of ``path`` in a process of its own and kill -9 it at ``step``."""
    env = {**os.environ, "MUXHOST_TEST_REWRITE_PAUSE": step}
    p = subprocess.Popen([sys.executable, "-c", REWRITER, home, kind, str(path)], stdout=subprocess.PIPE, env=env)
    try:
        ready, _, _ = select.select([p.stdout], [], [], 30)
        line = p.stdout.readline().decode() if ready else ""
        assert line == f"paused {step}\n", line
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        p.stdout.close()


def whole(data: bytes, old: bytes, new: bytes) -> bool:
    """The old bytes or the new ones (the new ones may still have their blank padding: newlines,
    which a JSON reader skips and a line reader sees as empty lines)."""
    return data == old or (data.startswith(new) and not data[len(new):].strip(b"\n"))


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("kind", ["Lines", "JsonMember"])
def test_a_kill_at_any_step_of_a_rewrite_leaves_the_old_file_or_the_new_one(ctx, data, kind, step):
    name, old, new = CASES[kind]
    (data / name).write_bytes(old)
    kill_at(step, kind, ctx.home, data / name)
    assert whole((data / name).read_bytes(), old, new)
    backups = sorted(p.name for p in data.glob(f".{name}.*.muxhost-backup"))
    assert len(backups) == 1  # what the next plan must find
    agent = Toy({"c1": [_art(kind, data / name)]})
    assert f"~/.local/share/toy/{backups[0]} (muxhost's backup from an interrupted rewrite)" in plans.labels(plan(agent, ctx))
    _, residual, notes = purge(agent, ctx)
    assert residual == [] and notes == []
    assert (data / name).read_bytes() == new and sorted(p.name for p in data.iterdir()) == [name]


@pytest.mark.parametrize("tear", ["half written", "never cut"])
@pytest.mark.parametrize("kind", ["Lines", "JsonMember"])
def test_a_torn_rewrite_is_put_right_from_its_backup(ctx, data, kind, tear):
    """A rewrite whose bytes did not all land (the machine lost power mid-write): half written,
    the original comes back from the backup; written but never cut, the cut is made. Then the purge
    rewrites it; nothing else is lost."""
    name, old, new = CASES[kind]
    (data / name).write_bytes(old)
    kill_at("backup-written", kind, ctx.home, data / name)
    k = len(new) - 5 if tear == "half written" else len(new)
    (data / name).write_bytes(new[:k] + old[k:])
    assert not whole((data / name).read_bytes(), old, new)
    _, residual, notes = purge(Toy({"c1": [_art(kind, data / name)]}), ctx)
    assert residual == [] and notes == []
    assert (data / name).read_bytes() == new and sorted(p.name for p in data.iterdir()) == [name]


def test_a_backup_beside_a_file_root_is_found_though_the_plugin_no_longer_names_the_file(ctx, data):
    """claude names ~/.claude.json only while the conversation's member is in it. Killed after the
    new bytes landed (the member gone from the file), the backup beside it holds it still: the next
    plan finds it by the root, and the purge removes it."""
    name, old, new = CASES["JsonMember"]
    (data / name).write_bytes(old)
    kill_at("truncated", "JsonMember", ctx.home, data / name)
    assert (data / name).read_bytes() == new and len(list(data.glob(f".{name}.*.muxhost-backup"))) == 1
    agent = Toy({"c1": [File(data / "c1.json")]}, roots=[data / name])  # (nothing of c1 in the file now)
    (data / "c1.json").write_text("{}")
    labels = plans.labels(plan(agent, ctx))
    assert any(label.endswith("(muxhost's backup from an interrupted rewrite)") for label in labels), labels
    _, residual, notes = purge(agent, ctx)
    assert residual == [] and notes == []
    assert sorted(p.name for p in data.iterdir()) == [name] and (data / name).read_bytes() == new


@pytest.mark.parametrize("tear", ["half written", "never cut"])
def test_a_torn_rewrite_the_agent_appended_to_since_is_put_right_and_keeps_the_append(ctx, data, tear):
    name, old, new = CASES["Lines"]
    (data / name).write_bytes(old)
    kill_at("backup-written", "Lines", ctx.home, data / name)
    written = new + b"\n" * (len(old) - len(new))
    k = len(new) - 5 if tear == "half written" else len(written)
    late = b'{"conversation": "n1", "late": true}\n'
    (data / name).write_bytes(written[:k] + old[k:] + late)  # the power went mid-write, then the agent wrote
    _, residual, notes = purge(Toy({"c1": [_art("Lines", data / name)]}), ctx)
    assert residual == [] and notes == []
    assert (data / name).read_bytes() == new + late and sorted(p.name for p in data.iterdir()) == [name]


def test_a_link_named_like_a_backup_is_removed_never_followed(ctx, data, tmp_path):
    name, old, new = CASES["Lines"]
    (data / name).write_bytes(old)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"not muxhost's\n")
    (data / f".{name}.abcd1234.muxhost-backup").symlink_to(target)
    _, residual, notes = purge(Toy({"c1": [_art("Lines", data / name)]}), ctx)
    assert residual == [] and notes == []
    assert (data / name).read_bytes() == new and sorted(p.name for p in data.iterdir()) == [name]
    assert target.read_bytes() == b"not muxhost's\n"


@pytest.mark.parametrize("step", ["backup-written", "written"])
def test_a_file_the_agent_wrote_anew_since_the_crash_is_never_put_back(ctx, data, step):
    """Killed mid-rewrite, then the agent wrote its file anew (claude rewrites ~/.claude.json whole):
    the next purge keeps the agent's new content (less the conversation's member), never the
    backup's older copy; the backup goes."""
    name, old, _ = CASES["JsonMember"]
    (data / name).write_bytes(old)
    kill_at(step, "JsonMember", ctx.home, data / name)
    anew = {"projects": {"/src/app": {"last": "c1"}, "/src/new": {"last": "n9"}}, "written": "by the agent"}
    (data / name).write_text(json.dumps(anew, indent=2))
    _, residual, notes = purge(Toy({"c1": [_art("JsonMember", data / name)]}), ctx)
    assert residual == [] and notes == []
    assert json.loads((data / name).read_text()) == {"projects": {"/src/app": {}, "/src/new": {"last": "n9"}},
                                                      "written": "by the agent"}
    assert sorted(p.name for p in data.iterdir()) == [name]


def test_a_finished_rewrite_keeps_what_an_agent_appended_since(ctx, data):
    (data / "history.jsonl").write_bytes(HISTORY)
    kill_at("truncated", "Lines", ctx.home, data / "history.jsonl")
    with open(data / "history.jsonl", "ab") as f:
        f.write(b'{"conversation": "n1", "late": true}\n')
    _, residual, notes = purge(Toy({"c1": [_art("Lines", data / "history.jsonl")]}), ctx)
    assert residual == [] and notes == []
    assert (data / "history.jsonl").read_bytes() == KEPT + b'{"conversation": "n1", "late": true}\n'
    assert sorted(p.name for p in data.iterdir()) == ["history.jsonl"]
