"""The built-in demo agent keeps the contract every agent plugin keeps (muxhost.testing.AgentContract)."""
from pathlib import Path

from muxhost.testing import AgentContract, wait_for


class TestDemoContract(AgentContract):
    agent = "demo"
    agent_cli = False  # the built-in stand-in: no real agent CLI
    has_children = True
    activity_fixtures = Path(__file__).parent / "fixtures" / "activity" / "demo"  # made by record_demo_activity.py

    def converse(self, mux, pane, text):
        mux.wait_screen(pane, "demo>")
        mux.type(pane, text)
        mux.wait_screen(pane, text[::-1])  # the answer is printed once the turn is on disk

    def spawn_child(self, mux, pane, text):
        mux.type(pane, f"/child {text}")

        def made():
            screen = mux.capture(pane)
            return f"/child {text}" in screen and "child conversation" in screen.split(f"/child {text}")[-1]

        wait_for(made, what=f"a child conversation holding {text!r} on pane {pane}")


# -- the suite's own helpers: what "the plan names a file" and "a file holds a text" mean --------
def test_plan_names_a_file_by_its_path_its_folder_or_its_database(tmp_path):
    from muxhost.testing import plan_names

    home = tmp_path / "home"
    f = str(home / ".local/share/agent/abc.jsonl")
    roots = [home]
    assert plan_names(["~/.local/share/agent/abc.jsonl: 2 lines"], f, home, roots)
    assert plan_names([f"{f} [child conversation 12]"], f, home, roots)
    assert plan_names(["~/.local/share/agent/ [child conversation 12]"], f, home, roots)  # a Dir
    assert not plan_names(["~/.local/share/agent/abc.jsonl.bak", "~/.local/share/agent/ab"], f, home, roots)
    assert not plan_names(["~/.local/share/agent/abc.jsonl.d/"], f, home, roots)
    assert not plan_names(["~/"], f, home, roots)  # HOME itself is no folder of a plan
    db = str(home / ".local/share/agent/store.db")
    for sidecar in ("-wal", "-shm", "-journal"):  # a database's files count via its path
        assert plan_names(["session:abc (3 rows in ~/.local/share/agent/store.db)"], db + sidecar, home, roots)
    assert not plan_names(["session:abc (3 rows in ~/.local/share/agent/store.db)"], db + ".bak", home, roots)


def test_files_holding_reads_raw_bytes_and_sqlite_rows_are_read_from_a_copy(tmp_path):
    import sqlite3

    from muxhost.testing import files_holding, sqlite_text, unique_text

    text, other = unique_text("unit"), unique_text("other")
    (tmp_path / "a.jsonl").write_text(f'{{"text": "{text}"}}\n')
    db = tmp_path / "store.db"
    con = sqlite3.connect(db)
    con.execute("pragma journal_mode = wal")
    con.execute("create table m (id, body)")
    con.execute("insert into m values (1, ?)", (text,))
    con.commit()  # the row is in the -wal only while this connection stays open
    try:
        held = files_holding([tmp_path], [text, other])
        assert str(tmp_path / "a.jsonl") in held and str(db) + "-wal" in held
        assert all(hits == [text] for hits in held.values())
        before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        assert sqlite_text(str(db), text) == (True, "")
        assert sqlite_text(str(db), other) == (False, "no row holds its text")
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # the original was not opened
    finally:
        con.close()
