"""Purge plans as data (issue 10, item 1): a plugin returns typed artifacts; the host checks them,
prints the plan and carries it out in one fixed order, the same way for every plugin.

The first half drives :mod:`muxhost.plans` directly with a tiny Agent on a temp HOME; the second
runs the real CLI against a third-party plugin package whose artifacts are typed, and checks what a
user would: the exit code, the one-line error, the plan, and every byte under HOME."""
import contextlib
import fcntl
import json
import os
import shlex
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from muxhost import plans
from muxhost.agent import Agent, AgentContext
from muxhost.artifacts import Command, Dir, File, FlockFile, JsonMember, Leftover, Lines, MkdirLock, Rows
from muxhost.testing import install_plugin, tree_hash


# -- a tiny agent on a temp HOME ------------------------------------------------------------------
class Toy(Agent):
    """``arts``: conversation id -> its artifacts; ``kids``: id -> its children (or an exception)."""

    name = "toy"
    id_pattern = r"[a-z0-9]{1,16}"

    def __init__(self, arts=None, kids=None, roots=()):
        self.arts, self.kids, self.more = arts or {}, kids or {}, [Path(r) for r in roots]

    def artifacts(self, ctx, conversation_id):
        return list(self.arts.get(conversation_id, []))

    def children(self, ctx, conversation_id):
        kids = self.kids.get(conversation_id, [])
        if isinstance(kids, Exception):
            raise kids
        return kids

    def roots(self, ctx):
        return [*super().roots(ctx), *self.more]


@pytest.fixture
def ctx(tmp_path) -> AgentContext:
    home = tmp_path / "home"
    (home / ".local/share/toy").mkdir(parents=True)
    return AgentContext(home=str(home), env={"HOME": str(home), "PATH": os.environ.get("PATH", os.defpath)},
                        cwd=str(home))


@pytest.fixture
def data(ctx) -> Path:
    return Path(ctx.home) / ".local/share/toy"


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder that is no root of the agent's, with a file a purge must never touch."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "precious.txt").write_text("not the agent's\n")
    return out


def plan(agent, ctx, cid="c1"):
    """What the host builds: the family walked, each member's artifacts checked and kept when there."""
    members = plans.family(agent, ctx, cid)
    return plans.build(agent, ctx, members, {m: agent.artifacts(ctx, m) for m in members})


def purge(agent, ctx, cid="c1"):
    """What the host does with a typed plan: carry it out, then ask again. -> (ran, residual, notes)."""
    items, notes = plan(agent, ctx, cid), []
    ran = plans.carry_out(items, ctx, notes)
    return ran, [i.label for i in plan(agent, ctx, cid) if i.artifact.kind != "command"], notes


def make_db(path: Path, wal: bool = False, **tables: list[tuple]) -> None:
    """A database whose tables (``cid text, body text``) hold the given rows."""
    con = sqlite3.connect(path)
    if wal:
        con.execute("pragma journal_mode = wal")
    for table, rows in tables.items():
        con.execute(f"create table {table} (cid text, body text)")
        con.executemany(f"insert into {table} values (?, ?)", rows)
    con.commit()
    con.close()


def sql(db: Path, *statements: str) -> None:
    with contextlib.closing(sqlite3.connect(db)) as con:
        for statement in statements:
            con.execute(statement)
        con.commit()


def count(db: Path, table: str, cid: str) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(f"select count(*) from {table} where cid = ?", (cid,)).fetchone()[0]
    finally:
        con.close()


# -- presence and labels --------------------------------------------------------------------------
def test_only_what_is_there_is_in_the_plan_labelled_as_a_user_reads_it(ctx, data):
    (data / "c1.json").write_text("{}")
    (data / "c1").mkdir()
    (data / "c1" / "a.txt").write_text("a")
    make_db(data / "store.db", messages=[("c1", "x"), ("c1", "y"), ("n1", "z")])
    (data / "history.jsonl").write_text('{"conversation": "c1"}\n{"conversation": "n1"}\n')
    (data / "state.json").write_text(json.dumps({"projects": {"/src/app": {"last": "c1"}}}))
    agent = Toy({"c1": [
        File(data / "c1.json"), File(data / "gone.json"),
        Dir(data / "c1"), Dir(data / "gone"),
        Rows(data / "store.db", "messages", "cid", "c1"),
        Rows(data / "store.db", "messages", "cid", "c9"),       # counts 0
        Rows(data / "store.db", "no_such_table", "cid", "c1"),  # a table this version lacks
        Rows(data / "store.db", "messages", "no_such_col", "c1"),
        Rows(data / "none.db", "messages", "cid", "c1"),        # no database at all
        Lines(data / "history.jsonl", key="conversation", value="c1"),
        Lines(data / "history.jsonl", key="conversation", value="c9"),
        Lines(data / "none.jsonl", key="conversation", value="c1"),
        JsonMember(data / "state.json", ("projects", "/src/app", "last"), equals="c1"),
        JsonMember(data / "state.json", ("projects", "/src/app", "last"), equals="c9"),
        JsonMember(data / "state.json", ("projects", "/src/gone", "last")),
        JsonMember(data / "none.json", ("last",)),
        Command(["true", "c1"]),
    ]})
    before = tree_hash(ctx.home)
    assert plans.labels(plan(agent, ctx)) == [
        "~/.local/share/toy/c1.json",
        "~/.local/share/toy/c1/",
        "messages:c1 (2 rows in ~/.local/share/toy/store.db)",
        "~/.local/share/toy/history.jsonl: 1 line",
        '~/.local/share/toy/state.json: projects["/src/app"].last',
        "run: true c1",
    ]
    assert tree_hash(ctx.home) == before  # building a plan reads only


def test_a_database_that_cannot_be_read_is_a_leftover_never_absent(ctx, data):
    (data / "store.db").write_bytes(b"this is not a database, whatever its name says\n" * 20)
    agent = Toy({"c1": [Rows(data / "store.db", "messages", "cid", "c1")]})
    items = plan(agent, ctx)
    assert len(items) == 1 and isinstance(items[0].artifact, Leftover)
    assert items[0].label.startswith("~/.local/share/toy/store.db (could not be read: ")
    _, residual, _ = purge(agent, ctx)
    assert residual == [items[0].label]  # what could not be read cannot be called gone


def test_items_of_children_are_labelled_with_their_child(ctx, data):
    for cid in ("c1", "c2", "c3", "c4"):
        (data / f"{cid}.json").write_text(cid)
    agent = Toy({"c1": [File(data / "c1.json"), File(data / "c4.json", conversation="c4")],
                 "c2": [File(data / "c2.json")], "c3": [File(data / "c3.json")]},
                kids={"c1": ["c2"], "c2": ["c3"]})
    items = plan(agent, ctx)
    assert plans.labels(items) == ["~/.local/share/toy/c1.json",
                                   "~/.local/share/toy/c4.json [child conversation c4]",
                                   "~/.local/share/toy/c2.json [child conversation c2]",
                                   "~/.local/share/toy/c3.json [child conversation c3]"]
    assert [i.conversation for i in items] == ["c1", "c4", "c2", "c3"]


def test_a_count_that_changes_is_the_same_item(ctx, data):
    make_db(data / "store.db", messages=[("c1", "x")])
    (data / "history.jsonl").write_text('{"conversation": "c1"}\n')
    agent = Toy({"c1": [Rows(data / "store.db", "messages", "cid", "c1"),
                        Lines(data / "history.jsonl", key="conversation", value="c1")]})
    first = plan(agent, ctx)
    sql(data / "store.db", "insert into messages values ('c1', 'more')")
    with open(data / "history.jsonl", "a") as f:
        f.write('{"conversation": "c1"}\n')
    again = plan(agent, ctx)
    assert [i.key for i in again] == [i.key for i in first]  # the residual is matched by key ...
    assert plans.labels(again) == ["messages:c1 (2 rows in ~/.local/share/toy/store.db)",
                                   "~/.local/share/toy/history.jsonl: 2 lines"]  # ... the label shows the count


def test_one_string_is_one_value_never_its_characters(data):
    assert Rows(data / "s.db", "t", "cid", values="c1").all_values() == ("c1",)
    assert Lines(data / "h.jsonl", key=["meta", "id"], values="c1").values == frozenset({"c1"})
    assert JsonMember(data / "s.json", "last").keys == ("last",)
    with pytest.raises(TypeError, match="never a shell string"):
        Command("codex delete c1")


# -- families -------------------------------------------------------------------------------------
def test_the_family_is_walked_at_every_depth_cycle_safe_with_valid_ids_only(ctx):
    agent = Toy(kids={"a": ["b", "../../etc", "B!", None, 7, "a"], "b": ["c", "a"], "c": ["d"], "d": ["b", "e"]})
    assert plans.family(agent, ctx, "a") == ["a", "b", "c", "d", "e"]


def test_children_that_answer_a_string_fail_closed(ctx):
    with pytest.raises(TypeError):  # "abc" would be the conversations a, b and c
        plans.family(Toy(kids={"c1": "abc"}), ctx, "c1")


# -- the rules: refused before anything runs ------------------------------------------------------
def _bad(case: str, data: Path, outside: Path):
    """An artifact that breaks one rule (setting up what it needs)."""
    if case == "outside the roots":
        return File(outside / "precious.txt")
    if case == "parent is a symlink to outside":
        (data / "bad-link").symlink_to(outside, target_is_directory=True)
        return File(data / "bad-link" / "precious.txt")
    if case == "dir through a symlinked parent":
        (data / "bad-link").symlink_to(outside, target_is_directory=True)
        return Dir(data / "bad-link" / "sub")
    if case == "lines target outside":  # rewriting it would write outside
        (data / "bad.jsonl").symlink_to(outside / "precious.txt")
        return Lines(data / "bad.jsonl", contains="c1")
    if case == "json target outside":
        (data / "bad.json").symlink_to(outside / "precious.txt")
        return JsonMember(data / "bad.json", ("last",))
    if case == "database outside":
        make_db(outside / "store.db", messages=[("c1", "x")])
        (data / "bad.db").symlink_to(outside / "store.db")
        return Rows(data / "bad.db", "messages", "cid", "c1")
    if case == "lock outside":
        (data / "bad.jsonl").write_text('{"c": "c1"}\n')
        return Lines(data / "bad.jsonl", key="c", value="c1", lock=FlockFile(outside / "h.lock"))
    if case == "a file that is a folder":
        (data / "bad-c1").mkdir()
        (data / "bad-c1" / "inside.txt").write_text("x")
        return File(data / "bad-c1")
    if case == "a whole root":
        return Dir(data.parent)
    if case == "table not an identifier":
        make_db(data / "bad.db", messages=[("c1", "x")])
        return Rows(data / "bad.db", 'x"; drop table messages; --', "cid", "c1")
    if case == "column not an identifier":
        make_db(data / "bad.db", messages=[("c1", "x")])
        return Rows(data / "bad.db", "messages", "cid = cid or 1 = 1 --", "c1")
    if case == "json member without keys":
        (data / "bad.json").write_text('{"last": "c1"}')
        return JsonMember(data / "bad.json", ())
    if case == "command without argv":
        return Command([])
    if case == "lines without a match":
        (data / "bad.jsonl").write_text('{"c": "c1"}\n')
        return Lines(data / "bad.jsonl")
    raise AssertionError(case)


RULES = ["outside the roots", "parent is a symlink to outside", "dir through a symlinked parent",
         "lines target outside", "json target outside", "database outside", "lock outside",
         "a file that is a folder", "a whole root", "table not an identifier", "column not an identifier",
         "json member without keys", "command without argv", "lines without a match"]


@pytest.mark.parametrize("case", RULES)
def test_a_plan_that_breaks_a_rule_is_refused_whole(ctx, data, outside, tmp_path, case):
    (data / "c1.json").write_text("mine")  # a good item beside the bad one
    bad = _bad(case, data, outside)
    seen = tmp_path / "command-ran"
    agent = Toy({"c1": [Command(["touch", str(seen)]), File(data / "c1.json"), bad]})
    before = tree_hash(tmp_path)
    with pytest.raises(plans.PlanError, match="^refused") as e:
        plan(agent, ctx)
    assert "\n" not in str(e.value)
    assert tree_hash(tmp_path) == before and not seen.exists()


def test_what_a_symlink_points_at_is_not_removed_only_the_link(ctx, data, outside):
    (data / "c1.json").symlink_to(outside / "precious.txt")
    _, residual, notes = purge(Toy({"c1": [File(data / "c1.json")]}), ctx)
    assert residual == [] and notes == []
    assert not os.path.lexists(data / "c1.json")
    assert (outside / "precious.txt").read_text() == "not the agent's\n"


def test_a_dir_is_removed_without_following_a_symlink_inside_it(ctx, data, outside):
    (outside / "tree").mkdir()
    (outside / "tree" / "deep.txt").write_text("deep")
    (data / "c1" / "sub").mkdir(parents=True)
    (data / "c1" / "sub" / "own.txt").write_text("own")
    (data / "c1" / "to-file").symlink_to(outside / "precious.txt")
    (data / "c1" / "sub" / "to-dir").symlink_to(outside / "tree", target_is_directory=True)
    before = tree_hash(outside)
    _, residual, notes = purge(Toy({"c1": [Dir(data / "c1")]}), ctx)
    assert residual == [] and notes == [] and not os.path.lexists(data / "c1")
    assert tree_hash(outside) == before


def test_a_file_that_turned_into_a_folder_after_the_plan_is_never_removed_as_one(ctx, data, tmp_path):
    (data / "c1.json").write_text("mine")
    script = f"import os; p = {str(data / 'c1.json')!r}; os.unlink(p); os.mkdir(p); open(p + '/kept', 'w').write('k')"
    items = plan(Toy({"c1": [Command([sys.executable, "-c", script]), File(data / "c1.json")]}), ctx)
    notes = []
    plans.carry_out(items, ctx, notes)
    assert (data / "c1.json" / "kept").read_text() == "k"
    assert any("could not remove ~/.local/share/toy/c1.json" in n for n in notes), notes


# -- a dry run (building the plan) changes nothing ------------------------------------------------
def test_reading_a_wal_database_at_rest_leaves_no_file_behind(ctx, data):
    make_db(data / "store.db", wal=True, messages=[("c1", "x"), ("n1", "y")])
    # one left by a crash: commits in a -wal without its -shm (a copy of a live database's two files)
    live = sqlite3.connect(data / "live.db")
    live.execute("pragma journal_mode = wal")
    live.execute("pragma wal_autocheckpoint = 0")
    live.execute("create table messages (cid text, body text)")
    live.execute("insert into messages values ('c1', 'in the wal only')")
    live.commit()
    for suffix in ("", "-wal"):
        (data / f"crashed.db{suffix}").write_bytes((data / f"live.db{suffix}").read_bytes())
    live.close()
    assert not (data / "crashed.db-shm").exists() and (data / "crashed.db-wal").stat().st_size
    before = tree_hash(ctx.home)
    agent = Toy({"c1": [Rows(data / "store.db", "messages", "cid", "c1"),
                        Rows(data / "crashed.db", "messages", "cid", "c1")]})
    assert plans.labels(plan(agent, ctx)) == ["messages:c1 (1 row in ~/.local/share/toy/store.db)",
                                              "messages:c1 (1 row in ~/.local/share/toy/crashed.db)"]
    assert tree_hash(ctx.home) == before  # no -shm, no -wal made by reading


# -- the order ------------------------------------------------------------------------------------
PROBE = textwrap.dedent('''
    import json, os, sqlite3, sys
    d, out = sys.argv[1], sys.argv[2]
    con = sqlite3.connect(os.path.join(d, "store.db"))
    rows = con.execute("select count(*) from messages where cid = 'c1'").fetchone()[0]
    con.close()
    json.dump({"file": os.path.exists(os.path.join(d, "c1.json")), "dir": os.path.isdir(os.path.join(d, "c1")),
               "rows": rows, "lines": open(os.path.join(d, "history.jsonl")).read().count('"c1"'),
               "member": '"c1"' in open(os.path.join(d, "state.json")).read()}, open(out, "w"))
''')


def test_the_agents_own_command_runs_first(ctx, data, tmp_path):
    (data / "c1.json").write_text("mine")
    (data / "c1").mkdir()
    make_db(data / "store.db", messages=[("c1", "x")])
    (data / "history.jsonl").write_text('{"conversation": "c1"}\n')
    (data / "state.json").write_text('{"last": "c1"}')
    seen = tmp_path / "seen.json"
    agent = Toy({"c1": [File(data / "c1.json"), Dir(data / "c1"), Rows(data / "store.db", "messages", "cid", "c1"),
                        Lines(data / "history.jsonl", key="conversation", value="c1"),
                        JsonMember(data / "state.json", ("last",), equals="c1"),
                        Command([sys.executable, "-c", PROBE, str(data), str(seen)])]})  # listed last
    ran, residual, notes = purge(agent, ctx)
    assert json.loads(seen.read_text()) == {"file": True, "dir": True, "rows": 1, "lines": 1, "member": True}
    assert ran == ["ran: " + shlex.join([sys.executable, "-c", PROBE, str(data), str(seen)])]
    assert residual == [] and notes == []


def test_rows_of_one_database_go_in_one_transaction_all_or_nothing(ctx, data):
    make_db(data / "store.db", messages=[("c1", "m"), ("n1", "m")], parts=[("c1", "p")])
    make_db(data / "other.db", messages=[("c1", "o")])
    # the second delete of the transaction fails
    sql(data / "store.db", "create trigger guard before delete on parts begin select raise(abort, 'parts are kept'); end")
    agent = Toy({"c1": [Rows(data / "store.db", "messages", "cid", "c1"), Rows(data / "store.db", "parts", "cid", "c1"),
                        Rows(data / "other.db", "messages", "cid", "c1")]})
    _, residual, notes = purge(agent, ctx)
    assert count(data / "store.db", "messages", "c1") == 1  # rolled back with the failed delete
    assert count(data / "store.db", "parts", "c1") == 1
    assert count(data / "other.db", "messages", "c1") == 0  # a database of its own: its own transaction
    assert residual == ["messages:c1 (1 row in ~/.local/share/toy/store.db)",
                        "parts:c1 (1 row in ~/.local/share/toy/store.db)"]
    assert any("could not delete rows from ~/.local/share/toy/store.db" in n and "parts are kept" in n for n in notes)


def test_rows_a_trigger_writes_back_are_deleted_too(ctx, data):
    sql(data / "store.db", "create table messages (cid text, rev int)", "insert into messages values ('c1', 0), ('n1', 0)",
        "create trigger revise after delete on messages when old.rev = 0 begin insert into messages values (old.cid, 1); end")
    _, residual, _ = purge(Toy({"c1": [Rows(data / "store.db", "messages", "cid", "c1")]}), ctx)
    assert residual == [] and count(data / "store.db", "messages", "n1") == 1


def test_deleted_text_is_gone_from_the_database_files_bytes(ctx, data):
    db = data / "store.db"
    con = sqlite3.connect(db, isolation_level=None)  # stays open, as the agent's own connection would
    con.execute("pragma journal_mode = wal")
    con.execute("pragma wal_autocheckpoint = 0")
    con.execute("pragma secure_delete = off")  # as most SQLite builds are: what an update frees keeps its bytes
    con.execute("create table messages (cid text, body text)")
    con.execute("insert into messages values ('n1', 'NEIGHBOUR-kept-7f3a')")
    con.execute("insert into messages values ('c1', ?)", ("SECRET-draft-5d2e" * 2000,))  # a long draft, then
    con.execute("update messages set body = ? where cid = 'c1'", ("SECRET-in-main-file-91ce" * 30,))  # the answer
    con.execute("pragma wal_checkpoint(truncate)")  # in the main file now; the draft in its free pages
    con.execute("insert into messages values ('c1', ?)", ("SECRET-in-the-wal-4b07" * 50,))  # this one in the -wal
    secrets = (b"SECRET-draft-5d2e", b"SECRET-in-main-file-91ce", b"SECRET-in-the-wal-4b07")
    raw = lambda: b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal")) if p.exists())  # noqa: E731
    assert all(s in raw() for s in secrets) and b"SECRET-in-the-wal-4b07" in Path(f"{db}-wal").read_bytes()
    try:
        _, residual, notes = purge(Toy({"c1": [Rows(db, "messages", "cid", "c1")]}), ctx)
        assert residual == [] and notes == []
        assert [s for s in secrets if s in raw()] == []
        assert con.execute("select body from messages").fetchall() == [("NEIGHBOUR-kept-7f3a",)]
    finally:
        con.close()


def test_rows_of_a_database_the_command_removed_make_no_new_database(ctx, data):
    make_db(data / "store.db", messages=[("c1", "x")])
    agent = Toy({"c1": [Command(["rm", "-f", str(data / "store.db")]), Rows(data / "store.db", "messages", "cid", "c1")]})
    ran, residual, notes = purge(agent, ctx)
    assert ran and residual == [] and notes == [] and not (data / "store.db").exists()


# -- shared files: in place, under locks ----------------------------------------------------------
HISTORY = (b'{"conversation": "n1", "text": "neighbour first"}\n'
           b'{"conversation": "c1", "text": "mine"}\n'
           b'not json at all, c1 in it\n'
           b'{"conversation": "n1", "text": "a \\r inside"}\r\n'
           b'progress 10%\rprogress 100% n1\n'
           b'{"conversation":"c1","text":"mine, compact"}\n'
           b'{"conversation": "n1", "text": "last, no newline"}')
KEPT = (b'{"conversation": "n1", "text": "neighbour first"}\n'
        b'not json at all, c1 in it\n'
        b'{"conversation": "n1", "text": "a \\r inside"}\r\n'
        b'progress 10%\rprogress 100% n1\n'
        b'{"conversation": "n1", "text": "last, no newline"}')


def test_lines_are_rewritten_in_place_every_other_byte_kept(ctx, data):
    (data / "real").mkdir()
    (data / "real" / "history.jsonl").write_bytes(HISTORY)
    (data / "history.jsonl").symlink_to(data / "real" / "history.jsonl")
    inode = (data / "real" / "history.jsonl").stat().st_ino
    agent = Toy({"c1": [Lines(data / "history.jsonl", key="conversation", value="c1")]})
    assert plans.labels(plan(agent, ctx)) == ["~/.local/share/toy/history.jsonl: 2 lines"]
    _, residual, notes = purge(agent, ctx)
    assert residual == [] and notes == []
    assert (data / "history.jsonl").is_symlink()  # a symlinked file stays a symlink
    assert (data / "real" / "history.jsonl").stat().st_ino == inode  # the same file, not a copy renamed over it
    assert (data / "real" / "history.jsonl").read_bytes() == KEPT
    assert list(data.glob("**/*backup*")) == []


def test_lines_by_text_keep_a_carriage_return_line_whole(ctx, data):
    log = (b'start n1\n'
           b'step 1\rstep 2\rdone c1\n'  # one line to a reader, whatever \r shows on a terminal
           b'end n1\r\n')
    (data / "agent.log").write_bytes(log)
    agent = Toy({"c1": [Lines(data / "agent.log", contains="c1")]})
    assert plans.labels(plan(agent, ctx)) == ["~/.local/share/toy/agent.log: 1 line"]
    _, residual, _ = purge(agent, ctx)
    assert residual == [] and (data / "agent.log").read_bytes() == b'start n1\nend n1\r\n'


def _wait_case(kind: str, data: Path):
    """(lock artifact, hold(), release()) for one kind of lock a rewrite must wait for."""
    if kind == "flock on the file":
        f = open(data / "history.jsonl", "rb")
        return None, lambda: fcntl.flock(f, fcntl.LOCK_EX), f.close
    if kind == "FlockFile":
        f = open(data / "history.jsonl.lock", "w")
        return FlockFile(data / "history.jsonl.lock"), lambda: fcntl.flock(f, fcntl.LOCK_EX), f.close
    if kind == "MkdirLock":
        return (MkdirLock(data / "history.jsonl.lock", stale=10), lambda: (data / "history.jsonl.lock").mkdir(),
                lambda: (data / "history.jsonl.lock").rmdir())
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["flock on the file", "FlockFile", "MkdirLock"])
def test_a_held_lock_makes_the_rewrite_wait(ctx, data, kind):
    (data / "history.jsonl").write_bytes(HISTORY)
    lock, hold, release = _wait_case(kind, data)
    items = plan(Toy({"c1": [Lines(data / "history.jsonl", key="conversation", value="c1", lock=lock)]}), ctx)
    hold()
    notes: list[str] = []
    worker = threading.Thread(target=plans.carry_out, args=(items, ctx, notes))
    worker.start()
    try:
        time.sleep(1.0)
        assert worker.is_alive() and (data / "history.jsonl").read_bytes() == HISTORY  # waiting
    finally:
        release()
    worker.join(15)
    assert not worker.is_alive() and notes == []
    assert (data / "history.jsonl").read_bytes() == KEPT
    assert not (data / "history.jsonl.lock").is_dir()  # a MkdirLock the host took, it gave back


@pytest.mark.parametrize("kind", ["flock on the file", "FlockFile", "MkdirLock"])
def test_a_lock_held_past_the_deadline_leaves_the_file_as_it_was(ctx, data, kind, monkeypatch):
    monkeypatch.setattr(plans, "LOCK_TIMEOUT", 0.5)
    (data / "history.jsonl").write_bytes(HISTORY)
    lock, hold, release = _wait_case(kind, data)
    agent = Toy({"c1": [Lines(data / "history.jsonl", key="conversation", value="c1", lock=lock)]})
    hold()
    try:
        _, residual, notes = purge(agent, ctx)
    finally:
        release()
    assert (data / "history.jsonl").read_bytes() == HISTORY
    assert residual == ["~/.local/share/toy/history.jsonl: 2 lines"]
    assert len(notes) == 1 and notes[0].startswith("could not rewrite ~/.local/share/toy/history.jsonl: ")


def test_a_stale_mkdir_lock_is_taken_over(ctx, data):
    (data / "history.jsonl").write_bytes(HISTORY)
    (data / "history.jsonl.lock").mkdir()
    old = time.time() - 60
    os.utime(data / "history.jsonl.lock", (old, old))  # its owner died a minute ago
    agent = Toy({"c1": [Lines(data / "history.jsonl", key="conversation", value="c1",
                              lock=MkdirLock(data / "history.jsonl.lock", stale=10))]})
    started = time.monotonic()
    _, residual, notes = purge(agent, ctx)
    assert time.monotonic() - started < 5
    assert residual == [] and notes == [] and (data / "history.jsonl").read_bytes() == KEPT
    assert not (data / "history.jsonl.lock").exists()


STATE = textwrap.dedent('''\
    {
      "numStartups": 12,
      "projects": {
        "/src/app": {
          "allowedTools": [],
          "lastSessionId": "c1",
          "lastCost": 0.25
        },
        "/src/other": {
          "lastSessionId": "c1"
        }
      },
      "theme": "dark"
    }
''').encode()


def test_a_json_member_goes_and_every_other_byte_stays(ctx, data):
    (data / "state.json").write_bytes(STATE)
    agent = Toy({"c1": [JsonMember(data / "state.json", ("projects", "/src/app", "lastSessionId"), equals="c1")]})
    _, residual, notes = purge(agent, ctx)
    assert residual == [] and notes == []
    assert (data / "state.json").read_bytes() == STATE.replace(b'      "lastSessionId": "c1",\n', b"")


@pytest.mark.parametrize("doc,keys,left", [
    (b'{"a":1,"b":"c1","c":2}', ("b",), b'{"a":1,"c":2}'),
    (b'{"b":"c1","a":1}\n', ("b",), b'{"a":1}\n'),
    (b'{"a":1,"b":"c1"}', ("b",), b'{"a":1}'),
    (b'{"x":{"b":"c1"},"b":"c1"}', ("x", "b"), b'{"x":{},"b":"c1"}'),
])
def test_a_json_member_is_cut_out_of_the_text(ctx, data, doc, keys, left):
    (data / "state.json").write_bytes(doc)
    purge(Toy({"c1": [JsonMember(data / "state.json", keys, equals="c1")]}), ctx)
    assert (data / "state.json").read_bytes() == left


def test_a_json_member_goes_only_while_it_equals_the_conversation(ctx, data):
    (data / "state.json").write_bytes(STATE)
    member = JsonMember(data / "state.json", ("projects", "/src/app", "lastSessionId"), equals="c1")
    items = plan(Toy({"c1": [member]}), ctx)
    assert len(items) == 1
    moved_on = STATE.replace(b'"lastSessionId": "c1",', b'"lastSessionId": "n7",')
    (data / "state.json").write_bytes(moved_on)  # the agent moved on to another conversation meanwhile
    notes: list[str] = []
    plans.carry_out(items, ctx, notes)
    assert (data / "state.json").read_bytes() == moved_on and notes == []
    assert plan(Toy({"c1": [member]}), ctx) == []  # and then it is not ours: not in the plan


# -- the agent's own command ----------------------------------------------------------------------
DUMP = "import json, os, sys; json.dump({'cwd': os.getcwd(), 'env': dict(os.environ)}, open(sys.argv[1], 'w'))"


def test_the_command_runs_with_the_agents_env_and_its_own_in_its_cwd(ctx, data, tmp_path):
    ctx.env.update(MUXHOST_RECORD="r1", AGENT_SETTING="from the agent")
    work, ctx.cwd = tmp_path / "work", str(tmp_path / "project")
    work.mkdir()
    os.mkdir(ctx.cwd)
    out1, out2 = tmp_path / "one.json", tmp_path / "two.json"
    agent = Toy({"c1": [Command([sys.executable, "-c", DUMP, str(out1)],
                                env={"TOY_TOKEN": "t1", "MUXHOST_RECORD": "r2"}, cwd=work),
                        Command([sys.executable, "-c", DUMP, str(out2)])]})
    ran, _, notes = purge(agent, ctx)
    assert len(ran) == 2 and notes == []
    one, two = json.loads(out1.read_text()), json.loads(out2.read_text())
    assert os.path.realpath(one["cwd"]) == os.path.realpath(work)
    assert os.path.realpath(two["cwd"]) == os.path.realpath(ctx.cwd)  # default: the agent's cwd
    for seen in (one, two):
        assert "MUXHOST_RECORD" not in seen["env"]  # not one of the record's processes
        assert seen["env"]["AGENT_SETTING"] == "from the agent" and seen["env"]["HOME"] == ctx.home
    assert one["env"]["TOY_TOKEN"] == "t1" and "TOY_TOKEN" not in two["env"]


@pytest.mark.parametrize("argv,note", [
    ([sys.executable, "-c", "import sys; sys.exit('no such session')"], "exited 1 (no such session)"),
    (["muxhost-no-such-delete-command", "c1"], "muxhost-no-such-delete-command not found"),
], ids=["it exits non-zero", "it is not installed"])
def test_a_failing_command_is_a_note_and_the_rest_of_the_plan_runs(ctx, data, argv, note):
    (data / "c1.json").write_text("mine")
    make_db(data / "store.db", messages=[("c1", "x")])
    agent = Toy({"c1": [Command(argv), File(data / "c1.json"), Rows(data / "store.db", "messages", "cid", "c1")]})
    ran, residual, notes = purge(agent, ctx)
    assert ran == []  # `removed` says "ran: …" only for a command that succeeded
    assert residual == [] and not (data / "c1.json").exists() and count(data / "store.db", "messages", "c1") == 0
    assert len(notes) == 1 and note in notes[0], notes


# -- through the CLI: a third-party plugin whose artifacts are typed --------------------------------
TYPEDKIT = textwrap.dedent('''
    """muxhost-typedkit: an agent plugin whose purge plan is typed artifacts. What it returns comes from
    the JSON file $TYPED_SPEC, so that each test says it:

    {"artifacts": {ID: [{"kind": "File", "path": "~/..."}, ...]}, "children": {ID: [ID, ...]},
     "children_raise": "why", "held": [ID, ...]}

    ``~/`` is the agent's HOME; kind "str" is a plain string, as an older plugin returns."""
    import json, os
    from pathlib import Path

    import muxhost
    from muxhost.artifacts import Command, Dir, File, JsonMember, Leftover, Lines, Rows

    KINDS = {k.__name__: k for k in (Command, Dir, File, JsonMember, Leftover, Lines, Rows)}


    class Typed(muxhost.Agent):
        name = "typed"
        id_pattern = r"[a-z0-9]{1,32}"

        def spec(self, ctx):
            return json.loads(Path(ctx.env["TYPED_SPEC"]).read_text())

        def where(self, ctx, p):
            return os.path.join(ctx.home, p[2:]) if isinstance(p, str) and p.startswith("~/") else p

        def artifacts(self, ctx, cid):
            out = []
            for a in self.spec(ctx).get("artifacts", {}).get(cid, []):
                a = dict(a)
                kind = a.pop("kind")
                if kind == "str":
                    out.append(a["text"])
                    continue
                for k in ("path", "db", "cwd"):
                    if k in a:
                        a[k] = self.where(ctx, a[k])
                if "argv" in a:
                    a["argv"] = [self.where(ctx, x) for x in a["argv"]]
                out.append(KINDS[kind](**a))
            return out

        def children(self, ctx, cid):
            spec = self.spec(ctx)
            if spec.get("children_raise"):
                raise OSError(spec["children_raise"])
            return spec.get("children", {}).get(cid, [])

        def in_use(self, ctx, cid):
            return [f"pid 4242 typed --resume {cid}"] if cid in self.spec(ctx).get("held", []) else []


    @muxhost.hookimpl
    def muxhost_register_agents(register):
        register(Typed())
''')


@pytest.fixture(scope="module")
def typedkit(tmp_path_factory):
    return install_plugin(tmp_path_factory.mktemp("typedkit"), "muxhost-typedkit", "muxhost_typedkit", TYPEDKIT)


class Kit:
    """The typed plugin's spec for one test, and the CLI run with it."""

    def __init__(self, mux, env, tmp_path):
        self.mux, self.spec_path = mux, tmp_path / "spec.json"
        self.env = {**env, "TYPED_SPEC": str(self.spec_path)}
        self.data = mux.home / ".local/share/typed"
        self.data.mkdir(parents=True)
        (mux.home / ".cache").mkdir(exist_ok=True)  # muxhost keeps its plugin list there (not compared)
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        (self.outside / "precious.txt").write_text("not the agent's\n")
        self.ran = tmp_path / "commands.log"  # the agent's own delete command appends here
        self.spec: dict = {"artifacts": {}}

    def command(self, cid: str) -> dict:
        code = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"
        return {"kind": "Command", "argv": [sys.executable, "-c", code, str(self.ran), f"delete {cid}"]}

    def purge(self, cid: str, *args: str):
        self.spec_path.write_text(json.dumps(self.spec))
        return self.mux.run("purge", "--agent", "typed", "--conversation", cid, *args, env=self.env)

    def snapshot(self) -> dict:
        """Every byte under HOME and outside it (but muxhost's own cache of the plugin list)."""
        return {**tree_hash(self.mux.home, skip=("/.cache/muxhost",)), **tree_hash(self.outside)}


@pytest.fixture
def kit(mux, typedkit, tmp_path) -> Kit:
    return Kit(mux, typedkit, tmp_path)


def make_family(kit: Kit) -> list[str]:
    """c1 with a child c2 and a grandchild c3 (c2 also names c1: a cycle), and a neighbour n1 with
    rows, lines and a state member beside them; returns the expected plan."""
    d = kit.data
    (d / "conv").mkdir()
    for cid in ("c1", "c2", "c3", "n1"):
        (d / "conv" / f"{cid}.json").write_text(f'{{"id": "{cid}"}}')
    (d / "att" / "c1").mkdir(parents=True)
    (d / "att" / "c1" / "image.png").write_bytes(b"\x89PNG c1")
    make_db(d / "store.db", wal=True, messages=[("c1", "c1 one"), ("c1", "c1 two"), ("c2", "c2 one"), ("n1", "n1 one")])
    (d / "history.jsonl").write_bytes(b'{"session": "c1", "t": 1}\n{"session": "n1", "t": 2}\n'
                                      b'{"session": "c2", "t": 3}\n{"session": "n1", "t": 4}\n')
    (kit.mux.home / ".config/typed").mkdir(parents=True)
    (kit.mux.home / ".config/typed/state.json").write_bytes(
        b'{\n  "last": {\n    "/src/app": "c1",\n    "/src/other": "n1"\n  }\n}\n')

    def own(cid):
        return [{"kind": "File", "path": f"~/.local/share/typed/conv/{cid}.json"},
                {"kind": "Rows", "db": "~/.local/share/typed/store.db", "table": "messages", "column": "cid", "value": cid},
                {"kind": "Lines", "path": "~/.local/share/typed/history.jsonl", "key": "session", "value": cid}]
    kit.spec = {"artifacts": {
        "c1": [kit.command("c1"), *own("c1"), {"kind": "Dir", "path": "~/.local/share/typed/att/c1"},
               {"kind": "JsonMember", "path": "~/.config/typed/state.json", "keys": ["last", "/src/app"], "equals": "c1"}],
        "c2": own("c2"), "c3": own("c3"), "n1": [kit.command("n1"), *own("n1")]},
        "children": {"c1": ["c2"], "c2": ["c3", "c1", "../../etc"], "c3": []}}
    return ["run: " + shlex.join(kit.command("c1")["argv"]),
            "~/.local/share/typed/conv/c1.json",
            "messages:c1 (2 rows in ~/.local/share/typed/store.db)",
            "~/.local/share/typed/history.jsonl: 1 line",
            "~/.local/share/typed/att/c1/",
            '~/.config/typed/state.json: last["/src/app"]',
            "~/.local/share/typed/conv/c2.json [child conversation c2]",
            "messages:c2 (1 row in ~/.local/share/typed/store.db) [child conversation c2]",
            "~/.local/share/typed/history.jsonl: 1 line [child conversation c2]",
            "~/.local/share/typed/conv/c3.json [child conversation c3]"]


def test_a_typed_plugin_purges_the_conversation_and_its_children_and_nothing_else(kit):
    expected = make_family(kit)
    neighbour = (kit.data / "conv" / "n1.json").read_bytes()

    before = kit.snapshot()
    r = kit.purge("c1", "--dry-run", "--json")
    assert r.rc == 0, r.err
    assert r.json["plan"] == expected
    assert kit.snapshot() == before and not kit.ran.exists()  # a dry run changes nothing, runs nothing
    human = kit.purge("c1", "--dry-run")
    assert human.rc == 0 and human.out.splitlines() == ["would purge typed conversation c1:",
                                                        *(f"  {p}" for p in expected)]

    r = kit.purge("c1", "--yes", "--json")
    assert r.rc == 0, r.err
    report = r.json
    assert report["residual"] == [] and report["complete"] is True and report["notes"] == []
    assert report["removed"] == ["ran: " + expected[0][len("run: "):], *expected[1:]]
    assert kit.ran.read_text() == "delete c1\n"  # the agent's own command, once, for the parent
    assert sorted(p.name for p in (kit.data / "conv").iterdir()) == ["n1.json"]
    assert (kit.data / "conv" / "n1.json").read_bytes() == neighbour
    assert not (kit.data / "att" / "c1").exists()
    db = kit.data / "store.db"
    assert [count(db, "messages", c) for c in ("c1", "c2", "n1")] == [0, 0, 1]
    assert (kit.data / "history.jsonl").read_bytes() == b'{"session": "n1", "t": 2}\n{"session": "n1", "t": 4}\n'
    assert (kit.mux.home / ".config/typed/state.json").read_bytes() == b'{\n  "last": {\n    "/src/other": "n1"\n  }\n}\n'
    assert b"c1 one" not in db.read_bytes() and b"c2 one" not in db.read_bytes()

    # again: only the agent's own command would be left: that is nothing to purge (exit 3), and it
    # does not run
    r = kit.purge("c1", "--yes", "--json")
    assert r.rc == 3 and "nothing to purge" in r.err


@pytest.mark.parametrize("case", ["outside the roots", "parent is a symlink to outside", "lines target outside",
                                  "a file that is a folder", "table not an identifier", "column not an identifier"])
def test_the_cli_refuses_a_plan_that_breaks_a_rule_before_anything_runs(kit, case):
    make_family(kit)
    bad = _bad(case, kit.data, kit.outside)
    spec = {"kind": type(bad).__name__, **{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(bad).items()
                                           if v not in (None, (), frozenset()) and k not in ("conversation",)}}
    if isinstance(bad, Lines):
        spec.pop("values", None)
    kit.spec["artifacts"]["c2"].append(spec)  # in a child's artifacts, after the parent's good ones
    before = kit.snapshot()
    r = kit.purge("c1", "--yes")
    assert r.rc == 4, (r.rc, r.err)
    assert r.err.startswith("muxhost: refused: ") and r.err.count("\n") == 1 and "nothing was removed" in r.err
    assert kit.snapshot() == before and not kit.ran.exists()


def test_a_dry_run_changes_nothing_byte_for_byte(kit):
    make_family(kit)
    before = kit.snapshot()
    for args in (["--dry-run"], ["--dry-run", "--json"]):
        r = kit.purge("c1", *args)
        assert r.rc == 0, r.err
    assert kit.snapshot() == before and not kit.ran.exists()


def test_a_held_child_refuses_the_purge_and_nothing_changes(kit):
    make_family(kit)
    kit.spec["held"] = ["c3"]
    before = kit.snapshot()
    r = kit.purge("c1", "--yes")
    assert r.rc == 4, r.err
    assert r.err == "muxhost: conversation c1 is in use: child conversation c3: pid 4242 typed --resume c3\n"
    assert kit.snapshot() == before and not kit.ran.exists()


def test_children_that_cannot_be_told_refuse_the_purge(kit):
    make_family(kit)
    kit.spec["children_raise"] = "the sessions index is corrupt"
    before = kit.snapshot()
    r = kit.purge("c1", "--yes")
    assert r.rc == 4, r.err
    assert r.err.startswith("muxhost: cannot tell the child conversations of c1") and r.err.count("\n") == 1
    assert "the sessions index is corrupt" in r.err
    assert kit.snapshot() == before and not kit.ran.exists()
    assert kit.purge("c1", "--dry-run").rc == 4  # not even a plan without its children


@contextlib.contextmanager
def unremovable(path: Path):
    """Make ``path`` impossible to unlink, as a user's system can (an immutable flag, a read-only folder)."""
    if sys.platform == "darwin":
        subprocess.run(["chflags", "uchg", str(path)], check=True)
        undo = lambda: subprocess.run(["chflags", "nouchg", str(path)], check=True)  # noqa: E731
    elif os.geteuid() == 0:  # root may unlink in any folder: only the immutable flag stops it
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("this file system cannot make a file immutable (chattr +i)")
        undo = lambda: subprocess.run(["chattr", "-i", str(path)], check=True)  # noqa: E731
    else:
        path.parent.chmod(0o555)
        undo = lambda: path.parent.chmod(0o755)  # noqa: E731
    try:
        yield
    finally:
        undo()


def test_what_could_not_be_removed_is_the_residual_exit_5(kit):
    make_family(kit)
    (kit.data / "stuck").mkdir()
    (kit.data / "stuck" / "c1.json").write_text("held fast")
    (kit.data / "garbled.db").write_bytes(b"not a database at all " * 40)
    kit.spec["artifacts"]["c1"] += [{"kind": "File", "path": "~/.local/share/typed/stuck/c1.json"},
                                    {"kind": "Rows", "db": "~/.local/share/typed/garbled.db", "table": "messages",
                                     "column": "cid", "value": "c1"}]
    plan = kit.purge("c1", "--dry-run", "--json").json["plan"]
    garbled = next(p for p in plan if p.startswith("~/.local/share/typed/garbled.db (could not be read: "))
    with unremovable(kit.data / "stuck" / "c1.json"):
        r = kit.purge("c1", "--yes", "--json")
    assert r.rc == 5, r.err
    assert r.err.startswith("muxhost: purge incomplete: 2 item(s) left: ") and r.err.count("\n") == 1
    report = json.loads(r.out)
    assert report["residual"] == ["~/.local/share/typed/stuck/c1.json", garbled]
    assert report["complete"] is False
    assert "~/.local/share/typed/stuck/c1.json" not in report["removed"]
    assert "~/.local/share/typed/conv/c1.json" in report["removed"]  # the rest of the plan ran
    assert any(n.startswith("could not remove ~/.local/share/typed/stuck/c1.json") for n in report["notes"])


def test_rows_that_keep_coming_back_are_the_residual(kit):
    make_family(kit)
    sql(kit.data / "store.db", "create trigger immortal after delete on messages when old.cid = 'c1' "
                               "begin insert into messages values (old.cid, old.body); end")
    r = kit.purge("c1", "--yes")
    assert r.rc == 5
    assert r.err == "muxhost: purge incomplete: 1 item(s) left: messages:c1 (2 rows in ~/.local/share/typed/store.db)\n"
    assert "  left: messages:c1 (2 rows in ~/.local/share/typed/store.db)" in r.out.splitlines()


def test_artifacts_that_mix_typed_and_strings_are_an_error_and_nothing_is_removed(kit):
    make_family(kit)
    kit.spec["artifacts"]["c1"].append({"kind": "str", "text": "~/.local/share/typed/conv/c1.json"})
    before = kit.snapshot()
    for args in (["--yes"], ["--dry-run"]):
        r = kit.purge("c1", *args)
        assert r.rc == 1 and r.err.startswith("muxhost: ") and r.err.count("\n") == 1, r.err
        assert "mixes typed artifacts" in r.err
    assert kit.snapshot() == before and not kit.ran.exists()
