"""`ls` as a person reads it: it fits 100 columns, ids cut like git's, folders from the left;
`--wide` keeps everything; child conversations are counted in `ls` and listed in `show`."""
import pytest

from muxhost.cli import short_id, short_path
from muxhost.testing import wait_for


def test_short_ids_are_eight_characters_unless_two_start_the_same():
    assert short_id("fad5a2c4bff54db6a22442a0d59ef827") == "fad5a2c4"
    assert short_id("ses_6f9a3b2c1d0e4f5a6b7c8d9e") == "ses_6f9a3b2c"  # a word prefix is not the id
    assert short_id("fad5a2c4bff5", ["fad5a2c4bff5", "fad5a2c4b000"]) == "fad5a2c4bf"
    assert short_id("abc") == "abc"


@pytest.mark.parametrize("path, width, want", [
    ("/work/short", 40, "/work/short"),
    ("/a/very/long/folder/of/the/user/project", 20, "/…/the/user/project"),
    ("/a/very/long/folder/of/the/user/project", 12, "/…/project"),
    ("/x/" + "p" * 30, 16, "…" + "p" * 15),
])
def test_folders_are_cut_from_the_left_keeping_whole_folders(path, width, want):
    out = short_path(path, width)
    assert out == want and len(out) <= width


def test_the_home_folder_is_a_tilde(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert short_path(str(tmp_path / "src" / "p"), 40) == "~/src/p"
    assert short_path(str(tmp_path) + "x/p", 200) == str(tmp_path) + "x/p"  # only the home folder itself


def test_ls_fits_100_columns_and_counts_children(mux):
    deep = mux.home / "src" / "clients" / "acme" / "services" / "billing" / "backend"
    deep.mkdir(parents=True)
    a = mux.ok("launch", "demo", "--cwd", str(deep), "--json")
    b = mux.ok("launch", "demo", "--cwd", str(mux.home), "--json")
    mux.wait_screen(a["pane"], "demo>")
    mux.type(a["pane"], "/child a child")
    wait_for(lambda: mux.ok("show", a["id"], "--json")["children"], what="the child conversation")
    out = mux.run("ls").out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100, out
    row_a = next(line for line in lines if line.startswith(a["id"]))
    assert f"{a['conversation_id'][:8]} +1" in row_a and a["conversation_id"] not in row_a
    assert row_a.rstrip().endswith("~/…/backend") and str(deep) not in row_a
    assert next(line for line in lines if line.startswith(b["id"])).rstrip().endswith("  ~")
    wide = mux.run("ls", "--wide").out
    assert a["conversation_id"] in wide and str(deep) in wide
    show = mux.run("show", a["id"]).out
    child = mux.ok("show", a["id"], "--json")["children"][0]
    assert "child conversations (1):" in show and child in show
    assert "children" not in mux.ok("ls", "--json")[0]  # --json unchanged
